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
from typing import Any

import pandas as pd

from .cells import paired
from .collect import REPORTING_CHOICES, ReportError, converged
from .paper_numbers import dataset_label, dataset_order, paper_values, table1_value
from .render import fmt, markdown_table, write_csv, write_markdown
from .stats import mean_interval

LEVEL = 0.95
SPLITS = ("train", "test")
IMPLEMENTATIONS = {False: "upfl, the paper's model", True: "upfl, the authors' protocol"}
AUTHORS_CODE = "the authors' code (measured)"


def implementation(runs: pd.DataFrame) -> pd.Series:
    """Per run: whether it ran the authors' loss (``softmax_before_loss``; a runs table without it has none)."""
    if "softmax_before_loss" not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs["softmax_before_loss"].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))


def gap_row(dataset: str, authors: bool, choice: str, split: str, prox: pd.DataFrame,
            up: pd.DataFrame) -> dict[str, Any]:
    """FedProx and Upcycled-FL means (%) of one reporting choice and split, and the paired gain with its 95% t
    interval (percentage points)."""
    column = f"{choice}_{split}_acc"
    pairs = paired(up, prox, column).dropna()
    ci = mean_interval(list((pairs["a"] - pairs["b"]) * 100.0), LEVEL)
    paper = {alg: table1_value(dataset, alg, 1.0) for alg in ("fedprox", "upcycled")}
    index = SPLITS.index(split)
    paper_prox = paper["fedprox"][index] if paper["fedprox"] and choice == "final" else math.nan
    paper_up = paper["upcycled"][index] if paper["upcycled"] and choice == "final" else math.nan
    return {"dataset": dataset, "implementation": IMPLEMENTATIONS[authors], "reporting": choice, "split": split,
            "seeds": ci.n, "fedprox": float(pairs["b"].mean() * 100.0), "upcycled": float(pairs["a"].mean() * 100.0),
            "gain": ci.mean, "gain_ci_low": ci.low, "gain_ci_high": ci.high,
            "paper_fedprox": paper_prox, "paper_upcycled": paper_up, "paper_gain": paper_up - paper_prox}


def measured_rows(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of the runs made here: data set x implementation x reporting choice x split."""
    runs = converged(runs[(runs["mu"].astype(float) - 1.0).abs() < 1e-12])
    runs = runs.assign(authors=implementation(runs))
    rows = []
    for (dataset, authors), cell in runs.groupby(["dataset", "authors"], sort=True):
        prox, up = cell[cell["algorithm"] == "fedprox"], cell[cell["algorithm"] == "upcycled"]
        if prox.empty or up.empty:
            raise ReportError(f"protocol_gap {dataset} / {IMPLEMENTATIONS[authors]}: needs FedProx and Upcycled-FL "
                              f"runs at mu 1")
        for choice in REPORTING_CHOICES:
            for split in SPLITS:
                rows.append(gap_row(dataset, authors, choice, split, prox, up))
    return rows


def reference_rows(datasets: list[str]) -> list[dict[str, Any]]:
    """The authors' code's measured rows (``paper_values/authors_code.csv``) of these data sets."""
    ref = paper_values("authors_code")
    rows = []
    for r in ref[ref["dataset"].isin(datasets)].to_dict("records"):
        label = AUTHORS_CODE + ("" if r["variant"] == "as released" else f", {r['variant']} (lr {r['lr']:g}, "
                                                                         f"step {r['step']:g})")
        rows.append({"dataset": r["dataset"], "implementation": label, "reporting": r["reporting"],
                     "split": r["split"], "seeds": int(r["seeds"]), "fedprox": r["fedprox"], "upcycled": r["upcycled"],
                     "gain": r["gain"], "gain_ci_low": r["gain_ci_low"], "gain_ci_high": r["gain_ci_high"],
                     "paper_fedprox": math.nan, "paper_upcycled": math.nan, "paper_gain": math.nan})
    return rows


def protocol_gap_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Measured rows, then the authors' code's reference rows of the same data sets."""
    if runs.empty:
        raise ReportError("protocol_gap: no runs")
    rows = measured_rows(runs[runs["algorithm"].isin(["fedprox", "upcycled"])])
    paper = [d for d in dict.fromkeys(r["dataset"] for r in rows) if on_paper_data(runs[runs["dataset"] == d])]
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
    return "data_path" in runs.columns and runs["data_path"].notna().any()


def _gain_text(r: dict) -> str:
    if math.isnan(r["gain_ci_low"]):
        return fmt(r["gain"], signed=True)
    return f"{fmt(r['gain'], signed=True)} [{fmt(r['gain_ci_low'], signed=True)}, {fmt(r['gain_ci_high'], signed=True)}]"


HEADER = ["Data set", "Implementation", "Reporting", "Split", "Seeds", "FedProx %", "Upcycled-FL %",
          "Gain pp [95% CI]", "Paper: FedProx, Upcycled-FL, gain"]


def gap_rows(frame: pd.DataFrame) -> list[list[str]]:
    rows = []
    for r in frame.to_dict("records"):
        paper = "" if math.isnan(r["paper_gain"]) else \
            f"{fmt(r['paper_fedprox'])}, {fmt(r['paper_upcycled'])}, {fmt(r['paper_gain'], signed=True)}"
        rows.append([dataset_label(r["dataset"]), r["implementation"], r["reporting"], r["split"], str(int(r["seeds"])),
                     fmt(r["fedprox"]), fmt(r["upcycled"]), _gain_text(r), paper])
    return rows


CAPTION = ("FedProx (80 iterations) and Upcycled-FL (160) at μ = 1, 90% stragglers, on the paper's synthetic "
           "sets. Implementations: upfl with the paper's model (λ = 0.43); upfl under the authors' protocol (their "
           "softmax before the cross-entropy, their scalar step 0.7); the authors' code, measured on the same data "
           "(reference rows, provenance in src/upfl/report/paper_values/authors_code.md). Reporting: "
           + "; ".join(f"{k} = {v}" for k, v in REPORTING_CHOICES.items())
           + ". Gain: Upcycled-FL minus FedProx per seed, mean and 95% t interval. The paper's figure (Table 1) is "
             "a final value; it is shown on the final rows. Both it and the authors' code's rows are shown only for "
             "runs on the paper's released data (the data folder's meta.json says source: paper); a generator draw "
             "(the quick preset) gets neither.")


def write_protocol_gap(runs: pd.DataFrame, out_prefix: str, provenance: str) -> pd.DataFrame:
    """Write ``<prefix>.csv`` and ``<prefix>.md``; return the frame."""
    frame = protocol_gap_frame(runs)
    write_csv(f"{out_prefix}.csv", frame, provenance)
    write_markdown(f"{out_prefix}.md", "Where the headline comes from: implementation x reporting choice",
                   [CAPTION, markdown_table(HEADER, gap_rows(frame))], provenance)
    return frame


def headline_section(runs: pd.DataFrame) -> list[str]:
    """The claims page's section "Why the headline differs" (markdown parts), from the final train and test rows
    of the runs of the protocol_gap experiment in ``runs``; empty when there are none."""
    if runs.empty or not implementation(runs).any():
        return []
    frame = protocol_gap_frame(runs)
    lines = []
    for dataset in dict.fromkeys(frame["dataset"]):
        cell = frame[frame["dataset"] == dataset]
        for split in SPLITS:
            final = cell[(cell["reporting"] == "final") & (cell["split"] == split)]
            parts = [f"{r['implementation']} {_gain_text(r)} pp"
                     + ("" if math.isnan(r["fedprox"]) else f" (FedProx {fmt(r['fedprox'])}%)")
                     for r in final.to_dict("records") if r["seeds"]]
            paper = final["paper_gain"].dropna()
            if parts:
                lines.append(f"- {dataset_label(dataset)}, final {split} accuracy: "
                             + (f"paper {fmt(paper.iloc[0], signed=True)} pp; " if len(paper) else "")
                             + "; ".join(parts) + ".")
        widest = cell[cell["implementation"].isin(IMPLEMENTATIONS.values())]
        top = widest.loc[widest["gain"].idxmax()] if len(widest) else None
        if top is not None:
            lines.append(f"- {dataset_label(dataset)}, the largest mean gain of upfl over every reporting choice "
                         f"and split: {fmt(top['gain'], signed=True)} pp ({top['implementation']}, {top['reporting']} "
                         f"{top['split']}).")
    text = ("What was measured (experiment protocol_gap, μ = 1, paired on seed, 95% t intervals; the full table is "
            "results/tables/protocol_gap.md): the Upcycled-FL gain of upfl with the paper's model, of upfl under the "
            "authors' protocol (their softmax before the cross-entropy and their scalar step 0.7), and of the "
            "authors' code measured on the same data, beside the paper's figure. The authors' loss "
            "CE(softmax(softmax(z)), y) shrinks every gradient like a smaller step. No conclusion is drawn beyond "
            "these numbers.")
    if frame["paper_gain"].isna().all():
        text += (" These runs are not on the paper's released data (a generator draw), so neither the paper's figure "
                 "nor the authors' code's results are set beside them.")
    return ["## Why the headline differs\n", text + "\n", "\n".join(lines)]
