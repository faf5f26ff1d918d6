"""The privacy-accuracy trade-off figure (Section 6, Figure 3 style): final accuracy against epsilon-bar, one point
per noise level, from the settings of :mod:`upfl.report.privacy_table`."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..names import ACCOUNTANTS as NAMED_ACCOUNTANTS
from ..names import PRIVACY_MECHANISMS, accountants_of
from .collect import ReportError, converged, require_converged
from .paper_numbers import algorithm_label, dataset_label, dataset_order, metric_label
from .privacy_table import MECHANISMS, iter_settings, setting_row
from .render import as_number, write_csv
from .theme import wrapped_figure_text

FIGURE_ACCOUNTANTS = {mech: accountants_of(mech, drawn=True) for mech in PRIVACY_MECHANISMS}
"""Epsilons drawn per mechanism: the first filled with solid lines, the second hollow and dashed."""
FIGURE_METRICS = ("test_acc", "train_acc")
TRADEOFF_NOTE = (
    "Points: noise levels (mean over seeds; error bars: min-max over seeds) at ε̄, the mean over "
    "devices; each is joined by a thin line to a triangle at the worst device's ε (max over devices and "
    "seeds; which device: the CSV's worst_device). The guarantee is per device: the worst device's ε "
    "(triangle) is the one that holds for every device, ε̄ is no device's guarantee. Output "
    "perturbation: filled markers, solid lines: the sound accountant (sensitivity 2τ), the guarantee; "
    "hollow, dashed: the paper's formula (Theorem C.1), for comparison only. Objective perturbation: "
    "Theorem C.2 (δ = 0, exact minimiser assumed). Dotted: non-private. Training accuracy is computed "
    "on the private training data, outside the guarantee."
)
WORST_LABELS = {name: f"{a.short} ε" for name, a in NAMED_ACCOUNTANTS.items() if a.short}
SHARED_NOISE_FIGURE_NOTE = (
    " The noise levels of a seed share their noise draws (seed-keyed noise): each point's ε "
    "holds for that run alone, the sweep together has no guarantee."
)


def tradeoff_data(runs: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Rows ``point`` (setting x accountant x metric: x = epsilon-bar, x_worst = the worst device's epsilon (max over
    devices and seeds) and worst_device = which device, mean/min/max over seeds of the final metric) and
    ``nonprivate_reference`` (mechanism 'none', x missing)."""
    rows = []
    for dataset, mech, alg, noise, cell in iter_settings(runs):
        s = setting_row(dataset, mech, alg, noise, cell)
        cell = converged(cell)
        if cell.empty:
            continue
        accs = FIGURE_ACCOUNTANTS.get(mech, ("",))
        for acc in accs:
            for metric in metrics:
                v = cell[f"final_{metric}"].astype(float)
                rows.append(
                    {
                        "panel": "point" if mech != "none" else "nonprivate_reference",
                        "dataset": dataset,
                        "mechanism": mech,
                        "algorithm": alg,
                        "line": algorithm_label(alg),
                        "noise": noise,
                        "sigma": s["sigma"],
                        "tau": s["tau"],
                        "alpha": s["alpha"],
                        "accountant": acc,
                        "metric": metric,
                        "x": as_number(s.get(f"eps_{acc}")) if acc else math.nan,
                        "x_worst": as_number(s.get(f"epsmax_{acc}")) if acc else math.nan,
                        "worst_device": s.get(f"worstdev_{acc}") if acc else None,
                        "mean": float(v.mean()),
                        "min": float(v.min()),
                        "max": float(v.max()),
                        "n_seeds": len(v),
                        "iteration": int(cell["final_iteration"].iloc[0]),
                        "guarantee": s.get("guarantee", ""),
                    }
                )
    data = pd.DataFrame(rows)
    if data.empty or not (data["panel"] == "point").any():
        raise ReportError("privacy_tradeoff: the selected runs have no private runs (mechanism output or objective)")
    return data


def _columns(data: pd.DataFrame) -> list[tuple[str, str]]:
    points = data[data["panel"] == "point"]
    order = dataset_order(points["dataset"])
    pairs = {(m, d) for m, d in zip(points["mechanism"], points["dataset"], strict=True)}
    return sorted(pairs, key=lambda p: (MECHANISMS.index(p[0]) if p[0] in MECHANISMS else 9, order.index(p[1])))


LEGEND_LINE = 24
"""Characters per line of a legend entry of the trade-off figure."""


def plot_tradeoff(data: pd.DataFrame, metrics: Sequence[str], title: str | None, shared_noise: bool = True):
    """Rows: metrics; columns: mechanism x data set; per algorithm a line through its noise levels."""
    from .figures import ALGORITHM_COLOURS, OTHER_COLOUR, grid, wrapped_panels
    from .theme import small_text

    cols = _columns(data)
    n_rows, n_cols, places = wrapped_panels(len(cols), len(metrics))
    fig, axes = grid(n_rows, n_cols)
    cb = [OTHER_COLOUR] * 5
    colours = {a: ALGORITHM_COLOURS[algorithm_label(a)] for a in ("fedavg", "fedprox", "upcycled")}
    for j, (mech, dataset) in enumerate(cols):
        for i, metric in enumerate(metrics):
            ax = axes[places[j][0] + i][places[j][1]]
            d = data[(data["dataset"] == dataset) & (data["metric"] == metric)]
            pts = d[(d["panel"] == "point") & (d["mechanism"] == mech)]
            drawn = False
            for alg in [a for a in ("fedavg", "fedprox", "upcycled") if a in set(pts["algorithm"])] + sorted(
                set(pts["algorithm"]) - {"fedavg", "fedprox", "upcycled"}
            ):
                colour = colours.get(alg, cb[4])
                for k, acc in enumerate(FIGURE_ACCOUNTANTS[mech]):
                    p = pts[
                        (pts["algorithm"] == alg) & (pts["accountant"] == acc) & pts["x"].notna() & (pts["x"] > 0)
                    ].sort_values("x")
                    if p.empty:
                        continue
                    drawn = True
                    short = f"{NAMED_ACCOUNTANTS[acc].short} ε̄"
                    ax.errorbar(
                        p["x"],
                        p["mean"],
                        yerr=[p["mean"] - p["min"], p["max"] - p["mean"]],
                        color=colour,
                        marker="o" if alg != "upcycled" else "s",
                        markersize=5,
                        linestyle="-" if k == 0 else "--",
                        linewidth=1.3,
                        capsize=2,
                        markerfacecolor=colour if k == 0 else "none",
                        markeredgecolor=colour,
                        label=f"{algorithm_label(alg)}, {short}" if i == 0 else None,
                    )
                    worst = p[p["x_worst"].notna() & (p["x_worst"] > 0)]
                    for x, x_worst, y in zip(worst["x"], worst["x_worst"], worst["mean"], strict=True):
                        ax.plot(
                            [x, x_worst],
                            [y, y],
                            color=colour,
                            linewidth=0.6,
                            linestyle="-" if k == 0 else "--",
                            alpha=0.7,
                        )
                    if not worst.empty:
                        ax.plot(
                            worst["x_worst"],
                            worst["mean"],
                            linestyle="none",
                            marker=">",
                            markersize=6,
                            color=colour,
                            markerfacecolor=colour if k == 0 else "none",
                            markeredgecolor=colour,
                            label=f"{algorithm_label(alg)}, worst device's {WORST_LABELS[acc]}" if i == 0 else None,
                        )
            for r in d[d["panel"] == "nonprivate_reference"].to_dict("records"):
                ax.axhline(
                    r["mean"],
                    color=colours.get(r["algorithm"], cb[4]),
                    linestyle=":",
                    linewidth=1.2,
                    label=f"{algorithm_label(r['algorithm'])}, non-private" if i == 0 else None,
                )
            if drawn:
                log_axis(ax)
            else:
                guarantee = "; ".join(sorted({g for g in pts["guarantee"] if g})) or "no epsilon"
                ax.text(0.5, 0.5, guarantee, ha="center", va="center", transform=ax.transAxes, fontsize=small_text())
            ax.set_ylabel(f"Final {metric_label(metric).lower()}")
            ax.set_xlabel("ε̄ (mean over devices); ▶ worst device" if i == len(metrics) - 1 else "")
            if i == 0:
                ax.set_title(f"{dataset_label(dataset)}, {mech} perturbation")
    used = {(places[j][0] + i, places[j][1]) for j in range(len(cols)) for i in range(len(metrics))}
    for r in range(n_rows):
        for c in range(n_cols):
            axes[r][c].set_visible((r, c) in used)
    if title:
        fig.suptitle(title)
    wrapped_figure_text(
        fig,
        0.5,
        -0.01,
        TRADEOFF_NOTE + (SHARED_NOISE_FIGURE_NOTE if shared_noise else ""),
        ha="center",
        va="top",
        fontsize=small_text(),
    )
    fig.tight_layout()
    legend: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(
        list(legend.values()),
        # in lines of at most 24 characters: the legend beside four panel columns keeps the figure narrow enough
        # for its text to show at 9 px in the report's viewer
        [textwrap.fill(label, LEGEND_LINE) for label in legend],
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        frameon=True,
        fontsize=small_text(),
    )
    return fig


def log_axis(ax) -> None:
    """Log x axis with plain-number labels at 1, 2, 5 x 10^k and unlabelled minor ticks (no overlapping labels)."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    low, high = ax.get_xlim()
    subs = (1.0, 2.0, 5.0) if high / low < 1e3 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    if high / low < 1e3:
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def privacy_tradeoff_figure(
    runs: pd.DataFrame,
    out_prefix: str,
    metrics: Sequence[str] = FIGURE_METRICS,
    title: str | None = None,
    provenance: str | None = None,
) -> pd.DataFrame:
    """Final accuracy against epsilon-bar (log x) for every algorithm and noise level; PNG, PDF and CSV."""
    from .figures import ALGORITHM_COLOURS, OTHER_COLOUR, csv_colour, save_figure, seed_keyed_runs

    runs = require_converged(runs, "privacy_tradeoff")
    data = tradeoff_data(runs, metrics)
    fig = plot_tradeoff(data, metrics, title, shared_noise=seed_keyed_runs(runs))
    save_figure(fig, out_prefix)
    data["colour"] = [csv_colour(ALGORITHM_COLOURS.get(algorithm_label(a), OTHER_COLOUR)) for a in data["algorithm"]]
    write_csv(f"{out_prefix}.csv", data, provenance)
    return data


__all__ = ["tradeoff_data", "plot_tradeoff", "privacy_tradeoff_figure", "FIGURE_ACCOUNTANTS"]
