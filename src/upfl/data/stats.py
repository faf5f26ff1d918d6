"""The paper's Table 2 row of a data set: sample counts and samples per device."""

from __future__ import annotations

from typing import Any

import numpy as np

from .leaf import FederatedDataset


def dataset_stats(ds: FederatedDataset) -> dict[str, Any]:
    """Totals and per-device mean/std (population, ddof 0) of train, test and train+test samples.

    The paper's Table 2 mixes readings (synthetic rows count train+test, FEMNIST rows count
    train), so all three are given. Devices are users with training data.
    """
    devices = ds.train_users
    n_train = np.array([len(ds.train_y[u]) for u in devices], dtype=np.int64)
    n_test = np.array([len(ds.test_y[u]) for u in devices], dtype=np.int64)
    total_test = int(sum(len(ds.test_y[u]) for u in ds.users))
    n_total = n_train + n_test
    row: dict[str, Any] = {
        "dataset": ds.meta.get("name", ds.path),
        "samples_total": int(n_train.sum()) + total_test,
        "samples_train": int(n_train.sum()),
        "samples_test": total_test,
        "devices": len(devices),
    }
    for key, arr in (("total", n_total), ("train", n_train), ("test", n_test)):
        row[f"per_device_{key}_mean"] = float(arr.mean())
        row[f"per_device_{key}_std"] = float(arr.std(ddof=0))
    row["per_device_train_min"] = int(n_train.min())
    row["per_device_train_max"] = int(n_train.max())
    return row


def format_stats(row: dict[str, Any]) -> str:
    """Human-readable Table 2 row."""
    lines = [
        f"dataset            {row['dataset']}",
        f"samples            {row['samples_total']} total = {row['samples_train']} train + {row['samples_test']} test",
        f"devices            {row['devices']}",
    ]
    for key in ("total", "train", "test"):
        lines.append(f"per device ({key:5s}) mean {row[f'per_device_{key}_mean']:.1f}  std {row[f'per_device_{key}_std']:.1f}")
    lines.append(f"per device (train) min {row['per_device_train_min']}  max {row['per_device_train_max']}")
    return "\n".join(lines)
