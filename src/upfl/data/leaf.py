"""LEAF-format federated data sets: reading (with validation), writing (atomic), and the in-memory form.

A data set folder holds ``train/*.json`` and ``test/*.json``, each file
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``,
and optionally ``meta.json`` (generator, parameters, seed, sha256 of the files, ``x_dtype``).
Users present only in train or only in test are legal (LEAF's user-level split).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..files import publish_mode, replace_dir, sha256_file, write_json

META_FILE = "meta.json"
MAX_CLASSES = 100_000
"""The most classes a data set may have (labels 0..MAX_CLASSES-1): far above LEAF's 62, far below what would
exhaust memory for the model's output layer."""
MAX_X_DIMS = 4
"""The most dimensions of one x row (a 3-channel image is 3); deeper nesting is refused before it is converted."""
FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass
class FederatedDataset:
    """Per-user arrays. ``users`` is the union of train and test users, train users first.

    ``train_x[u]`` has shape ``(n_u, *feature_shape)``; users without training data have
    ``n_u = 0`` and are never sampled; their test data still counts in the pooled test set.
    """

    users: list[str]
    train_x: dict[str, np.ndarray]
    train_y: dict[str, np.ndarray]
    test_x: dict[str, np.ndarray]
    test_y: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)
    path: str | None = None
    files: dict[str, dict[str, str]] = field(default_factory=dict)
    """``files[split][user]``: the JSON file a user's data came from (for error messages)."""

    @property
    def train_users(self) -> list[str]:
        return [u for u in self.users if len(self.train_y.get(u, ())) > 0]

    @property
    def feature_shape(self) -> tuple[int, ...]:
        for xs in (self.train_x, self.test_x):
            for x in xs.values():
                return tuple(x.shape[1:])
        raise DatasetError("data set has no samples")

    @property
    def num_classes(self) -> int:
        if "num_classes" in self.meta:
            return int(self.meta["num_classes"])
        ys = [y for y in list(self.train_y.values()) + list(self.test_y.values()) if len(y)]
        return int(max(int(y.max()) for y in ys)) + 1

    @property
    def num_classes_source(self) -> str:
        """Where :attr:`num_classes` comes from: ``meta.json`` or the largest label (no meta.json entry)."""
        return "meta.json" if "num_classes" in self.meta else "largest label + 1 (meta.json has no num_classes)"

    @property
    def test_samples(self) -> int:
        return int(sum(len(y) for y in self.test_y.values()))

    def check_labels(self) -> None:
        """Raise :class:`DatasetError` naming the file and user of the first label outside 0..num_classes-1.

        Every run checks its data set (a bundle's runs share one): the labels are checked in one pass over all of
        them, and user by user only when that pass finds one outside."""
        k = self.num_classes
        ys_all = [y for ys in (self.train_y, self.test_y) for y in ys.values() if len(y)]
        if ys_all:
            every = np.concatenate(ys_all)
            if every.min() >= 0 and every.max() < k:
                return
        for split, ys in (("train", self.train_y), ("test", self.test_y)):
            for user, y in ys.items():
                bad = np.flatnonzero((y < 0) | (y >= k))
                if len(bad):
                    file = self.files.get(split, {}).get(user, f"{self.path}/{split}")
                    raise DatasetError(
                        f"{file}: user {user!r}: label {bad[0]} is {int(y[bad[0]])}, outside "
                        f"0..{k - 1} (num_classes {k} from {self.num_classes_source})"
                    )


def _fail(file: Path, msg: str) -> None:
    raise DatasetError(f"{file}: {msg}")


class _DuplicateKey(ValueError):
    """A JSON object names one key twice (``json`` would keep the last value silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return doc


def read_json(file: Path) -> Any:
    """A JSON file's document; :class:`DatasetError` naming the file for bad UTF-8, bad JSON, deep nesting or a key
    given twice in one object (a user twice in ``user_data``: refused, never the last one kept)."""
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        raise DatasetError(
            f"{file}: key {e.args[0]!r} appears twice in one JSON object (a user twice in "
            "user_data?); refused rather than keeping the last one"
        ) from None
    except UnicodeDecodeError as e:
        raise DatasetError(f"{file}: not UTF-8 (byte {e.start} is 0x{e.object[e.start]:02x})") from None
    except json.JSONDecodeError as e:
        raise DatasetError(f"{file}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise DatasetError(f"{file}: JSON nested too deeply to be a data set") from None


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of the first element chain of ``value`` (lists), stopping above ``limit``."""
    depth = 0
    while isinstance(value, list) and depth <= limit:
        depth += 1
        value = value[0] if value else None
    return depth


def _check_x(file: Path, user: str, x_arr: np.ndarray, x_dtype: str) -> None:
    """Rows with features, finite in the dtype the model uses (float32 overflow is named by row)."""
    if 0 in x_arr.shape[1:]:
        _fail(file, f"user {user!r}: x rows have shape {x_arr.shape[1:]}: no features")
    rows = x_arr.reshape(len(x_arr), -1)
    if not np.isfinite(rows).all():
        row = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
        _fail(file, f"user {user!r}: x row {row} holds NaN or infinite values")
    limit = FLOAT32_MAX if x_dtype == "float32" else float(2**31 - 1)
    too_large = np.abs(rows) > limit
    if too_large.any():
        row = int(np.flatnonzero(too_large.any(axis=1))[0])
        _fail(
            file,
            f"user {user!r}: x row {row} holds {float(rows[row][too_large[row]][0]):g}, beyond {x_dtype} "
            f"(largest {limit:g}): it would be infinite in training",
        )


def _read_split(
    folder: Path, x_dtype: str, where: dict[str, str]
) -> tuple[list[str], dict[str, np.ndarray], dict[str, np.ndarray]]:
    if not folder.is_dir():
        raise DatasetError(f"{folder}: missing folder (a LEAF data set needs train/ and test/ folders)")
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DatasetError(f"{folder}: no .json files")
    users: list[str] = []
    xs: dict[str, np.ndarray] = {}
    ys: dict[str, np.ndarray] = {}
    feature_shape: tuple[int, ...] | None = None
    for file in files:
        doc = read_json(file)
        if not isinstance(doc, dict):
            _fail(file, "top level must be an object with keys users, num_samples, user_data")
        for key in ("users", "num_samples", "user_data"):
            if key not in doc:
                _fail(file, f"missing key {key!r}")
        f_users, counts, user_data = doc["users"], doc["num_samples"], doc["user_data"]
        if not isinstance(f_users, list) or not isinstance(counts, list) or not isinstance(user_data, dict):
            _fail(file, "'users' and 'num_samples' must be lists and 'user_data' an object")
        if len(f_users) != len(counts):
            _fail(file, f"'users' has {len(f_users)} entries but 'num_samples' has {len(counts)}")
        for user, count in zip(f_users, counts, strict=True):
            user = str(user)
            if user in xs:
                _fail(file, f"user {user!r} appears twice")
            if user not in user_data:
                _fail(file, f"user {user!r} is listed in 'users' but has no entry in 'user_data'")
            entry = user_data[user]
            if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
                _fail(file, f"user {user!r}: user_data entry needs keys 'x' and 'y'")
            x, y = entry["x"], entry["y"]
            if not isinstance(x, list) or not isinstance(y, list):
                _fail(file, f"user {user!r}: 'x' and 'y' must be lists")
            if len(x) != len(y):
                _fail(file, f"user {user!r}: {len(x)} x rows but {len(y)} labels")
            if not isinstance(count, int) or count != len(y):
                _fail(file, f"user {user!r}: num_samples says {count!r} but user_data holds {len(y)} samples")
            for i, label in enumerate(y):
                if isinstance(label, bool) or not (
                    isinstance(label, int) or (isinstance(label, float) and label.is_integer())
                ):
                    _fail(file, f"user {user!r}: label {i} is {label!r}, not an integer")
                if label < 0:
                    _fail(file, f"user {user!r}: label {i} is {label}, labels must be >= 0")
                if label >= MAX_CLASSES:
                    _fail(
                        file,
                        f"user {user!r}: label {i} is {label:g}, outside 0..{MAX_CLASSES - 1} "
                        "(upfl.data.leaf.MAX_CLASSES)",
                    )
            if x and _depth(x, MAX_X_DIMS + 1) > MAX_X_DIMS + 1:
                _fail(file, f"user {user!r}: x row 0 is nested more than {MAX_X_DIMS} levels deep")
            try:
                x_arr = np.asarray(x, dtype=np.float64)
            except (ValueError, TypeError):
                shapes = {np.shape(r) for r in x[:1]}
                for i, r in enumerate(x):
                    if np.shape(r) not in shapes:
                        _fail(
                            file,
                            f"user {user!r}: x row {i} has shape {np.shape(r)}, "
                            f"row 0 has {next(iter(shapes))} (ragged x)",
                        )
                _fail(file, f"user {user!r}: x holds non-numeric values")
            if len(x) and x_arr.ndim < 2:
                _fail(file, f"user {user!r}: each x row must be a list of numbers")
            if len(x) == 0:
                x_arr = np.zeros((0,) + (feature_shape or (0,)))
            elif feature_shape is None:
                feature_shape = x_arr.shape[1:]
            elif x_arr.shape[1:] != feature_shape:
                _fail(file, f"user {user!r}: x rows have shape {x_arr.shape[1:]}, other users have {feature_shape}")
            if len(x):
                _check_x(file, user, x_arr, x_dtype)
            if x_dtype == "int64":
                if len(x) and not np.all(x_arr == np.round(x_arr)):
                    _fail(file, f"user {user!r}: meta.json says x_dtype int64 but x holds non-integers")
                xs[user] = x_arr.astype(np.int64)
            else:
                xs[user] = x_arr.astype(np.float32)
            ys[user] = np.asarray(y, dtype=np.int64)
            where[user] = str(file)
            users.append(user)
        extra = set(map(str, user_data)) - set(map(str, f_users))
        if extra:
            _fail(file, f"user_data has users not listed in 'users': {sorted(extra)[:5]}")
    return users, xs, ys


def load_leaf(path: str | os.PathLike) -> FederatedDataset:
    """Read and validate a LEAF-format data set folder; raise :class:`DatasetError` naming the problem."""
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"{root}: data set folder does not exist")
    meta: dict[str, Any] = {}
    meta_file = root / META_FILE
    if meta_file.exists():
        meta = read_json(meta_file)
        if not isinstance(meta, dict):
            raise DatasetError(f"{meta_file}: must be a JSON object, got a {type(meta).__name__}")
    _check_num_classes(meta_file, meta)
    x_dtype = meta.get("x_dtype", "float32")
    if not isinstance(x_dtype, str) or x_dtype not in ("float32", "int64"):
        raise DatasetError(f"{meta_file}: x_dtype must be 'float32' or 'int64', got {x_dtype!r}")
    files: dict[str, dict[str, str]] = {"train": {}, "test": {}}
    tr_users, tr_x, tr_y = _read_split(root / "train", x_dtype, files["train"])
    te_users, te_x, te_y = _read_split(root / "test", x_dtype, files["test"])
    if not tr_users or sum(len(y) for y in tr_y.values()) == 0:
        raise DatasetError(f"{root / 'train'}: no training samples")
    shapes = {x.shape[1:] for x in list(tr_x.values()) + list(te_x.values()) if len(x)}
    if len(shapes) > 1:
        raise DatasetError(f"{root}: train and test x rows differ in shape: {sorted(shapes)}")
    shape = shapes.pop()
    for xs in (tr_x, te_x):
        for u, x in xs.items():
            if len(x) == 0:
                xs[u] = np.zeros((0,) + shape, dtype=x.dtype)
    users = tr_users + [u for u in te_users if u not in tr_x]
    for u in users:
        for xs, ys in ((tr_x, tr_y), (te_x, te_y)):
            if u not in xs:
                xs[u] = np.zeros((0,) + shape, dtype=np.int64 if x_dtype == "int64" else np.float32)
                ys[u] = np.zeros((0,), dtype=np.int64)
    ds = FederatedDataset(users, tr_x, tr_y, te_x, te_y, meta=meta, path=str(root), files=files)
    if "num_classes" in meta:
        ds.check_labels()
    return ds


def _check_num_classes(meta_file: Path, meta: dict[str, Any]) -> None:
    if "num_classes" not in meta:
        return
    k = meta["num_classes"]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_CLASSES:
        raise DatasetError(f"{meta_file}: num_classes must be an integer in 1..{MAX_CLASSES}, got {k!r}")


def _split_doc(users: list[str], xs: dict[str, np.ndarray], ys: dict[str, np.ndarray]) -> dict[str, Any]:
    present = [u for u in users if u in ys]
    return {
        "users": present,
        "num_samples": [int(len(ys[u])) for u in present],
        "user_data": {
            u: {"x": np.asarray(xs[u]).tolist(), "y": np.asarray(ys[u]).astype(int).tolist()} for u in present
        },
    }


def write_leaf(
    path: str | os.PathLike,
    users: list[str],
    train: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
    test: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
    meta: dict[str, Any],
) -> Path:
    """Write a data set folder atomically: built in a temporary sibling, renamed into place when complete.

    ``meta.json`` records ``meta`` plus the sha256 of every data file.
    """
    root = Path(path)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=root.parent))
    try:
        files: dict[str, str] = {}
        for split, (xs, ys) in (("train", train), ("test", test)):
            (tmp / split).mkdir()
            publish_mode(tmp / split)
            file = tmp / split / "data.json"
            with open(file, "w", encoding="utf-8") as f:
                f.write(json.dumps(_split_doc(users, xs, ys), separators=(",", ":")))  # dumps: C encoder
            publish_mode(file)
            files[f"{split}/data.json"] = sha256_file(file)
        write_json(tmp / META_FILE, {**meta, "sha256": files})
        replace_dir(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return root


def verify_checksums(path: str | os.PathLike) -> None:
    """Check the sha256 recorded in ``meta.json`` against the files; raise :class:`DatasetError` on mismatch."""
    root = Path(path)
    meta = json.loads((root / META_FILE).read_text(encoding="utf-8"))
    for rel, digest in meta.get("sha256", {}).items():
        if sha256_file(root / rel) != digest:
            raise DatasetError(f"{root / rel}: sha256 does not match the one recorded in {META_FILE}")
