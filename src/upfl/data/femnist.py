"""FEMNIST as LEAF builds it from NIST SD19, then the paper's 50-device subset of letters a-j.

LEAF steps (``data/femnist/preprocess``), read straight from ``by_class.zip``:

1. ``by_class``: ``<class hex>/<subfolder>/<image>.png``; keep subfolders whose name contains
   ``hsf`` and not ``mit``; hash each image file (MD5 of its bytes) -> class.
2. LEAF then finds each image again in ``by_write.zip`` (same MD5) to learn its writer, because
   LEAF's devices are writers. The paper's devices pool images of a class across writers, so the
   writer never enters the data set, and ``by_write`` holds the same image files (SD19 grouped by
   writer instead of by class): the images are taken from ``by_class`` and the 1 GB ``by_write.zip``
   is not needed.
3. Image to vector: greyscale, ``thumbnail((28, 28))`` with LANCZOS antialiasing in one step
   (``reducing_gap=None``, as the Pillow of LEAF's time), ``/ 255``:
   784 floats in [0, 1], not inverted. LEAF labels: digits 0-9, upper 10-35, lower 36-61.

The paper's subset (Appendix H.1, Table 2; FedProx's recipe): the letters 'a'-'j' (hex 61-6a)
relabelled 0-9, 50 devices of 5 classes each. FedProx's devices pool images across writers by
class, and so do these; unlike FedProx's script, an image is drawn at most once (pools are
consumed), and images with identical bytes count once. The selection procedure is in
``docs/data.md`` and :func:`select_devices`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from .. import __version__
from ..draws.streams import derive_seed, numpy_generator
from .archive import iter_members, member_parts, open_zip
from .download import read_recorded_sha256
from .leaf import DatasetError
from .publish import write_dataset
from .shapes import leaf_total_for_train, lognormal_sizes, proportional_sizes
from .synthetic import dataset_key

LOWER_A_J: tuple[str, ...] = tuple(f"{c:x}" for c in range(0x61, 0x6B))
IMAGE_SIZE = (28, 28)


def leaf_label(class_hex: str) -> int:
    """LEAF's 62-class label of a NIST class folder name (hex of the ASCII code)."""
    try:
        code = int(class_hex, 16)
    except ValueError:
        raise DatasetError(f"class folder {class_hex!r} is not a hex character code") from None
    if 0x30 <= code <= 0x39:
        return code - 0x30
    if 0x41 <= code <= 0x5A:
        return code - 0x41 + 10
    if 0x61 <= code <= 0x7A:
        return code - 0x61 + 36
    raise DatasetError(f"class folder {class_hex!r} is not a digit or an ASCII letter")


def _strip_root(parts: tuple[str, ...], root: str) -> tuple[str, ...]:
    return parts[1:] if parts and parts[0] == root else parts


def parse_by_class(name: str) -> tuple[str, str] | None:
    """``[by_class/]<hex>/<subfolder>/<image>.png`` -> ``(hex, subfolder)``; other names -> None."""
    parts = _strip_root(member_parts(name), "by_class")
    if len(parts) != 3 or not parts[2].lower().endswith(".png"):
        return None
    return parts[0].lower(), parts[1]


def keep_by_class_subfolder(subfolder: str) -> bool:
    """LEAF's filter of by_class subfolders: the name contains ``hsf`` and not ``mit``."""
    return "hsf" in subfolder and "mit" not in subfolder


def image_vector(data: bytes, source: str = "image") -> np.ndarray:
    """LEAF's image step: greyscale, thumbnail to 28x28 (LANCZOS), divide by 255 -> 784 float32.

    ``reducing_gap=None``: Pillow 7+ first shrinks by an integer factor (2x for 128 -> 28) before the
    LANCZOS step, which changes pixels by up to 0.07; the Pillow of LEAF's scripts resized in one step.
    """
    try:
        with Image.open(io.BytesIO(data)) as img:
            grey = img.convert("L")
    except (OSError, ValueError) as e:
        raise DatasetError(f"{source}: not a readable image: {e}") from None
    grey.thumbnail(IMAGE_SIZE, Image.Resampling.LANCZOS, reducing_gap=None)
    if grey.size != IMAGE_SIZE:
        raise DatasetError(f"{source}: image thumbnails to {grey.size}, not {IMAGE_SIZE} (not square?)")
    return (np.asarray(grey, dtype=np.float32) / 255.0).reshape(-1)


@dataclass
class ImageRef:
    """One kept by_class image: its member name, class folder and MD5."""

    member: str
    class_hex: str
    md5: str
    data: bytes = field(repr=False)


def class_images(
    zf: zipfile.ZipFile, classes: set[str] | None = None, progress: bool = False
) -> tuple[list[ImageRef], dict[str, int]]:
    """LEAF step 1 on ``by_class``: every kept image (``hsf``, not ``mit``) of ``classes`` with its MD5.

    Bytes seen before under another class are a conflict: the first class keeps the image (as in
    LEAF's hash table) and the conflict is counted; identical bytes are dropped later, in :func:`paper_subset`.
    """

    def select(name: str) -> bool:
        parsed = parse_by_class(name)
        return parsed is not None and keep_by_class_subfolder(parsed[1]) and (classes is None or parsed[0] in classes)

    first_class: dict[str, str] = {}
    refs: list[ImageRef] = []
    counts = {"by_class_images": 0, "by_class_conflicts": 0}
    for info, data in tqdm(iter_members(zf, select), desc="by_class", unit="img", disable=not progress):
        parsed = parse_by_class(info.filename)
        assert parsed is not None  # select kept only the names it parses
        cls = parsed[0]
        digest = hashlib.md5(data).hexdigest()
        counts["by_class_images"] += 1
        if first_class.setdefault(digest, cls) != cls:
            counts["by_class_conflicts"] += 1
            continue
        refs.append(ImageRef(info.filename, cls, digest, data))
    return refs, counts


SIZES = ("paper_index", "table2_shape")


@dataclass(frozen=True)
class FemnistSpec:
    """The paper's FEMNIST subset (Table 2): 50 devices x 5 of the letters a-j.

    ``sizes="paper_index"`` (default): device ``k`` has exactly ``train_counts[k]`` training and
    ``test_counts[k]`` test samples, the per-device counts of the authors' device index
    (``user_groups.json``, read by ``upfl data prepare femnist``; 16421 + 1924 over 50 devices), in
    the authors' device order. ``sizes="table2_shape"``: counts shaped like Table 2 without the
    index: 16421 in all, min 79, median 277.5 and max 1950 (:func:`upfl.data.shapes.lognormal_sizes`;
    those three figures come from the authors' index, not from the paper); test counts
    ``test_total`` split in proportion when given, else LEAF's split by sample at ``train_fraction``
    (each device gets the largest size whose split keeps its train count).
    """

    num_devices: int = 50
    classes_per_device: int = 5
    classes: tuple[str, ...] = LOWER_A_J
    train_total: int = 16421
    train_min: int = 79
    train_median: float = 277.5
    train_max: int = 1950
    test_total: int | None = None
    train_fraction: float = 0.9
    sizes: str = "paper_index"
    train_counts: tuple[int, ...] = ()
    test_counts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.sizes not in SIZES:
            raise ValueError(f"sizes must be one of {', '.join(SIZES)}, got {self.sizes!r}")
        if len(self.train_counts) != len(self.test_counts):
            raise ValueError(f"train_counts has {len(self.train_counts)} devices, test_counts {len(self.test_counts)}")
        if any(int(n) < 1 for n in self.train_counts) or any(int(n) < 0 for n in self.test_counts):
            raise ValueError("train_counts must be >= 1 and test_counts >= 0 per device")
        if not 1 <= self.classes_per_device <= len(self.classes):
            raise ValueError(f"classes_per_device must be in 1..{len(self.classes)}, got {self.classes_per_device}")
        if not 0 < self.train_fraction < 1:
            raise ValueError(f"train_fraction must be in (0, 1), got {self.train_fraction}")


def device_sizes(spec: FemnistSpec) -> tuple[np.ndarray, np.ndarray]:
    """Per-device ``(train, test)`` counts of the spec (deterministic): the index's, in its order, or
    the Table 2 shape, sorted."""
    if spec.sizes == "paper_index":
        if not spec.train_counts:
            raise ValueError(
                "FEMNIST sizes 'paper_index' need the authors' per-device counts (train_counts, "
                "test_counts): 'upfl data prepare femnist' reads them from the paper's device index "
                "('upfl data fetch paper_femnist'); or set sizes=table2_shape"
            )
        if len(spec.train_counts) != spec.num_devices:
            raise ValueError(
                f"num_devices is {spec.num_devices} but the device index has {len(spec.train_counts)} devices"
            )
        return np.array(spec.train_counts, dtype=np.int64), np.array(spec.test_counts, dtype=np.int64)
    train = lognormal_sizes(spec.num_devices, spec.train_total, spec.train_min, spec.train_median, spec.train_max)
    if spec.test_total is not None:
        test = proportional_sizes(train, spec.test_total)
    else:
        test = np.array([leaf_total_for_train(int(t), spec.train_fraction) - int(t) for t in train])
    return train, test


def select_devices(
    pool_sizes: dict[int, int], totals: np.ndarray, classes_per_device: int, rng: np.random.Generator
) -> list[tuple[list[int], dict[int, int]]]:
    """Choose each device's classes and how many images of each it takes (no image twice).

    Device ``d`` (in the given order) needs ``totals[d]`` images split as evenly as possible
    over ``classes_per_device`` classes (the remainder goes to classes drawn at random); its
    classes are drawn uniformly without replacement among those with enough images left, and
    the counts are subtracted from the pools. Raises :class:`DatasetError` when pools run dry.
    """
    left = dict(pool_sizes)
    plan: list[tuple[list[int], dict[int, int]]] = []
    for d, total in enumerate(int(t) for t in totals):
        share = -(-total // classes_per_device)
        able = sorted(c for c, n in left.items() if n >= share)
        if len(able) < classes_per_device:
            raise DatasetError(
                f"device {d} needs {share} images from each of {classes_per_device} classes, "
                f"but only {len(able)} classes have that many left: {dict(sorted(left.items()))}"
            )
        chosen = sorted(int(c) for c in rng.choice(able, size=classes_per_device, replace=False))
        base, extra = divmod(total, classes_per_device)
        bonus = {int(c) for c in rng.choice(chosen, size=extra, replace=False)}
        counts = {c: base + (1 if c in bonus else 0) for c in chosen}
        for c, n in counts.items():
            left[c] -= n
        plan.append((chosen, counts))
    return plan


def paper_subset(refs: list[ImageRef], spec: FemnistSpec, seed: int) -> dict[str, Any]:
    """The paper's devices from LEAF's matched images: returns users, splits, per-device image names.

    Seeded draws, each from its own key of the ``data`` stream: device order (key 0), pool
    shuffles (key 1, class), class choice (key 2), per-device train/test split (key 3, device).
    """
    key = dataset_key("femnist")
    label_of = {h: i for i, h in enumerate(spec.classes)}
    pools: dict[int, list[ImageRef]] = {i: [] for i in range(len(spec.classes))}
    seen: set[str] = set()
    duplicates = 0
    for ref in refs:
        if ref.class_hex not in label_of:
            continue
        if ref.md5 in seen:
            duplicates += 1
            continue
        seen.add(ref.md5)
        pools[label_of[ref.class_hex]].append(ref)
    for c, pool in pools.items():
        pool.sort(key=lambda r: r.member)
        order = numpy_generator(seed, "data", key, 1, c).permutation(len(pool))
        pools[c] = [pool[i] for i in order]
    train_sizes, test_sizes = device_sizes(spec)
    if spec.sizes != "paper_index":  # the index's devices keep the authors' order
        order = numpy_generator(seed, "data", key, 0).permutation(spec.num_devices)
        train_sizes, test_sizes = train_sizes[order], test_sizes[order]
    plan = select_devices(
        {c: len(p) for c, p in pools.items()},
        train_sizes + test_sizes,
        spec.classes_per_device,
        numpy_generator(seed, "data", key, 2),
    )
    users: list[str] = []
    train: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] = ({}, {})
    test: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] = ({}, {})
    images: dict[str, dict[str, list[str]]] = {}
    devices: dict[str, dict[str, Any]] = {}
    taken = dict.fromkeys(pools, 0)
    for d, (chosen, counts) in enumerate(plan):
        user = f"f_{d:05d}"
        picked: list[tuple[ImageRef, int]] = []
        for c in chosen:
            picked += [(r, c) for r in pools[c][taken[c] : taken[c] + counts[c]]]
            taken[c] += counts[c]
        perm = numpy_generator(seed, "data", key, 3, d).permutation(len(picked))
        n_train = int(train_sizes[d])
        split = {"train": [picked[i] for i in perm[:n_train]], "test": [picked[i] for i in perm[n_train:]]}
        for name, (xs, ys) in (("train", train), ("test", test)):
            rows = split[name]
            xs[user] = (
                np.stack([image_vector(r.data, r.member) for r, _ in rows])
                if rows
                else np.zeros((0, 784), dtype=np.float32)
            )
            ys[user] = np.array([c for _, c in rows], dtype=np.int64)
        users.append(user)
        images[user] = {name: [r.member for r, _ in rows] for name, rows in split.items()}
        devices[user] = {
            "classes": [chr(int(spec.classes[c], 16)) for c in chosen],
            "train": len(split["train"]),
            "test": len(split["test"]),
        }
    return {
        "users": users,
        "train": train,
        "test": test,
        "images": images,
        "devices": devices,
        "pool_sizes": {chr(int(spec.classes[c], 16)): len(p) for c, p in pools.items()},
        "duplicate_images_skipped": duplicates,
    }


def build_femnist(
    by_class: str | os.PathLike,
    out: str | os.PathLike,
    seed: int = 0,
    spec: FemnistSpec = FemnistSpec(),
    progress: bool = True,
    name: str = "femnist",
    device_index: dict[str, Any] | None = None,
) -> Path:
    """LEAF's FEMNIST steps on NIST's ``by_class.zip``, then the paper's subset, written as a LEAF folder.

    The folder holds ``train/``, ``test/``, ``meta.json`` (spec, seed, counts, per-device
    classes, archive checksums) and ``images.json`` (the by_class member of every sample). ``device_index``
    (the index files' URLs and sha256, when the counts come from it) is recorded in ``meta.json``.
    """
    device_sizes(spec)  # a spec without its counts fails here, before the archives are read
    by_class = Path(by_class)
    with open_zip(by_class) as zc:
        refs, counts = class_images(zc, set(spec.classes), progress)
    subset = paper_subset(refs, spec, seed)
    key = dataset_key("femnist")
    meta = {
        "name": name,
        "table2_reading": "train",
        "generator": "leaf_femnist_paper_subset",
        "parameters": asdict(spec),
        "data_seed": seed,
        "data_seed_derived": derive_seed(seed, "data", key),
        "num_classes": len(spec.classes),
        "label_map": {chr(int(h, 16)): i for i, h in enumerate(spec.classes)},
        "x_dtype": "float32",
        "image": {"size": list(IMAGE_SIZE), "resample": "LANCZOS thumbnail", "scale": "1/255", "inverted": False},
        "counts": {
            **counts,
            "pool_sizes": subset["pool_sizes"],
            "duplicate_images_skipped": subset["duplicate_images_skipped"],
        },
        "devices": subset["devices"],
        "sources": {by_class.name: read_recorded_sha256(by_class)},
        "device_index": device_index,
        "upfl_version": __version__,
    }

    def write_index(path: Path) -> None:
        path.write_text(json.dumps(subset["images"], separators=(",", ":")), encoding="utf-8")

    return write_dataset(
        out, subset["users"], subset["train"], subset["test"], meta, extras={"images.json": write_index}
    )
