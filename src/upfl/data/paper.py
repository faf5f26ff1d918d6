"""The paper's released data: its four synthetic sets as LEAF folders, and its FEMNIST device counts.

The authors published the synthetic sets they trained on (github.com/osu-srml/Upcycled-FL at
:data:`~upfl.data.sources.PAPER_COMMIT`, ``data/synthetic_<set>/data/{train,test}/``):
``mytrain.pt`` / ``mytest.pt`` are ``torch.save``d ``TensorDataset(x float64 (n, 20), y float64 (n,))``
and ``user_groups.json`` maps a device id (``"0"``..``"29"``) to row indices. Their sizes are the
paper's Table 2 exactly. The same repository has the FEMNIST device index (50 devices; only the
per-device counts are used, by :mod:`upfl.data.femnist`).

Every file is read once into memory and its sha256 checked against the pinned one before a byte
of it is parsed. Tensors are read without torch (:mod:`upfl.data.torch_file`, an unpickler that knows
``TensorDataset``, tensors and their storages and nothing else), so a file whose pickle needs anything
else (``os.system``, a custom class) is refused. Shapes, dtypes, labels (whole numbers >= 0) and the
index (every row of a split in exactly one device, no index out of range) are checked; only then is the LEAF folder
written, atomically. Any failure raises :class:`PaperDataError` naming the file; nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .leaf import DatasetError, write_leaf
from .sources import PAPER_COMMIT, PAPER_REPO, PAPER_SYNTHETIC_SETS, Source, paper_file_name

DIM = 20


class PaperDataError(DatasetError):
    """A released file is missing, fails its checksum, or is not what the paper's format says."""


def checked_bytes(path: str | os.PathLike, sha256: str | None) -> bytes:
    """The bytes of ``path`` after their sha256 matched ``sha256`` (the same bytes are then parsed)."""
    path = Path(path)
    if not sha256:
        raise PaperDataError(f"{path}: no pinned sha256 to check it against; refusing to parse it")
    if not path.is_file():
        raise PaperDataError(f"{path}: missing; run 'upfl data fetch paper_synthetic' first")
    data = path.read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256.lower():
        raise PaperDataError(f"{path}: sha256 mismatch: expected {sha256.lower()}, got {got}; not parsed")
    return data


def load_tensor_dataset(data: bytes, name: str, dim: int = DIM) -> tuple[np.ndarray, np.ndarray]:
    """``(x float64 (n, dim), y int64 (n,))`` from the bytes of a ``torch.save``d ``TensorDataset``.

    Read without torch (:mod:`upfl.data.torch_file`): the pickle may name ``torch.utils.data.TensorDataset``, its
    tensors and their storages, nothing else. ``name`` (the file) is named in every error.
    """
    from .torch_file import RefusedGlobal, Tensor, TensorDataset, TorchFileError, read_torch_file

    try:
        obj = read_torch_file(data)
    except RefusedGlobal as e:
        raise PaperDataError(
            f"{name}: refused: the file needs the global {e.name}; only "
            "torch.utils.data.TensorDataset of tensors is allowed (nothing else in the pickle is looked up)"
        ) from None
    except TorchFileError as e:
        raise PaperDataError(f"{name}: not a readable torch file ({e})") from None
    if type(obj) is not TensorDataset:
        raise PaperDataError(f"{name}: holds a {type(obj).__name__}, expected a TensorDataset")
    tensors = getattr(obj, "tensors", None)
    if not isinstance(tensors, tuple) or len(tensors) != 2 or not all(isinstance(t, Tensor) for t in tensors):
        raise PaperDataError(f"{name}: the TensorDataset must hold exactly two tensors (x, y)")
    x, y = tensors
    if x.dtype not in ("torch.float32", "torch.float64") or x.ndim != 2 or x.shape[1] != dim:
        raise PaperDataError(f"{name}: x is {x.dtype} of shape {x.shape}, expected float64 (n, {dim})")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise PaperDataError(f"{name}: y has shape {y.shape}, expected ({x.shape[0]},) like x's rows")
    if y.dtype.startswith("torch.complex") or y.dtype == "torch.bool":
        raise PaperDataError(f"{name}: y is {y.dtype}, expected float64 or integer labels")
    x_np = x.array.astype(np.float64)
    y_np = y.array
    if x.shape[0] == 0:
        raise PaperDataError(f"{name}: holds no rows")
    if not np.isfinite(x_np).all():
        raise PaperDataError(
            f"{name}: x holds NaN or infinite values (row {int(np.argwhere(~np.isfinite(x_np))[0, 0])})"
        )
    y_float = y_np.astype(np.float64)
    bad = ~np.isfinite(y_float) | (y_float != np.round(y_float)) | (y_float < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PaperDataError(f"{name}: label of row {i} is {y_np[i].item()!r}, not a whole number >= 0")
    return x_np, y_float.astype(np.int64)


def load_user_groups(data: bytes, name: str, num_rows: int | None = None) -> dict[str, list[int]]:
    """``{device: [row, ...]}`` from a ``user_groups.json``, devices in numeric order.

    Row indices are integers, none twice (in one device or across devices); with ``num_rows`` every
    index is in ``[0, num_rows)`` and every row belongs to a device.
    """
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PaperDataError(f"{name}: not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not doc:
        raise PaperDataError(f"{name}: expected a non-empty object mapping device id to a list of row indices")
    keys = list(doc)
    if all(k.isdigit() for k in keys):
        keys.sort(key=int)
    owner: dict[int, str] = {}
    groups: dict[str, list[int]] = {}
    for device in keys:
        rows = doc[device]
        if not isinstance(rows, list):
            raise PaperDataError(
                f"{name}: device {device!r}: expected a list of row indices, got {type(rows).__name__}"
            )
        for i in rows:
            if isinstance(i, bool) or not isinstance(i, int):
                raise PaperDataError(f"{name}: device {device!r}: row index {i!r} is not an integer")
            if i < 0 or (num_rows is not None and i >= num_rows):
                limit = f"[0, {num_rows})" if num_rows is not None else ">= 0"
                raise PaperDataError(f"{name}: device {device!r}: row index {i} out of range {limit}")
            if i in owner:
                where = "twice in this device" if owner[i] == device else f"also in device {owner[i]!r}"
                raise PaperDataError(f"{name}: device {device!r}: row {i} is duplicated ({where})")
            owner[i] = device
        groups[device] = list(rows)
    if num_rows is not None and len(owner) != num_rows:
        missing = sorted(set(range(num_rows)) - set(owner))
        raise PaperDataError(f"{name}: {len(missing)} of {num_rows} rows belong to no device (first: {missing[:5]})")
    return groups


def device_counts(data: bytes, name: str) -> dict[str, int]:
    """Per-device sample counts of a ``user_groups.json`` (the FEMNIST index: counts, not the rows)."""
    return {device: len(rows) for device, rows in load_user_groups(data, name).items()}


def femnist_device_counts(
    resources: str | os.PathLike, sources: list[Source] | None = None
) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, dict[str, str]]]:
    """The authors' 50 FEMNIST devices as ``(train counts, test counts, files)``, devices in numeric order.

    Read from the two ``user_groups.json`` of their FEMNIST index (placed under ``resources`` by
    ``upfl data fetch paper_femnist``), checked against their pinned sha256 first. Only the counts
    are used: the indices point into the authors' image tensor, which was never published.
    """
    from .sources import SOURCES

    given = {s.name: s for s in sources or []}
    counts: dict[str, dict[str, int]] = {}
    files: dict[str, dict[str, str]] = {}
    for split in ("train", "test"):
        name = paper_file_name("femnist", split, True)
        src = given.get(name, SOURCES[name])
        path = Path(resources) / src.filename
        if not path.is_file():
            raise PaperDataError(
                f"{path}: missing; run 'upfl data fetch paper_femnist' (the authors' FEMNIST "
                "device index) first, or prepare with --set sizes=table2_shape"
            )
        counts[split] = device_counts(checked_bytes(path, src.sha256), str(path))
        assert src.sha256 is not None  # the paper's files are pinned (PAPER_SHA256)
        files[src.path] = {"url": src.url, "sha256": src.sha256.lower()}
    if list(counts["train"]) != list(counts["test"]):
        raise PaperDataError(
            f"{Path(resources) / SOURCES[paper_file_name('femnist', 'test', True)].filename}: "
            "train and test index list different devices"
        )
    empty = [d for d, n in counts["train"].items() if n == 0]
    if empty:
        raise PaperDataError(f"FEMNIST device index: devices {empty[:5]} have no training samples")
    return tuple(counts["train"].values()), tuple(counts["test"].values()), files


def paper_sources(setting: str, sources: list[Source] | None = None) -> dict[tuple[str, bool], Source]:
    """The four sources of one released set, by ``(split, is_index)``; ``sources`` may carry overrides."""
    if setting not in PAPER_SYNTHETIC_SETS:
        raise PaperDataError(f"unknown paper data set {setting!r}; known: {', '.join(PAPER_SYNTHETIC_SETS)}")
    from .sources import SOURCES

    given = {s.name: s for s in sources or []}
    return {
        (split, groups): given.get(n, SOURCES[n])
        for split in ("train", "test")
        for groups in (False, True)
        for n in [paper_file_name(setting, split, groups)]
    }


def build_paper_synthetic(
    setting: str,
    resources: str | os.PathLike,
    out: str | os.PathLike,
    name: str | None = None,
    sources: list[Source] | None = None,
) -> Path:
    """Check, load and convert one released synthetic set (``synthetic_1_1``, ...) into a LEAF folder.

    The four files are read from ``<resources>/<source.filename>`` (where ``upfl data fetch`` puts
    them). ``name`` is the data set's name in ``meta.json`` (default ``setting``).
    """
    resources = Path(resources)
    srcs = paper_sources(setting, sources)
    split_data: dict[str, tuple[list[str], dict[str, np.ndarray], dict[str, np.ndarray]]] = {}
    files: dict[str, dict[str, str]] = {}
    for split in ("train", "test"):
        tensor_src, index_src = srcs[(split, False)], srcs[(split, True)]
        tensor_path, index_path = resources / tensor_src.filename, resources / index_src.filename
        x, y = load_tensor_dataset(checked_bytes(tensor_path, tensor_src.sha256), str(tensor_path))
        groups = load_user_groups(checked_bytes(index_path, index_src.sha256), str(index_path), num_rows=len(y))
        xs = {device: x[rows] for device, rows in groups.items()}
        ys = {device: y[rows] for device, rows in groups.items()}
        split_data[split] = (list(groups), xs, ys)
        for src in (tensor_src, index_src):
            assert src.sha256 is not None  # the paper's files are pinned (PAPER_SHA256)
            files[src.path] = {"url": src.url, "sha256": src.sha256.lower()}
    train_devices, test_devices = split_data["train"][0], split_data["test"][0]
    if set(train_devices) != set(test_devices):
        only = sorted(set(train_devices) ^ set(test_devices))
        raise PaperDataError(
            f"{resources / srcs[('test', True)].filename}: train and test index differ in their "
            f"devices (only in one: {only[:5]})"
        )
    labels = np.concatenate([np.concatenate(list(split_data[s][2].values())) for s in ("train", "test")])
    meta: dict[str, Any] = {
        "name": name or setting,
        "setting": setting,
        "source": "paper",
        "generator": "the authors' released draw of the FedProx synthetic generator",
        "repository": f"https://github.com/{PAPER_REPO}",
        "commit": PAPER_COMMIT,
        "files": files,
        "num_classes": max(2, int(labels.max()) + 1),
        "x_dtype": "float32",
        "table2_reading": "total",
        "upfl_version": __version__,
    }
    return write_leaf(out, train_devices, split_data["train"][1:], split_data["test"][1:], meta)
