"""The claims page: every quantitative claim of the paper, our figure beside it, and a verdict.

One row per claim (``results/tables/claims.{csv,md,html}``): the paper's figure, ours with a 95% t interval and
the number of seed pairs (a verdict needs :data:`MIN_PAIRS`), the data, seeds and runs it was computed on (rows on
our generator's draws marked as a preview), the spread across fresh data draws where the draws experiment
measured it, the privacy level the claim was measured at (marked when it gives no meaningful guarantee),
and a verdict by the rule :data:`VERDICT_RULE`. Claims whose runs are not in the runs table are listed
as 'not measured here' with the reason. Runs flagged ``diverged`` (in runs.csv or their summary.json) are
left out of every figure, and the page says how many.

The experiments each group of claims reads are :data:`DEFAULT_ROLES` (config key ``claims`` overrides them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import pandas as pd

from ..privacy.accounting import MEANINGFUL_EPSILON, NO_MEANINGFUL
from .cells import paired
from .collect import ORIGIN_COLUMNS, REPORTING_NOTE, ReportError, is_generated, origin_text
from .paper_numbers import algorithm_label, dataset_label, paper_values
from .gain_grid import claims_section
from .protocol_gap import headline_section
from .render import as_number, fmt, fmt_mu, markdown_table, write_csv, write_markdown
from .stats import LEVEL, mean_interval

ACC = ("train_acc", "test_acc")
METRIC_TEXT = {"train_acc": "training accuracy", "test_acc": "test accuracy"}

DEFAULT_ROLES = {"table1": "table1", "time": "table1", "lambda_sweep": "fig2_lambda",
                 "privacy": "privacy_output,privacy_objective", "privacy_real": "fig12", "cnn": "fig4",
                 "draws": "table1_draws", "bases": "upcycling_bases",
                 "momentum": "ablation_momentum", "protocol_gap": "protocol_gap", "sensitivity": "sensitivity"}
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
    f"a row on our generator's draws rather than the authors' released ones is marked '{PREVIEW}'.")

MEANINGFUL_RULE = (f"Privacy level: ε̄ (mean over devices) and the worst device's ε; a value above "
                   f"{MEANINGFUL_EPSILON:g} is marked '{NO_MEANINGFUL}' (at ε = {MEANINGFUL_EPSILON:g} an adversary's "
                   "odds on a record may grow e^10 = 22,026-fold; docs/privacy.md).")

COLUMNS = ["id", "section", "claim", "dataset", "paper", "unit", "ours", "ci_low", "ci_high", "n_pairs",
           "draws_n", "draws_min", "draws_max", "draws_above_zero", "draws_below_zero", "privacy_level",
           "meaningful_guarantee", "verdict", "why", "experiment", "source", "data_origin", "preview", "seeds",
           "n_runs"]


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
        return "inconclusive", (f"all {n} pairs gave the same difference: a zero-width interval says nothing of "
                                "the spread")
    return None


def verdict_gain(paper: float, low: float, high: float, n: int, tolerance: float = 0.0,
                 exact: bool = False) -> tuple[str, str]:
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
        return ("holds", "the interval contains 0") if low <= 0 <= high else \
            ("does not hold", "the interval excludes the paper's 0")
    if high < target and low > 0:
        return "does not hold", "a gain, but smaller than the paper's: the interval lies wholly below its figure"
    if high <= 0:
        return "does not hold", "no gain: the interval lies at or below 0"
    if high < target:
        return "does not hold", "the interval excludes the paper's figure (and contains 0)"
    if low > 0:
        return "holds", "the interval lies above 0 and reaches the paper's figure"
    return "inconclusive", "the interval contains both 0 and the paper's figure"


def verdict_equivalence(target: float, low: float, high: float, n: int,
                        margin: float = EQUIVALENCE_MARGIN) -> tuple[str, str]:
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
        return runs, ("No run records a 'diverged' flag (summary.json field), so no run is left out on that "
                      "ground.")
    out = runs[~flags]
    bad = runs[flags]
    text = (f"{len(bad)} of {len(runs)} runs are flagged 'diverged' in their summary.json and are left out of "
            "every figure")
    if len(bad):
        where = sorted({f"{d} / {algorithm_label(a)}" for d, a in zip(bad["dataset"], bad["algorithm"])})
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
            return (f"{dataset_label(dataset)} is excluded from this pipeline run (the preset's exclude_sources), "
                    f"so experiment {exp} made no runs on it")
        where = f" on {dataset_label(dataset)}" if dataset else ""
        real = dataset in ("femnist", "sent140")
        return (f"no runs of experiment {exp}{where} in the runs table"
                + (" (the real data was not downloaded, or its runs were not made)" if real else ""))


def _row(**kw) -> dict[str, Any]:
    row = {c: kw.get(c, math.nan) for c in COLUMNS}
    for key in ("id", "section", "claim", "dataset", "unit", "privacy_level", "meaningful_guarantee", "verdict",
                "why", "experiment", "source", "data_origin", "seeds"):
        if isinstance(row[key], float) and math.isnan(row[key]):
            row[key] = ""
    return row


def _interval(values: Sequence[float] | pd.Series) -> tuple[float, float, float, int]:
    ci = mean_interval(list(values), LEVEL)
    return ci.mean, ci.low, ci.high, ci.n


def _not_measured(**kw) -> dict[str, Any]:
    return _row(verdict="not measured here", n_pairs=0, **kw)


# ---------------------------------------------------------------------------------------------
# Table 1 (and its real-data rows) with the spread across draws


def _draw_gains(ctx: Context) -> pd.DataFrame | None:
    from .fresh_data_sets import draw_gains

    runs = ctx.of("draws")
    if runs.empty:
        return None
    try:
        return draw_gains(runs)
    except ReportError:
        return None


def table1_claims(ctx: Context) -> list[dict[str, Any]]:
    """Upcycled-FL minus FedProx per data set x mu x metric (Table 1), ours paired on seed."""
    from .fresh_data_sets import spread
    from .tables import table1_frame

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
            ours = frame[(frame["dataset"] == dataset) & (frame["algorithm"] == "upcycled")
                         & (frame["mu"].astype(float).sub(mu).abs() < 1e-9)] if len(frame) else frame
            for key in ACC:
                paper = float(up[key]) - float(prox[key])
                text = f"{float(up[key]):.2f} − {float(prox[key]):.2f}"
                base = dict(id=f"table1/{dataset}/mu{fmt_mu(mu)}/{key}", section="Table 1",
                            claim=f"Upcycled-FL − FedProx, final {METRIC_TEXT[key]}, μ = {fmt_mu(mu)} ({text})",
                            dataset=dataset, paper=paper, unit="pp", experiment=ctx.roles["table1"],
                            source="Table 1")
                if draws is not None:
                    sp = spread(draws, dataset, mu, key)
                    if sp:
                        base.update(sp)
                if ours.empty or "n_pairs" not in ours.columns or pd.isna(ours.iloc[0].get("n_pairs")):
                    have = not runs.empty and (runs["dataset"] == dataset).any()
                    why = (f"no FedProx / Upcycled-FL pair at μ = {fmt_mu(mu)} on {dataset_label(dataset)} in "
                           f"experiment {ctx.roles['table1']}") if have else ctx.missing("table1", dataset)
                    rows.append(_not_measured(**base, why=why))
                    continue
                r = ours.iloc[0]
                low, high, n = r[f"{key}_gain_ci_low"], r[f"{key}_gain_ci_high"], int(r["n_pairs"])
                verdict, why = verdict_gain(paper, low, high, n, 0.01)
                rows.append(_row(**base, ours=r[f"{key}_gain_mean"], ci_low=low, ci_high=high, n_pairs=n,
                                 verdict=verdict, why=why))
    return rows


# ---------------------------------------------------------------------------------------------
# Training time


def time_claims(ctx: Context) -> list[dict[str, Any]]:
    """'48% less training time' at equal iterations and 'about the same time' at double iterations."""
    from .timing import time_frame

    runs = ctx.of("time")
    paper = paper_values("time").set_index("comparison")
    exp = ctx.roles["time"]
    base_eq = dict(id="time/equal_iterations", section="Training time",
                   claim="Upcycled-FL needs less training time than FedProx at equal iterations "
                         "(all Table 1 cells pooled)",
                   dataset="all", paper=(1 - float(paper.loc["equal_iterations", "paper_ratio"])) * 100,
                   unit="% less time", experiment=exp, source=str(paper.loc["equal_iterations", "source"]))
    base_rounds = dict(id="time/equal_rounds", section="Training time",
                       claim="About the same training time with double iterations (Upcycled-FL / FedProx at equal "
                             "training rounds; all Table 1 cells pooled)",
                       dataset="all", paper=float(paper.loc["equal_rounds", "paper_ratio"]), unit="ratio",
                       experiment=exp, source=str(paper.loc["equal_rounds", "source"]))
    pairs = runs[runs["algorithm"].isin(["fedprox", "upcycled"])] if not runs.empty else runs
    if pairs.empty or set(pairs["algorithm"]) != {"fedprox", "upcycled"}:
        why = ctx.missing("time")
        return [_not_measured(**base_eq, why=why), _not_measured(**base_rounds, why=why)]
    frame = time_frame(pairs)
    allrow = frame[frame["dataset"] == "all"]
    if allrow.empty:
        why = "no FedProx / Upcycled-FL pair with the same data set and mu"
        return [_not_measured(**base_eq, why=why), _not_measured(**base_rounds, why=why)]
    r = allrow.iloc[0]
    n = int(r["n_pairs"])
    low, high = (1 - r["ratio_equal_iterations_ci_high"]) * 100, (1 - r["ratio_equal_iterations_ci_low"]) * 100
    verdict, why = verdict_gain(base_eq["paper"], low, high, n, half_unit("48"))
    out = [_row(**base_eq, ours=(1 - r["ratio_equal_iterations_mean"]) * 100, ci_low=low, ci_high=high, n_pairs=n,
                verdict=verdict, why=why)]
    low, high = r["ratio_equal_rounds_ci_low"], r["ratio_equal_rounds_ci_high"]
    verdict, why = verdict_equivalence(base_rounds["paper"], low, high, n)
    out.append(_row(**base_rounds, ours=r["ratio_equal_rounds_mean"], ci_low=low, ci_high=high, n_pairs=n,
                    verdict=verdict, why=why))
    return out


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
    base = dict(id="fig2/lambda_sweep", section="Figure 2 (right)",
                claim="Smaller λ (larger step μ/(μ+λ)) converges faster: mean training loss over the iterations, "
                      "smallest λ minus largest λ (negative: faster)",
                dataset="", paper=math.nan, unit="loss", experiment=ctx.roles["lambda_sweep"],
                source="Section 6: 'models with smaller λ tend to converge faster'")
    ups = runs[runs["algorithm"] == "upcycled"] if not runs.empty else runs
    if ups.empty or ups["coef"].astype(float).nunique() < 2:
        return [_not_measured(**base, why=ctx.missing("lambda_sweep") if ups.empty else
                              "fewer than two λ values among the Upcycled-FL runs")]
    rows = []
    for dataset, sub in ups.groupby("dataset", sort=True):
        coefs = sub["coef"].astype(float)
        big, small = sub[coefs == coefs.max()], sub[coefs == coefs.min()]
        a = big.assign(area=[loss_area(d) for d in big["run_dir"]])
        b = small.assign(area=[loss_area(d) for d in small["run_dir"]])
        p = paired(a, b, "area")
        mean, low, high, n = _interval(p["a"] - p["b"])
        verdict, why = verdict_direction(-1, low, high, n)
        rows.append(_row(**{**base, "id": f"fig2/lambda_sweep/{dataset}", "dataset": dataset,
                            "claim": base["claim"] + f" (step {coefs.max():g} against {coefs.min():g})"},
                         ours=mean, ci_low=low, ci_high=high, n_pairs=n, verdict=verdict,
                         why=why + "; the paper gives a direction, no figure"))
    return rows


# ---------------------------------------------------------------------------------------------
# Section 6: privacy


def privacy_levels(runs: pd.DataFrame) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(mechanism, accountant) -> (min, max of private FedProx's ε̄ over data sets, max worst-device ε)."""
    from .privacy_table import ACCOUNTANTS, privacy_frame

    try:
        frame = privacy_frame(runs)
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
            worst = sub[f"epsmax_{acc}"].astype(float).dropna() if f"epsmax_{acc}" in sub.columns \
                else pd.Series([], dtype=float)
            if not eps.empty:
                out[(mech, acc)] = (float(eps.min()), float(eps.max()), float(worst.max()) if len(worst) else math.nan)
    return out


def level_text(level: tuple[float, float, float] | None, accountant: str) -> tuple[str, str]:
    """('private FedProx ε̄ 5100–33000 (worst device 90000), sound', mark) for a privacy level."""
    if level is None:
        return "", ""
    low, high, worst = level
    eps = fmt(low, 3 if low < 10 else 0) if abs(high - low) < 1e-9 * max(1, high) else \
        f"{fmt(low, 3 if low < 10 else 0)}–{fmt(high, 3 if high < 10 else 0)}"
    text = f"private FedProx ε̄ {eps}"
    if not math.isnan(worst):
        text += f", worst device {fmt(worst, 3 if worst < 10 else 0)}"
    text += f" ({accountant})"
    top = worst if not math.isnan(worst) else high
    return text, ("no" if top > MEANINGFUL_EPSILON else "yes")


def privacy_claims(ctx: Context) -> list[dict[str, Any]]:
    """Section 6's claims (paper_values/privacy.csv): pooled over the paper's data sets where we have them."""
    from .privacy_table import PRIMARY, privacy_claims_frame

    paper = paper_values("privacy")
    runs = ctx.of("privacy")
    exp = ctx.roles["privacy"]
    names = {"privacy_loss": "less privacy loss ε̄ at equal noise",
             "train_acc": "higher training accuracy at equal ε̄", "test_acc": "higher test accuracy at equal ε̄", "time": "less training time at equal noise"}
    claims = pd.DataFrame()
    if not runs.empty:
        try:
            claims = privacy_claims_frame(runs)
        except ReportError:
            claims = pd.DataFrame()
    levels = privacy_levels(runs) if not runs.empty else {}
    rows = []
    for c in paper.to_dict("records"):
        mech, claim = c["mechanism"], c["claim"]
        unit = {"privacy_loss": "% less ε̄", "time": "% less time"}.get(claim, "pp")
        base = dict(section="Section 6 (privacy)",
                    dataset=", ".join(dataset_label(d) for d in str(c["paper_datasets"]).split(";")),
                    paper=float(c["paper_value"]), unit=unit, experiment=exp, source=c["source"])
        label = f"{mech} perturbation: {names[claim]}"
        sub = claims[(claims["mechanism"] == mech) & (claims["claim"] == claim)] if not claims.empty else claims
        if sub.empty:
            have = not runs.empty and (runs["mechanism"].fillna("none") == mech).any()
            why = ctx.missing("privacy") if not have else \
                f"no private FedProx / Upcycled-FL comparison for this protocol among the {mech}-perturbation runs"
            if not runs.empty and not have:
                why = f"no {mech}-perturbation runs in experiment(s) {exp}"
            rows.append(_not_measured(**base, id=f"privacy/{mech}/{claim}", claim=label, why=why))
            continue
        pooled = sub[sub["dataset"] == "all"]
        named = sub[sub["paper_dataset"].fillna(False).astype(bool)] if "paper_dataset" in sub.columns else sub
        use = pooled if not pooled.empty else (named if not named.empty else sub)
        for r in use.to_dict("records"):
            acc = r.get("accountant") or PRIMARY[mech]
            level, mark = level_text(levels.get((mech, acc)), acc.replace("_", " "))
            where = "pooled: " + ", ".join(dataset_label(d) for d in str(r.get("pooled_datasets", "")).split(";")) \
                if r["dataset"] == "all" else dataset_label(r["dataset"])
            ident = f"privacy/{mech}/{claim}" + (f"/{r['accountant']}" if r.get("accountant") else "") + \
                ("" if r["dataset"] == "all" else f"/{r['dataset']}")
            versus = f"{r['upcycled_noise']} vs {r['reference_noise']}" if r.get("upcycled_noise") else \
                f"{c['protocol']} against FedProx {r.get('reference_noise')}"
            text = label + (f", ε̄ by {r['accountant'].replace('_', ' ')}" if r.get("accountant") else "") + \
                f" ({versus}; {where})"
            if claim == "privacy_loss":
                ours = float(r["ours"])
                verdict, why = verdict_gain(base["paper"], ours, ours, 0, half_unit(c["paper_value"]), exact=True)
                why += "; computed from the configuration (no sampling noise)"
                rows.append(_row(**base, id=ident, claim=text, ours=ours, verdict=verdict, why=why,
                                 privacy_level=level, meaningful_guarantee=mark))
                continue
            n = 0 if pd.isna(r["n_pairs"]) else int(r["n_pairs"])
            verdict, why = verdict_gain(base["paper"], float(r["ci_low"]), float(r["ci_high"]), n,
                                        half_unit(c["paper_value"]))
            if claim in ACC:
                why += "; the paper's '%' read as percentage points"
            rows.append(_row(**base, id=ident, claim=text, ours=r["ours"], ci_low=r["ci_low"], ci_high=r["ci_high"],
                             n_pairs=n, verdict=verdict, why=why, privacy_level=level, meaningful_guarantee=mark))
    return rows


# ---------------------------------------------------------------------------------------------
# Real data: Figure 12 (private, Femnist and Sent140) and Figure 4 (CNN)


def _paired_gain(up: pd.DataFrame, prox: pd.DataFrame, key: str) -> tuple[float, float, float, int]:
    p = paired(up, prox, f"final_{key}")
    return _interval((p["a"].astype(float) - p["b"].astype(float)) * 100.0)


def real_claims(ctx: Context) -> list[dict[str, Any]]:
    """Figure 12's and Figure 4's quoted accuracies as Upcycled-FL minus FedProx gains."""
    from .privacy_table import blocks

    figs = paper_values("figures")
    rows = []
    for (fig, dataset, model, mech), grp in figs.groupby(["figure", "dataset", "model", "mechanism"], sort=False):
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
            base = dict(id=f"{fig}/{dataset}/{mech}/{key}", section="Real data (Figures 4, 12)",
                        claim=f"{dataset_label(dataset)}, {what}: Upcycled-FL − FedProx, final {METRIC_TEXT[key]} "
                              f"({float(up[key]):.2f} − {float(prox[key]):.2f})",
                        dataset=dataset, paper=paper, unit="pp", experiment=ctx.roles[role], source=up["source"])
            if cells is None:
                rows.append(_not_measured(**base, why=ctx.missing(role, dataset)))
                continue
            mean, low, high, n = _paired_gain(cells[0], cells[1], key)
            verdict, why = verdict_gain(paper, low, high, n, 0.01)
            rows.append(_row(**base, ours=mean, ci_low=low, ci_high=high, n_pairs=n, verdict=verdict, why=why))
    return rows


# ---------------------------------------------------------------------------------------------
# Section 1: upcycling is orthogonal to the base algorithm (the upcycling_bases experiment)

BASES_SOURCE = "Section 1: 'upcycling is orthogonal to the base algorithm' (no figure given)"


def _straggler_text(value: Any) -> str:
    v = as_number(value)
    return "" if math.isnan(v) else f", {v:.0%} stragglers"


def bases_claims(ctx: Context) -> list[dict[str, Any]]:
    """Per data set x straggler level x base: Upcycled-on-base minus the base, final test accuracy, paired on
    seed at equal training rounds. The paper gives a direction only, so the rule is the lambda sweep's: holds
    when the interval lies above 0."""
    from .ablations import BASE_LABELS
    from .collect import base_algorithm

    runs = ctx.of("bases")
    exp = ctx.roles["bases"]
    base = dict(section="Upcycling on other base algorithms", paper=math.nan, unit="pp", experiment=exp,
                source=BASES_SOURCE)
    claim = "Upcycling improves {label} (Upcycled {label} − {label}, final test accuracy, equal training rounds{s})"
    if runs.empty:
        return [_not_measured(**base, id="bases", dataset="", why=ctx.missing("bases"),
                              claim=claim.format(label="every base", s=""))]
    runs = runs.assign(base=runs["algorithm"].map(base_algorithm))
    straggler = runs["straggler"].map(as_number) if "straggler" in runs.columns else pd.Series(math.nan, runs.index)
    model = runs["model"].fillna("") if "model" in runs.columns else pd.Series("", runs.index)
    rows = []
    for dataset in sorted(set(runs["dataset"])):
        for mdl in sorted(set(model[runs["dataset"] == dataset])):
            cell = (runs["dataset"] == dataset) & (model == mdl)
            for level in sorted({v for v in straggler[cell] if not math.isnan(v)} or {math.nan}):
                at = cell & ((straggler == level) | (straggler.isna() & math.isnan(level)))
                sub = runs[at]
                order = [b for b in BASE_LABELS if b in set(sub["base"])] + \
                    sorted(set(sub["base"]) - set(BASE_LABELS))
                for name in order:
                    plain = sub[(sub["base"] == name) & (sub["algorithm"] == name)]
                    up = sub[(sub["base"] == name) & (sub["algorithm"] != name)]
                    label = BASE_LABELS.get(name, name)
                    real = bool(mdl) and dataset in ("femnist", "sent140")
                    where = _straggler_text(level) + (f", {mdl.upper()}" if real else "")
                    ident = f"bases/{dataset}" + (f"/{mdl}" if real else "") + \
                        ("" if math.isnan(level) else f"/s{level:g}") + f"/{name}"
                    row = dict(base, id=ident, dataset=dataset, claim=claim.format(label=label, s=where))
                    if plain.empty or up.empty:
                        missing = "its upcycled version" if up.empty else "the base itself"
                        rows.append(_not_measured(**row, why=f"no runs of {missing} in experiment {exp}"))
                        continue
                    try:
                        mean, low, high, n = _paired_gain(up, plain, "test_acc")
                    except ReportError as err:
                        rows.append(_not_measured(**row, why=str(err)))
                        continue
                    verdict, why = verdict_direction(+1, low, high, n)
                    rows.append(_row(**row, ours=mean, ci_low=low, ci_high=high, n_pairs=n, verdict=verdict,
                                     why=why + "; the paper gives a direction, no figure"))
    return rows


MOMENTUM_NOTE = (
    "Not a claim of the paper (an ablation's question): the even step extrapolates along the last global update, as "
    "server momentum does. Upcycled-FL minus FedProx with server momentum β (`fedavgm` with the same μ), final "
    "test accuracy at equal training rounds, paired on seed, mean and 95% t interval; no verdict.")
MOMENTUM_HEADER = ["Data", "Comparison", "Ours [95% CI] (pp)", "Pairs"]


def momentum_information(ctx: Context) -> list[list[str]]:
    """Rows of the information section: Upcycled-FL against FedProx + momentum per β (experiment of role
    ``momentum``); empty when that experiment has no such runs."""
    from .ablations import options_text

    runs = ctx.of("momentum")
    if runs.empty:
        return []
    rows = []
    mu = runs["mu"].map(as_number)
    for dataset, m in sorted({(d, v) for d, v in zip(runs["dataset"], mu) if v > 0}):
        sub = runs[(runs["dataset"] == dataset) & (mu == m)]
        up = sub[sub["algorithm"] == "upcycled"]
        mom = sub[sub["algorithm"] == "fedavgm"]
        options = mom["algorithm_options"].fillna("").astype(str)
        for opts in sorted(set(options)):
            if up.empty:
                continue
            try:
                mean, low, high, n = _paired_gain(up, mom[options == opts], "test_acc")
            except ReportError as err:
                rows.append([dataset_label(dataset), "Upcycled-FL − FedProx + momentum", str(err), "0"])
                continue
            ours = _number(mean, "pp") + ("" if math.isnan(low) else
                                           f" [{_number(low, 'pp')}, {_number(high, 'pp')}]")
            rows.append([dataset_label(dataset), f"Upcycled-FL − FedProx + momentum ({options_text(opts)}), "
                         f"μ = {fmt_mu(m)}", ours, str(n)])
    return rows


# ---------------------------------------------------------------------------------------------
# The page

BUILDERS: tuple[Callable[[Context], list[dict[str, Any]]], ...] = (
    table1_claims, time_claims, lambda_claims, privacy_claims, real_claims, bases_claims)


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
        return dict(data_origin="", preview=False, seeds="", n_runs=0)
    origin = runs.reindex(columns=list(ORIGIN_COLUMNS))
    texts = sorted({origin_text(*r) for r in origin.itertuples(index=False)})
    seeds = sorted({int(float(v)) for v in runs["seed"] if not math.isnan(as_number(v))})
    return dict(data_origin="; ".join(texts), preview=bool(origin["data_source"].map(is_generated).any()),
                seeds=" ".join(str(v) for v in seeds), n_runs=len(runs))


def claims_frame(runs: pd.DataFrame, roles: dict[str, str] | None = None,
                 excluded: Iterable[str] = ()) -> tuple[pd.DataFrame, str]:
    """Every claim's row (see :data:`COLUMNS`) with the data, seeds and runs it came from, and the sentence on
    diverged runs."""
    kept, diverged = without_diverged(runs)
    ctx = Context(kept, roles or {}, excluded)
    rows = []
    for build in BUILDERS:
        rows += build(ctx)
    rows = [{**row, **provenance_columns(row_runs(kept, row))} for row in rows]
    return pd.DataFrame(rows, columns=COLUMNS), diverged


def _number(value: Any, unit: str, signed: bool = True) -> str:
    v = as_number(value)
    if math.isnan(v):
        return ""
    if unit == "ratio":
        return fmt(v, 3)
    if unit == "loss":
        return fmt(v, 4, signed=True)
    return fmt(v, 2, signed=signed and unit == "pp")


def _ours_text(r: dict) -> str:
    if r["verdict"] == "not measured here":
        return "–"
    ours = _number(r["ours"], r["unit"])
    low, high = _number(r["ci_low"], r["unit"]), _number(r["ci_high"], r["unit"])
    if r["verdict"] != TOO_FEW and low and low != high:
        ours += f" [{low}, {high}]"
    return ours


def _draws_text(r: dict) -> str:
    n = as_number(r["draws_n"])
    if math.isnan(n):
        return ""
    return (f"{_number(r['draws_min'], r['unit'])} to {_number(r['draws_max'], r['unit'])} over {int(n)} draws; "
            f"{int(r['draws_above_zero'])} above 0, {int(r['draws_below_zero'])} below 0")


def _unit_text(unit: str) -> str:
    return {"pp": "pp", "% less ε̄": "%", "% less time": "%", "ratio": "×", "loss": ""}.get(unit, unit)


HEADER = ["Claim", "Data", "Paper", "Ours [95% CI]", "Pairs", "Across draws (mean gains; intervals)",
          "Privacy level", "Verdict", "Why", "Trained on (seeds; runs)"]


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
        paper = _number(r["paper"], r["unit"])
        paper = f"{paper} {_unit_text(r['unit'])}".strip() if paper else "direction only"
        level = r["privacy_level"] + (f" — **{NO_MEANINGFUL}**" if r["meaningful_guarantee"] == "no" else "")
        out.setdefault(r["section"], []).append([
            r["claim"], dataset_label(r["dataset"]) if r["dataset"] not in ("", "all") and "," not in r["dataset"]
            else (r["dataset"] or ""), paper, _ours_text(r),
            "" if math.isnan(as_number(r["n_pairs"])) or r["verdict"] == "not measured here"
            else str(int(r["n_pairs"])),
            _draws_text(r), level, verdict_text(r), r["why"], origin_cell(r)])
    return out


def summary_text(frame: pd.DataFrame) -> str:
    """'2 holds, 0 does not hold, ... (of 40 claims; 12 on generated data, a preview).'"""
    counts = frame["verdict"].value_counts()
    previews = int(frame["preview"].astype(bool).sum()) if "preview" in frame.columns else 0
    tail = f"; {previews} on our generator's draws: {PREVIEW}" if previews else ""
    return ", ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS) + f" (of {len(frame)} claims{tail})."


def write_claims(runs: pd.DataFrame, out_prefix: str, provenance: str, roles: dict[str, str] | None = None,
                 excluded: Iterable[str] = ()) -> pd.DataFrame:
    """Write ``<prefix>.csv`` and ``<prefix>.md`` (the claims page); return the frame."""
    frame, diverged = claims_frame(runs, roles, excluded)
    write_csv(f"{out_prefix}.csv", frame, provenance)
    sections = [
        "Each quantitative claim of the paper, our figure beside it (on the data each row names), and a verdict. Ours: "
        "Upcycled-FL minus FedProx per seed (same seed, same device draws), mean and 95% t interval; pp = "
        "percentage points. Across draws: the same difference on fresh draws of the synthetic generator "
        "(the draws experiment), each draw's paired mean, their range and how many draws' intervals lie above "
        "or below 0.",
        VERDICT_RULE, REPORTING_NOTE, MEANINGFUL_RULE, "Runs: " + diverged, "Summary: " + summary_text(frame)]
    for section, rows in claims_rows(frame).items():
        sections += [f"## {section}\n", markdown_table(HEADER, rows)]
    ctx = Context(without_diverged(runs)[0], roles or {}, excluded)
    info = momentum_information(ctx)
    if info:
        sections += ["## Information: upcycling or server momentum?\n", MOMENTUM_NOTE + "\n",
                     markdown_table(MOMENTUM_HEADER, info)]
    sections += headline_section(ctx.of("protocol_gap"), ctx.of("sensitivity"))
    sections += claims_section(ctx.of("sensitivity"))
    write_markdown(f"{out_prefix}.md", "The paper's claims, judged", sections, provenance)
    return frame


def parse_roles(items: Sequence[str] | None) -> dict[str, str]:
    """``ROLE=EXPERIMENT[,EXPERIMENT]`` items to a mapping; unknown roles are errors naming the known ones."""
    roles = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or key not in DEFAULT_ROLES or not value:
            raise ReportError(f"--experiment-for {item!r}: expected ROLE=EXPERIMENT with ROLE one of "
                              f"{', '.join(DEFAULT_ROLES)}")
        roles[key] = value
    return roles


__all__ = ["claims_frame", "write_claims", "verdict_gain", "verdict_equivalence", "verdict_direction",
           "without_diverged", "parse_roles", "DEFAULT_ROLES", "VERDICT_RULE"]
