"""The claims page's privacy section (Section 6): private Upcycled-FL against private FedProx at equal noise
and equal epsilon, with the privacy level each claim was measured at, from :mod:`upfl.report.privacy_table`."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ..privacy.accounting import MEANINGFUL_EPSILON
from .claim_rules import ACC, Context, claim_row, half_unit, not_measured, verdict_gain
from .collect import ReportError
from .paper_numbers import dataset_label, paper_values
from .render import fmt

# ---------------------------------------------------------------------------------------------
# Section 6: privacy


def privacy_levels(
    runs: pd.DataFrame, settings: list[dict[str, Any]] | None = None
) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(mechanism, accountant) -> (min, max of private FedProx's ε̄ over data sets, max worst-device ε);
    ``settings``: the :func:`upfl.report.privacy_table.blocks` of ``runs`` where the caller has them."""
    from .privacy_table import ACCOUNTANTS, privacy_frame

    try:
        frame = privacy_frame(runs, settings)
    except ReportError:
        return {}
    ref = frame[frame["variant"] == "fedprox_private"]
    out = {}
    for mech, accs in ACCOUNTANTS.items():
        sub = ref[ref["mechanism"] == mech]
        for acc in accs:
            if sub.empty or f"eps_{acc}" not in sub.columns:
                continue
            eps = sub[f"eps_{acc}"].astype(float).dropna()
            worst = (
                sub[f"epsmax_{acc}"].astype(float).dropna()
                if f"epsmax_{acc}" in sub.columns
                else pd.Series([], dtype=float)
            )
            if not eps.empty:
                out[(mech, acc)] = (float(eps.min()), float(eps.max()), float(worst.max()) if len(worst) else math.nan)
    return out


def level_text(level: tuple[float, float, float] | None, accountant: str) -> tuple[str, str]:
    """('private FedProx ε̄ 5100–33000, worst device's ε 90000 (sound)', mark) for a privacy level."""
    if level is None:
        return "", ""
    low, high, worst = level
    eps = (
        fmt(low, 3 if low < 10 else 0)
        if abs(high - low) < 1e-9 * max(1, high)
        else f"{fmt(low, 3 if low < 10 else 0)}–{fmt(high, 3 if high < 10 else 0)}"
    )
    text = f"private FedProx ε̄ {eps}"
    if not math.isnan(worst):
        text += f", worst device's ε {fmt(worst, 3 if worst < 10 else 0)}"
    text += f" ({accountant})"
    top = worst if not math.isnan(worst) else high
    return text, ("no" if top > MEANINGFUL_EPSILON else "yes")


def privacy_claims(ctx: Context) -> list[dict[str, Any]]:
    """Section 6's claims (paper_values/privacy.csv): pooled over the paper's data sets where we have them."""
    from .privacy_table import PRIMARY, blocks, privacy_claims_frame

    paper = paper_values("privacy")
    runs = ctx.of("privacy")
    exp = ctx.roles["privacy"]
    names = {
        "privacy_loss": "less privacy loss ε̄ at equal noise",
        "train_acc": "higher training accuracy at equal ε̄",
        "test_acc": "higher test accuracy at equal ε̄",
        "time": "less training time at equal noise",
    }
    claims = pd.DataFrame()
    levels: dict[tuple[str, str], tuple[float, float, float]] = {}
    if not runs.empty:
        try:
            settings = blocks(runs)  # once for the claims and the levels
        except ReportError:  # no settings: no claims and no levels, as each would find
            settings = None
        if settings is not None:
            try:
                claims = privacy_claims_frame(runs, settings=settings)
            except ReportError:
                claims = pd.DataFrame()
            levels = privacy_levels(runs, settings)
    rows = []
    for c in paper.to_dict("records"):
        mech, claim = c["mechanism"], c["claim"]
        unit = {"privacy_loss": "% less ε̄", "time": "% less time"}.get(claim, "pp")
        base = {
            "section": "Section 6 (privacy)",
            "dataset": ", ".join(dataset_label(d) for d in str(c["paper_datasets"]).split(";")),
            "paper": float(c["paper_value"]),
            "unit": unit,
            "experiment": exp,
            "source": c["source"],
        }
        label = f"{mech} perturbation: {names[claim]}"
        sub = claims[(claims["mechanism"] == mech) & (claims["claim"] == claim)] if not claims.empty else claims
        if sub.empty:
            have = not runs.empty and (runs["mechanism"].fillna("none") == mech).any()
            why = (
                ctx.missing("privacy")
                if not have
                else f"no private FedProx / Upcycled-FL comparison for this protocol among the {mech}-perturbation runs"
            )
            if not runs.empty and not have:
                why = f"no {mech}-perturbation runs in experiment(s) {exp}"
            rows.append(not_measured(**base, id=f"privacy/{mech}/{claim}", claim=label, why=why))
            continue
        pooled = sub[sub["dataset"] == "all"]
        named = sub[sub["paper_dataset"].fillna(False).astype(bool)] if "paper_dataset" in sub.columns else sub
        use = pooled if not pooled.empty else (named if not named.empty else sub)
        for r in use.to_dict("records"):
            acc = r.get("accountant") or PRIMARY[mech]
            level, mark = level_text(levels.get((mech, acc)), acc.replace("_", " "))
            where = (
                "pooled: " + ", ".join(dataset_label(d) for d in str(r.get("pooled_datasets", "")).split(";"))
                if r["dataset"] == "all"
                else dataset_label(r["dataset"])
            )
            ident = (
                f"privacy/{mech}/{claim}"
                + (f"/{r['accountant']}" if r.get("accountant") else "")
                + ("" if r["dataset"] == "all" else f"/{r['dataset']}")
            )
            versus = (
                f"{r['upcycled_noise']} vs {r['reference_noise']}"
                if r.get("upcycled_noise")
                else f"{c['protocol']} against FedProx {r.get('reference_noise')}"
            )
            text = (
                label
                + (f", ε̄ by {r['accountant'].replace('_', ' ')}" if r.get("accountant") else "")
                + f" ({versus}; {where})"
            )
            if claim == "privacy_loss":
                ours = float(r["ours"])
                verdict, why = verdict_gain(base["paper"], ours, ours, 0, half_unit(c["paper_value"]), exact=True)
                why += "; computed from the configuration (no sampling noise)"
                rows.append(
                    claim_row(
                        **base,
                        id=ident,
                        claim=text,
                        ours=ours,
                        verdict=verdict,
                        why=why,
                        privacy_level=level,
                        meaningful_guarantee=mark,
                    )
                )
                continue
            n = 0 if pd.isna(r["n_pairs"]) else int(r["n_pairs"])
            verdict, why = verdict_gain(
                base["paper"], float(r["ci_low"]), float(r["ci_high"]), n, half_unit(c["paper_value"])
            )
            if claim in ACC:
                why += "; the paper's '%' read as percentage points"
            rows.append(
                claim_row(
                    **base,
                    id=ident,
                    claim=text,
                    ours=r["ours"],
                    ci_low=r["ci_low"],
                    ci_high=r["ci_high"],
                    n_pairs=n,
                    verdict=verdict,
                    why=why,
                    privacy_level=level,
                    meaningful_guarantee=mark,
                )
            )
    return rows
