"""How large can the gain get: the Upcycled-FL minus FedProx gain over a grid of settings (experiment ``sensitivity``).

Each setting is one data set, one protocol (the paper's model or the authors' protocol, docs/differences.md) and one
value of every knob of :data:`KNOBS`; Upcycled-FL at 2T iterations is paired on seed with FedProx at T iterations
and the same mu, learning rate, local epochs and batch size (FedProx has no even-iteration coefficient: one FedProx
cell serves every coefficient). A setting's *base* is the value each knob takes in most settings of its data set and
protocol (the grid is built one knob at a time around one point); the knobs where a setting differs from it are the
ones it varies. Table, figure (gain against each knob) and the claims page's statement "in N settings no gain
exceeds X" are computed from the same frame.
"""

from __future__ import annotations

import math
from typing import Any, cast

import pandas as pd

from .collect import ReportError, converged, implementation
from .paper_numbers import dataset_label, dataset_order, table1_value
from .render import as_number, fmt, markdown_table, write_csv, write_markdown
from .stats import LEVEL, mean_interval

SPLITS = ("train", "test")
KNOBS = {
    "mu": "μ (Table 1's λ with it)",
    "lr": "learning rate",
    "coef": "even-iteration coefficient μ/(μ+λ)",
    "epochs": "local epochs E",
    "batch_size": "batch size",
    "fedprox_rounds": "iterations T (Upcycled-FL 2T)",
}
"""The grid's knobs: runs.csv column (``fedprox_rounds``: FedProx's ``rounds``) and label."""
SHORT = {"mu": "μ", "lr": "lr", "coef": "c", "epochs": "E", "batch_size": "B", "fedprox_rounds": "T"}
PROTOCOLS = {False: "paper's model", True: "authors' protocol"}
SHARED = ("dataset", "authors", "mu", "lr", "epochs", "batch_size")
"""What a FedProx cell and its Upcycled-FL cells share (besides the rounds, T and 2T)."""


def _key(value: Any) -> float:
    """A knob value as a float rounded for grouping (0.6993006993 and 0.69930069930 are one coefficient)."""
    return round(as_number(value), 9)


def paired_gain(up: pd.DataFrame, prox: pd.DataFrame, split: str) -> tuple[float, float, float, float, float, int]:
    """FedProx and Upcycled-FL means (%) of ``final_<split>_acc`` and the paired gain (pp) with its 95% interval."""
    column = f"final_{split}_acc"
    merged = up[["seed", column]].merge(prox[["seed", column]], on="seed", suffixes=("_up", "_prox"))
    ups, proxes = merged[f"{column}_up"].astype(float) * 100, merged[f"{column}_prox"].astype(float) * 100
    ci = mean_interval(list(ups - proxes), LEVEL)
    return float(proxes.mean()), float(ups.mean()), ci.mean, ci.low, ci.high, ci.n


def _cells(runs: pd.DataFrame) -> pd.DataFrame:
    runs = runs.assign(authors=implementation(runs), fedprox_rounds=runs["rounds"].astype(int))
    for col in ("mu", "lr", "coef", "epochs", "batch_size"):
        runs[col] = runs[col].map(_key)
    up = runs["algorithm"] == "upcycled"
    runs.loc[up, "fedprox_rounds"] = runs.loc[up, "rounds"].astype(int) // 2
    return runs


def base_setting(frame: pd.DataFrame) -> dict[str, float]:
    """The value each knob takes in most settings of ``frame`` (one data set and protocol)."""
    return {k: cast(float, frame[k].value_counts().idxmax()) for k in KNOBS}


def varied_knobs(row: dict[str, Any], base: dict[str, float]) -> list[str]:
    """The knobs where a setting differs from the base; a Table 1 mu row brings its own lambda, so its
    coefficient is part of the mu knob."""
    knobs = [k for k in KNOBS if not _same(row[k], base[k])]
    return [k for k in knobs if k != "coef"] if "mu" in knobs else knobs


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) < 1e-9


def gain_grid_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per data set x protocol x setting: knob values, the knobs varied from the base, FedProx and
    Upcycled-FL final accuracies (%) and the paired gains (pp, 95% t interval) on train and test."""
    runs = runs[runs["algorithm"].isin(["fedprox", "upcycled"])]
    if runs.empty:
        raise ReportError("sensitivity: no FedProx or Upcycled-FL runs")
    runs = _cells(converged(runs))
    prox_cells = dict(
        iter(runs[runs["algorithm"] == "fedprox"].groupby([*SHARED, "fedprox_rounds"]))
    )  # (key, rows) pairs
    rows = []
    for key, up in runs[runs["algorithm"] == "upcycled"].groupby([*SHARED, "fedprox_rounds", "coef"], sort=True):
        prox = prox_cells.get(key[:-1])
        if prox is None:
            continue
        row = dict(zip([*SHARED, "fedprox_rounds", "coef"], key, strict=True))
        row["protocol"] = PROTOCOLS[bool(row.pop("authors"))]
        row["upcycled_rounds"] = int(up["rounds"].iloc[0])
        for split in SPLITS:
            values = paired_gain(up, prox, split)
            row.update(
                dict(
                    zip(
                        [
                            f"fedprox_{split}",
                            f"upcycled_{split}",
                            f"gain_{split}",
                            f"gain_{split}_low",
                            f"gain_{split}_high",
                            "pairs",
                        ],
                        values,
                        strict=True,
                    )
                )
            )
        rows.append(row)
    if not rows:
        raise ReportError(
            "sensitivity: no Upcycled-FL cell has a FedProx cell at half its iterations with the same "
            "mu, lr, epochs, batch size and protocol"
        )
    frame = pd.DataFrame(rows)
    parts = []
    for _, cell in frame.groupby(["dataset", "protocol"], sort=False):
        base = base_setting(cell)
        varied = [varied_knobs(r, base) for r in cell.to_dict("records")]
        parts.append(cell.assign(varied=[",".join(v) for v in varied], base=[not v for v in varied]))
    frame = pd.concat(parts)
    order = {d: i for i, d in enumerate(dataset_order(frame["dataset"]))}
    frame = frame.assign(_d=frame["dataset"].map(order), _n=frame["varied"].str.count(",") + (frame["varied"] != ""))
    frame = frame.sort_values(["_d", "protocol", "_n", "varied", *KNOBS], kind="stable")
    return frame.drop(columns=["_d", "_n"]).reset_index(drop=True)


def setting_text(row: dict[str, Any]) -> str:
    """'base' or the varied knobs with their values ('lr 0.005, c 0.9')."""
    if row["base"]:
        return "base"
    return ", ".join(f"{SHORT[k]} {_value_text(k, row[k])}" for k in str(row["varied"]).split(","))


def _value_text(knob: str, value: float) -> str:
    return f"{value:.3g}" if knob == "coef" else f"{value:g}"


def _gain_cell(row: dict[str, Any], split: str) -> str:
    g, lo, hi = row[f"gain_{split}"], row[f"gain_{split}_low"], row[f"gain_{split}_high"]
    if math.isnan(lo):
        return fmt(g, signed=True)
    return f"{fmt(g, signed=True)} [{fmt(lo, signed=True)}, {fmt(hi, signed=True)}]"


HEADER = [
    "Data set",
    "Protocol",
    "Setting",
    "μ",
    "lr",
    "c",
    "E",
    "B",
    "T / 2T",
    "Pairs",
    "FedProx train (test) %",
    "Upcycled-FL train (test) %",
    "Gain train pp [95% CI]",
    "Gain test pp [95% CI]",
]


def grid_rows(frame: pd.DataFrame) -> list[list[str]]:
    rows = []
    for r in cast(list[dict[str, Any]], frame.to_dict("records")):
        rows.append(
            [
                dataset_label(r["dataset"]),
                r["protocol"],
                setting_text(r),
                f"{r['mu']:g}",
                f"{r['lr']:g}",
                f"{r['coef']:.3g}",
                f"{r['epochs']:g}",
                f"{r['batch_size']:g}",
                f"{int(r['fedprox_rounds'])} / {int(r['upcycled_rounds'])}",
                str(int(r["pairs"])),
                f"{fmt(r['fedprox_train'])} ({fmt(r['fedprox_test'])})",
                f"{fmt(r['upcycled_train'])} ({fmt(r['upcycled_test'])})",
                _gain_cell(r, "train"),
                _gain_cell(r, "test"),
            ]
        )
    return rows


def paper_gain(dataset: str, mu: float = 1.0) -> float:
    """The paper's Table 1 gain in final training accuracy (pp) on ``dataset`` at ``mu``; NaN when it has none."""
    up, prox = table1_value(dataset, "upcycled", mu), table1_value(dataset, "fedprox", mu)
    return up[0] - prox[0] if up and prox else math.nan


def _where(r: dict[str, Any]) -> str:
    return f"{dataset_label(r['dataset'])}, {r['protocol']}, {setting_text(r)}"


def largest_gains(frame: pd.DataFrame) -> list[str]:
    """The statements of the claims page: the largest mean gain in final training accuracy over all settings
    ("in N settings no gain exceeds X"), the largest upper interval end, and per data set its largest gain beside
    the paper's Table 1 gain."""
    top = cast(dict[str, Any], frame.loc[cast(int, frame["gain_train"].idxmax())].to_dict())
    reach = cast(dict[str, Any], frame.loc[cast(int, frame["gain_train_high"].idxmax())].to_dict())
    seeds = sorted({int(p) for p in frame["pairs"]})
    lines = [
        f"- In {len(frame)} settings ({frame['dataset'].nunique()} data sets x {frame['protocol'].nunique()} "
        f"protocols x the grid; {'-'.join(map(str, seeds[:: max(len(seeds) - 1, 1)]))} seed pairs each) no mean "
        f"gain in final training accuracy exceeds {fmt(top['gain_train'], signed=True)} pp: "
        f"{_gain_cell(top, 'train')} pp on {_where(top)}. The highest upper end of a 95% interval is "
        f"{fmt(reach['gain_train_high'], signed=True)} pp ({_where(reach)})."
    ]
    for dataset in dict.fromkeys(frame["dataset"]):
        cell = frame[frame["dataset"] == dataset]
        best = cell.loc[cell["gain_train"].idxmax()].to_dict()
        paper = paper_gain(dataset)
        lines.append(
            f"- {dataset_label(dataset)}: largest gain {_gain_cell(best, 'train')} pp ({best['protocol']}, "
            f"{setting_text(best)}; FedProx {fmt(best['fedprox_train'])}%) in {len(cell)} settings"
            + ("" if math.isnan(paper) else f"; the paper's Table 1 gain at μ = 1: {fmt(paper, signed=True)} pp")
            + "."
        )
    return lines


CAPTION = (
    "The Upcycled-FL minus FedProx gain over a grid of settings (experiment sensitivity): the paper's "
    "synthetic sets, 90% stragglers, both protocols (the paper's model with λ = 0.43; the authors' protocol: "
    "their softmax before the cross-entropy, their scalar step 0.7), one knob at a time around the base (μ 1, "
    "lr 0.05, c = μ/(μ+λ) 0.699 / 0.7, E 20, batch 32, FedProx T = 80 and Upcycled-FL 2T = 160 iterations), "
    "the authors' tuning comment (lr 0.005, c 0.9) crossed with c 1 and lr 0.0125 and with their code's E 10, "
    "and on Synthetic(1,1) Table 1's other μ rows (λ 0.04, 0.12, 0.21 with μ 0.1, 0.3, 0.5; the authors' "
    "protocol keeps step 0.7). Setting: the knobs that differ from the base. Final accuracy in %, mean over "
    "seeds; gain in percentage points per seed (same seed, same devices and stragglers), mean and 95% t "
    "interval. Diverged runs are left out (Pairs counts the rest)."
)


def section(frame: pd.DataFrame) -> list[str]:
    """Markdown parts of the statement "how large can the gain get" (claims page and the table's own page)."""
    return [
        "## How large can the gain get\n",
        "Measured by the sensitivity experiment (results/tables/sensitivity.md, results/figures/sensitivity.png): "
        "Upcycled-FL 2T against FedProx T iterations, paired on seed, over learning rate, even-iteration "
        "coefficient, local epochs, batch size, iterations and Table 1's μ rows, under both protocols. No "
        "verdict: the paper states no such range.\n",
        "\n".join(largest_gains(frame)),
    ]


def plot_gain_grid(frame: pd.DataFrame):
    """One panel per knob: the gain in final training accuracy (95% interval) against the knob's value, over the
    base and the settings that vary that knob alone; colour = data set, line style = protocol."""
    from .figures import grid
    from .theme import colour_palette, small_text

    knobs = [k for k in KNOBS if (frame["varied"] == k).any()]
    if not knobs:
        raise ReportError("sensitivity: no setting varies a single knob")
    cols = min(3, len(knobs))
    fig, axes = grid(math.ceil(len(knobs) / cols), cols)
    datasets = list(dict.fromkeys(frame["dataset"]))
    colours = dict(zip(datasets, colour_palette("colorblind", len(datasets)), strict=True))
    styles = {PROTOCOLS[False]: ("-", "o"), PROTOCOLS[True]: ("--", "s")}
    points = []
    labelled: set[tuple[str, str]] = set()
    lines = list(frame.groupby(["dataset", "protocol"], sort=False))
    for i, knob in enumerate(knobs):
        ax = axes[i // cols][i % cols]
        log = knob in ("lr", "epochs", "batch_size", "fedprox_rounds")
        # one tick per value (the paper's c 0.699 and the authors' 0.7 share one)
        values = sorted(
            {
                round(float(v), 2) if knob == "coef" else float(v)
                for v in frame.loc[(frame["varied"] == knob) | frame["base"], knob]
            }
        )
        span = (values[-1] - values[0]) or 1.0
        for k, (key, cell) in enumerate(lines):
            dataset, protocol = cast(tuple[str, str], key)
            line = cell[(cell["varied"] == knob) | cell["base"]].sort_values(knob)
            if len(line) < 2:
                continue
            style, marker = styles[protocol]
            # the lines side by side around each value, so that their intervals do not hide one another
            offset = (k - (len(lines) - 1) / 2) / max(len(lines), 1)
            x = line[knob] * 2 ** (0.12 * offset) if log else line[knob] + 0.04 * span * offset
            err = [line["gain_train"] - line["gain_train_low"], line["gain_train_high"] - line["gain_train"]]
            ax.errorbar(
                x,
                line["gain_train"],
                yerr=err,
                color=colours[dataset],
                linestyle=style,
                marker=marker,
                markersize=4,
                capsize=2,
                linewidth=1,
                label=None if (dataset, protocol) in labelled else f"{dataset_label(dataset)}, {protocol}",
            )
            labelled.add((dataset, protocol))
            points += [
                {
                    "knob": knob,
                    "dataset": dataset,
                    "protocol": protocol,
                    "value": r[knob],
                    "gain_train": r["gain_train"],
                    "gain_train_low": r["gain_train_low"],
                    "gain_train_high": r["gain_train_high"],
                    "pairs": r["pairs"],
                }
                for r in line.to_dict("records")
            ]
        ax.axhline(0, color="grey", linewidth=0.8)
        if log:
            ax.set_xscale("log", base=2)
            ax.minorticks_off()
        ax.set_xticks(values, [_value_text(knob, v) for v in values], fontsize=small_text())
        ax.set_xlabel(KNOBS[knob])
        ax.set_ylabel("gain, final train acc (pp)")
    for j in range(len(knobs), len(axes) * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.tight_layout()
    found = {
        label: handle
        for ax in (a for row in axes for a in row)
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)
    }
    labels = [f"{dataset_label(str(d))}, {p}" for (d, p), _ in lines if f"{dataset_label(str(d))}, {p}" in found]
    fig.legend(
        [found[label] for label in labels],
        labels,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        frameon=True,
        fontsize=small_text(),
    )
    return fig, pd.DataFrame(points)


def write_gain_grid(runs: pd.DataFrame, table_prefix: str, figure_prefix: str, provenance: str) -> pd.DataFrame:
    """``<table_prefix>.csv``/``.md``/``.html`` and ``<figure_prefix>.png``/``.pdf``/``.csv``; return the frame."""
    from .figures import save_figure

    frame = gain_grid_frame(runs)
    write_csv(f"{table_prefix}.csv", frame, provenance)
    write_markdown(
        f"{table_prefix}.md",
        "How large can the gain get: the gain over a grid of settings",
        [*section(frame), "## The grid\n", CAPTION, markdown_table(HEADER, grid_rows(frame))],
        provenance,
    )
    fig, points = plot_gain_grid(frame)
    save_figure(fig, figure_prefix)
    write_csv(f"{figure_prefix}.csv", points, provenance)
    return frame


def claims_section(runs: pd.DataFrame) -> list[str]:
    """The claims page's section from the runs of the sensitivity experiment in ``runs``; empty when there are
    none."""
    if runs.empty:
        return []
    return section(gain_grid_frame(runs))


def claims_page_section(ctx) -> list[str]:
    """The claims page's section on the gain grid (:func:`claims_section`) from the context's ``sensitivity`` runs."""
    return claims_section(ctx.of("sensitivity"))
