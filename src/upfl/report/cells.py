"""Grouping runs into cells (data set x algorithm x mu) and pairing Upcycled-FL with FedProx on seed."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

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
        if col in ignore or col not in group.columns or _one_value(group[col].to_numpy()):
            continue
        values = sorted(set(group[col].astype(str)))
        if len(values) > 1:
            raise ReportError(
                f"{what}: runs differ in {col} ({', '.join(values)}); "
                f"keep one with --where {col}=VALUE or split the experiment"
            )


def _one_value(values: np.ndarray) -> bool:
    """Whether ``values`` surely hold one value written one way (what the check above compares as text): all equal
    numbers (all NaN, or all equal and not zero, which may be written -0.0), or all equal strings. False leaves the
    decision to the comparison as text."""
    if len(values) <= 1:
        return True
    first = values[0]
    if values.dtype.kind == "f":
        return bool(np.isnan(values).all()) if np.isnan(first) else first != 0.0 and bool((values == first).all())
    if values.dtype.kind in "iub":
        return bool((values == first).all())
    return type(first) is str and all(type(v) is str and v == first for v in values)


def missing(value) -> bool:
    """Whether a cell's value is absent: None or NaN (what pandas reads from an empty CSV field)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _same_as(values: np.ndarray, mu: float) -> np.ndarray:
    """Which of ``values`` equal ``mu`` (both NaN, or within 1e-12), as a mask."""
    if math.isnan(mu):
        return np.isnan(values)
    with np.errstate(invalid="ignore"):
        return ~np.isnan(values) & (np.abs(values - mu) < 1e-12)


def iter_cells(runs: pd.DataFrame) -> Iterator[tuple[str, str, float, pd.DataFrame]]:
    """(dataset, algorithm, mu, runs) for every cell, in the paper's order; mu is NaN for FedAvg."""
    runs = with_cell_mu(runs)
    algos = [a for a in ALGORITHM_ORDER if a in set(runs["algorithm"])]
    algos += sorted(set(runs["algorithm"]) - set(algos))
    for dataset in dataset_order(runs["dataset"]):
        sub = runs[runs["dataset"] == dataset]
        mus = sorted({float(m) for m in sub["cell_mu"] if not math.isnan(m)})
        cell_mu = sub["cell_mu"].to_numpy(dtype=float)
        for mu in [math.nan] + mus:
            same_mu = _same_as(cell_mu, mu)
            for alg in algos:
                cell = sub[(sub["algorithm"] == alg).to_numpy() & same_mu]
                if not cell.empty:
                    yield dataset, alg, mu, cell


def dataset_mus(runs: pd.DataFrame, dataset: str) -> list[float]:
    """The mu values of a data set's FedProx and Upcycled-FL runs, sorted."""
    runs = with_cell_mu(runs)
    sub = runs[runs["dataset"] == dataset]
    return sorted({float(m) for m in sub["cell_mu"] if not math.isnan(m)})


def records(frame: pd.DataFrame, columns: Sequence[str]) -> list[dict[str, Any]]:
    """``frame.to_dict("records")`` of the ``columns`` it has (the others left out, as if the frame had none): the
    same values at a fraction of the cost on a runs table, where each column of the frame costs a Series
    (``to_dict`` of a 140-column runs table, 3 ms a call, was a figure's or the time table's loop's main cost)."""
    return frame[[c for c in dict.fromkeys(columns) if c in frame.columns]].to_dict("records")


def paired(a: pd.DataFrame, b: pd.DataFrame, column: str) -> pd.DataFrame:
    """Inner join of two cells on seed: columns ``seed``, ``a``, ``b`` (the value of ``column`` in each), sorted by
    seed. Joined with a dict of the second cell's seeds (what ``merge`` on ``seed`` then ``sort_values`` gives, a
    tenth of its cost: the claims page pairs a hundred cells)."""
    seeds = {}
    for side, name in ((a, "first"), (b, "second")):
        if pd.Index(side["seed"]).has_duplicates:
            raise ReportError(f"pairing on seed: the {name} cell has several runs with the same seed")
        seeds[name] = side["seed"].to_numpy()
    where_b = {seed: i for i, seed in enumerate(seeds["second"])}
    rows_a = [i for i, seed in enumerate(seeds["first"]) if seed in where_b]
    rows_a.sort(key=lambda i: seeds["first"][i])
    rows_b = [where_b[seeds["first"][i]] for i in rows_a]
    return pd.DataFrame(
        {
            "seed": seeds["first"][rows_a],
            "a": a[column].to_numpy()[rows_a],
            "b": b[column].to_numpy()[rows_b],
        }
    )
