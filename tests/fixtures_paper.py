"""Small files in the layout and format of the paper's released data, made by the tests.

``make_paper_mirror(folder)`` writes, for each synthetic set, ``<folder>/<repo>/<commit>/data/<set>/data/
{train,test}/{mytrain.pt|mytest.pt, user_groups.json}`` as the authors published them (a
``torch.save``d ``TensorDataset(x float64 (n, 20), y float64 (n,))`` and a device -> row index JSON,
rows shuffled across devices), plus the FEMNIST device index; so serving ``folder`` on 127.0.0.1
is a mirror with the layout of raw.githubusercontent.com. The checksums differ from the pinned ones:
``checksum_flags`` gives the ``--sha256 NAME=HEX`` overrides.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from upfl.data.sources import PAPER_COMMIT, PAPER_REPO, PAPER_SYNTHETIC_SETS, SOURCES, paper_file_name, paper_file_path
from upfl.files import sha256_file


def mirror_root(folder: Path) -> Path:
    return Path(folder) / PAPER_REPO / PAPER_COMMIT


def save_tensor_dataset(path: Path, x, y) -> None:
    import torch
    from torch.utils.data import TensorDataset

    path.parent.mkdir(parents=True, exist_ok=True)
    dataset = TensorDataset.__new__(TensorDataset)  # as the constructor builds it, without its size check
    dataset.tensors = (torch.as_tensor(x), torch.as_tensor(y))
    torch.save(dataset, path)


def write_groups(path: Path, groups: dict[str, list[int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(groups))


def set_arrays(setting: str, devices: int = 4, seed: int = 0, dim: int = 20):
    """Per split: ``(x, y, groups)`` with device sizes 6..20 (train) and 1..3 (test), rows shuffled."""
    rng = np.random.default_rng([seed, PAPER_SYNTHETIC_SETS.index(setting) if setting in PAPER_SYNTHETIC_SETS else 9])
    out = {}
    for split, (lo, hi) in (("train", (6, 21)), ("test", (1, 4))):
        sizes = rng.integers(lo, hi, devices)
        n = int(sizes.sum())
        x = rng.normal(size=(n, dim))
        y = rng.integers(0, 2, n).astype(np.float64)
        order = rng.permutation(n)
        groups, start = {}, 0
        for k, size in enumerate(sizes):
            groups[str(k)] = [int(i) for i in order[start : start + size]]
            start += size
        out[split] = (x, y, groups)
    return out


def make_paper_set(folder: Path, setting: str, devices: int = 4, seed: int = 0) -> dict[str, Path]:
    """One set's four files under ``folder`` (mirror layout); returns source name -> path."""
    root = mirror_root(folder)
    files = {}
    for split, (x, y, groups) in set_arrays(setting, devices, seed).items():
        tensors = root / paper_file_path(setting, split, False)
        index = root / paper_file_path(setting, split, True)
        save_tensor_dataset(tensors, x, y)
        write_groups(index, groups)
        files[paper_file_name(setting, split, False)] = tensors
        files[paper_file_name(setting, split, True)] = index
    return files


def make_femnist_index(folder: Path, train_counts: list[int], test_counts: list[int]) -> dict[str, Path]:
    """The FEMNIST device index in the authors' format: device -> row indices into their image tensor."""
    root = mirror_root(folder)
    files = {}
    for split, counts in (("train", train_counts), ("test", test_counts)):
        groups, start = {}, 0
        for k, c in enumerate(counts):
            groups[str(k)] = list(range(start, start + c))
            start += c
        path = root / paper_file_path("femnist", split, True)
        write_groups(path, groups)
        files[paper_file_name("femnist", split, True)] = path
    return files


def make_paper_mirror(folder: Path, sets=PAPER_SYNTHETIC_SETS, devices: int = 4) -> dict[str, Path]:
    """Every set of ``sets`` in mirror layout under ``folder``; source name -> path."""
    files = {}
    for setting in sets:
        files.update(make_paper_set(folder, setting, devices))
    return files


def checksum_flags(files: dict[str, Path]) -> list[str]:
    """``--sha256 NAME=HEX`` for each file (the fixtures are not the pinned files)."""
    flags = []
    for name, path in files.items():
        assert name in SOURCES, name
        flags += ["--sha256", f"{name}={sha256_file(path)}"]
    return flags
