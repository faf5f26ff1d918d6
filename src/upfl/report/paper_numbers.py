"""The paper's own numbers (typed in from the paper into ``paper_values/*.csv``) and display names."""

from __future__ import annotations

import io
import math
import re
from functools import cache
from importlib import resources

import pandas as pd

from .styles import ALGORITHM_STYLES, PAPER_ALGORITHMS

ALGORITHM_LABELS = {name: ALGORITHM_STYLES[name][0] for name in PAPER_ALGORITHMS}
ALGORITHM_ORDER = list(PAPER_ALGORITHMS)
METRIC_LABELS = {
    "train_loss": "Training loss",
    "test_loss": "Test loss",
    "train_acc": "Training accuracy",
    "test_acc": "Test accuracy",
}


@cache
def paper_values(name: str) -> pd.DataFrame:
    """``paper_values/<name>.csv`` as a data frame (packaged with upfl)."""
    text = resources.files("upfl.report").joinpath("paper_values").joinpath(f"{name}.csv").read_text(encoding="utf-8")
    return pd.read_csv(io.StringIO(text), dtype={"dataset": str})


@cache
def table1_value(dataset: str, algorithm: str, mu: float | None) -> tuple[float, float] | None:
    """The paper's Table 1 (train, test) accuracy in percent, or None when the paper has no such cell (looked up
    once per cell in a process: a report asks for the same cells many times)."""
    rows = _table1_rows().get((dataset, algorithm), [])
    if algorithm == "fedavg":
        rows = [r for r in rows if math.isnan(r[0])]
    elif mu is None or (isinstance(mu, float) and math.isnan(mu)):
        return None
    else:
        rows = [r for r in rows if abs(r[0] - float(mu)) < 1e-9]
    if not rows:
        return None
    return rows[0][1], rows[0][2]


@cache
def _table1_rows() -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    """The paper's Table 1 by (data set, algorithm): its rows' (mu, train, test) in the file's order."""
    out: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    df = paper_values("table1")
    for dataset, algorithm, mu, train, test in zip(
        df["dataset"], df["algorithm"], df["mu"], df["train_acc"], df["test_acc"], strict=True
    ):
        out.setdefault((dataset, algorithm), []).append((float(mu), float(train), float(test)))
    return out


@cache
def dataset_label(name: str) -> str:
    """The paper's name of a data set (``synthetic_0.5_0.5`` -> ``Synthetic(0.5,0.5)``); else ``name`` (looked up
    once per name in a process)."""
    df = paper_values("table2")
    hit = df[df["dataset"] == name]
    if not hit.empty:
        return str(hit.iloc[0]["label"])
    m = re.fullmatch(r"synthetic_([0-9.]+)_([0-9.]+)", name)
    if m:
        return f"Synthetic({m.group(1)},{m.group(2)})"
    return name


def algorithm_label(name: str) -> str:
    """Display name of an algorithm (``upcycled`` -> ``Upcycled-FL``)."""
    return ALGORITHM_LABELS.get(name, name)


def metric_label(name: str) -> str:
    """Axis label of a metric column (``train_loss`` -> ``Training loss``)."""
    return METRIC_LABELS.get(name, name.replace("_", " "))


def dataset_order(names) -> list[str]:
    """Data sets in the paper's order (Table 2's rows), unknown ones after, sorted."""
    known = list(paper_values("table2")["dataset"])
    names = list(dict.fromkeys(names))
    return [n for n in known if n in names] + sorted(n for n in names if n not in known)
