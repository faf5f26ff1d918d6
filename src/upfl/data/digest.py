"""A data set's digest: its content, hashed once where the data set is made, read by every later step.

The digest of a data set folder is the SHA-256 (16 hex digits) over the relative path and SHA-256 of each of its
files (hidden files aside): what a run reads. The job that makes or verifies a data set writes it beside the folder,
``<folder>.digest.json`` (:func:`write_digest`), with the files' checksums and their *stat signature*
(:func:`stat_signature`: each file's size, modification and change times and inode). A reader trusts the recorded
digest while the stat signature is unchanged (:func:`recorded_digest`) and hashes the files otherwise
(:func:`folder_digest`): a file replaced by other bytes changes its change time (``ctime``) whatever its
modification time says, so a stale record is never used.

The workflow takes the digest file as the input of every job that reads the data set and the stat signature as
the param of the job that writes it (rule ``data_digest``, workflow/rules/data.smk): replacing a data file (its
modification time kept or touched) reruns that job; the file's bytes change only when the content does, and
Snakemake reruns the training jobs for an input whose checksum changed. Standard library only: the workflow's
parse reads the stat signature.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..files import sha256_file, write_text

DIGEST_SUFFIX = ".digest.json"
FORMAT = 1


class DigestError(ValueError):
    """A data set's digest cannot be made (the folder is missing or empty); the message names the folder."""


def digest_path(folder: str | os.PathLike) -> Path:
    """``<folder>.digest.json``: beside the data set's folder, never inside it (a job's folder output holds only
    what that job wrote)."""
    return Path(os.path.normpath(os.fspath(folder)) + DIGEST_SUFFIX)


def data_files(folder: str | os.PathLike) -> list[Path]:
    """The files of a data set folder a run may read: every file below it but hidden ones, sorted."""
    root = Path(folder)
    files = (p for p in root.rglob("*") if p.is_file())
    return sorted(p for p in files if not any(part.startswith(".") for part in p.relative_to(root).parts))


def _stat_entries(folder: Path) -> list[tuple[str, int, int, int, int]]:
    out = []
    for f in data_files(folder):
        st = f.stat()
        out.append((f.relative_to(folder).as_posix(), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return out


def stat_signature(folder: str | os.PathLike) -> str:
    """SHA-256 (16 hex digits) of each file's relative path, size, modification and change times and inode; ``absent``
    for a missing folder. Cheap (no file is read): it changes whenever a file is written, replaced, added or removed,
    whatever the file's modification time was set to afterwards."""
    root = Path(folder)
    if not root.is_dir():
        return "absent"
    return hashlib.sha256(json.dumps(_stat_entries(root)).encode()).hexdigest()[:16]


def checksums(folder: str | os.PathLike) -> dict[str, str]:
    """Relative path -> SHA-256 of every file of the folder (:func:`data_files`)."""
    root = Path(folder)
    return {f.relative_to(root).as_posix(): sha256_file(f) for f in data_files(root)}


def digest_of(files: dict[str, str]) -> str:
    """The data digest of a folder whose files have the checksums ``files`` (relative path -> SHA-256)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()[:16]


def make_record(folder: str | os.PathLike) -> dict[str, Any]:
    """What :func:`write_digest` writes: the digest, each file's checksum and the stat signature they were read at."""
    root = Path(folder)
    if not root.is_dir():
        raise DigestError(f"{root}: no such data set folder")
    before = stat_signature(root)
    files = checksums(root)
    if not files:
        raise DigestError(f"{root}: the data set folder holds no files")
    after = stat_signature(root)
    if before != after:
        raise DigestError(f"{root}: its files changed while they were hashed; run again once they are written")
    return {"format": FORMAT, "digest": digest_of(files), "stat": after, "files": files}


def write_digest(folder: str | os.PathLike, out: str | os.PathLike | None = None) -> dict[str, Any]:
    """Hash the data set's files and write ``<folder>.digest.json`` (or ``out``) atomically; the record written."""
    record = make_record(folder)
    write_text(out if out is not None else digest_path(folder), json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def read_record(path: str | os.PathLike) -> dict[str, Any] | None:
    """A digest file's record, or None when it is missing or not one (a reader then hashes the files)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return None
    if not isinstance(record.get("digest"), str) or not isinstance(record.get("stat"), str):
        return None
    return record


def recorded_digest(folder: str | os.PathLike) -> str | None:
    """The digest recorded beside the folder while its files are as they were hashed (same stat signature); None
    otherwise."""
    record = read_record(digest_path(folder))
    if record is None or record["stat"] != stat_signature(folder):
        return None
    return record["digest"]


def folder_digest(folder: str | os.PathLike) -> str:
    """The data set's digest: the recorded one where it still holds (:func:`recorded_digest`), else the files
    hashed (once per process for each state of the folder)."""
    recorded = recorded_digest(folder)
    if recorded is not None:
        return recorded
    root = Path(folder)
    return _hashed(str(root.resolve()), stat_signature(root))


@functools.lru_cache(maxsize=64)
def _hashed(root: str, signature: str) -> str:
    return digest_of(checksums(root))


def files_signature(paths: list[str] | tuple[str, ...]) -> str:
    """:func:`stat_signature` of a list of files (a data set's sources: the paper's released files, a LEAF folder
    named by config): ``absent`` for a missing one."""
    entries: list[Any] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            entries.append([str(path), "absent"])
            continue
        entries.append([str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]
