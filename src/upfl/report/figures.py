"""The paper's figures from the runs table: convergence curves (Figures 2 left, 4-8) and the lambda sweep
(Figure 2 right).

Every figure draws the mean over seeds as a line and the min-max range over seeds as a band (the
paper's convention for its repeated runs), and writes ``NAME.png``, ``NAME.pdf`` and ``NAME.csv``
(the plotted numbers).

matplotlib is imported by the drawing functions (:func:`pyplot`), not with the module: the table commands import
this module's helpers and never draw. The figures wear seaborn's "whitegrid" / "paper" theme
(:mod:`upfl.report.theme`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from .. import __version__
from ..files import atomic_path, git_commit
from ..names import base_name, equivalent_lambda
from .cells import check_one_config, dataset_mus, records, with_cell_mu
from .collect import METRIC_NAMES, ReportError, cumulative_rounds, load_metrics, require_converged
from .paper_numbers import ALGORITHM_ORDER, algorithm_label, dataset_label, dataset_order, metric_label
from .render import as_number, fmt_mu, write_csv
from .styles import ALGORITHM_STYLES, PAPER_ALGORITHMS
from .theme import colour_palette, pyplot, set_theme, small_text

KINDS = ("convergence", "lambda_sweep")
X_CHOICES = {"convergence": ("iteration", "round", "time"), "lambda_sweep": ("step", "lam")}
X_LABELS = {
    "iteration": "Iteration",
    "round": "Training round",
    "time": "Training time (s)",
    "step": "Step μ/(μ+λ)",
    "lam": "λ",
}
DEFAULT_METRICS = ("train_loss", "test_acc")
PRIVACY_KEYS = ("mechanism", "sigma", "tau", "alpha")
"""runs.csv columns of a run's privacy setting, carried into the convergence figure's CSV."""
BAND_ALPHA = 0.2
BAND_NOTE = "Lines: mean over seeds; bands: min-max over seeds."
PRIVATE_RUNS_NOTE = (
    "Private runs: training metrics are computed on the devices' private training data, outside the privacy guarantee."
)
SHARED_NOISE_RUNS_NOTE = (
    " Runs of one seed share their noise draws (seed-keyed noise), so each run's ε holds on its "
    "own, not for the runs together."
)


def seed_keyed_runs(runs: pd.DataFrame, mechanism: str | None = None) -> bool:
    """Whether any private run among ``runs`` (of ``mechanism`` when given) drew seed-keyed noise
    (:func:`upfl.privacy.accounting.noise_is_seed_keyed` of runs.csv's ``privacy_noise_source``), so that the notes
    on shared noise apply."""
    from ..privacy.accounting import noise_is_seed_keyed

    mechs = (
        runs["mechanism"].fillna("none").astype(str)
        if "mechanism" in runs.columns
        else pd.Series("none", index=runs.index)
    )
    private = runs[(mechs != "none") & ((mechs == mechanism) if mechanism else True)]
    sources = private["privacy_noise_source"] if "privacy_noise_source" in private.columns else [None] * len(private)
    return any(noise_is_seed_keyed(None if pd.isna(v) else v) for v in sources)


def private_runs_note(runs: pd.DataFrame, metrics: Sequence[str]) -> str:
    """:data:`PRIVATE_RUNS_NOTE` when ``runs`` holds a private run whose training metrics are drawn (with
    :data:`SHARED_NOISE_RUNS_NOTE` where their noise is seed-keyed), else ''."""
    marked = runs.get("privacy_train_metrics", pd.Series(dtype=object)).eq("outside_privacy_guarantee").any()
    if not (marked and any(m.startswith("train_") for m in metrics)):
        return ""
    return PRIVATE_RUNS_NOTE + (SHARED_NOISE_RUNS_NOTE if seed_keyed_runs(runs) else "")


def parse_metrics(text: str | None) -> list[str]:
    """``train_loss,test_acc`` to a list; unknown names are errors listing the known ones."""
    names = [m.strip() for m in (text or ",".join(DEFAULT_METRICS)).split(",") if m.strip()]
    bad = [m for m in names if m not in METRIC_NAMES]
    if bad or not names:
        raise ReportError(
            f"--metrics {text}: unknown metric {', '.join(bad) or '(none)'}; known: {', '.join(METRIC_NAMES)}"
        )
    return names


def variant_label(row: dict) -> str:
    """An Upcycled-FL run's lambda (or step) as a legend entry, e.g. ``λ = 0.21``."""
    lam, step = as_number(row.get("lam")), as_number(row.get("step"))
    if not math.isnan(lam):
        return f"λ = {lam:g}"
    return f"step = {step:g}" if not math.isnan(step) else ""


def facet_title(dataset: str, mu: float, extra: str = "") -> str:
    """``Synthetic(0.5,0.5), μ = 0.5`` (mu left out when NaN)."""
    parts = [dataset_label(dataset)] + ([] if math.isnan(mu) else [f"μ = {fmt_mu(mu)}"])
    return ", ".join(parts + ([extra] if extra else []))


def assign_facets(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, facet): facets are data set x mu; FedAvg joins every mu facet of its data set."""
    runs = with_cell_mu(runs)
    out = []
    for r in runs.to_dict("records"):
        mus = [r["cell_mu"]] if r["algorithm"] != "fedavg" else (dataset_mus(runs, r["dataset"]) or [math.nan])
        for mu in mus:
            out.append({**r, "facet_mu": mu})
    return pd.DataFrame(out)


def privacy_label(row: dict, show_tau: bool = False) -> str:
    """A run's privacy setting as a legend entry: ``σ = 1`` (``σ = 1, τ = 10``), ``α = 10``, ``non-private``."""
    mech = row.get("mechanism")
    mech = "none" if not isinstance(mech, str) else mech
    if mech == "output":
        sigma, tau = row.get("sigma"), row.get("tau")
        text = f"σ = {as_number(sigma):g}" if not math.isnan(as_number(sigma)) else f"σ = {sigma}"
        return text + (f", τ = {as_number(tau):g}" if show_tau else "")
    if mech == "objective":
        alpha = row.get("alpha")
        return f"α = {as_number(alpha):g}" if not math.isnan(as_number(alpha)) else f"α = {alpha}"
    return "non-private"


def line_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``line``, the legend entry: the algorithm, with lambda (and schedule) when Upcycled-FL variants share a
    facet, and with the privacy setting (noise level, or 'non-private') in every facet that holds a private run."""
    frame = frame.copy()
    frame["line"] = [algorithm_label(a) for a in frame["algorithm"]]
    for _, grp in frame[frame["algorithm"] == "upcycled"].groupby(["dataset", "facet_mu"], dropna=False):
        if grp["coef"].nunique(dropna=False) > 1 or grp["schedule"].nunique() > 1:
            for idx in grp.index:
                r = frame.loc[idx].to_dict()
                frame.at[idx, "line"] = (
                    f"Upcycled-FL ({variant_label(r)}{', ' + r['schedule'] if grp['schedule'].nunique() > 1 else ''})"
                )
    if "mechanism" in frame.columns:
        mech = frame["mechanism"].fillna("none").astype(str)
        for _, grp in frame.groupby(["dataset", "facet_mu"], dropna=False):
            if (mech[grp.index] == "none").all():
                continue
            show_tau = grp.loc[mech[grp.index] == "output", "tau"].nunique() > 1 if "tau" in grp else False
            for idx in grp.index:
                r = frame.loc[idx].to_dict()
                line, extra = r["line"], privacy_label(r, show_tau)
                frame.at[idx, "line"] = f"{line[:-1]}, {extra})" if line.endswith(")") else f"{line} ({extra})"
    return frame


VARIANT_STYLES = (("-", None), ("--", "o"), ("-.", "s"), ((0, (5, 1, 1, 1, 1, 1)), "^"), ((0, (8, 2)), "D"))
"""Line style and marker of the k-th variant of one algorithm in a figure (beside its shade of the colour), so
that noise levels or λ values stay apart in grey print and for colour-blind readers."""
REFERENCE_STYLE = (":", None)
"""The non-private reference of a private figure: dotted."""


def line_styles(lines: Sequence[str]) -> dict[str, tuple[Any, str | None]]:
    """Each legend entry's (line style, marker): the non-private references dotted; the variants of one algorithm
    (its noise levels, λ values) each their own dash pattern and marker, in legend order."""
    styles: dict[str, tuple[Any, str | None]] = {}
    for algorithm in dict.fromkeys(line_algorithm(ln) for ln in lines):
        variants = [ln for ln in lines if line_algorithm(ln) == algorithm and "non-private" not in ln]
        for k, ln in enumerate(variants):
            styles[ln] = VARIANT_STYLES[k % len(VARIANT_STYLES)]
    return {ln: styles.get(ln, REFERENCE_STYLE) for ln in lines}


def _curve_rows(run: dict, metrics: Sequence[str], x: str) -> dict[str, Any]:
    """A run's curves in long form (iteration, x, value, metric), the iterations without a value left out, as the
    columns of one frame (numpy arrays; a frame per metric cost a figure of 200 runs half a second)."""
    m = load_metrics(run["run_dir"])
    xs = cumulative_rounds(m) if x == "round" else m[{"iteration": "iteration", "time": "cum_wall_s"}[x]]
    iteration, x_values = m["iteration"].to_numpy(), xs.astype(float).to_numpy()
    columns: dict[str, list] = {"iteration": [], "x": [], "value": [], "metric": []}
    for metric in metrics:
        value = m[metric].astype(float).to_numpy()
        kept = ~np.isnan(value)
        columns["iteration"].append(iteration[kept])
        columns["x"].append(x_values[kept])
        columns["value"].append(value[kept])
        columns["metric"].append(np.full(int(kept.sum()), metric, dtype=object))
    return {k: np.concatenate(v) for k, v in columns.items()}


def aggregate(curves: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean, min and max over seeds at each iteration (x averaged over seeds), and the seed count."""
    grouped = curves.groupby(keys + ["metric", "iteration"], dropna=False, sort=True)
    out = grouped.agg(
        x=("x", "mean"), mean=("value", "mean"), min=("value", "min"), max=("value", "max"), n_seeds=("value", "size")
    ).reset_index()
    return out


def curve_data(facets: pd.DataFrame, metrics: Sequence[str], x: str) -> pd.DataFrame:
    """Aggregated curves per facet (data set, mu) and line, NaN (unevaluated) iterations dropped."""
    parts = []
    cache: dict[str, dict[str, Any]] = {}
    for (dataset, mu, line), grp in facets.groupby(["dataset", "facet_mu", "line"], dropna=False, sort=False):
        check_one_config(
            grp, f"figure line {line} on {facet_title(str(dataset), cast(float, mu))}", ignore=("seed", "mu")
        )
        runs = records(grp, ["run_dir", "algorithm", "lam", "coef", *PRIVACY_KEYS])
        for run in runs:
            if run["run_dir"] not in cache:
                cache[run["run_dir"]] = _curve_rows(run, metrics, x)
        # one frame per line and facet, its runs' curves one after another and its config (one value: checked
        # above) given once (a frame per run cost a figure of 200 runs a tenth of a second)
        curves = [cache[run["run_dir"]] for run in runs]
        c: dict[str, Any] = {k: np.concatenate([rows[k] for rows in curves]) for k in curves[0]}
        first = runs[0]
        c.update(dataset=dataset, mu=mu, line=line)
        c.update(algorithm=first["algorithm"], lam=first.get("lam"), coef=first.get("coef"))
        for key in PRIVACY_KEYS:
            c[key] = first.get(key, "none" if key == "mechanism" else math.nan)
        parts.append(pd.DataFrame(c))
    curves_frame = pd.concat(parts, ignore_index=True)
    return aggregate(curves_frame, ["dataset", "mu", "line", "algorithm", "lam", "coef", *PRIVACY_KEYS])


def facet_list(data: pd.DataFrame) -> list[tuple[str, float]]:
    """(data set, mu) facets in the paper's order."""
    pairs = {(d, float(m)) for d, m in zip(data["dataset"], data["mu"], strict=True)}
    order = dataset_order([d for d, _ in pairs])
    return sorted(pairs, key=lambda p: (order.index(p[0]), -math.inf if math.isnan(p[1]) else p[1]))


ALGORITHM_COLOURS = {
    (label if name in PAPER_ALGORITHMS else name): colour for name, (label, colour) in ALGORITHM_STYLES.items()
}
"""The one colour of each algorithm in every figure (keyed by its legend label; Okabe-Ito colour-blind safe
for the paper's three). Variants of one algorithm (λ values, privacy settings) get shades of its colour."""
OTHER_COLOUR = "#444444"


def csv_colour(colour: str) -> str:
    """A hex colour as a figure's CSV records it, ``rgb(0,114,178)`` ('#' is the CSV's comment character, and a
    bare hex such as ``009e73`` would read as a number)."""
    value = colour.lstrip("#")
    return "rgb({},{},{})".format(*(int(value[i : i + 2], 16) for i in (0, 2, 4)))


def line_algorithm(line: str) -> str:
    """The algorithm part of a legend entry (``Upcycled-FL (λ = 0.2)`` -> ``Upcycled-FL``)."""
    return line.split(" (", 1)[0]


def palette_for(lines: Sequence[str]) -> dict[str, str]:
    """Each legend entry's colour (hex): its algorithm's from :data:`ALGORITHM_COLOURS`; several variants of one
    algorithm in a figure get shades of that colour from darker to lighter (with their own dash and marker,
    :func:`line_styles`), darkest first."""
    from matplotlib.colors import to_hex, to_rgb

    pal: dict[str, str] = {}
    for algorithm in dict.fromkeys(line_algorithm(ln) for ln in lines):
        colour = ALGORITHM_COLOURS.get(algorithm, OTHER_COLOUR)
        variants = [ln for ln in lines if line_algorithm(ln) == algorithm]
        if len(variants) == 1:
            pal[variants[0]] = colour
            continue
        rgb = to_rgb(colour)
        for i, ln in enumerate(variants):
            # from darker (blended toward black) to lighter (toward white): far enough apart to tell at a glance
            t = -0.5 + 1.1 * i / (len(variants) - 1)
            target = 1.0 if t > 0 else 0.0
            r, g, b = (c + (target - c) * abs(t) for c in rgb)
            pal[ln] = to_hex((r, g, b))
    return pal


def outside_legend(ax) -> None:
    """The legend to the right of the axes, off the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False, fontsize=small_text())


def draw_band(
    ax, d: pd.DataFrame, color, label: str | None = None, style: Any = "-", marker: str | None = None
) -> None:
    """Mean line and the min-max band of one line, sorted by x; points without a value are left out of the line.

    The line is ``ax.plot``: what ``seaborn.lineplot`` draws for one line without error bars, at a tenth of its cost
    (a figure draws dozens).
    """
    d = d.sort_values("x")
    line = d.dropna(subset=["x", "mean"])
    ax.plot(
        line["x"].to_numpy(),
        line["mean"].to_numpy(),
        color=color,
        label=label,
        linestyle=style,
        linewidth=1.3,
        marker=marker,
        markevery=max(1, len(line) // 8),
        markersize=4,
    )
    ax.fill_between(d["x"], d["min"], d["max"], color=color, alpha=BAND_ALPHA, linewidth=0)


def save_figure(fig, out_prefix: str) -> None:
    """Save PNG and PDF atomically, with upfl's version and commit in the metadata.

    The figure's layout (``tight_layout``) is already done: without a layout engine left on the figure and with the
    tight bounding box computed once, each file is one drawing (``bbox_inches="tight"`` draws twice per file).
    """
    creator = f"upfl {__version__} (git {git_commit() or 'unknown'})"
    fig.set_layout_engine(None)
    bbox = fig.get_tightbbox().padded(pyplot().rcParams["savefig.pad_inches"])
    smallest = {SMALLEST_TEXT_KEY: f"{smallest_text_pt(fig) * FIGURE_DPI / 72:.2f}"}
    for ext in ("png", "pdf"):
        with atomic_path(f"{out_prefix}.{ext}") as tmp:
            metadata = {"Creator": creator, **(smallest if ext == "png" else {})}
            fig.savefig(tmp, format=ext, dpi=FIGURE_DPI, bbox_inches=bbox, metadata=metadata)
    pyplot().close(fig)


FIGURE_DPI = 150
SMALLEST_TEXT_KEY = "Smallest text px"
"""The PNG text chunk holding the font size of the figure's smallest text, in the PNG's pixels: a reader's viewer
shows it at (displayed width / PNG width) times that (tests/workflow/test_report_browser.py measures it)."""


def smallest_text_pt(fig) -> float:
    """The font size (points) of the smallest text drawn on ``fig``: titles, labels, tick labels, legends, notes
    (texts that are empty or on a hidden panel left out)."""
    from matplotlib.text import Text

    sizes = [
        t.get_fontsize()
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())
    ]
    return min(sizes) if sizes else 0.0


def grid(n_rows: int, n_cols: int):
    plt = pyplot()
    set_theme(font_scale=1.1)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.6 * n_cols, 2.8 * n_rows), squeeze=False)
    return fig, axes


def _line_order(data: pd.DataFrame) -> list[str]:
    firsts = data.groupby("line", sort=False)["coef"].first()

    def key(line: str):
        rank = next((i for i, a in enumerate(ALGORITHM_ORDER) if line.startswith(algorithm_label(a))), 9)
        coef = as_number(firsts.get(line))
        return rank, -math.inf if math.isnan(coef) else coef, line

    return sorted(firsts.index, key=key)


MAX_PANEL_COLUMNS = 4
"""Facet columns per row of a figure: more facets wrap onto further rows. The report's viewer shows a figure about
1150 px wide and centres it in a 900 px window, cutting off the top of a taller one (its scroll starts at the
middle), so a figure stays wide rather than tall: four facet columns (about 2,500 px at 150 dpi) show the smallest
text (:func:`upfl.report.theme.small_text`) at 9 px or more, and a figure's height stays within the window."""


def wrapped_panels(n_facets: int, n_metrics: int, max_cols: int = MAX_PANEL_COLUMNS) -> tuple[int, int, list]:
    """Grid of facets, each a column of ``n_metrics`` panels, at most ``max_cols`` facets side by side: (rows,
    columns, each facet's (first row, column))."""
    n_cols = max(1, min(n_facets, max_cols))
    blocks = math.ceil(n_facets / n_cols) if n_facets else 1
    return blocks * n_metrics, n_cols, [((j // n_cols) * n_metrics, j % n_cols) for j in range(n_facets)]


def panel_layout(facets: Sequence[tuple[str, float]], n_metrics: int) -> tuple[int, int, dict]:
    """Grid positions: one facet per data set gives a column of metric panels per facet, at most
    :data:`MAX_PANEL_COLUMNS` side by side (:func:`wrapped_panels`); several mu per data set give a block of metric
    rows per data set and one column per mu. Returns (rows, cols, {facet: (row0, col)})."""
    datasets = list(dict.fromkeys(d for d, _ in facets))
    if len(datasets) == len(facets):
        n_rows, n_cols, places = wrapped_panels(len(facets), n_metrics)
        return n_rows, n_cols, dict(zip(facets, places, strict=True))
    mus = sorted({mu for _, mu in facets}, key=lambda m: -math.inf if math.isnan(m) else m)
    col = {mu: j for j, mu in enumerate(mus)}
    pos = {}
    for d, mu in facets:
        key = next(m for m in col if _same(m, mu))
        pos[(d, mu)] = (datasets.index(d) * n_metrics, col[key])
    return n_metrics * len(datasets), len(mus), pos


def plot_convergence(data: pd.DataFrame, metrics: Sequence[str], x: str, title: str | None, note: str = ""):
    """Metric panels per facet (see :func:`panel_layout`); one band per line; ``note`` below the band note."""
    facets = facet_list(data)
    lines = _line_order(data)
    pal, styles = palette_for(lines), line_styles(lines)
    n_rows, n_cols, pos = panel_layout(facets, len(metrics))
    fig, axes = grid(n_rows, n_cols)
    used = set()
    for dataset, mu in facets:
        row0, j = pos[(dataset, mu)]
        fd = data[(data["dataset"] == dataset) & data["mu"].map(lambda m, mu=mu: _same(m, mu))]
        lam = _single_lambda(fd)
        for i, metric in enumerate(metrics):
            ax = axes[row0 + i][j]
            used.add((row0 + i, j))
            md = fd[fd["metric"] == metric]
            for line in [ln for ln in lines if ln in set(md["line"])]:
                style, marker = styles[line]
                draw_band(ax, md[md["line"] == line], pal[line], label=line, style=style, marker=marker)
            ax.set_ylabel(metric_label(metric))
            ax.set_xlabel(X_LABELS[x] if i == len(metrics) - 1 else "")
            if i == 0:
                ax.set_title(facet_title(dataset, mu, lam))
    for r in range(n_rows):
        for c in range(n_cols):
            if (r, c) not in used:
                axes[r][c].set_visible(False)
    _finish(fig, title, "\n".join(part for part in (length_note(data, x), note) if part))
    figure_legend(fig, axes)
    return fig


def figure_legend(fig, axes) -> None:
    """One legend for the whole figure, right of the panels (each line's colour, dash and marker are the same in
    every panel), instead of one per panel."""
    entries: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(
            list(entries.values()),
            list(entries),
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            frameon=False,
            fontsize=small_text(),
        )


def _single_lambda(fd: pd.DataFrame) -> str:
    up = fd[fd["algorithm"] == "upcycled"]
    lams = {float(v) for v in up["lam"].dropna()} if "lam" in up else set()
    return f"λ = {lams.pop():g}" if len(lams) == 1 and up["line"].nunique() == 1 else ""


def _same(a, b) -> bool:
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or a == b


def length_note(data: pd.DataFrame, x: str) -> str:
    """A caption line when the curves end at different x (Upcycled-FL's 2T iterations against FedProx's T):
    'FedAvg, FedProx end at iteration 20, Upcycled-FL at 40 (equal training rounds; ...)'; '' when they agree."""
    ends = data.groupby("line")["x"].max()
    if ends.nunique() < 2:
        return ""
    groups: dict[float, list[str]] = {}
    for line, end in ends.items():
        groups.setdefault(float(end), []).append(str(line))
    unit = {"iteration": "iteration", "round": "training round", "time": "second"}[x]
    parts = [f"{', '.join(lines)} at {unit} {end:g}" for end, lines in sorted(groups.items())]
    why = (
        " (equal training rounds: Upcycled-FL's even iterations train no device)"
        if x == "iteration" and any(ln.startswith("Upcycled") for ln in ends.index)
        else ""
    )
    return "Curves end at different points: " + "; ".join(parts) + why + "."


def figure_title(name: str) -> str:
    """The paper's number for an output named ``fig<N>[_part]`` ('Figure 5', 'Figure 3 (output)'), else a name
    that says the paper has no such figure."""
    from ..paper_order import paper_figure

    figure = paper_figure(name)
    if figure:
        number, part = figure
        return f"Figure {number}" + (f" ({part})" if part else "")
    return f"Not in the paper: {name.replace('_', ' ')}"


def wrapped_note(text: str, width_in: float) -> str:
    """A figure's note in lines that fit its width (about 14 characters per inch at the note's small font), so a
    long note never widens the saved figure and squashes its panels."""
    import textwrap

    width = max(50, int(width_in * 14))
    return "\n".join(textwrap.fill(line, width) for line in text.splitlines())


def figure_note(fig, text: str) -> None:
    """``text`` under the figure's panels, centred, in the small font and in lines that fit its width
    (:func:`wrapped_note`)."""
    fig.text(0.5, -0.01, wrapped_note(text, fig.get_figwidth()), ha="center", va="top", fontsize=small_text())


def staggered_log_labels(values: list[float], min_gap: float = 0.09) -> list[str]:
    """``%g`` labels of sorted ticks on a log axis, each within ``min_gap`` of the axis' span (in decades) of the
    label before it on its line moved to a second line (c_1 = 0.9 and 1 would overlap)."""
    if not values:
        return []
    span = max(math.log10(values[-1] / values[0]), 1e-12) * 1.1
    last = [-math.inf, -math.inf]
    labels = []
    for value in values:
        x = math.log10(value)
        line = 0 if x - last[0] >= min_gap * span else 1
        last[line] = x
        labels.append(("\n" if line else "") + f"{value:g}")
    return labels


def _finish(fig, title: str | None, note: str = "") -> None:
    if title:
        fig.suptitle(title)
    figure_note(fig, BAND_NOTE + (f"\n{note}" if note else ""))
    fig.tight_layout()


def convergence_figure(
    runs: pd.DataFrame,
    out_prefix: str,
    metrics: Sequence[str],
    x: str = "iteration",
    title: str | None = None,
    provenance: str | None = None,
) -> pd.DataFrame:
    """Loss and accuracy against iterations (or training rounds, or time) of every algorithm, per facet."""
    if x not in X_CHOICES["convergence"]:
        raise ReportError(f"--x {x}: convergence plots against {', '.join(X_CHOICES['convergence'])}")
    facets = line_keys(assign_facets(require_converged(runs, "convergence figure")))
    data = curve_data(facets, metrics, x)
    fig = plot_convergence(data, metrics, x, title, private_runs_note(runs, metrics))
    save_figure(fig, out_prefix)
    data.insert(0, "panel", "curve")
    data["colour"] = data["line"].map(palette_for(_line_order(data))).map(csv_colour)
    write_csv(f"{out_prefix}.csv", data, provenance)
    return data


def final_data(ups: pd.DataFrame, metrics: Sequence[str], x: str) -> pd.DataFrame:
    """Per facet and lambda: mean, min and max over seeds of the final metrics (from runs.csv)."""
    rows = []
    for (dataset, mu, coef), grp in ups.groupby(["dataset", "facet_mu", "coef"], dropna=False, sort=True):
        check_one_config(
            grp, f"lambda sweep point {facet_title(str(dataset), cast(float, mu))}, step {coef:g}", ignore=("seed",)
        )
        for metric in metrics:
            v = grp[f"final_{metric}"].astype(float)
            rows.append(
                {
                    "dataset": dataset,
                    "mu": mu,
                    "line": grp["line"].iloc[0],
                    "algorithm": "upcycled",
                    "lam": grp["lam"].iloc[0],
                    "coef": coef,
                    "metric": metric,
                    "iteration": int(grp["final_iteration"].iloc[0]),
                    "x": float(cast(float, coef) if x == "step" else grp["lam"].iloc[0]),
                    "mean": v.mean(),
                    "min": v.min(),
                    "max": v.max(),
                    "n_seeds": len(v),
                }
            )
    return pd.DataFrame(rows)


def reference_final(refs: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """FedProx's final metrics per facet (mean, min, max over seeds): the sweep's reference line."""
    rows = []
    for (dataset, mu), grp in refs.groupby(["dataset", "facet_mu"], dropna=False, sort=True):
        check_one_config(grp, f"FedProx reference on {facet_title(str(dataset), cast(float, mu))}", ignore=("seed",))
        for metric in metrics:
            v = grp[f"final_{metric}"].astype(float)
            rows.append(
                {
                    "dataset": dataset,
                    "mu": mu,
                    "line": "FedProx",
                    "algorithm": "fedprox",
                    "metric": metric,
                    "iteration": int(grp["final_iteration"].iloc[0]),
                    "mean": v.mean(),
                    "min": v.min(),
                    "max": v.max(),
                    "n_seeds": len(v),
                }
            )
    return pd.DataFrame(rows)


def sweep_line(row: dict) -> str:
    """A sweep point's legend entry: the variant as configured and its other form, ``λ = 0.43 (step 0.70)`` for a
    run given lambda, ``step = 0.3 (λ = 1.17)`` for one given the step (Eq. (5): step = mu / (mu + lambda)), the step
    alone when no lambda gives it (:func:`upfl.names.equivalent_lambda`)."""
    label = variant_label(row)
    if not math.isnan(as_number(row.get("lam"))):
        return f"{label} (step {as_number(row['coef']):.2f})"
    lam = equivalent_lambda(base_name(str(row["algorithm"])), as_number(row.get("mu")), as_number(row.get("coef")))
    return f"{label} (λ = {lam:.3g})" if lam is not None else label


def _sweep_lines(ups: pd.DataFrame) -> pd.DataFrame:
    ups = ups.copy()
    ups["line"] = [sweep_line(r) for r in ups.to_dict("records")]
    return ups


def plot_lambda_sweep(
    curves: pd.DataFrame,
    finals: pd.DataFrame,
    refs: pd.DataFrame,
    metrics: Sequence[str],
    x: str,
    panels: Sequence[str],
    title: str | None,
):
    """Per facet: curves of every lambda against iterations (FedProx dashed), and final value against step."""
    facets = facet_list(pd.concat([finals, curves]) if not curves.empty else finals)
    fig, axes = grid(len(metrics), len(facets) * len(panels))
    ref_color = ALGORITHM_COLOURS["FedProx"]
    for j, (dataset, mu) in enumerate(facets):

        def sel(d, dataset=dataset, mu=mu):
            return d[(d["dataset"] == dataset) & d["mu"].map(lambda m: _same(m, mu))] if not d.empty else d

        fc, ff, fr = sel(curves), sel(finals), sel(refs)
        sweep = ff.drop_duplicates("line").sort_values("coef")["line"].tolist()
        ramp = dict(zip(sweep, colour_palette("viridis", n_colors=max(len(sweep), 1)), strict=False))
        for i, metric in enumerate(metrics):
            for k, panel in enumerate(panels):
                ax = axes[i][j * len(panels) + k]
                if panel == "curves":
                    _sweep_curves(ax, fc[fc["metric"] == metric], sweep, ramp, ref_color, legend=i == 0)
                    ax.set_xlabel("Iteration" if i == len(metrics) - 1 else "")
                else:
                    _sweep_final(
                        ax,
                        ff[ff["metric"] == metric],
                        fr[fr["metric"] == metric] if not fr.empty else fr,
                        ref_color,
                        legend=i == 0,
                    )
                    ax.set_xlabel(X_LABELS[x] if i == len(metrics) - 1 else "")
                ax.set_ylabel(metric_label(metric) if panel == "curves" else f"Final {metric_label(metric).lower()}")
                if i == 0:
                    ax.set_title(facet_title(dataset, mu))
    _finish(fig, title, sweep_length_note(curves))
    return fig


def sweep_length_note(curves: pd.DataFrame) -> str:
    """:func:`length_note` of a sweep's curves, its Upcycled-FL lines as one ('FedProx at iteration 80; Upcycled-FL
    at iteration 160 (equal training rounds ...)')."""
    if curves.empty:
        return ""
    lines = curves["line"].where(curves["line"] == "FedProx", algorithm_label("upcycled"))
    return length_note(curves.assign(line=lines), "iteration")


def _sweep_curves(ax, d: pd.DataFrame, sweep: list[str], ramp: dict, ref_color, legend: bool) -> None:
    for line in sweep:
        draw_band(ax, d[d["line"] == line], ramp[line], label=line if legend else None)
    ref = d[d["line"] == "FedProx"]
    if not ref.empty:
        draw_band(ax, ref, ref_color, label="FedProx" if legend else None, style="--")
    if legend:
        outside_legend(ax)


def _sweep_final(ax, d: pd.DataFrame, ref: pd.DataFrame, ref_color, legend: bool) -> None:
    color = colour_palette("colorblind")[2]
    draw_band(ax, d, color, label="Upcycled-FL" if legend else None, marker="o")
    if not ref.empty:
        r = ref.iloc[0]
        ax.axhline(r["mean"], color=ref_color, linestyle="--", label="FedProx" if legend else None)
        ax.axhspan(r["min"], r["max"], color=ref_color, alpha=BAND_ALPHA / 2, linewidth=0)
    if legend:
        outside_legend(ax)


def lambda_sweep_figure(
    runs: pd.DataFrame,
    out_prefix: str,
    metrics: Sequence[str],
    x: str = "step",
    panels: Sequence[str] = ("curves", "final"),
    title: str | None = None,
    provenance: str | None = None,
) -> pd.DataFrame:
    """Upcycled-FL over lambda per data set x mu: curves against iterations and final value against step."""
    if x not in X_CHOICES["lambda_sweep"]:
        raise ReportError(f"--x {x}: the lambda sweep plots against {', '.join(X_CHOICES['lambda_sweep'])}")
    bad = [p for p in panels if p not in ("curves", "final")]
    if bad or not panels:
        raise ReportError(f"--panels: choose from curves, final; got {', '.join(panels) or 'none'}")
    facets = assign_facets(require_converged(runs, "lambda sweep figure"))
    ups = facets[facets["algorithm"] == "upcycled"]
    if ups.empty:
        raise ReportError("lambda_sweep: the selected runs have no Upcycled-FL runs")
    if x == "lam" and ups["lam"].isna().any():
        raise ReportError("lambda_sweep --x lam: some Upcycled-FL runs give step instead of lambda; use --x step")
    ups = _sweep_lines(ups)
    keys = set(zip(ups["dataset"], ups["facet_mu"], strict=True))
    in_sweep = pd.Series(
        [k in keys for k in zip(facets["dataset"], facets["facet_mu"], strict=True)], index=facets.index
    )
    refs = facets[(facets["algorithm"] == "fedprox") & in_sweep].copy()
    refs["line"] = "FedProx"
    finals = final_data(ups, metrics, x)
    ref_finals = reference_final(refs, metrics) if not refs.empty else pd.DataFrame()
    curves = (
        curve_data(pd.concat([ups, refs], ignore_index=True), metrics, "iteration")
        if "curves" in panels
        else pd.DataFrame(columns=["dataset", "mu", "line", "metric"])
    )
    fig = plot_lambda_sweep(curves, finals, ref_finals, metrics, x, panels, title)
    save_figure(fig, out_prefix)
    parts = [
        df.assign(panel=name)
        for name, df in (("curve", curves), ("final", finals), ("final_reference", ref_finals))
        if not df.empty
    ]
    data = pd.concat(parts, ignore_index=True)
    data = data[["panel"] + [c for c in data.columns if c != "panel"]]
    write_csv(f"{out_prefix}.csv", data, provenance)
    return data
