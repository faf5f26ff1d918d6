"""The claims page's Table 1 section: Upcycled-FL minus FedProx per data set x mu x metric, ours paired on seed,
with the spread of the gain across fresh generator draws (:mod:`upfl.report.fresh_data_sets`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .claim_rules import METRIC_TEXT, Context, claim_row, not_measured, table1_verdict
from .collect import ReportError
from .fresh_data_sets import draw_gains, spread
from .paper_numbers import dataset_label, paper_values
from .render import fmt_mu
from .tables import ACC, table1_frame


def _draw_gains(ctx: Context) -> pd.DataFrame | None:
    runs = ctx.of("draws")
    if runs.empty:
        return None
    try:
        return draw_gains(runs)
    except ReportError:
        return None


def table1_claims(ctx: Context) -> list[dict[str, Any]]:
    """Upcycled-FL minus FedProx per data set x mu x metric (Table 1), ours paired on seed."""
    runs = ctx.of("table1")
    frame = table1_frame(runs) if not runs.empty else pd.DataFrame(columns=["dataset", "algorithm", "mu"])
    draws = _draw_gains(ctx)
    pv = paper_values("table1")
    rows = []
    for dataset in pv["dataset"].drop_duplicates():
        d = pv[(pv["dataset"] == dataset) & (pv["algorithm"] != "fedavg")]
        for mu in sorted({float(m) for m in d["mu"]}):
            up = d[(d["algorithm"] == "upcycled") & ((d["mu"] - mu).abs() < 1e-9)].iloc[0]
            prox = d[(d["algorithm"] == "fedprox") & ((d["mu"] - mu).abs() < 1e-9)].iloc[0]
            ours = (
                frame[
                    (frame["dataset"] == dataset)
                    & (frame["algorithm"] == "upcycled")
                    & (frame["mu"].astype(float).sub(mu).abs() < 1e-9)
                ]
                if len(frame)
                else frame
            )
            for key in ACC:
                paper = float(up[key]) - float(prox[key])
                text = f"{float(up[key]):.2f} − {float(prox[key]):.2f}"
                base = {
                    "id": f"table1/{dataset}/mu{fmt_mu(mu)}/{key}",
                    "section": "Table 1",
                    "claim": f"Upcycled-FL − FedProx, final {METRIC_TEXT[key]}, μ = {fmt_mu(mu)} ({text})",
                    "dataset": dataset,
                    "paper": paper,
                    "unit": "pp",
                    "experiment": ctx.roles["table1"],
                    "source": "Table 1",
                }
                if draws is not None:
                    sp = spread(draws, dataset, mu, key)
                    if sp:
                        base.update(sp)
                if ours.empty or "n_pairs" not in ours.columns or pd.isna(ours.iloc[0].get("n_pairs")):
                    have = not runs.empty and (runs["dataset"] == dataset).any()
                    why = (
                        (
                            f"no FedProx / Upcycled-FL pair at μ = {fmt_mu(mu)} on {dataset_label(dataset)} in "
                            f"experiment {ctx.roles['table1']}"
                        )
                        if have
                        else ctx.missing("table1", dataset)
                    )
                    rows.append(not_measured(**base, why=why))
                    continue
                r = ours.iloc[0]
                low, high, n = r[f"{key}_gain_ci_low"], r[f"{key}_gain_ci_high"], int(r["n_pairs"])
                verdict, why = table1_verdict(paper, low, high, n)
                rows.append(
                    claim_row(
                        **base,
                        ours=r[f"{key}_gain_mean"],
                        ci_low=low,
                        ci_high=high,
                        n_pairs=n,
                        verdict=verdict,
                        why=why,
                    )
                )
    return rows
