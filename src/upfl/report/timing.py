"""Training time per algorithm and data set, and Upcycled-FL / FedProx time ratios.

Times of one iteration are the ``wall_s`` of ``metrics.csv`` (the training round or the Eq. (5)
step; evaluation and the making of the rounds' draws excluded, which the first run of a seed in a process
does for the later ones); ``cum_wall_s`` sums them. Two ratios per seed (paired runs):

- equal iterations: both algorithms' time to iteration I = min of their iteration counts
  (Upcycled-FL trains at half of them: the paper's "48% less training time");
- equal training rounds: both algorithms' time to complete R = min of their training rounds
  (Upcycled-FL runs 2R iterations: the paper's "approximately same training time").
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from .cells import check_one_config, iter_cells, missing, records
from .claim_rules import Context, claim_row, half_unit, not_measured, verdict_equivalence, verdict_gain
from .collect import ReportError, cumulative_rounds, is_diverged, load_metrics, require_converged
from .paper_numbers import algorithm_label, dataset_label, paper_values
from .render import fmt, fmt_mu, markdown_table, mean_std, write_csv, write_markdown
from .stats import LEVEL, mean_interval

COMPARISONS = ("equal_iterations", "equal_rounds")


def time_to_iteration(metrics: pd.DataFrame, iteration: int) -> float:
    """Cumulative iteration time (s) at ``iteration``."""
    hit = metrics[metrics["iteration"] == iteration]
    if hit.empty:
        raise ReportError(f"metrics.csv has no iteration {iteration}")
    return float(hit["cum_wall_s"].iloc[0])


def time_to_rounds(metrics: pd.DataFrame, rounds: int) -> float:
    """Cumulative time (s) at the last iteration with ``rounds`` training rounds done (even steps after it included)."""
    done = cumulative_rounds(metrics)
    hit = metrics[done == rounds]
    if hit.empty:
        raise ReportError(f"metrics.csv never reaches {rounds} training rounds")
    return float(hit["cum_wall_s"].iloc[-1])


def run_times(cell: pd.DataFrame) -> pd.DataFrame:
    """Per run of a cell: seed, iterations, training rounds and its metrics (loaded once)."""
    rows = []
    for r in records(cell, ["seed", "run_dir"]):
        m = load_metrics(r["run_dir"])
        rows.append(
            {
                "seed": r["seed"],
                "iterations": int(m["iteration"].max()),
                "training_rounds": int(cumulative_rounds(m).iloc[-1]),
                "metrics": m,
            }
        )
    return pd.DataFrame(rows)


def time_row(dataset: str, alg: str, mu: float, cell: pd.DataFrame) -> dict[str, Any]:
    """Mean and std over seeds of the summary's time split (s) for one cell."""
    check_one_config(cell, f"time cell {dataset} / {algorithm_label(alg)}")
    training = cell["time_train_s"].astype(float) + cell["time_upcycle_s"].astype(float)
    rounds = cell["training_rounds"].astype(float)
    row = {
        "dataset": dataset,
        "label": dataset_label(dataset),
        "algorithm": alg,
        "mu": mu,
        "lam": cell["lam"].iloc[0],
        "n_seeds": len(cell),
        "iterations": int(cell["rounds"].iloc[0]),
        "training_rounds": int(rounds.iloc[0]),
        "training_s_mean": float(training.mean()),
        "training_s_std": float(training.std(ddof=1)) if len(cell) > 1 else math.nan,
    }
    for key in ("train_s", "upcycle_s", "eval_s"):
        row[f"{key}_mean"] = float(cell[f"time_{key}"].astype(float).mean())
    row["s_per_iteration"] = row["training_s_mean"] / row["iterations"]
    row["s_per_training_round"] = float((cell["time_train_s"].astype(float) / rounds).mean())
    return row


def ratio_pairs(up: pd.DataFrame, prox: pd.DataFrame) -> pd.DataFrame:
    """Per seed: Upcycled-FL / FedProx time at equal iterations and at equal training rounds."""
    a, b = run_times(up), run_times(prox)
    iters = min(a["iterations"].min(), b["iterations"].min())
    rounds = min(a["training_rounds"].min(), b["training_rounds"].min())
    joined = a.merge(b, on="seed", suffixes=("_up", "_prox"))
    rows = []
    for r in joined.to_dict("records"):
        rows.append(
            {
                "seed": r["seed"],
                "at_iteration": iters,
                "at_rounds": rounds,
                "equal_iterations": time_to_iteration(r["metrics_up"], iters)
                / time_to_iteration(r["metrics_prox"], iters),
                "equal_rounds": time_to_rounds(r["metrics_up"], rounds) / time_to_rounds(r["metrics_prox"], rounds),
            }
        )
    return pd.DataFrame(rows)


def ratio_columns(pairs: pd.DataFrame) -> dict[str, Any]:
    """Mean, std and 95% t interval of the per-seed ratios, with the paper's ratios beside."""
    paper = paper_values("time").set_index("comparison")["paper_ratio"]
    out: dict[str, Any] = {"n_pairs": len(pairs)}
    if len(pairs):
        out["ratio_at_iteration"] = int(pairs["at_iteration"].iloc[0])
        out["ratio_at_rounds"] = int(pairs["at_rounds"].iloc[0])
    for comp in COMPARISONS:
        ci = mean_interval(pairs[comp] if len(pairs) else [], LEVEL)
        out.update(
            {
                f"ratio_{comp}_mean": ci.mean,
                f"ratio_{comp}_std": ci.std,
                f"ratio_{comp}_ci_low": ci.low,
                f"ratio_{comp}_ci_high": ci.high,
                f"less_time_{comp}_pct": (1.0 - ci.mean) * 100.0,
                f"paper_ratio_{comp}": float(paper[comp]),
            }
        )
    return out


def time_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per data set x algorithm x mu; ratio columns on Upcycled-FL rows; an 'all' row pools every pair."""
    cells = list(iter_cells(require_converged(runs, "time")))
    if not cells:
        raise ReportError("time: no runs")
    rows = [time_row(*c) for c in cells]
    by_key = {(c[0], c[1], c[2]): c[3] for c in cells}
    pooled = []
    for row in rows:
        key = (row["dataset"], "fedprox", row["mu"])
        if row["algorithm"] != "upcycled" or key not in by_key:
            continue
        pairs = ratio_pairs(by_key[(row["dataset"], "upcycled", row["mu"])], by_key[key])
        pooled.append(pairs)
        row.update(ratio_columns(pairs))
    if pooled:
        allpairs = pd.concat(pooled, ignore_index=True)
        overall = {
            "dataset": "all",
            "label": "all data sets and mu",
            "algorithm": "upcycled",
            "mu": math.nan,
            **ratio_columns(allpairs),
        }
        overall.pop("ratio_at_iteration", None)
        overall.pop("ratio_at_rounds", None)
        rows.append(overall)
    return pd.DataFrame(rows)


def _ratio_text(row: dict, comp: str) -> str:
    mean = row.get(f"ratio_{comp}_mean")
    if missing(mean):
        return ""
    low, high = row[f"ratio_{comp}_ci_low"], row[f"ratio_{comp}_ci_high"]
    ci = "" if missing(low) else f" [{fmt(low, 3)}, {fmt(high, 3)}]"
    return f"{fmt(mean, 3)}{ci}"


TIME_HEADER = [
    "Dataset",
    "Algorithm",
    "μ",
    "seeds",
    "iterations",
    "training rounds",
    "training time (s)",
    "ms / iteration",
    "ms / training round",
    "evaluation (s)",
]
RATIO_HEADER = [
    "Dataset",
    "μ",
    "pairs",
    "Upcycled / FedProx at equal iterations [95% CI]",
    "less time",
    "at iteration",
    "at equal training rounds [95% CI]",
    "at rounds",
    "paper (equal iterations)",
    "paper (equal rounds)",
]


def time_rows(frame: pd.DataFrame) -> list[list[str]]:
    """Markdown rows of the time-per-cell table."""
    out = []
    for r in frame[frame["dataset"] != "all"].to_dict("records"):
        out.append(
            [
                r["label"],
                algorithm_label(r["algorithm"]),
                fmt_mu(r["mu"]),
                str(int(r["n_seeds"])),
                str(int(r["iterations"])),
                str(int(r["training_rounds"])),
                mean_std(r["training_s_mean"], r["training_s_std"], 3),
                fmt(r["s_per_iteration"] * 1e3, 2),
                fmt(r["s_per_training_round"] * 1e3, 2),
                fmt(r["eval_s_mean"], 3),
            ]
        )
    return out


def ratio_rows(frame: pd.DataFrame) -> list[list[str]]:
    """Markdown rows of the Upcycled-FL / FedProx ratio table."""
    out: list[list[str]] = []
    if "n_pairs" not in frame.columns:
        return out
    for r in frame[frame["n_pairs"].notna()].to_dict("records"):
        less = r["less_time_equal_iterations_pct"]
        out.append(
            [
                r["label"],
                fmt_mu(r["mu"]),
                str(int(r["n_pairs"])),
                _ratio_text(r, "equal_iterations"),
                "" if missing(less) else f"{fmt(less, 1)}%",
                "" if missing(r.get("ratio_at_iteration")) else str(int(r["ratio_at_iteration"])),
                _ratio_text(r, "equal_rounds"),
                "" if missing(r.get("ratio_at_rounds")) else str(int(r["ratio_at_rounds"])),
                f"{fmt(r['paper_ratio_equal_iterations'], 2)} (48% less)",
                fmt(r["paper_ratio_equal_rounds"], 2),
            ]
        )
    return out


TIME_NOTE = (
    "Training time: the summary's train_s + upcycle_s (evaluation and the making of the rounds' draws "
    "excluded), mean ± sample std over "
    "seeds. Ratios: per seed, Upcycled-FL's cumulative iteration time over FedProx's (metrics.csv "
    "cum_wall_s), at the same iteration and at the same number of training rounds; mean and 95% t "
    "interval over seeds. The paper's values: "
)


def write_time(runs: pd.DataFrame, out_prefix: str, provenance: str) -> pd.DataFrame:
    """Write ``<prefix>.csv`` and ``.md`` of training times and ratios; return the frame."""
    frame = time_frame(runs)
    write_csv(f"{out_prefix}.csv", frame, provenance)
    paper = paper_values("time")
    sources = "; ".join(
        f"{r['comparison'].replace('_', ' ')}: {r['paper_ratio']:g} ('{r['paper_text']}', {r['source']})"
        for r in paper.to_dict("records")
    )
    sections = [
        TIME_NOTE + sources + ".",
        "## Training time per algorithm and data set\n",
        markdown_table(TIME_HEADER, time_rows(frame)),
        "## Upcycled-FL / FedProx\n",
        markdown_table(RATIO_HEADER, ratio_rows(frame)),
    ]
    n_diverged = int(is_diverged(runs).sum())
    if n_diverged:
        sections.insert(1, f"{n_diverged} diverged run(s) left out (see diverged_what in runs.csv).")
    write_markdown(f"{out_prefix}.md", "Training time", sections, provenance)
    return frame


__all__ = ["write_time", "time_frame", "ratio_pairs", "time_to_iteration", "time_to_rounds"]


# ---------------------------------------------------------------------------------------------
# Training time


def time_claims(ctx: Context) -> list[dict[str, Any]]:
    """'48% less training time' at equal iterations and 'about the same time' at double iterations."""

    runs = ctx.of("time")
    paper = paper_values("time").set_index("comparison")
    exp = ctx.roles["time"]
    base_eq: dict[str, Any] = {
        "id": "time/equal_iterations",
        "section": "Training time",
        "claim": "Upcycled-FL needs less training time than FedProx at equal iterations (all Table 1 cells pooled)",
        "dataset": "all",
        "paper": (1 - float(paper.loc["equal_iterations", "paper_ratio"])) * 100,
        "unit": "% less time",
        "experiment": exp,
        "source": str(paper.loc["equal_iterations", "source"]),
    }
    base_rounds: dict[str, Any] = {
        "id": "time/equal_rounds",
        "section": "Training time",
        "claim": "About the same training time with double iterations (Upcycled-FL / FedProx at equal "
        "training rounds; all Table 1 cells pooled)",
        "dataset": "all",
        "paper": float(paper.loc["equal_rounds", "paper_ratio"]),
        "unit": "ratio",
        "experiment": exp,
        "source": str(paper.loc["equal_rounds", "source"]),
    }
    pairs = runs[runs["algorithm"].isin(["fedprox", "upcycled"])] if not runs.empty else runs
    if pairs.empty or set(pairs["algorithm"]) != {"fedprox", "upcycled"}:
        why = ctx.missing("time")
        return [not_measured(**base_eq, why=why), not_measured(**base_rounds, why=why)]
    frame = time_frame(pairs)
    allrow = frame[frame["dataset"] == "all"]
    if allrow.empty:
        why = "no FedProx / Upcycled-FL pair with the same data set and mu"
        return [not_measured(**base_eq, why=why), not_measured(**base_rounds, why=why)]
    r = allrow.iloc[0]
    n = int(r["n_pairs"])
    low, high = (1 - r["ratio_equal_iterations_ci_high"]) * 100, (1 - r["ratio_equal_iterations_ci_low"]) * 100
    verdict, why = verdict_gain(base_eq["paper"], low, high, n, half_unit("48"))
    out = [
        claim_row(
            **base_eq,
            ours=(1 - r["ratio_equal_iterations_mean"]) * 100,
            ci_low=low,
            ci_high=high,
            n_pairs=n,
            verdict=verdict,
            why=why,
        )
    ]
    low, high = r["ratio_equal_rounds_ci_low"], r["ratio_equal_rounds_ci_high"]
    verdict, why = verdict_equivalence(base_rounds["paper"], low, high, n)
    out.append(
        claim_row(
            **base_rounds,
            ours=r["ratio_equal_rounds_mean"],
            ci_low=low,
            ci_high=high,
            n_pairs=n,
            verdict=verdict,
            why=why,
        )
    )
    return out
