"""Where the paper's headline comes from: the ``protocol_gap`` table and the claims page's section built from it.

Table 1's synthetic pairs at mu 1 (FedProx 80, Upcycled-FL 160 iterations), paired on seed, under two
implementations run here (the paper's model, ``protocol: paper``; the authors' loss and scalar step,
``protocol: authors``; docs/differences.md "The authors' protocol") and under each reporting choice
(:data:`upfl.report.collect.REPORTING_CHOICES`) of train and test accuracy, beside the paper's figure and the
authors' code's results measured on the same data (``paper_values/authors_code.csv``, provenance in
``paper_values/authors_code.md``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, cast

import pandas as pd

from .cells import paired
from .collect import REPORTING_CHOICES, ReportError, converged, implementation
from .paper_numbers import dataset_label, dataset_order, paper_values, table1_value
from .render import fmt, markdown_table, seeds_text, write_csv, write_markdown
from .stats import LEVEL, Interval, mean_interval, std_from_interval, welch_interval

SPLITS = ("train", "test")
IMPLEMENTATIONS = {False: "upfl, the paper's model", True: "upfl, the authors' protocol"}
AUTHORS_CODE = "the authors' code (measured)"


def gap_row(
    dataset: str, authors: bool, choice: str, split: str, prox: pd.DataFrame, up: pd.DataFrame
) -> dict[str, Any]:
    """FedProx and Upcycled-FL means (%) of one reporting choice and split, and the paired gain with its 95% t
    interval (percentage points)."""
    column = f"{choice}_{split}_acc"
    pairs = paired(up, prox, column).dropna()
    ci = mean_interval(list((pairs["a"] - pairs["b"]) * 100.0), LEVEL)
    paper = {alg: table1_value(dataset, alg, 1.0) for alg in ("fedprox", "upcycled")}
    index = SPLITS.index(split)
    paper_prox = paper["fedprox"][index] if paper["fedprox"] and choice == "final" else math.nan
    paper_up = paper["upcycled"][index] if paper["upcycled"] and choice == "final" else math.nan
    return {
        "dataset": dataset,
        "implementation": IMPLEMENTATIONS[authors],
        "reporting": choice,
        "split": split,
        "seeds": ci.n,
        "fedprox": float(pairs["b"].mean() * 100.0),
        "upcycled": float(pairs["a"].mean() * 100.0),
        "gain": ci.mean,
        "gain_std": ci.std,
        "gain_ci_low": ci.low,
        "gain_ci_high": ci.high,
        "paper_fedprox": paper_prox,
        "paper_upcycled": paper_up,
        "paper_gain": paper_up - paper_prox,
    }


def measured_rows(runs: pd.DataFrame, same_seeds: dict[str, list[int]] | None = None) -> list[dict[str, Any]]:
    """The rows of the runs made here: data set x implementation x reporting choice x split; and, for each data set
    of ``same_seeds`` (the authors' code's seeds where they are fewer than ours), the authors'-protocol rows again on
    those seeds alone (implementation '..., seeds 0-4')."""
    runs = converged(runs[(runs["mu"].astype(float) - 1.0).abs() < 1e-12])
    runs = runs.assign(authors=implementation(runs))
    rows = []
    for dataset, seeds in (same_seeds or {}).items():
        cell = runs[(runs["dataset"] == dataset) & runs["authors"] & runs["seed"].astype(int).isin(seeds)]
        prox, up = cell[cell["algorithm"] == "fedprox"], cell[cell["algorithm"] == "upcycled"]
        if (
            set(runs.loc[(runs["dataset"] == dataset) & runs["authors"], "seed"].astype(int)) <= set(seeds)
            or prox.empty
            or up.empty
        ):
            continue
        for choice in REPORTING_CHOICES:
            for split in SPLITS:
                row = gap_row(dataset, True, choice, split, prox, up)
                rows.append({**row, "implementation": f"{row['implementation']}, {seeds_text(seeds)}"})
    for key, cell in runs.groupby(["dataset", "authors"], sort=True):
        dataset, authors = cast(tuple[str, bool], key)
        prox, up = cell[cell["algorithm"] == "fedprox"], cell[cell["algorithm"] == "upcycled"]
        if prox.empty or up.empty:
            raise ReportError(
                f"protocol_gap {dataset} / {IMPLEMENTATIONS[authors]}: needs FedProx and Upcycled-FL runs at mu 1"
            )
        for choice in REPORTING_CHOICES:
            for split in SPLITS:
                rows.append(gap_row(dataset, authors, choice, split, prox, up))
    return rows


def reference_label(variant: str, lr: float, step: float, epochs: float) -> str:
    """The implementation cell of a row of the authors' code: its variant and, off the released settings, the
    settings it changes."""
    if variant == "as released":
        return AUTHORS_CODE
    return f"{AUTHORS_CODE}, {variant} (lr {lr:g}, step {step:g}, E {epochs:g})"


def reference_rows(datasets: list[str]) -> list[dict[str, Any]]:
    """Every measured row of the authors' code (``paper_values/authors_code.csv``) on these data sets: each variant,
    reporting choice and split."""
    ref = paper_values("authors_code")
    rows = []
    for r in ref[ref["dataset"].isin(datasets)].to_dict("records"):
        rows.append(
            {
                "dataset": r["dataset"],
                "implementation": reference_label(r["variant"], r["lr"], r["step"], r["epochs"]),
                "reporting": r["reporting"],
                "split": r["split"],
                "seeds": int(r["seeds"]),
                "fedprox": r["fedprox"],
                "upcycled": r["upcycled"],
                "gain": r["gain"],
                "gain_std": std_from_interval(r["gain_ci_low"], r["gain_ci_high"], int(r["seeds"]), LEVEL),
                "gain_ci_low": r["gain_ci_low"],
                "gain_ci_high": r["gain_ci_high"],
                "paper_fedprox": math.nan,
                "paper_upcycled": math.nan,
                "paper_gain": math.nan,
            }
        )
    return rows


def reference_seeds(datasets: list[str]) -> dict[str, list[int]]:
    """The seeds of the authors' code's runs with its released settings, per data set: those of its final rows (a
    row of more seeds supersedes one of fewer per reporting choice, so its max and last10 rows may have fewer)."""
    ref = paper_values("authors_code")
    ref = ref[ref["dataset"].isin(datasets) & (ref["variant"] == "as released") & (ref["reporting"] == "final")]
    return {d: sorted({int(s) for s in str(g["seed_list"].iloc[0]).split()}) for d, g in ref.groupby("dataset")}


def protocol_gap_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Measured rows, then the authors' code's reference rows of the same data sets; on the paper's data, where the
    authors' code ran fewer seeds, upfl's authors'-protocol rows on those seeds too."""
    if runs.empty:
        raise ReportError("protocol_gap: no runs")
    runs = runs[runs["algorithm"].isin(["fedprox", "upcycled"])]
    paper = [d for d in dict.fromkeys(runs["dataset"]) if on_paper_data(runs[runs["dataset"] == d])]
    rows = measured_rows(runs, reference_seeds(paper))
    for r in rows:
        if r["dataset"] not in paper:
            r.update(paper_fedprox=math.nan, paper_upcycled=math.nan, paper_gain=math.nan)
    frame = pd.DataFrame(rows + reference_rows(paper))
    order = {d: i for i, d in enumerate(dataset_order(frame["dataset"]))}
    return frame.sort_values("dataset", key=lambda col: col.map(order), kind="stable").reset_index(drop=True)


def on_paper_data(runs: pd.DataFrame) -> bool:
    """Whether every run's data folder holds the paper's released set (its meta.json ``source: paper``): only then
    do the paper's figure and the authors' code's results describe the same data."""
    for path in runs["data_path"].dropna().unique() if "data_path" in runs.columns else ():
        meta = Path(str(path)) / "meta.json"
        try:
            source = json.loads(meta.read_text(encoding="utf-8")).get("source")
        except (OSError, json.JSONDecodeError):
            return False
        if source != "paper":
            return False
    return "data_path" in runs.columns and bool(runs["data_path"].notna().any())


def _gain_text(r: dict) -> str:
    if math.isnan(r["gain_ci_low"]):
        return fmt(r["gain"], signed=True)
    return (
        f"{fmt(r['gain'], signed=True)} [{fmt(r['gain_ci_low'], signed=True)}, {fmt(r['gain_ci_high'], signed=True)}]"
    )


HEADER = [
    "Data set",
    "Implementation",
    "Reporting",
    "Split",
    "Seeds",
    "FedProx %",
    "Upcycled-FL %",
    "Gain pp [95% CI]",
    "Paper: FedProx, Upcycled-FL, gain",
]


def gap_rows(frame: pd.DataFrame) -> list[list[str]]:
    rows = []
    for r in frame.to_dict("records"):
        paper = (
            ""
            if math.isnan(r["paper_gain"])
            else f"{fmt(r['paper_fedprox'])}, {fmt(r['paper_upcycled'])}, {fmt(r['paper_gain'], signed=True)}"
        )
        rows.append(
            [
                dataset_label(r["dataset"]),
                r["implementation"],
                r["reporting"],
                r["split"],
                str(int(r["seeds"])),
                fmt(r["fedprox"]),
                fmt(r["upcycled"]),
                _gain_text(r),
                paper,
            ]
        )
    return rows


def iterations_text(runs: pd.DataFrame) -> str:
    """'80/160': FedProx's and Upcycled-FL's iterations in these runs (several values joined by ', ')."""

    def values(alg):
        return ", ".join(str(int(r)) for r in sorted(set(runs.loc[runs["algorithm"] == alg, "rounds"].astype(int))))

    return f"{values('fedprox')}/{values('upcycled')}"


def caption(runs: pd.DataFrame, frame: pd.DataFrame) -> str:
    """The table's caption, stating the iterations and data of these runs; the paper's figure and the authors'
    code's rows are named only when the runs are on the paper's released data."""
    on_paper = not frame["paper_gain"].isna().all()
    data = (
        "the paper's released synthetic sets"
        if on_paper
        else "draws of upfl's synthetic generator (not the paper's data)"
    )
    text = (
        f"FedProx and Upcycled-FL ({iterations_text(runs)} iterations) at μ = 1, 90% stragglers, on {data}. "
        "Implementations: upfl with the paper's model (λ = 0.43); upfl under the authors' protocol (their softmax "
        "before the cross-entropy, their scalar step 0.7)"
    )
    text += (
        "; the authors' code, measured on the same data (every measured row: its released settings and the "
        "variants at lr 5e-3, step 0.7 or 0.9 (the code's tuning comment), E 20 or 10; provenance in "
        "src/upfl/report/paper_values/authors_code.md)"
        if on_paper
        else ""
    )
    text += (
        ". Reporting: "
        + "; ".join(f"{k} = {v}" for k, v in REPORTING_CHOICES.items())
        + ". Gain: Upcycled-FL minus FedProx per seed, mean and 95% t interval."
    )
    if on_paper:
        return text + " The paper's figure (Table 1) is a final value; it is shown on the final rows."
    return text + (
        " Neither the paper's Table 1 figure nor the authors' code's results are shown: they describe "
        "the paper's data, which these runs are not on."
    )


def write_protocol_gap(runs: pd.DataFrame, out_prefix: str, provenance: str) -> pd.DataFrame:
    """Write ``<prefix>.csv`` and ``<prefix>.md`` (the claims page's section "Why the headline differs" first,
    then the table); return the frame."""
    frame = protocol_gap_frame(runs)
    write_csv(f"{out_prefix}.csv", frame, provenance)
    write_markdown(
        f"{out_prefix}.md",
        "Where the headline comes from: implementation x reporting choice",
        [*headline_section(runs), "## The table\n", caption(runs, frame), markdown_table(HEADER, gap_rows(frame))],
        provenance,
    )
    return frame


def _final_row(frame: pd.DataFrame, dataset: str, implementation: str, split: str = "train") -> dict | None:
    rows = frame[
        (frame["dataset"] == dataset)
        & (frame["implementation"] == implementation)
        & (frame["reporting"] == "final")
        & (frame["split"] == split)
    ]
    return rows.iloc[0].to_dict() if len(rows) else None


def authors_gradient_factor(wrong: float) -> float:
    """For two classes, the authors' loss CE(softmax(softmax(z)), y)'s gradient in the true class's logit divided by
    the paper's CE(softmax(z), y)'s, when the model puts probability ``wrong`` on the wrong class: 2 (1 - w)
    sigmoid(2w - 1) (docs/differences.md)."""
    return 2.0 * (1.0 - wrong) / (1.0 + math.exp(-(2.0 * wrong - 1.0)))


FACTOR_AT = (0.1, 0.5, 0.9, 0.99)
"""Probabilities on the wrong class at which the claims page states :func:`authors_gradient_factor`."""


def smaller_step_lines(frame: pd.DataFrame, grid: pd.DataFrame | None) -> list[str]:
    """The measured answer to "is the authors' loss a smaller step?": per data set where the sensitivity grid ran
    the paper's model at smaller learning rates, those FedProx accuracies and gains beside the authors' protocol
    at the base learning rate, and how many of those gains' 95% intervals exclude the authors' protocol's gain;
    then the per-sample factor of the authors' gradient. Empty when either side is missing."""
    if grid is None or grid.empty:
        return []
    lines = []
    for dataset in dict.fromkeys(frame["dataset"]):
        authors = _final_row(frame, dataset, IMPLEMENTATIONS[True])
        cell = grid[(grid["dataset"] == dataset) & (grid["protocol"] == "paper's model")]
        base = cell[cell["base"]]
        if authors is None or base.empty:
            continue
        smaller = cell[(cell["varied"] == "lr") & (cell["lr"] < base["lr"].iloc[0])].sort_values("lr", ascending=False)
        if smaller.empty:
            continue
        excluded = int(
            ((smaller["gain_train_low"] > authors["gain"]) | (smaller["gain_train_high"] < authors["gain"])).sum()
        )
        rates = ", ".join(f"{v:g}" for v in smaller["lr"])
        lines.append(
            f"- Is the authors' loss a smaller step? {dataset_label(dataset)}, final train accuracy: the paper's "
            f"model at lr {rates} gives FedProx {fmt(smaller['fedprox_train'].min())}-"
            f"{fmt(smaller['fedprox_train'].max())}% and gains {fmt(smaller['gain_train'].min(), signed=True)} "
            f"to {fmt(smaller['gain_train'].max(), signed=True)} pp (sensitivity table); the authors' protocol "
            f"at lr {base['lr'].iloc[0]:g} gives FedProx {fmt(authors['fedprox'])}% and "
            f"{fmt(authors['gain'], signed=True)} pp (this table); {excluded} of the {len(smaller)} smaller "
            f"learning rates' 95% intervals exclude that gain."
        )
    if lines:
        factors = ", ".join(f"{authors_gradient_factor(w):.2g} at {w:g}" for w in FACTOR_AT)
        lines.append(
            "- Per sample, the authors' loss scales the paper's gradient by a factor that depends on the "
            "probability w the model puts on the wrong class (two classes, docs/differences.md): "
            f"{factors}; a smaller step scales every sample by one factor."
        )
    return lines


def _interval(row: dict) -> Interval:
    return Interval(int(row["seeds"]), row["gain"], row["gain_std"], row["gain_ci_low"], row["gain_ci_high"])


def seed_spread_lines(frame: pd.DataFrame) -> list[str]:
    """Per data set and split where both upfl under the authors' protocol and the authors' code's released settings
    have final rows: both gains in final accuracy and their difference with Welch's 95% interval (the two
    implementations draw devices, stragglers and batches from different generators, so a seed is not a pair across
    them), on the authors' code's seeds where they are fewer than upfl's, and on all of upfl's."""
    lines = []
    for dataset in dict.fromkeys(frame["dataset"]):
        cell = frame[(frame["dataset"] == dataset) & (frame["reporting"] == "final")]
        for split in SPLITS:
            rows = cell[cell["split"] == split].set_index("implementation")
            same = [i for i in rows.index if i.startswith(IMPLEMENTATIONS[True] + ", seeds")]
            if AUTHORS_CODE not in rows.index or IMPLEMENTATIONS[True] not in rows.index:
                continue
            theirs = rows.loc[AUTHORS_CODE].to_dict()
            parts = []
            for label in [*same[:1], IMPLEMENTATIONS[True]]:
                ours = rows.loc[label].to_dict()
                diff, low, high = welch_interval(_interval(ours), _interval(theirs), LEVEL)
                where = (
                    "on the same " + label.split(", ")[-1]
                    if label != IMPLEMENTATIONS[True]
                    else f"on all {int(ours['seeds'])} seeds"
                )
                spread = "within seed spread" if low <= 0 <= high else "beyond seed spread"
                parts.append(
                    f"{where} {_gain_text(ours)} pp (FedProx {fmt(ours['fedprox'])}%, Upcycled-FL "
                    f"{fmt(ours['upcycled'])}%, std of the per-seed gains {fmt(ours['gain_std'])}): "
                    f"difference {fmt(diff, signed=True)} pp, Welch 95% interval [{fmt(low, signed=True)}, "
                    f"{fmt(high, signed=True)}], {spread}"
                )
            lines.append(
                f"- {dataset_label(dataset)}, final {split} accuracy, the authors' code against upfl under "
                f"the authors' protocol: the authors' code {_gain_text(theirs)} pp ({int(theirs['seeds'])} "
                f"seeds; FedProx {fmt(theirs['fedprox'])}%, Upcycled-FL {fmt(theirs['upcycled'])}%, std of "
                f"the per-seed gains {fmt(theirs['gain_std'])}); upfl " + "; ".join(parts) + "."
            )
    return lines


def headline_section(runs: pd.DataFrame, grid_runs: pd.DataFrame | None = None) -> list[str]:
    """The claims page's section "Why the headline differs" (markdown parts), from the final train and test rows
    of the runs of the protocol_gap experiment in ``runs`` (and, where given, the sensitivity experiment's runs in
    ``grid_runs`` for the learning-rate comparison); empty when there are none."""
    if runs.empty or not implementation(runs).any():
        return []
    frame = protocol_gap_frame(runs)
    on_paper = not frame["paper_gain"].isna().all()
    lines = []
    for dataset in dict.fromkeys(frame["dataset"]):
        cell = frame[frame["dataset"] == dataset]
        for split in SPLITS:
            final = cell[
                (cell["reporting"] == "final")
                & (cell["split"] == split)
                & cell["implementation"].isin([*IMPLEMENTATIONS.values(), AUTHORS_CODE])
            ]
            parts = [
                f"{r['implementation']} {_gain_text(r)} pp"
                + ("" if math.isnan(r["fedprox"]) else f" (FedProx {fmt(r['fedprox'])}%)")
                for r in final.to_dict("records")
                if r["seeds"]
            ]
            paper = final["paper_gain"].dropna()
            if parts:
                lines.append(
                    f"- {dataset_label(dataset)}, final {split} accuracy: "
                    + (f"paper {fmt(paper.iloc[0], signed=True)} pp; " if len(paper) else "")
                    + "; ".join(parts)
                    + "."
                )
        widest = cell[cell["implementation"].isin(IMPLEMENTATIONS.values())]
        top = widest.loc[widest["gain"].idxmax()] if len(widest) else None
        if top is not None:
            lines.append(
                f"- {dataset_label(dataset)}, the largest mean gain of upfl over every reporting choice "
                f"and split: {fmt(top['gain'], signed=True)} pp ({top['implementation']}, {top['reporting']} "
                f"{top['split']})."
            )
    measured = (
        "the Upcycled-FL gain of upfl with the paper's model and of upfl under the authors' protocol (their "
        "softmax before the cross-entropy and their scalar step 0.7)"
    )
    text = (
        f"What was measured (experiment protocol_gap, FedProx and Upcycled-FL at {iterations_text(runs)} "
        f"iterations, μ = 1, paired on seed, 95% t intervals; the full table is results/tables/protocol_gap.md): "
        + (
            f"{measured}, and of the authors' code measured on the same data (final rows of its released "
            "settings here; every measured row in the table), beside the paper's figure."
            if on_paper
            else f"{measured}. These runs are not on the paper's released data (a generator draw), so neither the "
            "paper's figure nor the authors' code's results are set beside them."
        )
        + " No conclusion is drawn beyond these numbers."
    )
    grid = None
    if grid_runs is not None and not grid_runs.empty:
        from .gain_grid import gain_grid_frame

        grid = gain_grid_frame(grid_runs)
    lines += seed_spread_lines(frame)
    lines += smaller_step_lines(frame[frame["implementation"].isin(IMPLEMENTATIONS.values())], grid)
    return ["## Why the headline differs\n", text + "\n", "\n".join(lines)]


def claims_page_section(ctx) -> list[str]:
    """The claims page's section "Why the headline differs" (:func:`headline_section`) from the context's
    ``protocol_gap`` and ``sensitivity`` runs."""
    return headline_section(ctx.of("protocol_gap"), ctx.of("sensitivity"))
