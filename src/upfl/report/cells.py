"""Grouping runs into cells (data set x algorithm x mu) and pairing Upcycled-FL with FedProx on seed."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pandas as pd

from .collect import CONFIG_COLUMNS, ReportError
from .paper_numbers import ALGORITHM_ORDER, dataset_order

CELL_KEYS = ("dataset", "algorithm", "mu")


def with_cell_mu(runs: pd.DataFrame) -> pd.DataFrame:
    """A copy with ``cell_mu``: mu, or NaN for FedAvg (which has no proximal term)."""
    out = runs.copy()
    out["cell_mu"] = np.where(out["algorithm"] == "fedavg", np.nan, out["mu"].astype(float))
    return out


def check_one_config(group: pd.DataFrame, what: str, ignore: tuple[str, ...] = ("seed",)) -> None:
    """Raise when the runs of one cell differ in a config column other than ``ignore``."""
    for col in CONFIG_COLUMNS:
        if col in ignore or col not in group.columns:
            continue
        values = sorted(set(group[col].astype(str)))
        if len(values) > 1:
            raise ReportError(
                f"{what}: runs differ in {col} ({', '.join(values)}); "
                f"keep one with --where {col}=VALUE or split the experiment"
            )


def missing(value) -> bool:
    """Whether a cell's value is absent: None or NaN (what pandas reads from an empty CSV field)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (not math.isnan(a) and not math.isnan(b) and abs(a - b) < 1e-12)


def iter_cells(runs: pd.DataFrame) -> Iterator[tuple[str, str, float, pd.DataFrame]]:
    """(dataset, algorithm, mu, runs) for every cell, in the paper's order; mu is NaN for FedAvg."""
    runs = with_cell_mu(runs)
    algos = [a for a in ALGORITHM_ORDER if a in set(runs["algorithm"])]
    algos += sorted(set(runs["algorithm"]) - set(algos))
    for dataset in dataset_order(runs["dataset"]):
        sub = runs[runs["dataset"] == dataset]
        mus = sorted({float(m) for m in sub["cell_mu"] if not math.isnan(m)})
        for mu in [math.nan] + mus:
            for alg in algos:
                cell = sub[(sub["algorithm"] == alg) & sub["cell_mu"].map(lambda m, mu=mu: _same(float(m), mu))]
                if not cell.empty:
                    yield dataset, alg, mu, cell


def dataset_mus(runs: pd.DataFrame, dataset: str) -> list[float]:
    """The mu values of a data set's FedProx and Upcycled-FL runs, sorted."""
    runs = with_cell_mu(runs)
    sub = runs[runs["dataset"] == dataset]
    return sorted({float(m) for m in sub["cell_mu"] if not math.isnan(m)})


def paired(a: pd.DataFrame, b: pd.DataFrame, column: str) -> pd.DataFrame:
    """Inner join of two cells on seed: columns ``seed``, ``a``, ``b`` (the value of ``column`` in each)."""
    left = a[["seed", column]].rename(columns={column: "a"})
    right = b[["seed", column]].rename(columns={column: "b"})
    for side, name in ((left, "first"), (right, "second")):
        if side["seed"].duplicated().any():
            raise ReportError(f"pairing on seed: the {name} cell has several runs with the same seed")
    return left.merge(right, on="seed").sort_values("seed")
