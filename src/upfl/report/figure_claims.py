"""The claims page's rows read off the paper's figures: the lambda sweep (Figure 2, right) and the quoted
accuracies of Figure 12 (private, real data) and Figure 4 (CNN)."""

from __future__ import annotations

import math
from typing import Any

from .cells import paired
from .claim_rules import (
    ACC,
    METRIC_TEXT,
    Context,
    claim_interval,
    claim_row,
    not_measured,
    paired_gain,
    verdict_direction,
    verdict_gain,
)
from .collect import ReportError
from .paper_numbers import dataset_label, paper_values

# ---------------------------------------------------------------------------------------------
# Figure 2 (right): the lambda sweep


def loss_area(run_dir: str) -> float:
    """Mean training loss over the evaluated iterations 1..T (lower: faster convergence)."""
    from .collect import load_metrics

    m = load_metrics(run_dir)
    m = m[(m["iteration"] > 0) & m["train_loss"].notna()]
    return float(m["train_loss"].mean())


def lambda_claims(ctx: Context) -> list[dict[str, Any]]:
    """'Smaller lambda converges faster': the largest step mu/(mu+lambda) against the smallest, per seed."""
    runs = ctx.of("lambda_sweep")
    base: dict[str, Any] = {
        "id": "fig2/lambda_sweep",
        "section": "Figure 2 (right)",
        "claim": "Smaller λ (larger step μ/(μ+λ)) converges faster: mean training loss over the iterations, "
        "smallest λ minus largest λ (negative: faster)",
        "dataset": "",
        "paper": math.nan,
        "unit": "loss",
        "experiment": ctx.roles["lambda_sweep"],
        "source": "Section 6: 'models with smaller λ tend to converge faster'",
    }
    ups = runs[runs["algorithm"] == "upcycled"] if not runs.empty else runs
    if ups.empty or ups["coef"].astype(float).nunique() < 2:
        return [
            not_measured(
                **base,
                why=ctx.missing("lambda_sweep") if ups.empty else "fewer than two λ values among the Upcycled-FL runs",
            )
        ]
    rows = []
    for key, sub in ups.groupby("dataset", sort=True):
        dataset = str(key)
        coefs = sub["coef"].astype(float)
        big, small = sub[coefs == coefs.max()], sub[coefs == coefs.min()]
        a = big.assign(area=[loss_area(d) for d in big["run_dir"]])
        b = small.assign(area=[loss_area(d) for d in small["run_dir"]])
        p = paired(a, b, "area")
        mean, low, high, n = claim_interval(p["a"] - p["b"])
        verdict, why = verdict_direction(-1, low, high, n)
        rows.append(
            claim_row(
                **{
                    **base,
                    "id": f"fig2/lambda_sweep/{dataset}",
                    "dataset": dataset,
                    "claim": base["claim"] + f" (step {float(coefs.max()):g} against {float(coefs.min()):g})",
                },
                ours=mean,
                ci_low=low,
                ci_high=high,
                n_pairs=n,
                verdict=verdict,
                why=why + "; the paper gives a direction, no figure",
            )
        )
    return rows


# ---------------------------------------------------------------------------------------------
# Real data: Figure 12 (private, Femnist and Sent140) and Figure 4 (CNN)


def real_claims(ctx: Context) -> list[dict[str, Any]]:
    """Figure 12's and Figure 4's quoted accuracies as Upcycled-FL minus FedProx gains."""
    from .privacy_table import blocks

    figs = paper_values("figures")
    rows = []
    for keys, grp in figs.groupby(["figure", "dataset", "model", "mechanism"], sort=False):
        fig, dataset, model, mech = (str(k) for k in keys)
        up = grp[grp["algorithm"] == "upcycled"].iloc[0]
        prox = grp[grp["algorithm"] == "fedprox"].iloc[0]
        role = "privacy_real" if fig == "fig12" else "cnn"
        runs = ctx.of(role)
        runs = runs[(runs["dataset"] == dataset) & (runs["model"] == model)] if not runs.empty else runs
        cells = None
        if not runs.empty and mech != "none":
            private = (runs["mechanism"].fillna("none") == mech).any()
            try:
                mine = [b for b in blocks(runs) if b["mechanism"] == mech] if private else []
            except ReportError:
                mine = []
            if mine and "upcycled_equal_noise" in mine[0]["variants"]:
                v = mine[0]["variants"]
                cells = (v["upcycled_equal_noise"]["_cell"], v["fedprox_private"]["_cell"])
        elif not runs.empty:
            plain = runs[runs["mechanism"].fillna("none") == "none"]
            u, f = plain[plain["algorithm"] == "upcycled"], plain[plain["algorithm"] == "fedprox"]
            cells = (u, f) if not u.empty and not f.empty else None
        for key in ACC:
            paper = float(up[key]) - float(prox[key])
            what = f"private ({mech} perturbation, equal noise)" if mech != "none" else model.upper()
            base = {
                "id": f"{fig}/{dataset}/{mech}/{key}",
                "section": "Real data (Figures 4, 12)",
                "claim": f"{dataset_label(dataset)}, {what}: Upcycled-FL − FedProx, final {METRIC_TEXT[key]} "
                f"({float(up[key]):.2f} − {float(prox[key]):.2f})",
                "dataset": dataset,
                "paper": paper,
                "unit": "pp",
                "experiment": ctx.roles[role],
                "source": up["source"],
            }
            if cells is None:
                rows.append(not_measured(**base, why=ctx.missing(role, dataset)))
                continue
            mean, low, high, n = paired_gain(cells[0], cells[1], key)
            verdict, why = verdict_gain(paper, low, high, n, 0.01)
            rows.append(claim_row(**base, ours=mean, ci_low=low, ci_high=high, n_pairs=n, verdict=verdict, why=why))
    return rows
