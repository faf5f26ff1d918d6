"""The claims page: every quantitative claim of the paper, our figure beside it, and a verdict.

One row per claim (``results/tables/claims.{csv,md,html}``): the paper's figure, ours with a 95% t interval and
the number of seed pairs (a verdict needs :data:`MIN_PAIRS`), the data, seeds and runs it was computed on (rows on
our generator's draws marked as a preview), the spread across fresh data draws where the draws experiment
measured it, the privacy level the claim was measured at (marked when it gives no meaningful guarantee),
and a verdict by the rule :data:`VERDICT_RULE`. Claims whose runs are not in the runs table are listed
as 'not measured here' with the reason. Runs flagged ``diverged`` (in runs.csv or their summary.json) are
left out of every figure, and the page says how many.

The page is assembled here from the sections the output modules supply (:data:`CLAIM_SECTIONS`,
:data:`PAGE_SECTIONS`); the verdict rule and the roles (:data:`~upfl.report.claim_rules.DEFAULT_ROLES`, config
key ``claims``) are :mod:`upfl.report.claim_rules`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd

from ..privacy.accounting import NO_MEANINGFUL
from .claim_rules import (
    COLUMNS,
    DEFAULT_ROLES,
    MEANINGFUL_RULE,
    PREVIEW,
    TOO_FEW,
    VERDICT_RULE,
    VERDICTS,
    Context,
    number_text,
    select,
    without_diverged,
)
from .collect import ORIGIN_COLUMNS, REPORTING_NOTE, ReportError, is_generated, origin_text
from .front import SUMMARY_PREFIX
from .paper_numbers import dataset_label
from .render import as_number, markdown_table, write_csv, write_markdown

# ---------------------------------------------------------------------------------------------
# The page

CLAIM_SECTIONS = (
    "table1_claims:table1_claims",
    "timing:time_claims",
    "figure_claims:lambda_claims",
    "privacy_claims:privacy_claims",
    "figure_claims:real_claims",
    "ablations:bases_claims",
)
"""The claim rows each output module supplies, in the page's order: ``module:function`` under ``upfl.report``, called
with the :class:`~upfl.report.claim_rules.Context`, returning rows (:func:`~upfl.report.claim_rules.claim_row`)."""
PAGE_SECTIONS = ("ablations:momentum_page_section", "protocol_gap:claims_page_section", "gain_grid:claims_page_section")
"""The sections of the page after the claims' tables, each from its output module: ``function(context)`` returns
Markdown blocks (none where its experiment made no runs)."""


def load_section(name: str) -> Callable[..., Any]:
    """The function ``module:function`` under ``upfl.report`` (:data:`CLAIM_SECTIONS`, :data:`PAGE_SECTIONS`)."""
    module, function = name.split(":")
    return getattr(importlib.import_module(f"upfl.report.{module}"), function)


def row_runs(runs: pd.DataFrame, row: dict[str, Any]) -> pd.DataFrame:
    """The runs a claim row was computed from: its experiment's, on its data set when it names one."""
    if row["verdict"] == "not measured here" or not row["experiment"]:
        return runs.iloc[0:0]
    sub = select(runs, row["experiment"])
    if row["dataset"] in set(sub["dataset"]):
        sub = sub[sub["dataset"] == row["dataset"]]
    return sub


def provenance_columns(runs: pd.DataFrame) -> dict[str, Any]:
    """``data_origin`` (each distinct data origin in words), ``preview`` (any run on our generator's draws),
    ``seeds`` and ``n_runs`` of a claim's runs."""
    if runs.empty:
        return {"data_origin": "", "preview": False, "seeds": "", "n_runs": 0}
    origin = runs.reindex(columns=list(ORIGIN_COLUMNS))
    texts = sorted({origin_text(*r) for r in origin.itertuples(index=False)})
    seeds = sorted({int(float(v)) for v in runs["seed"] if not math.isnan(as_number(v))})
    return {
        "data_origin": "; ".join(texts),
        "preview": bool(origin["data_source"].map(is_generated).any()),
        "seeds": " ".join(str(v) for v in seeds),
        "n_runs": len(runs),
    }


def claims_frame(
    runs: pd.DataFrame, roles: dict[str, str] | None = None, excluded: Iterable[str] = ()
) -> tuple[pd.DataFrame, str]:
    """Every claim's row (see :data:`COLUMNS`) with the data, seeds and runs it came from, and the sentence on
    diverged runs."""
    kept, diverged = without_diverged(runs)
    ctx = Context(kept, roles or {}, excluded)
    rows = []
    for name in CLAIM_SECTIONS:
        rows += load_section(name)(ctx)
    provenance: dict[tuple[Any, ...], dict[str, Any]] = {}  # claims of one experiment and data set share theirs
    out = []
    for row in rows:
        key = (row["verdict"] == "not measured here", row["experiment"], row["dataset"])
        if key not in provenance:
            provenance[key] = provenance_columns(row_runs(kept, row))
        out.append({**row, **provenance[key]})
    return pd.DataFrame(out, columns=COLUMNS), diverged


def _ours_text(r: dict) -> str:
    if r["verdict"] == "not measured here":
        return "–"
    ours = number_text(r["ours"], r["unit"])
    low, high = number_text(r["ci_low"], r["unit"]), number_text(r["ci_high"], r["unit"])
    if r["verdict"] != TOO_FEW and low and low != high:
        ours += f" [{low}, {high}]"
    return ours


def _draws_text(r: dict) -> str:
    n = as_number(r["draws_n"])
    if math.isnan(n):
        return ""
    return (
        f"{number_text(r['draws_min'], r['unit'])} to {number_text(r['draws_max'], r['unit'])} over {int(n)} draws; "
        f"{int(r['draws_above_zero'])} above 0, {int(r['draws_below_zero'])} below 0"
    )


def _unit_text(unit: str) -> str:
    return {"pp": "pp", "% less ε̄": "%", "% less time": "%", "ratio": "×", "loss": ""}.get(unit, unit)


HEADER = [
    "Claim",
    "Data",
    "Paper",
    "Ours [95% CI]",
    "Pairs",
    "Across draws (mean gains; intervals)",
    "Privacy level",
    "Verdict",
    "Why",
    "Trained on (seeds; runs)",
]


def verdict_text(r: dict) -> str:
    """The verdict cell: the verdict, 'too few seeds (n)', and the preview mark for generated data."""
    text = f"{TOO_FEW} ({int(as_number(r['n_pairs']))})" if r["verdict"] == TOO_FEW else r["verdict"]
    return f"**{text}**" + (f" — {PREVIEW}" if r["preview"] else "")


def origin_cell(r: dict) -> str:
    """What a claim row's runs were trained on, their seeds and how many runs."""
    if not r["data_origin"]:
        return ""
    return f"{r['data_origin']} (seeds {r['seeds']}; {int(r['n_runs'])} runs)"


def claims_rows(frame: pd.DataFrame) -> dict[str, list[list[str]]]:
    """Markdown rows grouped by section."""
    out: dict[str, list[list[str]]] = {}
    for r in frame.to_dict("records"):
        paper = number_text(r["paper"], r["unit"])
        paper = f"{paper} {_unit_text(r['unit'])}".strip() if paper else "direction only"
        level = r["privacy_level"] + (f" — **{NO_MEANINGFUL}**" if r["meaningful_guarantee"] == "no" else "")
        out.setdefault(r["section"], []).append(
            [
                r["claim"],
                dataset_label(r["dataset"])
                if r["dataset"] not in ("", "all") and "," not in r["dataset"]
                else (r["dataset"] or ""),
                paper,
                _ours_text(r),
                ""
                if math.isnan(as_number(r["n_pairs"])) or r["verdict"] == "not measured here"
                else str(int(r["n_pairs"])),
                _draws_text(r),
                level,
                verdict_text(r),
                r["why"],
                origin_cell(r),
            ]
        )
    return out


def summary_text(frame: pd.DataFrame) -> str:
    """'2 holds, 0 does not hold, ... (of 40 claims; 12 on generated data, a preview).'"""
    counts = frame["verdict"].value_counts()
    previews = int(frame["preview"].astype(bool).sum()) if "preview" in frame.columns else 0
    tail = f"; {previews} on our generator's draws: {PREVIEW}" if previews else ""
    return ", ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS) + f" (of {len(frame)} claims{tail})."


def write_claims(
    runs: pd.DataFrame,
    out_prefix: str,
    provenance: str,
    roles: dict[str, str] | None = None,
    excluded: Iterable[str] = (),
) -> pd.DataFrame:
    """Write ``<prefix>.csv`` and ``<prefix>.md`` (the claims page); return the frame."""
    frame, diverged = claims_frame(runs, roles, excluded)
    write_csv(f"{out_prefix}.csv", frame, provenance)
    sections = [
        "Each quantitative claim of the paper, our figure beside it (on the data each row names), and a verdict. Ours: "
        "Upcycled-FL minus FedProx per seed (same seed, same device draws), mean and 95% t interval; pp = "
        "percentage points. Across draws: the same difference on fresh draws of the synthetic generator "
        "(the draws experiment), each draw's paired mean, their range and how many draws' intervals lie above "
        "or below 0.",
        VERDICT_RULE,
        REPORTING_NOTE,
        MEANINGFUL_RULE,
        "Runs: " + diverged,
        SUMMARY_PREFIX + summary_text(frame),
    ]
    for section, rows in claims_rows(frame).items():
        sections += [f"## {section}\n", markdown_table(HEADER, rows)]
    ctx = Context(without_diverged(runs)[0], roles or {}, excluded)
    for name in PAGE_SECTIONS:
        sections += load_section(name)(ctx)
    write_markdown(f"{out_prefix}.md", "The paper's claims, judged", sections, provenance)
    return frame


def parse_roles(items: Sequence[str] | None) -> dict[str, str]:
    """``ROLE=EXPERIMENT[,EXPERIMENT]`` items to a mapping; unknown roles are errors naming the known ones."""
    roles = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or key not in DEFAULT_ROLES or not value:
            raise ReportError(
                f"--experiment-for {item!r}: expected ROLE=EXPERIMENT with ROLE one of {', '.join(DEFAULT_ROLES)}"
            )
        roles[key] = value
    return roles


__all__ = ["claims_frame", "write_claims", "parse_roles", "summary_text", "CLAIM_SECTIONS", "PAGE_SECTIONS"]
