"""The rules the claims page judges by: the verdict rule (:data:`VERDICT_RULE`), the rows' columns, the runs a
group of claims reads (:class:`Context`, roles :data:`DEFAULT_ROLES`) and the paired intervals. The sections of the
page come from the output modules (:data:`upfl.report.claims.CLAIM_SECTIONS`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import (
    Any,
)

import pandas as pd

from ..privacy.accounting import MEANINGFUL_EPSILON, NO_MEANINGFUL
from .cells import paired
from .paper_numbers import algorithm_label, dataset_label
from .render import as_number, fmt
from .stats import LEVEL, mean_interval

ACC = ("train_acc", "test_acc")
METRIC_TEXT = {"train_acc": "training accuracy", "test_acc": "test accuracy"}

DEFAULT_ROLES = {
    "table1": "table1",
    "time": "table1",
    "lambda_sweep": "fig2_lambda",
    "privacy": "privacy_output,privacy_objective",
    "privacy_real": "fig12",
    "cnn": "fig4",
    "draws": "table1_draws",
    "bases": "upcycling_bases",
    "momentum": "ablation_momentum",
    "protocol_gap": "protocol_gap",
    "sensitivity": "sensitivity",
    "sensitivity_held_out": "sensitivity_held_out",
}
"""Which experiment(s) of the runs table each group of claims reads (comma-separated names)."""

EQUIVALENCE_MARGIN = 0.10
"""'About the same' (a ratio of 1): holds when the 95% interval lies within 1 +- this margin."""

MIN_PAIRS = 5
"""Fewest paired seeds a verdict is given on. The 95% t interval's half-width is t* s / sqrt(n): 8.98 s at 2
pairs (t* = 12.71), 2.48 s at 3, 1.59 s at 4 and 1.24 s at 5 (t* = 2.78), and s itself, estimated from 2 to 4
values, is too unsteady for the interval to be trusted; from 5 pairs on both settle."""

TOO_FEW = "too few seeds"
VERDICTS = ("holds", "does not hold", "inconclusive", TOO_FEW, "not measured here")
PREVIEW = "preview, not the paper's data"

VERDICT_RULE = (
    "Verdict rule. A claim 'Upcycled-FL is better by g' (the paper's figure g; ours as a per-seed paired "
    "difference, mean and 95% t interval [lo, hi]) **holds** when the interval lies on the paper's side of 0 and "
    "does not lie wholly short of g (lo > 0 and hi >= g, g taken to the half-unit of its last printed digit; "
    "mirrored for g < 0); it **does not hold** when the interval lies wholly short of g or on the other side of 0; "
    "it is **inconclusive** when the interval contains both 0 and g (too much spread to tell), or when it has zero "
    "width (every pair gave the same difference, so the seeds say nothing of the spread). "
    f"A verdict needs at least {MIN_PAIRS} paired seeds: the 95% t interval's half-width is 8.98 standard deviations "
    "of the differences over √n at 2 pairs and 1.24 at 5, and a standard deviation from 2 to 4 values is itself "
    f"too unsteady; below {MIN_PAIRS} the row shows '{TOO_FEW} (n)' and its mean, with no interval and no verdict. "
    "A figure without sampling noise (a privacy-loss reduction computed from the configuration) is judged by the "
    f"same rule with lo = hi = ours. 'About the same' (a ratio of 1) holds when the interval lies within "
    f"1 ± {EQUIVALENCE_MARGIN:g}, does not hold when it lies wholly outside, else inconclusive. A claim without a "
    "figure (a direction only) holds when the interval excludes 0 on the claimed side, does not hold when it "
    "excludes 0 on the other side, else inconclusive. 'Not measured here': "
    "the runs are not in the runs table (the reason is given). Every row names the data its runs were trained on; "
    f"a row on our generator's draws rather than the authors' released ones is marked '{PREVIEW}'."
)

MEANINGFUL_RULE = (
    f"Privacy level: ε̄ (mean over devices) and the worst device's ε; a value above "
    f"{MEANINGFUL_EPSILON:g} is marked '{NO_MEANINGFUL}' (at ε = {MEANINGFUL_EPSILON:g} an adversary's "
    "odds on a record may grow e^10 = 22,026-fold; docs/privacy.md)."
)

COLUMNS = [
    "id",
    "section",
    "claim",
    "dataset",
    "paper",
    "unit",
    "ours",
    "ci_low",
    "ci_high",
    "n_pairs",
    "draws_n",
    "draws_min",
    "draws_max",
    "draws_above_zero",
    "draws_below_zero",
    "privacy_level",
    "meaningful_guarantee",
    "verdict",
    "why",
    "experiment",
    "source",
    "data_origin",
    "preview",
    "seeds",
    "n_runs",
]


# ---------------------------------------------------------------------------------------------
# Verdicts


def half_unit(paper_text: str | float) -> float:
    """Half a unit of the last printed digit of a figure (``7.19`` -> 0.005, ``48`` -> 0.5)."""
    text = str(paper_text)
    if "e" in text.lower():
        return 0.0
    digits = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0 ** (-digits)


def pairs_text(n: int) -> str:
    return f"{n} pair{'s' if n != 1 else ''}"


def zero_width(low: float, high: float) -> bool:
    """True for an interval of no width (every pair gave the same difference, up to rounding)."""
    return high - low <= 1e-9 * max(1.0, abs(low), abs(high))


def evidence_gate(low: float, high: float, n: int) -> tuple[str, str] | None:
    """The verdict when the interval cannot carry one (fewer than MIN_PAIRS pairs, no interval, zero width)."""
    if n < MIN_PAIRS:
        return TOO_FEW, f"{pairs_text(n)}; a verdict needs at least {MIN_PAIRS}"
    if math.isnan(low) or math.isnan(high):
        return "inconclusive", f"{pairs_text(n)}: no interval"
    if zero_width(low, high):
        return "inconclusive", (
            f"all {n} pairs gave the same difference: a zero-width interval says nothing of the spread"
        )
    return None


def verdict_gain(
    paper: float, low: float, high: float, n: int, tolerance: float = 0.0, exact: bool = False
) -> tuple[str, str]:
    """The verdict on 'better by ``paper``' from our interval [low, high] over ``n`` pairs (see VERDICT_RULE);
    ``exact``: a figure without sampling noise, judged with low = high = ours."""
    if math.isnan(paper):
        return "inconclusive", "the paper gives no figure"
    gate = None if exact else evidence_gate(low, high, n)
    if gate:
        return gate
    if paper < 0:
        verdict, why = verdict_gain(-paper, -high, -low, n, tolerance, exact=True)
        return verdict, why.replace("above 0", "below 0 (the paper's sign)")
    target = paper - tolerance
    if paper == 0:
        return (
            ("holds", "the interval contains 0")
            if low <= 0 <= high
            else ("does not hold", "the interval excludes the paper's 0")
        )
    if high < target and low > 0:
        return "does not hold", "a gain, but smaller than the paper's: the interval lies wholly below its figure"
    if high <= 0:
        return "does not hold", "no gain: the interval lies at or below 0"
    if high < target:
        return "does not hold", "the interval excludes the paper's figure (and contains 0)"
    if low > 0:
        return "holds", "the interval lies above 0 and reaches the paper's figure"
    return "inconclusive", "the interval contains both 0 and the paper's figure"


TABLE1_TOLERANCE = 0.01
"""Table 1's gains are printed to 2 decimals: the paper's difference is reached within this many points."""


def table1_verdict(paper: float, low: float, high: float, n: int) -> tuple[str, str]:
    """The verdict on a Table 1 gain (Upcycled-FL minus FedProx, points), on the claims page and in Table 1."""
    return verdict_gain(paper, low, high, n, TABLE1_TOLERANCE)


def verdict_equivalence(
    target: float, low: float, high: float, n: int, margin: float = EQUIVALENCE_MARGIN
) -> tuple[str, str]:
    """'About ``target``' (a ratio): the interval within target x (1 +- margin)."""
    gate = evidence_gate(low, high, n)
    if gate:
        return gate
    lo_ok, hi_ok = target * (1 - margin), target * (1 + margin)
    if lo_ok <= low and high <= hi_ok:
        return "holds", f"the interval lies within {fmt(lo_ok, 2)}..{fmt(hi_ok, 2)}"
    if high < lo_ok or low > hi_ok:
        return "does not hold", f"the interval lies outside {fmt(lo_ok, 2)}..{fmt(hi_ok, 2)}"
    return "inconclusive", f"the interval crosses a bound of {fmt(lo_ok, 2)}..{fmt(hi_ok, 2)}"


def verdict_direction(sign: int, low: float, high: float, n: int) -> tuple[str, str]:
    """A direction without a figure: ``sign`` +1 (ours should be > 0) or -1 (< 0)."""
    gate = evidence_gate(low, high, n)
    if gate:
        return gate
    if (sign > 0 and low > 0) or (sign < 0 and high < 0):
        return "holds", "the interval excludes 0 on the claimed side"
    if (sign > 0 and high < 0) or (sign < 0 and low > 0):
        return "does not hold", "the interval excludes 0 on the other side"
    return "inconclusive", "the interval contains 0"


# ---------------------------------------------------------------------------------------------
# Runs


def diverged_flags(runs: pd.DataFrame) -> pd.Series | None:
    """Per run: True when flagged ``diverged`` (runs.csv column, else summary.json key); None when no run has it."""
    if "diverged" in runs.columns:
        return runs["diverged"].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0", "yes"))
    flags, seen = [], False
    for run_dir in runs.get("run_dir", pd.Series([""] * len(runs), index=runs.index)):
        path = Path(str(run_dir)) / "summary.json"
        value = False
        if path.is_file():
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                doc = {}
            if "diverged" in doc:
                seen = True
                value = bool(doc["diverged"])  # False, or the entry {iteration, kind, what}
        flags.append(value)
    return pd.Series(flags, index=runs.index) if seen else None


def without_diverged(runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs that did not diverge, and a sentence saying what was left out (or that nothing records it)."""
    flags = diverged_flags(runs)
    if flags is None:
        return runs, ("No run records a 'diverged' flag (summary.json field), so no run is left out on that ground.")
    out = runs[~flags]
    bad = runs[flags]
    text = (
        f"{len(bad)} of {len(runs)} runs are flagged 'diverged' in their summary.json and are left out of every figure"
    )
    if len(bad):
        where = sorted({f"{d} / {algorithm_label(a)}" for d, a in zip(bad["dataset"], bad["algorithm"], strict=True)})
        text += f" ({'; '.join(where[:8])}{' ...' if len(where) > 8 else ''})"
    return out, text + "."


def select(runs: pd.DataFrame, names: str) -> pd.DataFrame:
    """The runs of any of the comma-separated experiment ``names`` (empty frame when none)."""
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    mask = runs["experiments"].fillna("").map(lambda cell: bool(wanted & set(str(cell).split(";"))))
    return runs[mask].copy()


class Context:
    """The runs, roles and excluded data sets shared by the claim builders, with the not-measured reasons."""

    def __init__(self, runs: pd.DataFrame, roles: dict[str, str], excluded: Iterable[str]):
        self.runs, self.roles, self.excluded = runs, {**DEFAULT_ROLES, **roles}, set(excluded)

    def of(self, role: str) -> pd.DataFrame:
        return select(self.runs, self.roles[role])

    def missing(self, role: str, dataset: str | None = None) -> str:
        exp = self.roles[role]
        if dataset and dataset in self.excluded:
            return (
                f"{dataset_label(dataset)} is excluded from this pipeline run (the preset's exclude_sources), "
                f"so experiment {exp} made no runs on it"
            )
        where = f" on {dataset_label(dataset)}" if dataset else ""
        real = dataset in ("femnist", "sent140")
        return f"no runs of experiment {exp}{where} in the runs table" + (
            " (the real data was not downloaded, or its runs were not made)" if real else ""
        )


def claim_row(**kw) -> dict[str, Any]:
    row = {c: kw.get(c, math.nan) for c in COLUMNS}
    for key in (
        "id",
        "section",
        "claim",
        "dataset",
        "unit",
        "privacy_level",
        "meaningful_guarantee",
        "verdict",
        "why",
        "experiment",
        "source",
        "data_origin",
        "seeds",
    ):
        if isinstance(row[key], float) and math.isnan(row[key]):
            row[key] = ""
    return row


def claim_interval(values: Sequence[float] | pd.Series) -> tuple[float, float, float, int]:
    ci = mean_interval(list(values), LEVEL)
    return ci.mean, ci.low, ci.high, ci.n


def not_measured(**kw) -> dict[str, Any]:
    return claim_row(verdict="not measured here", n_pairs=0, **kw)


def paired_gain(up: pd.DataFrame, prox: pd.DataFrame, key: str) -> tuple[float, float, float, int]:
    p = paired(up, prox, f"final_{key}")
    return claim_interval((p["a"].astype(float) - p["b"].astype(float)) * 100.0)


def number_text(value: Any, unit: str, signed: bool = True) -> str:
    """A claim's number in its unit's format (pp signed, ratios to 3 places, losses to 4)."""
    v = as_number(value)
    if math.isnan(v):
        return ""
    if unit == "ratio":
        return fmt(v, 3)
    if unit == "loss":
        return fmt(v, 4, signed=True)
    return fmt(v, 2, signed=signed and unit == "pp")
