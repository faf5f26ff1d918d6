"""The report front page's headline numbers: the paper's own figures (Table 1's Upcycled-FL − FedProx gains, the
48% training-time saving, the privacy-loss reduction) beside ours, read from the claims page's CSV
(``results/tables/claims.csv``); the Snakefile calls it while making a report."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from .render import PROVENANCE_PREFIX

SUMMARY_PREFIX = "Summary: "
"""How the claims page (``results/tables/claims.md``) begins its line of verdict counts."""

HEADLINES = (
    ("table1/", "/train_acc", "Table 1: Upcycled-FL − FedProx, final training accuracy (pp), per data set and μ"),
    ("time/equal_iterations", "", "Training time saved at equal iterations (%)"),
    ("privacy/objective/privacy_loss", "", "Privacy loss saved at equal noise, objective perturbation (%)"),
    ("privacy/output/privacy_loss", "", "Privacy loss saved at equal noise, output perturbation (%)"),
)


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _span(values: list[float]) -> str:
    values = sorted(v for v in values if not math.isnan(v))
    if not values:
        return "not measured here"
    return (
        f"{values[0]:+.2f}" if len(values) == 1 or values[0] == values[-1] else f"{values[0]:+.2f} to {values[-1]:+.2f}"
    )


def headline_numbers(claims_csv: str | Path) -> list[dict[str, str]]:
    """One row per headline: what, the paper's value (a range over the Table 1 cells measured here, all of them when
    none is), ours (the same cells) and how many of its rows hold / do not hold / have too few seeds. [] when the
    claims page is not built."""
    path = Path(claims_csv)
    if not path.exists():
        return []
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith(PROVENANCE_PREFIX)))
    headlines = []
    for prefix, suffix, label in HEADLINES:
        hit = [r for r in rows if r["id"].startswith(prefix) and r["id"].endswith(suffix)]
        if not hit:
            continue
        verdicts: dict[str, int] = {}
        for r in hit:
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        measured = [r for r in hit if not math.isnan(_number(r["ours"]))]
        headlines.append(
            {
                "what": label,
                "paper": _span([_number(r["paper"]) for r in measured or hit]),
                "ours": _span([_number(r["ours"]) for r in hit]),
                "verdicts": ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())),
            }
        )
    return headlines


def headline_table_rst(headlines: list[dict[str, str]]) -> str:
    """The headline rows as a reStructuredText list table ('' when there are none)."""
    if not headlines:
        return ""

    def cell(text: str) -> str:
        return text.replace("*", "\\*").replace("`", "'")

    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        "",
        "   * - Headline",
        "     - Paper",
        "     - Ours",
        "     - Verdicts",
    ]
    for h in headlines:
        lines += [
            f"   * - {cell(h['what'])}",
            f"     - {cell(h['paper'])}",
            f"     - {cell(h['ours'])}",
            f"     - {cell(h['verdicts'])}",
        ]
    return "\n".join(lines)


def claims_summary(page: str | Path) -> str | None:
    """The claims page's summary line (its verdict counts, without :data:`SUMMARY_PREFIX`); None when the page or
    the line is missing."""
    try:
        lines = Path(page).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    return next((line.removeprefix(SUMMARY_PREFIX).strip() for line in lines if line.startswith(SUMMARY_PREFIX)), None)
