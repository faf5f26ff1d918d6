"""A LEAF-format folder brought in by config alone (``datasets.<name>: {source: leaf, path: DIR}``).

The folder (``train/*.json``, ``test/*.json`` in LEAF's format, an optional ``meta.json``) is copied into the
workflow's data folder and checked there, so every run reads a fixed copy whose files are recorded, never a
folder that may change under it. Only what a data set is made of is copied: the split files, ``meta.json``
and the side files ``meta.json`` names (a Sent140 folder's embeddings and vocabulary); LEAF's other folders
(``all_data/``, ``sampled_data/``, ``rem_user_data/``) are not. The model reads its input shape and number of
classes from the data (``meta.json``'s ``num_classes``, else the largest label + 1).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from ..files import replace_dir, sha256_file, write_json
from .leaf import META_FILE, DatasetError, load_leaf, read_json

SPLITS = ("train", "test")


def side_files(meta_file: Path, meta: dict[str, Any]) -> list[str]:
    """Files besides the splits that ``meta.json`` names (``embeddings.file``, ``embeddings.vocab_file``, the
    keys of ``extra_files``), relative to the folder; a name that leaves the folder is refused."""
    names: list[str] = []
    embeddings = meta.get("embeddings")
    if isinstance(embeddings, dict):
        names += [embeddings[k] for k in ("file", "vocab_file") if k in embeddings]
    extra = meta.get("extra_files")
    if isinstance(extra, dict):
        names += list(extra)
    out = []
    for name in names:
        rel = PurePosixPath(str(name))
        if not isinstance(name, str) or rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise DatasetError(f"{meta_file}: side file {name!r} is not a path inside the folder")
        if rel.as_posix() not in out:
            out.append(rel.as_posix())
    return out


def folder_files(path: str | os.PathLike) -> list[Path]:
    """The files a copy of LEAF folder ``path`` holds: ``train/*.json``, ``test/*.json``, ``meta.json`` and its
    side files; :class:`DatasetError` naming the folder or file that is missing."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DatasetError(f"{root}: data set folder does not exist")
    files: list[Path] = []
    for split in SPLITS:
        folder = root / split
        if not folder.is_dir():
            raise DatasetError(f"{folder}: missing folder (a LEAF data set needs train/ and test/ folders)")
        found = sorted(folder.glob("*.json"))
        if not found:
            raise DatasetError(f"{folder}: no .json files")
        files += found
    meta_file = root / META_FILE
    if meta_file.is_file():
        meta = read_json(meta_file)
        if not isinstance(meta, dict):
            raise DatasetError(f"{meta_file}: must be a JSON object, got a {type(meta).__name__}")
        files.append(meta_file)
        for rel in side_files(meta_file, meta):
            if not (root / rel).is_file():
                raise DatasetError(f"{meta_file}: names {rel!r}, which is not a file of {root}")
            files.append(root / rel)
    return files


def _check_recorded(root: Path, recorded: Any, digests: dict[str, str], key: str) -> None:
    """Files whose sha256 the source's ``meta.json`` records (``sha256``, ``extra_files``) must match it."""
    if not isinstance(recorded, dict):
        return
    for rel, digest in recorded.items():
        if rel in digests and isinstance(digest, str) and digests[rel] != digest.lower():
            raise DatasetError(
                f"{root / rel}: sha256 {digests[rel]} is not the {digest} that {root / META_FILE} records ({key})"
            )


def import_leaf_folder(source: str | os.PathLike, out: str | os.PathLike, name: str | None = None) -> Path:
    """Copy LEAF folder ``source`` to ``out`` (atomically: built aside, checked, renamed into place).

    The copy is read with :func:`upfl.data.leaf.load_leaf` before it is published; a failure names the source
    file, user and row. Its ``meta.json`` is the source's (or empty) with ``source: leaf`` (unless the source
    says otherwise), ``name``, ``imported_from`` (the source folder) and the sha256 of every split file.
    """
    src, dest = Path(source).expanduser(), Path(out)
    a, b = src.resolve(), dest.resolve()
    if a == b or a in b.parents or b in a.parents:
        # replacing `out` would replace (or delete) the folder being copied
        raise ValueError(
            f"--out {dest}: the folder it copies ({src}) is inside it or it is inside that folder; "
            f"give another output folder"
        )
    files = folder_files(src)
    meta: dict[str, Any] = read_json(src / META_FILE) if (src / META_FILE).is_file() else {}
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        digests: dict[str, str] = {}
        for file in files:
            rel = file.relative_to(src).as_posix()
            if rel == META_FILE:
                continue
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, tmp / rel)
            digests[rel] = sha256_file(tmp / rel)
        _check_recorded(src, meta.get("sha256"), digests, "sha256")
        _check_recorded(src, meta.get("extra_files"), digests, "extra_files")
        split_files = {rel: d for rel, d in digests.items() if rel.split("/", 1)[0] in SPLITS}
        write_json(
            tmp / META_FILE,
            {
                **meta,
                "name": name or meta.get("name") or src.name,
                "source": meta.get("source", "leaf"),
                "imported_from": str(src.resolve()),
                "sha256": split_files,
            },
        )
        try:
            load_leaf(tmp)
        except DatasetError as e:
            raise DatasetError(str(e).replace(str(tmp), str(src))) from None
        replace_dir(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return dest
