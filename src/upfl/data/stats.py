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
    reading = ds.meta.get("table2_reading", "total")
    if reading not in ("total", "train"):
        raise ValueError(f"{ds.path}: meta.json table2_reading must be 'total' or 'train', got {reading!r}")
    row["table2_reading"] = reading
    return row


def format_stats(row: dict[str, Any]) -> str:
    """Human-readable Table 2 row."""
    lines = [
        f"dataset            {row['dataset']}",
        f"samples            {row['samples_total']} total = {row['samples_train']} train + {row['samples_test']} test",
        f"devices            {row['devices']}",
    ]
    for key in ("total", "train", "test"):
        lines.append(
            f"per device ({key:5s}) mean {row[f'per_device_{key}_mean']:.1f}  std {row[f'per_device_{key}_std']:.1f}"
        )
    lines.append(f"per device (train) min {row['per_device_train_min']}  max {row['per_device_train_max']}")
    lines.append(f"Table 2 row        {table2_text(row)}")
    return "\n".join(lines)


def table2_text(row: dict[str, Any]) -> str:
    """The row as the paper's Table 2 prints it: ``samples (test), devices, mean +- std`` (rounded).

    Synthetic rows count train + test samples, FEMNIST and Sent140 rows training samples
    (``table2_reading`` in meta.json); std is the population std (ddof 0), which reproduces the paper.
    """
    reading = row.get("table2_reading", "total")
    samples = row["samples_total"] if reading == "total" else row["samples_train"]
    what = "train + test" if reading == "total" else "train"
    return (
        f"{samples} ({row['samples_test']} test), {row['devices']} devices, "
        f"{row[f'per_device_{reading}_mean']:.0f} +- {row[f'per_device_{reading}_std']:.0f} per device ({what})"
    )
