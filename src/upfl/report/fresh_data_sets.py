"""Claims across data draws: the Upcycled-FL minus FedProx gain on the paper's draw beside our fresh draws.

The draws experiment runs Table 1's synthetic grid on fresh generator draws (``data_seed`` 0-4) of each
generator setting; each draw is its own data set (``synthetic_1_1_draw3``). A run's generator setting and
draw are read from its data folder's ``meta.json`` (``name``, ``data_seed``, written by ``upfl synth``), or,
without one, from a ``<setting>_draw<k>`` data set name. Each draw's gain is paired on seed (same seed, same
device draws) with a 95% t interval, exactly as Table 1's claim columns (:func:`upfl.report.tables.claim_columns`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pandas as pd

from .cells import missing
from .collect import ReportError
from .paper_numbers import dataset_label, dataset_order, table1_value
from .tables import ACC, table1_frame

DRAW_NAME = re.compile(r"^(?P<setting>.+)_draw(?P<draw>\d+)$")


def draw_of(dataset: str, origin: Mapping[Any, Any]) -> tuple[str, int]:
    """(generator setting, data seed) of a draw data set: its runs' ``data_setting`` and ``data_seed`` (what
    :func:`upfl.report.collect.data_origin` read from its meta.json, written by ``upfl synth``); for a meta.json of an
    earlier form, without ``setting``, the setting it names in ``name``; else its ``_draw<k>`` name. ``origin``: the
    runs' ``data_path``, ``data_setting`` and ``data_seed`` (any may be absent)."""
    if not missing(origin.get("data_setting")) and not missing(origin.get("data_seed")):
        return str(origin["data_setting"]), int(float(origin["data_seed"]))
    data_path = origin.get("data_path")
    meta = Path(str(data_path)) / "meta.json" if isinstance(data_path, str) and data_path else None
    if meta is not None and meta.is_file():
        try:
            doc = json.loads(meta.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ReportError(f"{meta}: not valid JSON: {e}") from None
        if "name" in doc and "data_seed" in doc:
            return str(doc["name"]), int(doc["data_seed"])
    m = DRAW_NAME.match(dataset)
    if not m:
        raise ReportError(
            f"draws: data set {dataset!r} has no meta.json with 'setting' and 'data_seed' and is not "
            f"named <setting>_draw<k>; cannot tell its generator setting"
        )
    return m.group("setting"), int(m.group("draw"))


def draw_gains(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per generator setting x draw x mu x metric: the paired Upcycled-FL minus FedProx gain.

    Columns: setting, dataset, draw (data seed), mu, metric, n_pairs, gain_mean, gain_ci_low, gain_ci_high.
    """
    if runs.empty:
        raise ReportError("draws: no runs")
    frame = table1_frame(runs)
    if "n_pairs" not in frame.columns:
        raise ReportError("draws: no FedProx / Upcycled-FL pairs with the same data set and mu")
    columns = [c for c in ("data_path", "data_setting", "data_seed") if c in runs.columns]
    origins = runs.groupby("dataset")[columns].first().to_dict("index") if columns else {}
    rows = []
    for r in frame[(frame["algorithm"] == "upcycled") & frame["n_pairs"].notna()].to_dict("records"):
        setting, draw = draw_of(r["dataset"], origins.get(r["dataset"], {}))
        for key in ACC:
            rows.append(
                {
                    "setting": setting,
                    "label": dataset_label(setting),
                    "dataset": r["dataset"],
                    "draw": draw,
                    "mu": r["mu"],
                    "metric": key,
                    "n_pairs": int(r["n_pairs"]),
                    "gain_mean": r[f"{key}_gain_mean"],
                    "gain_ci_low": r[f"{key}_gain_ci_low"],
                    "gain_ci_high": r[f"{key}_gain_ci_high"],
                }
            )
    if not rows:
        raise ReportError("draws: no FedProx / Upcycled-FL pairs with the same data set and mu")
    out = pd.DataFrame(rows)
    order = {s: i for i, s in enumerate(dataset_order(out["setting"]))}
    out["_o"] = out["setting"].map(order)
    out["_m"] = out["metric"].map(ACC.index)
    return out.sort_values(["_o", "mu", "_m", "draw"]).drop(columns=["_o", "_m"]).reset_index(drop=True)


def spread(gains: pd.DataFrame, setting: str, mu: float, metric: str) -> dict[str, Any] | None:
    """The spread of one claim across draws: number of draws, min and max of their mean gains, and how many
    draws' intervals lie above 0 and below 0. None when the setting has no draws at this mu."""
    sub = gains[
        (gains["setting"] == setting)
        & (gains["metric"] == metric)
        & ((gains["mu"].astype(float) - float(mu)).abs() < 1e-12)
    ]
    if sub.empty:
        return None
    means = sub["gain_mean"].astype(float)
    return {
        "draws_n": len(sub),
        "draws_min": float(means.min()),
        "draws_max": float(means.max()),
        "draws_above_zero": int((sub["gain_ci_low"].astype(float) > 0).sum()),
        "draws_below_zero": int((sub["gain_ci_high"].astype(float) < 0).sum()),
        "draws_pairs": " ".join(str(int(n)) for n in sub["n_pairs"]),
    }


def paper_gain(setting: str, mu: float, metric: str) -> float:
    """The paper's Table 1 gain (Upcycled-FL minus FedProx, percentage points) for a setting and mu, or NaN."""
    up, prox = table1_value(setting, "upcycled", mu), table1_value(setting, "fedprox", mu)
    if up is None or prox is None:
        return math.nan
    i = ACC.index(metric)
    return up[i] - prox[i]


# ---------------------------------------------------------------------------------------------
# The table and the figure


def draws_frame(draw_runs: pd.DataFrame, reference_runs: pd.DataFrame | None) -> pd.DataFrame:
    """Rows of the draws table: per setting x mu x metric, the paper's gain, ours on the paper's data (the
    reference experiment's runs of the same data set name) with its interval, then one row per draw."""
    gains = draw_gains(draw_runs)
    ref = None
    if reference_runs is not None and not reference_runs.empty:
        frame = table1_frame(reference_runs)
        if "n_pairs" in frame.columns:
            ref = frame[(frame["algorithm"] == "upcycled") & frame["n_pairs"].notna()]
    rows = []
    for key, sub in gains.groupby(["setting", "mu", "metric"], sort=False):
        setting, mu, metric = cast(tuple[str, float, str], key)
        base = {
            "setting": setting,
            "label": dataset_label(setting),
            "mu": mu,
            "metric": metric,
            "paper_gain": paper_gain(setting, mu, metric),
        }
        hit = (
            ref[(ref["dataset"] == setting) & ((ref["mu"].astype(float) - float(mu)).abs() < 1e-12)]
            if ref is not None
            else pd.DataFrame()
        )
        if not hit.empty:
            r = hit.iloc[0]
            rows.append(
                {
                    **base,
                    "source": "paper's draw",
                    "dataset": setting,
                    "draw": math.nan,
                    "n_pairs": int(r["n_pairs"]),
                    "gain_mean": r[f"{metric}_gain_mean"],
                    "gain_ci_low": r[f"{metric}_gain_ci_low"],
                    "gain_ci_high": r[f"{metric}_gain_ci_high"],
                }
            )
        for g in sub.to_dict("records"):
            rows.append(
                {
                    **base,
                    "source": "fresh draw",
                    "dataset": g["dataset"],
                    "draw": g["draw"],
                    "n_pairs": g["n_pairs"],
                    "gain_mean": g["gain_mean"],
                    "gain_ci_low": g["gain_ci_low"],
                    "gain_ci_high": g["gain_ci_high"],
                }
            )
    return pd.DataFrame(rows)


def _gain_text(mean: Any, low: Any, high: Any) -> str:
    from .render import fmt

    if pd.isna(mean):
        return ""
    ci = "" if pd.isna(low) else f" [{fmt(low, signed=True)}, {fmt(high, signed=True)}]"
    return f"{fmt(mean, signed=True)}{ci}"


DRAWS_HEADER = [
    "Data set",
    "μ",
    "Metric",
    "paper (its draw)",
    "ours on the paper's draw [95% CI]",
    "our draws: mean gain [95% CI] per draw",
    "draws above 0 / below 0",
]

DRAWS_CAPTION = (
    "Upcycled-FL minus FedProx, final accuracy in percentage points, per seed (same seed, same device "
    "draws), mean and 95% t interval. 'paper': the paper's Table 1 difference on the draw it used; "
    "'ours on the paper's draw': the same difference from our runs on that data set (experiment "
    "table1); then each fresh draw of the generator (data_seed k) with its own interval. A claim that "
    "holds on the paper's draw but not on most fresh draws depends on that draw."
)


def draws_rows(frame: pd.DataFrame) -> list[list[str]]:
    from .render import fmt, fmt_mu

    lines = []
    for (setting, mu, metric), sub in frame.groupby(["setting", "mu", "metric"], sort=False):
        ref = sub[sub["source"] == "paper's draw"]
        draws = sub[sub["source"] == "fresh draw"].sort_values("draw")
        per_draw = "; ".join(
            f"{int(d['draw'])}: {_gain_text(d['gain_mean'], d['gain_ci_low'], d['gain_ci_high'])}"
            for d in draws.to_dict("records")
        )
        above = int((draws["gain_ci_low"].astype(float) > 0).sum())
        below = int((draws["gain_ci_high"].astype(float) < 0).sum())
        lines.append(
            [
                dataset_label(str(setting)),
                fmt_mu(mu),
                "train" if metric == "train_acc" else "test",
                fmt(sub["paper_gain"].iloc[0], signed=True),
                _gain_text(*ref.iloc[0][["gain_mean", "gain_ci_low", "gain_ci_high"]])
                if not ref.empty
                else "not measured",
                per_draw,
                f"{above} / {below} of {len(draws)}",
            ]
        )
    return lines


def plot_draws(frame: pd.DataFrame, title: str | None = None):
    """One panel per setting (columns) and metric (rows): x = mu; the paper's gain (star), ours on the paper's
    draw (black, 95% interval), each fresh draw (coloured, 95% interval, side by side); :data:`DRAWS_CAPTION` below
    the panels."""
    from .figures import figure_note, grid
    from .theme import colour_palette, small_text

    settings = list(dict.fromkeys(frame["setting"]))
    metrics = [m for m in ACC if m in set(frame["metric"])]
    fig, axes = grid(len(metrics), len(settings))
    draws = sorted({int(d) for d in frame["draw"].dropna()})
    colours = dict(zip(draws, colour_palette("colorblind", max(len(draws), 1)), strict=False))
    width = 0.6 / max(len(draws) + 1, 1)
    for j, setting in enumerate(settings):
        for i, metric in enumerate(metrics):
            ax = axes[i][j]
            sub = frame[(frame["setting"] == setting) & (frame["metric"] == metric)]
            mus = sorted({float(m) for m in sub["mu"]})
            for k, mu in enumerate(mus):
                at = sub[(sub["mu"].astype(float) - mu).abs() < 1e-12]
                ax.plot(
                    [k - 0.4],
                    [at["paper_gain"].iloc[0]],
                    marker="*",
                    color="black",
                    markersize=10,
                    linestyle="",
                    label="paper (its draw)" if k == 0 and i == 0 and j == 0 else None,
                )
                for r in at.to_dict("records"):
                    off = -0.3 if r["source"] == "paper's draw" else -0.3 + width * (draws.index(int(r["draw"])) + 1)
                    colour = "black" if r["source"] == "paper's draw" else colours[int(r["draw"])]
                    err = (
                        None
                        if pd.isna(r["gain_ci_low"])
                        else [[r["gain_mean"] - r["gain_ci_low"]], [r["gain_ci_high"] - r["gain_mean"]]]
                    )
                    label = None
                    if k == 0 and i == 0 and j == 0:
                        label = "ours, paper's draw" if r["source"] == "paper's draw" else f"draw {int(r['draw'])}"
                    ax.errorbar(
                        [k + off],
                        [r["gain_mean"]],
                        yerr=err,
                        color=colour,
                        marker="o",
                        markersize=4,
                        capsize=2,
                        linestyle="",
                        label=label,
                    )
            ax.axhline(0, color="grey", linewidth=0.8)
            ax.set_xticks(range(len(mus)), [f"μ = {m:g}" for m in mus])
            ax.set_ylabel(f"Upcycled − FedProx,\n{'train' if metric == 'train_acc' else 'test'} acc (pp)")
            if i == 0:
                ax.set_title(dataset_label(setting))
    if title:
        fig.suptitle(title)
    figure_note(fig, DRAWS_CAPTION)
    fig.tight_layout()
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=True, fontsize=small_text())
    return fig


def write_draws(
    draw_runs: pd.DataFrame, reference_runs: pd.DataFrame | None, table_prefix: str, figure_prefix: str, provenance: str
) -> pd.DataFrame:
    """``<table_prefix>.csv``/``.md`` and ``<figure_prefix>.png``/``.pdf``/``.csv``; return the frame."""
    from .figures import figure_title, save_figure
    from .render import markdown_table, write_csv, write_markdown

    frame = draws_frame(draw_runs, reference_runs)
    write_csv(f"{table_prefix}.csv", frame, provenance)
    write_markdown(
        f"{table_prefix}.md",
        "Claims across data draws: the Upcycled-FL gain on the paper's draw and on fresh draws",
        [DRAWS_CAPTION, markdown_table(DRAWS_HEADER, draws_rows(frame))],
        provenance,
    )
    save_figure(plot_draws(frame, figure_title(Path(figure_prefix).name)), figure_prefix)
    write_csv(f"{figure_prefix}.csv", frame, provenance)
    return frame
