"""The straggler sensitivity table: the Upcycled-FL minus FedProx gain under each combination of the straggler
switches (``devices.straggler_draw`` x ``devices.straggler_policy``; docs/experiments.md), paired on seed."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from .cells import check_one_config
from .collect import ReportError
from .paper_numbers import dataset_label
from .render import fmt, fmt_mu, markdown_table, write_csv, write_markdown
from .tables import ACC, claim_columns

SWITCHES = ("straggler_draw", "policy")
DEFAULTS = {"straggler_draw": "bernoulli", "policy": "partial"}


def sensitivity_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per data set x mu x straggler draw x policy: FedProx and Upcycled-FL final accuracies (%) and
    the paired gain with its 95% t interval."""
    runs = runs.copy()
    for col, default in DEFAULTS.items():
        runs[col] = runs[col].fillna(default) if col in runs.columns else default
    runs = runs[runs["algorithm"].isin(["fedprox", "upcycled"])]
    if runs.empty:
        raise ReportError("sensitivity: no FedProx or Upcycled-FL runs")
    rows = []
    keys = ["dataset", "mu", *SWITCHES]
    for (dataset, mu, draw, policy), grp in runs.groupby(keys, sort=True):
        up, prox = grp[grp["algorithm"] == "upcycled"], grp[grp["algorithm"] == "fedprox"]
        what = f"sensitivity {dataset} / mu {mu:g} / {draw} / {policy}"
        if up.empty or prox.empty:
            raise ReportError(f"{what}: needs both FedProx and Upcycled-FL runs")
        check_one_config(up, what + " / Upcycled-FL")
        check_one_config(prox, what + " / FedProx")
        row: dict[str, Any] = {
            "dataset": dataset,
            "label": dataset_label(str(dataset)),
            "mu": mu,
            "straggler_draw": draw,
            "policy": policy,
            "default": draw == DEFAULTS["straggler_draw"] and policy == DEFAULTS["policy"],
        }
        for key in ACC:
            row[f"fedprox_{key}"] = float(prox[f"final_{key}"].astype(float).mean() * 100)
            row[f"upcycled_{key}"] = float(up[f"final_{key}"].astype(float).mean() * 100)
        row.update(claim_columns(up, prox, {}, {}))
        rows.append({k: v for k, v in row.items() if not k.startswith("paper_")})
    return pd.DataFrame(rows)


HEADER = [
    "Data set",
    "μ",
    "straggler draw",
    "straggler policy",
    "pairs",
    "FedProx train (test) %",
    "Upcycled-FL train (test) %",
    "gain train [95% CI]",
    "gain test [95% CI]",
]
CAPTION = (
    "The Upcycled-FL minus FedProx gain under the straggler switches: `bernoulli` (each sampled device a "
    "straggler with probability p, the authors' code) or `exact` (round(K p) of the K sampled devices, "
    "FedProx's reference); policy `partial` (stragglers' partial work aggregated, the authors) or `drop`. "
    "Final accuracy in %, mean over seeds; gain in percentage points per seed (same seed, same devices and "
    "stragglers in both algorithms), mean and 95% t interval. The first combination (bernoulli, partial) "
    "is the default of every other experiment."
)


def _ci(row: dict, key: str) -> str:
    mean, low, high = row[f"{key}_gain_mean"], row[f"{key}_gain_ci_low"], row[f"{key}_gain_ci_high"]
    if math.isnan(mean):
        return ""
    return fmt(mean, signed=True) + ("" if math.isnan(low) else f" [{fmt(low, signed=True)}, {fmt(high, signed=True)}]")


def sensitivity_rows(frame: pd.DataFrame) -> list[list[str]]:
    order = frame.sort_values(
        ["dataset", "mu", "default", "straggler_draw", "policy"], ascending=[True, True, False, True, False]
    )
    return [
        [
            r["label"],
            fmt_mu(r["mu"]),
            r["straggler_draw"],
            r["policy"],
            str(int(r["n_pairs"])),
            f"{fmt(r['fedprox_train_acc'])} ({fmt(r['fedprox_test_acc'])})",
            f"{fmt(r['upcycled_train_acc'])} ({fmt(r['upcycled_test_acc'])})",
            _ci(r, "train_acc"),
            _ci(r, "test_acc"),
        ]
        for r in order.to_dict("records")
    ]


def write_sensitivity(runs: pd.DataFrame, out_prefix: str, provenance: str) -> pd.DataFrame:
    """Write ``<prefix>.csv`` and ``<prefix>.md``; return the frame."""
    frame = sensitivity_frame(runs)
    write_csv(f"{out_prefix}.csv", frame, provenance)
    write_markdown(
        f"{out_prefix}.md",
        "Straggler switches: the Upcycled-FL gain under each combination",
        [CAPTION, markdown_table(HEADER, sensitivity_rows(frame))],
        provenance,
    )
    return frame
