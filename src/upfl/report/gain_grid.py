"""How large can the gain get: the Upcycled-FL minus FedProx gain over a grid of settings (experiment ``sensitivity``).

Each setting is one data set, one protocol (the paper's model or the authors' protocol, docs/differences.md) and one
value of every knob of :data:`KNOBS`; Upcycled-FL at 2T iterations is paired on seed with FedProx at T iterations
and the same mu, learning rate, local epochs and batch size (FedProx has no even-iteration coefficient: one FedProx
cell serves every coefficient). A setting's *base* is the value each knob takes in most settings of its data set and
protocol (the grid is built one knob at a time around one point); the knobs where a setting differs from it are the
ones it varies. Table, figure (gain against each knob) and the claims page's statement "in N settings no gain
exceeds X" are computed from the same frame.

Each data set's best setting is chosen on the experiment's seeds; its gain there is the largest of many noisy means,
biased upward by that choice. The grid run again on other seeds (experiment ``sensitivity_held_out``, seeds 10-19,
the output's ``reference``) measures the chosen setting on seeds that chose nothing (:func:`held_out_rows`), and
:func:`bracket` says whether each knob of the best setting was tried on both sides of its value.
"""

from __future__ import annotations

import math
from typing import Any, cast

import pandas as pd

from .collect import ReportError, converged, implementation
from .paper_numbers import dataset_label, dataset_order, table1_value
from .render import as_number, fmt, markdown_table, seeds_text, write_csv, write_markdown
from .stats import LEVEL, mean_interval

HELD_OUT_ROLE = "sensitivity_held_out"
"""The claims page's role (config ``claims``) of the held-out runs: the grid on seeds that chose no setting."""

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
RANGE = {"coef": (0.0, 1.0)}
"""Where a knob's values end by definition: c = μ/(μ+λ) lies in (0, 1] for λ >= 0 (c = 1 is λ = 0, no proximal pull
in Eq. (5)), so a best c of 1 is bracketed by its range, not by the grid."""


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
    """The setting of ``frame`` (one data set and protocol) that most others differ from in one knob alone: the
    centre the grid is built around one knob at a time (a grid gone on past its edges around another point has
    more settings there, but fewer of them one knob away from it). Ties go to the setting whose values most
    settings share."""
    rows = frame[list(KNOBS)].astype(float).to_dict("records")

    def differing(a: dict[str, float], b: dict[str, float]) -> int:
        return sum(not _same(a[k], b[k]) for k in KNOBS)

    def shared(a: dict[str, float]) -> int:
        return sum(int((frame[k].astype(float) - a[k]).abs().lt(1e-9).sum()) for k in KNOBS if not math.isnan(a[k]))

    best = max(rows, key=lambda a: (sum(differing(a, b) == 1 for b in rows), shared(a)))
    return {k: best[k] for k in KNOBS}


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
        row["seeds"] = seeds_text(set(up["seed"].astype(int)) & set(prox["seed"].astype(int)))
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
    "Held-out gain train pp [95% CI]",
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
                _held_out_cell(r),
            ]
        )
    return rows


def _held_out_cell(r: dict[str, Any]) -> str:
    if math.isnan(r.get("held_out_gain_train", math.nan)):
        return ""
    held = {"gain_train": r["held_out_gain_train"]}
    held.update(gain_train_low=r["held_out_gain_train_low"], gain_train_high=r["held_out_gain_train_high"])
    return f"{_gain_cell(held, 'train')} ({r['held_out_seeds']})"


def best_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Each data set's setting with the largest mean gain in final training accuracy (the data sets in frame order)."""
    rows = []
    for dataset in dict.fromkeys(frame["dataset"]):
        cell = frame[frame["dataset"] == dataset]
        rows.append(cast(dict[str, Any], cell.loc[cast(int, cell["gain_train"].idxmax())].to_dict()))
    return rows


def same_setting(frame: pd.DataFrame, row: dict[str, Any]) -> pd.DataFrame:
    """The rows of ``frame`` with ``row``'s data set, protocol and value of every knob."""
    mask = (frame["dataset"] == row["dataset"]) & (frame["protocol"] == row["protocol"])
    for knob in KNOBS:
        mask &= frame[knob].map(lambda v, k=knob: _same(float(v), float(row[k])))
    return frame[mask]


def held_out_rows(frame: pd.DataFrame, held_out: pd.DataFrame | None) -> dict[str, dict[str, Any] | None]:
    """Per data set, the held-out frame's row (:func:`gain_grid_frame` of the held-out runs) of the setting chosen on
    ``frame``'s seeds (:func:`best_rows`); None where the held-out runs lack it."""
    found: dict[str, dict[str, Any] | None] = {}
    for best in best_rows(frame):
        match = same_setting(held_out, best) if held_out is not None else pd.DataFrame()
        found[best["dataset"]] = cast(dict[str, Any], match.iloc[0].to_dict()) if len(match) else None
    return found


def with_held_out(frame: pd.DataFrame, held_out: pd.DataFrame | None) -> pd.DataFrame:
    """``frame`` with the held-out gain in final training accuracy (``held_out_gain_train`` with its interval,
    ``held_out_pairs``, ``held_out_seeds``) on each data set's best setting; NaN on the other settings, whose
    held-out figures were not chosen to be read."""
    frame = frame.assign(
        held_out_gain_train=math.nan,
        held_out_gain_train_low=math.nan,
        held_out_gain_train_high=math.nan,
        held_out_pairs=math.nan,
        held_out_seeds="",
    )
    for best, row in zip(best_rows(frame), held_out_rows(frame, held_out).values(), strict=True):
        if row is None:
            continue
        index = same_setting(frame, best).index[0]
        frame.loc[index, ["held_out_gain_train", "held_out_gain_train_low", "held_out_gain_train_high"]] = [
            row["gain_train"],
            row["gain_train_low"],
            row["gain_train_high"],
        ]
        frame.loc[index, "held_out_pairs"] = row["pairs"]
        frame.loc[index, "held_out_seeds"] = row["seeds"]
    return frame


def bracket(frame: pd.DataFrame, row: dict[str, Any]) -> dict[str, tuple[float | None, float | None]]:
    """For each knob, the nearest values tried below and above ``row``'s with every other knob as in ``row`` (the
    same data set and protocol; for μ, whose Table 1 rows bring their own λ, the coefficient may differ); None on a
    side where nothing was tried."""
    cell = frame[(frame["dataset"] == row["dataset"]) & (frame["protocol"] == row["protocol"])]
    found: dict[str, tuple[float | None, float | None]] = {}
    for knob in KNOBS:
        others = [k for k in KNOBS if k != knob and not (knob == "mu" and k == "coef")]
        mask = pd.Series(True, index=cell.index)
        for k in others:
            mask &= cell[k].map(lambda v, k=k: _same(float(v), float(row[k])))
        values = [float(v) for v in cell.loc[mask, knob]]
        below = [v for v in values if v < row[knob] - 1e-9]
        above = [v for v in values if v > row[knob] + 1e-9]
        found[knob] = (max(below) if below else None, min(above) if above else None)
    return found


def bracket_text(frame: pd.DataFrame, row: dict[str, Any]) -> str:
    """Which knobs of ``row`` were tried on both sides (the gain falls on both: ``row`` is the largest), which end
    at the grid's edge or at the end of their range (:data:`RANGE`), and which were not varied around it."""
    bracketed, edge, alone = [], [], []
    for knob, (below, above) in bracket(frame, row).items():
        value = _value_text(knob, row[knob])
        low_end, high_end = RANGE.get(knob, (None, None))
        if below is None and above is None:
            alone.append(SHORT[knob])
        elif below is not None and above is not None:
            bracketed.append(f"{SHORT[knob]} {value} between {_value_text(knob, below)} and {_value_text(knob, above)}")
        elif below is not None and high_end is not None and _same(row[knob], high_end):
            bracketed.append(f"{SHORT[knob]} {value} (the end of its range) above {_value_text(knob, below)}")
        elif above is not None and low_end is not None and _same(row[knob], low_end):
            bracketed.append(f"{SHORT[knob]} {value} (the end of its range) below {_value_text(knob, above)}")
        else:
            side = "lowest" if below is None else "highest"
            edge.append(f"{SHORT[knob]} {value} (the {side} value tried there)")
    parts = []
    if bracketed:
        parts.append("bracketed in " + ", ".join(bracketed))
    if edge:
        parts.append("at the grid's edge in " + ", ".join(edge))
    if alone:
        parts.append("not varied around it: " + ", ".join(alone))
    return "; ".join(parts)


def grid_edges(frame: pd.DataFrame) -> str:
    """The smallest and largest value of each knob over the grid ('lr 0.0025-0.1, c 0.3-1, ...')."""
    parts = []
    for knob in KNOBS:
        values = frame[knob].dropna().astype(float)
        if len(values) and values.min() != values.max():
            low, high = _value_text(knob, values.min()), _value_text(knob, values.max())
            parts.append(f"{SHORT[knob]} {low}-{high}")
    return ", ".join(parts)


SELECTION = (
    "Why the two differ: each in-sample figure is the largest of many noisy means, read on the seeds that chose it, "
    "so it is biased upward (a maximum over settings picks the settings whose seeds happened to run high); the "
    "held-out seeds, which chose nothing, measure the chosen setting without that bias."
)


def paper_gain(dataset: str, mu: float = 1.0) -> float:
    """The paper's Table 1 gain in final training accuracy (pp) on ``dataset`` at ``mu``; NaN when it has none."""
    up, prox = table1_value(dataset, "upcycled", mu), table1_value(dataset, "fedprox", mu)
    return up[0] - prox[0] if up and prox else math.nan


def _where(r: dict[str, Any]) -> str:
    return f"{dataset_label(r['dataset'])}, {r['protocol']}, {setting_text(r)}"


def _held_out_text(row: dict[str, Any] | None, held_out: pd.DataFrame | None) -> str:
    if held_out is None:
        return "not measured on held-out seeds (no held-out runs)"
    if row is None:
        return "not run on the held-out seeds"
    return (
        f"on the held-out {row['seeds']} {_gain_cell(row, 'train')} pp ({int(row['pairs'])} pairs; FedProx "
        f"{fmt(row['fedprox_train'])}%)"
    )


def largest_gains(frame: pd.DataFrame, held_out: pd.DataFrame | None = None) -> list[str]:
    """The statements of the claims page: the largest mean gain in final training accuracy over all settings
    ("in N settings no gain exceeds X", the grid's edges, whether each knob of it was tried on both sides), the
    largest upper interval end, and per data set its largest gain (in sample, with the values tried around it, and
    on the held-out seeds where ``held_out``, :func:`gain_grid_frame` of the held-out runs, is given) beside the
    paper's Table 1 gain."""
    top = cast(dict[str, Any], frame.loc[cast(int, frame["gain_train"].idxmax())].to_dict())
    reach = cast(dict[str, Any], frame.loc[cast(int, frame["gain_train_high"].idxmax())].to_dict())
    seeds = sorted({int(p) for p in frame["pairs"]})
    chosen_on = f", {frame['seeds'].iloc[0]}" if frame["seeds"].nunique() == 1 else ""
    lines = [
        f"- In {len(frame)} settings ({frame['dataset'].nunique()} data sets x {frame['protocol'].nunique()} "
        f"protocols x the grid; {'-'.join(map(str, seeds[:: max(len(seeds) - 1, 1)]))} seed pairs each"
        f"{chosen_on}) no mean gain in final training accuracy exceeds {fmt(top['gain_train'], signed=True)} pp: "
        f"{_gain_cell(top, 'train')} pp on {_where(top)}. That is the largest of this grid, whose edges are "
        f"{grid_edges(frame)}. Around it: {bracket_text(frame, top)}. The highest upper end of a 95% "
        f"interval is {fmt(reach['gain_train_high'], signed=True)} pp ({_where(reach)})."
    ]
    held = held_out_rows(frame, held_out)
    for best in best_rows(frame):
        dataset = best["dataset"]
        paper = paper_gain(dataset)
        lines.append(
            f"- {dataset_label(dataset)}: largest gain {_gain_cell(best, 'train')} pp ({best['protocol']}, "
            f"{setting_text(best)}; FedProx {fmt(best['fedprox_train'])}%) in "
            f"{int((frame['dataset'] == dataset).sum())} settings (around it: {bracket_text(frame, best)}); "
            f"{_held_out_text(held[dataset], held_out)}"
            + ("" if math.isnan(paper) else f"; the paper's Table 1 gain at μ = 1: {fmt(paper, signed=True)} pp")
            + "."
        )
    if held_out is not None:
        lines.append(f"- {SELECTION}")
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
    "interval. Diverged runs are left out (Pairs counts the rest). Held-out gain: on each data set's best setting "
    "(the largest gain in final training accuracy, chosen on the seeds of the other columns), the same setting's "
    "gain on the held-out seeds (experiment sensitivity_held_out), which chose nothing; left empty elsewhere."
)


def section(frame: pd.DataFrame, held_out: pd.DataFrame | None = None) -> list[str]:
    """Markdown parts of the statement "how large can the gain get" (claims page and the table's own page);
    ``held_out``: :func:`gain_grid_frame` of the held-out runs, or None."""
    return [
        "## How large can the gain get\n",
        "Measured by the sensitivity experiment (results/tables/sensitivity.md, results/figures/sensitivity.png): "
        "Upcycled-FL 2T against FedProx T iterations, paired on seed, over learning rate, even-iteration "
        "coefficient, local epochs, batch size, iterations and Table 1's μ rows, under both protocols; each data "
        "set's best setting again on held-out seeds (experiment sensitivity_held_out). No verdict: the paper states "
        "no such range.\n",
        "\n".join(largest_gains(frame, held_out)),
    ]


def held_out_frame(held_out_runs: pd.DataFrame | None) -> pd.DataFrame | None:
    """:func:`gain_grid_frame` of the held-out runs; None when there are none."""
    if held_out_runs is None or held_out_runs.empty:
        return None
    return gain_grid_frame(held_out_runs)


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


def write_gain_grid(
    runs: pd.DataFrame,
    held_out_runs: pd.DataFrame | None,
    table_prefix: str,
    figure_prefix: str,
    provenance: str,
) -> pd.DataFrame:
    """``<table_prefix>.csv``/``.md``/``.html`` and ``<figure_prefix>.png``/``.pdf``/``.csv`` from the grid's runs
    and (the output's ``reference``) its held-out runs; return the frame."""
    from .figures import save_figure

    held_out = held_out_frame(held_out_runs)
    frame = with_held_out(gain_grid_frame(runs), held_out)
    write_csv(f"{table_prefix}.csv", frame, provenance)
    write_markdown(
        f"{table_prefix}.md",
        "How large can the gain get: the gain over a grid of settings",
        [*section(frame, held_out), "## The grid\n", CAPTION, markdown_table(HEADER, grid_rows(frame))],
        provenance,
    )
    fig, points = plot_gain_grid(frame)
    save_figure(fig, figure_prefix)
    write_csv(f"{figure_prefix}.csv", points, provenance)
    return frame


def claims_section(runs: pd.DataFrame, held_out_runs: pd.DataFrame | None = None) -> list[str]:
    """The claims page's section from the runs of the sensitivity experiment in ``runs`` and its held-out runs;
    empty when there are none."""
    if runs.empty:
        return []
    return section(gain_grid_frame(runs), held_out_frame(held_out_runs))


def claims_page_section(ctx) -> list[str]:
    """The claims page's section on the gain grid (:func:`claims_section`) from the context's ``sensitivity`` and
    ``sensitivity_held_out`` runs."""
    return claims_section(ctx.of("sensitivity"), ctx.of(HELD_OUT_ROLE))
