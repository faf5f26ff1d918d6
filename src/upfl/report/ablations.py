"""The ablations: is the gain upcycling or momentum, upcycling on every base, and the coefficient schedules.

- ``momentum_table`` / ``momentum_figure`` (experiment ``ablation_momentum``): FedProx, FedProx with server
  momentum beta, Upcycled-FL, Upcycled-FL with server momentum; final test accuracy at equal training rounds
  and at equal wall time (each run's accuracy at the wall time FedProx of the same seed needed), with the paired
  95% t interval of the gain over FedProx.
- ``bases_table`` (experiment ``upcycling_bases``): every base against its upcycled version at equal training
  rounds, per straggler level, with the paired interval of the gain.
- ``schedule_figure`` (experiment ``lambda_schedule``): final accuracy against c_1 for the ``const``, ``horizon``
  and ``inv_sqrt`` schedules of the coefficient (Corollary 4.8), and the curves of each schedule's best c_1.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import CHOICES
from ..names import BASE_ALGORITHMS, is_upcycled
from .cells import paired, records
from .claim_rules import Context, claim_row, not_measured, number_text, paired_gain, verdict_direction
from .collect import ReportError, converged, cumulative_rounds, load_metrics
from .figures import (
    ALGORITHM_COLOURS,
    csv_colour,
    figure_note,
    figure_title,
    line_styles,
    palette_for,
    save_figure,
    staggered_log_labels,
)
from .paper_numbers import algorithm_label, dataset_label, dataset_order
from .render import as_number, fmt, fmt_mu, markdown_table, write_csv, write_markdown
from .stats import LEVEL, mean_interval
from .styles import ALGORITHM_STYLES
from .theme import pyplot, set_theme, small_text

SCHEDULES = CHOICES["algorithm.schedule"]

BASE_LABELS = {name: label for name, (label, _) in ALGORITHM_STYLES.items() if name in BASE_ALGORITHMS}
OPTION_SYMBOLS = {"server_momentum": "β", "nesterov": "nesterov", "server_lr": "η_s", "alpha": "α"}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def options_text(options: Any) -> str:
    """``server_momentum=0.5;nesterov=False`` -> ``β = 0.5, plain``."""
    parts = []
    for item in _text(options).split(";"):
        if not item:
            continue
        key, _, value = item.partition("=")
        if key == "nesterov":
            parts.append("Nesterov" if value == "True" else "plain")
        else:
            parts.append(f"{OPTION_SYMBOLS.get(key, key)} = {value}")
    return ", ".join(parts)


def variant_label(row: dict) -> str:
    """``FedProx``, ``FedProx + momentum (β = 0.5)``, ``Upcycled-FL``, ``Upcycled FedAvgM (β = 0.5)``."""
    base, alg = row.get("base") or row["algorithm"], row["algorithm"]
    opts = options_text(row.get("algorithm_options"))
    if base == "fedavgm" and float(row.get("mu") or 0) > 0:
        name = "Upcycled-FL + momentum" if alg != base else "FedProx + momentum"
    elif alg == base:
        name = BASE_LABELS.get(base, base)
    else:
        name = algorithm_label("upcycled") if base == "fedprox" else f"Upcycled {BASE_LABELS.get(base, base)}"
    return f"{name} ({opts})" if opts else name


def _group_key(row: dict) -> tuple:
    return (
        row["algorithm"],
        _text(row.get("algorithm_options")),
        float(row["mu"]),
        str(row.get("coef")),
        str(row.get("schedule")),
    )


def _variants(sub: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    keys = sub.apply(lambda r: _group_key(r.to_dict()), axis=1)
    out = []
    for key in sorted(set(keys), key=lambda k: (k[0] != "fedprox", is_upcycled(k[0]), k[1])):
        cell = sub[keys == key]
        out.append((variant_label(cell.iloc[0].to_dict()), cell))
    return out


def at_wall_time(metrics: pd.DataFrame, budget: float, metric: str = "test_acc") -> float:
    """``metric`` at the last evaluated iteration whose cumulative training time is within ``budget`` seconds."""
    hit = metrics[(metrics["cum_wall_s"] <= budget + 1e-12) & metrics[metric].notna()]
    return float(hit[metric].iloc[-1]) if not hit.empty else math.nan


def _gain(a: pd.DataFrame, b: pd.DataFrame, column: str) -> dict[str, float]:
    pairs = paired(a, b, column)
    iv = mean_interval((pairs["a"].astype(float) - pairs["b"].astype(float)).tolist(), LEVEL)
    return {"n_pairs": iv.n, "gain": iv.mean, "gain_low": iv.low, "gain_high": iv.high}


def verdict(low: float, high: float) -> str:
    if math.isnan(low):
        return "n < 2"
    return "gain" if low > 0 else ("loss" if high < 0 else "no difference")


def momentum_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per data set x variant: accuracy at equal training rounds and equal wall time, gains over FedProx.
    Diverged runs are left out (as everywhere in the report)."""
    runs = converged(runs)
    rows = []
    for dataset in dataset_order(runs["dataset"]):
        sub = runs[runs["dataset"] == dataset].copy()
        ref = sub[(sub["algorithm"] == "fedprox") & sub["algorithm_options"].map(lambda o: not _text(o))]
        if ref.empty:
            raise ReportError(f"ablation_momentum: {dataset} has no FedProx runs to compare with")
        budgets = {
            int(r["seed"]): float(load_metrics(r["run_dir"])["cum_wall_s"].iloc[-1]) for r in ref.to_dict("records")
        }
        sub["wall_test_acc"] = [
            at_wall_time(load_metrics(r["run_dir"]), budgets.get(int(r["seed"]), math.nan))
            for r in sub.to_dict("records")
        ]
        ref = sub.loc[ref.index]
        for label, cell in _variants(sub):
            row = {
                "dataset": dataset,
                "variant": label,
                "algorithm": cell["algorithm"].iloc[0],
                "options": _text(cell["algorithm_options"].iloc[0]),
                "mu": float(cell["mu"].iloc[0]),
                "training_rounds": int(cell["training_rounds"].iloc[0]),
                "n": len(cell),
                "test_acc": float(cell["final_test_acc"].mean()),
                "wall_test_acc": float(cell["wall_test_acc"].mean()),
            }
            for prefix, column in (("", "final_test_acc"), ("wall_", "wall_test_acc")):
                gain = _gain(cell, ref, column)
                row.update({f"{prefix}{k}": v for k, v in gain.items()})
            rows.append(row)
    return pd.DataFrame(rows)


def bases_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per data set x straggler level x base: the base, its upcycled version and the paired gain
    (diverged runs left out)."""
    runs = converged(runs)
    rows = []
    for dataset in dataset_order(runs["dataset"]):
        for straggler in sorted(set(runs.loc[runs["dataset"] == dataset, "straggler"].astype(float))):
            sub = runs[(runs["dataset"] == dataset) & (runs["straggler"].astype(float) == straggler)]
            for base in [b for b in BASE_LABELS if b in set(sub["base"])]:
                plain, up = sub[sub["algorithm"] == base], sub[(sub["base"] == base) & (sub["algorithm"] != base)]
                if plain.empty or up.empty:
                    continue
                gain = _gain(up, plain, "final_test_acc")
                row = {
                    "dataset": dataset,
                    "straggler": straggler,
                    "base": base,
                    "label": BASE_LABELS[base],
                    "n": min(len(plain), len(up)),
                    "base_test_acc": float(plain["final_test_acc"].mean()),
                    "upcycled_test_acc": float(up["final_test_acc"].mean()),
                    **gain,
                    "verdict": verdict(gain["gain_low"], gain["gain_high"]),
                }
                if "final_personal_test_acc" in sub.columns and plain["final_personal_test_acc"].notna().any():
                    row.update(
                        {
                            "base_personal_test_acc": float(plain["final_personal_test_acc"].mean()),
                            "upcycled_personal_test_acc": float(up["final_personal_test_acc"].mean()),
                        }
                    )
                rows.append(row)
    if not rows:
        raise ReportError("upcycling_bases: no base with both its plain and its upcycled runs")
    return pd.DataFrame(rows)


def _pct(x: float) -> str:
    return fmt(100 * x, 2)


def _interval(mean: float, low: float, high: float) -> str:
    if math.isnan(low):
        return f"{fmt(100 * mean, 2, signed=True)}"
    return f"{fmt(100 * mean, 2, signed=True)} [{fmt(100 * low, 2, signed=True)}, {fmt(100 * high, 2, signed=True)}]"


def write_momentum_table(runs: pd.DataFrame, out_prefix: str, provenance: str) -> pd.DataFrame:
    frame = momentum_frame(runs)
    write_csv(f"{out_prefix}.csv", frame, provenance)
    sections = []
    for dataset, grp in frame.groupby("dataset", sort=False):
        rows = [
            [
                r["variant"],
                str(r["training_rounds"]),
                str(r["n"]),
                _pct(r["test_acc"]),
                _interval(r["gain"], r["gain_low"], r["gain_high"]),
                _pct(r["wall_test_acc"]),
                _interval(r["wall_gain"], r["wall_gain_low"], r["wall_gain_high"]),
            ]
            for r in grp.to_dict("records")
        ]
        sections.append(
            f"## {dataset_label(str(dataset))}\n\n"
            + markdown_table(
                [
                    "variant",
                    "training rounds",
                    "seeds",
                    "test acc. (%)",
                    f"gain over FedProx, {LEVEL:.0%} CI (pp)",
                    "test acc. at FedProx's wall time (%)",
                    f"gain at equal wall time, {LEVEL:.0%} CI (pp)",
                ],
                rows,
            )
        )
    sections.append(
        "Gains are paired on seed (same devices, stragglers and batches in each training round). "
        "Equal wall time: each run's accuracy at the last iteration within the training time FedProx "
        "needed for the same seed."
    )
    write_markdown(f"{out_prefix}.md", "Is the gain upcycling or momentum? (ablation_momentum)", sections, provenance)
    return frame


def write_bases_table(runs: pd.DataFrame, out_prefix: str, provenance: str) -> pd.DataFrame:
    frame = bases_frame(runs)
    write_csv(f"{out_prefix}.csv", frame, provenance)
    sections = []
    for (dataset, straggler), grp in frame.groupby(["dataset", "straggler"], sort=False):
        rows = [
            [
                r["label"],
                str(r["n"]),
                _pct(r["base_test_acc"]),
                _pct(r["upcycled_test_acc"]),
                _interval(r["gain"], r["gain_low"], r["gain_high"]),
                r["verdict"],
            ]
            for r in grp.to_dict("records")
        ]
        sections.append(
            f"## {dataset_label(str(dataset))}, {straggler:.0%} stragglers\n\n"
            + markdown_table(
                [
                    "base",
                    "seeds",
                    "base test acc. (%)",
                    "upcycled test acc. (%)",
                    f"gain, {LEVEL:.0%} CI (pp)",
                    "verdict",
                ],
                rows,
            )
        )
    sections.append(
        "Equal training rounds: the upcycled run has twice the iterations, the even ones free. "
        "Claim tested: 'upcycling is orthogonal to the base algorithm' (Section 4)."
    )
    write_markdown(f"{out_prefix}.md", "Upcycling on every base algorithm (upcycling_bases)", sections, provenance)
    return frame


def _curves(cell: pd.DataFrame, x: str, memo: dict | None = None) -> pd.DataFrame:
    """Mean, min and max test accuracy over the cell's seeds per iteration, against ``x`` (training rounds or
    time). ``memo``: a figure's cache of its curves and of the runs' metrics (a variant's curve is drawn in its own
    panel and as the reference of the other family's, each run's metrics read for both x axes)."""
    memo = {} if memo is None else memo
    key = ("curve", x, tuple(cell["run_dir"]))
    if key in memo:
        return memo[key]
    parts = []
    for r in records(cell, ["run_dir", "seed"]):
        if ("metrics", r["run_dir"]) not in memo:
            memo["metrics", r["run_dir"]] = load_metrics(r["run_dir"])
        m = memo["metrics", r["run_dir"]]
        xs = cumulative_rounds(m) if x == "round" else m["cum_wall_s"]
        parts.append(
            pd.DataFrame(
                {
                    "iteration": m["iteration"],
                    "x": xs.astype(float),
                    "test_acc": m["test_acc"].astype(float),
                    "seed": r["seed"],
                }
            ).dropna()
        )
    memo[key] = (
        pd.concat(parts)
        .groupby("iteration")
        .agg(x=("x", "mean"), mean=("test_acc", "mean"), low=("test_acc", "min"), high=("test_acc", "max"))
        .reset_index()
    )
    return memo[key]


def variant_family(cell: pd.DataFrame) -> str:
    """The legend family of a variant, whose colour it takes: ``FedProx`` (with or without server momentum),
    ``Upcycled-FL`` (with or without), or the base's own label."""
    row = cell.iloc[0].to_dict()
    base = row.get("base") or row["algorithm"]
    if base == "fedavgm" and float(row.get("mu") or 0) > 0:
        return "Upcycled-FL" if row["algorithm"] != base else "FedProx"
    if base == "fedprox":
        return "Upcycled-FL" if is_upcycled(row["algorithm"]) else "FedProx"
    return BASE_LABELS.get(base, base)


def colour_distance(a: str, b: str) -> float:
    """Euclidean distance of two colours in RGB."""
    from matplotlib.colors import to_rgb

    return sum((x - y) ** 2 for x, y in zip(to_rgb(a), to_rgb(b), strict=True)) ** 0.5


def family_palette(variants: list[tuple[str, pd.DataFrame]]) -> dict[str, str]:
    """Each variant's colour: its family's from :data:`upfl.report.figures.ALGORITHM_COLOURS`, the plain variant (the
    first) in the full colour and the momentum variants in the darker and lighter shades of it that
    :func:`upfl.report.figures.palette_for` gives, the shade nearest the full colour left to the plain one."""
    pal: dict[str, str] = {}
    for family in dict.fromkeys(variant_family(cell) for _, cell in variants):
        labels = [label for label, cell in variants if variant_family(cell) == family]
        shades = list(palette_for([f"{family} ({i})" for i in range(len(labels))]).values())
        full = palette_for([family])[family]
        nearest_full = min(range(len(shades)), key=lambda i: colour_distance(shades[i], full))
        others = shades[:nearest_full] + shades[nearest_full + 1 :]
        pal.update(zip(labels, [full, *others], strict=True))
    return pal


def momentum_figure(runs: pd.DataFrame, out_prefix: str, provenance: str) -> None:
    """Test accuracy against training rounds (top row) and training time (bottom row). Per data set two columns:
    FedProx with and without server momentum, Upcycled-FL with and without; each panel shows the other family's
    plain algorithm as a dotted reference, so no panel holds more than one family's lines."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    runs = converged(runs)
    datasets = dataset_order(runs["dataset"])
    set_theme(font_scale=1.0)
    families = ("FedProx", "Upcycled-FL")
    fig, axes = plt.subplots(2, 2 * len(datasets), figsize=(3.6 * 2 * len(datasets), 6.0), squeeze=False)
    rows = []
    memo: dict = {}
    for j, dataset in enumerate(datasets):
        variants = _variants(runs[runs["dataset"] == dataset])
        colours = family_palette(variants)
        plain = {variant_family(cell): label for label, cell in variants if "momentum" not in label}
        for k, family in enumerate(families):
            shown = [(label, cell) for label, cell in variants if variant_family(cell) == family]
            other = [
                (label, cell)
                for label, cell in variants
                if variant_family(cell) != family and label == plain.get(variant_family(cell))
            ]
            for i, x in enumerate(("round", "time")):
                ax = axes[i, 2 * j + k]
                for label, cell in shown + other:
                    d = _curves(cell, x, memo)
                    reference = (label, cell) in other
                    ax.plot(
                        d["x"],
                        d["mean"],
                        ":" if reference else "-",
                        color=colours[label],
                        linewidth=1.2,
                        label=f"{label} (reference)" if reference else label,
                    )
                    if not reference:
                        ax.fill_between(d["x"], d["low"], d["high"], color=colours[label], alpha=0.12, linewidth=0)
                        rows.append(
                            d.assign(
                                dataset=dataset,
                                panel=family,
                                variant=label,
                                x_axis=x,
                                colour=csv_colour(colours[label]),
                            )
                        )
                if x == "round":
                    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set_xlabel("Training round" if x == "round" else "Training time (s)")
                ax.set_ylabel("Test accuracy")
                ax.set_title(f"{dataset_label(dataset)}: {family} ± momentum")
                if i == 0:
                    ax.legend(fontsize=small_text(), loc="lower right")
    fig.suptitle(
        f"{figure_title(Path(out_prefix).name)}: upcycling or server momentum? Mean over seeds, bands min-max",
        fontsize=10,
    )
    fig.tight_layout()
    save_figure(fig, out_prefix)
    write_csv(f"{out_prefix}.csv", pd.concat(rows, ignore_index=True), provenance)


SCHEDULE_DODGE = 0.012
"""How far apart (in decades of c_1) the schedules' points of one c_1 are drawn in the schedule figure's top
panels: their 95% intervals overlap, and drawn at one x they would hide each other."""
SCHEDULE_NOTE = (
    "Top: mean and 95% t interval over seeds of the final test accuracy; the schedules' points of one c_1 are drawn "
    "slightly apart along the axis (the CSV gives the c_1 of each). Bottom: mean over seeds, each schedule at its best "
    "c_1."
)


def schedule_figure(runs: pd.DataFrame, out_prefix: str, provenance: str) -> None:
    """Top: final test accuracy against c_1 per schedule (mean and 95% CI over seeds), FedProx as a line; each
    schedule its own marker and dash, set apart along c_1 by :data:`SCHEDULE_DODGE` so their intervals do not cover
    each other. Bottom: test accuracy against training rounds for each schedule at its best c_1."""
    from matplotlib.ticker import FixedFormatter, MaxNLocator, NullFormatter

    plt = pyplot()
    runs = converged(runs)
    datasets = dataset_order(runs["dataset"])
    set_theme(font_scale=1.0)
    fig, axes = plt.subplots(2, len(datasets), figsize=(4.2 * len(datasets), 6.0), squeeze=False)
    shades = palette_for([f"Upcycled-FL ({s})" for s in SCHEDULES])
    colours = {s: shades[f"Upcycled-FL ({s})"] for s in SCHEDULES}
    dashes = line_styles([f"Upcycled-FL ({s})" for s in SCHEDULES])
    styles = {s: (dashes[f"Upcycled-FL ({s})"][0], "os^D"[k % 4]) for k, s in enumerate(SCHEDULES)}
    dodge = {s: 10 ** (SCHEDULE_DODGE * (k - (len(SCHEDULES) - 1) / 2)) for k, s in enumerate(SCHEDULES)}
    fedprox_colour = ALGORITHM_COLOURS["FedProx"]
    rows = []
    for j, dataset in enumerate(datasets):
        sub = runs[runs["dataset"] == dataset]
        ups = sub[sub["algorithm"].map(lambda a: isinstance(a, str) and is_upcycled(a))]
        ref = sub[sub["algorithm"] == "fedprox"]
        ax = axes[0, j]
        for schedule, grp in ups.groupby("schedule"):
            pts = []
            for c1, cell in grp.groupby(grp["coef"].astype(float)):
                iv = mean_interval(cell["final_test_acc"].astype(float).tolist(), LEVEL)
                pts.append(
                    {
                        "dataset": dataset,
                        "schedule": schedule,
                        "c1": c1,
                        "n": iv.n,
                        "test_acc": iv.mean,
                        "low": iv.low,
                        "high": iv.high,
                    }
                )
            pts = pd.DataFrame(pts)
            rows.append(pts)
            linestyle, marker = styles.get(schedule, ("-", "o"))
            ax.errorbar(
                pts["c1"] * dodge.get(schedule, 1.0),
                pts["test_acc"],
                yerr=[pts["test_acc"] - pts["low"], pts["high"] - pts["test_acc"]],
                marker=marker,
                linestyle=linestyle,
                capsize=2,
                color=colours.get(schedule),
                label=schedule,
            )
            best = pts.loc[pts["test_acc"].idxmax(), "c1"]
            d = _curves(grp[grp["coef"].astype(float) == best], "round")
            axes[1, j].plot(
                d["x"], d["mean"], color=colours.get(schedule), linestyle=linestyle, label=f"{schedule}, c1 = {best:g}"
            )
        if not ref.empty:
            acc = float(ref["final_test_acc"].mean())
            ax.axhline(acc, color=fedprox_colour, linestyle=":", label="FedProx")
            d = _curves(ref, "round")
            axes[1, j].plot(d["x"], d["mean"], ":", color=fedprox_colour, label="FedProx")
            rows.append(
                pd.DataFrame(
                    [
                        {
                            "dataset": dataset,
                            "schedule": "fedprox",
                            "c1": math.nan,
                            "n": len(ref),
                            "test_acc": acc,
                            "low": math.nan,
                            "high": math.nan,
                        }
                    ]
                )
            )
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        c1s = sorted(set(ups["coef"].astype(float)))
        ax.set_xticks(c1s)
        ax.xaxis.set_major_formatter(FixedFormatter(staggered_log_labels(c1s)))
        ax.set_xlabel("c_1 (log scale)")
        ax.set_ylabel("Final test accuracy")
        ax.set_title(dataset_label(dataset))
        axes[1, j].set_xlabel("Training round")
        axes[1, j].xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[1, j].set_ylabel("Test accuracy")
    axes[0, -1].legend(fontsize=small_text())
    axes[1, -1].legend(fontsize=small_text())
    title = (
        f"{figure_title(Path(out_prefix).name)}: coefficient schedules, const c1, horizon c1/sqrt(M), "
        "inv_sqrt c1/sqrt(m)"
    )
    fig.suptitle(textwrap.fill(title, max(40, int(fig.get_figwidth() * 12))), fontsize=10)
    figure_note(fig, SCHEDULE_NOTE)
    fig.tight_layout()
    save_figure(fig, out_prefix)
    if not rows:
        raise ReportError("lambda_schedule: no upcycled runs")
    write_csv(f"{out_prefix}.csv", pd.concat(rows, ignore_index=True), provenance)


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
    from .collect import base_algorithm

    runs = ctx.of("bases")
    exp = ctx.roles["bases"]
    base = {
        "section": "Upcycling on other base algorithms",
        "paper": math.nan,
        "unit": "pp",
        "experiment": exp,
        "source": BASES_SOURCE,
    }
    claim = "Upcycling improves {label} (Upcycled {label} − {label}, final test accuracy, equal training rounds{s})"
    if runs.empty:
        return [
            not_measured(
                **base, id="bases", dataset="", why=ctx.missing("bases"), claim=claim.format(label="every base", s="")
            )
        ]
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
                order = [b for b in BASE_LABELS if b in set(sub["base"])] + sorted(set(sub["base"]) - set(BASE_LABELS))
                for name in order:
                    plain = sub[(sub["base"] == name) & (sub["algorithm"] == name)]
                    up = sub[(sub["base"] == name) & (sub["algorithm"] != name)]
                    label = BASE_LABELS.get(name, name)
                    real = bool(mdl) and dataset in ("femnist", "sent140")
                    where = _straggler_text(level) + (f", {mdl.upper()}" if real else "")
                    ident = (
                        f"bases/{dataset}"
                        + (f"/{mdl}" if real else "")
                        + ("" if math.isnan(level) else f"/s{level:g}")
                        + f"/{name}"
                    )
                    row = dict(base, id=ident, dataset=dataset, claim=claim.format(label=label, s=where))
                    if plain.empty or up.empty:
                        missing = "its upcycled version" if up.empty else "the base itself"
                        rows.append(not_measured(**row, why=f"no runs of {missing} in experiment {exp}"))
                        continue
                    try:
                        mean, low, high, n = paired_gain(up, plain, "test_acc")
                    except ReportError as err:
                        rows.append(not_measured(**row, why=str(err)))
                        continue
                    verdict, why = verdict_direction(+1, low, high, n)
                    rows.append(
                        claim_row(
                            **row,
                            ours=mean,
                            ci_low=low,
                            ci_high=high,
                            n_pairs=n,
                            verdict=verdict,
                            why=why + "; the paper gives a direction, no figure",
                        )
                    )
    return rows


MOMENTUM_NOTE = (
    "Not a claim of the paper (an ablation's question): the even step extrapolates along the last global update, as "
    "server momentum does. Upcycled-FL minus FedProx with server momentum β (`fedavgm` with the same μ), final "
    "test accuracy at equal training rounds, paired on seed, mean and 95% t interval; no verdict."
)
MOMENTUM_HEADER = ["Data", "Comparison", "Ours [95% CI] (pp)", "Pairs"]


def momentum_information(ctx: Context) -> list[list[str]]:
    """Rows of the information section: Upcycled-FL against FedProx + momentum per β (experiment of role
    ``momentum``); empty when that experiment has no such runs."""

    runs = ctx.of("momentum")
    if runs.empty:
        return []
    rows = []
    mu = runs["mu"].map(as_number)
    for dataset, m in sorted({(d, v) for d, v in zip(runs["dataset"], mu, strict=True) if v > 0}):
        sub = runs[(runs["dataset"] == dataset) & (mu == m)]
        up = sub[sub["algorithm"] == "upcycled"]
        mom = sub[sub["algorithm"] == "fedavgm"]
        options = mom["algorithm_options"].fillna("").astype(str)
        for opts in sorted(set(options)):
            if up.empty:
                continue
            try:
                mean, low, high, n = paired_gain(up, mom[options == opts], "test_acc")
            except ReportError as err:
                rows.append([dataset_label(dataset), "Upcycled-FL − FedProx + momentum", str(err), "0"])
                continue
            ours = number_text(mean, "pp") + (
                "" if math.isnan(low) else f" [{number_text(low, 'pp')}, {number_text(high, 'pp')}]"
            )
            rows.append(
                [
                    dataset_label(dataset),
                    f"Upcycled-FL − FedProx + momentum ({options_text(opts)}), μ = {fmt_mu(m)}",
                    ours,
                    str(n),
                ]
            )
    return rows


def momentum_page_section(ctx: Context) -> list[str]:
    """The claims page's information section on upcycling or server momentum (no verdict: the paper makes no
    claim), empty without the momentum ablation's runs."""
    info = momentum_information(ctx)
    if not info:
        return []
    return [
        "## Information: upcycling or server momentum?\n",
        MOMENTUM_NOTE + "\n",
        markdown_table(MOMENTUM_HEADER, info),
    ]
