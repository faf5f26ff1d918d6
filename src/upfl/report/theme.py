"""The figures' look: matplotlib on the Agg backend (:func:`pyplot`, imported when a figure is drawn) and seaborn's
"whitegrid" / "paper" theme and palettes, set from their rcParams and colour tables (:func:`set_theme`,
:func:`colour_palette`) without importing seaborn (tests/report/test_report.py checks them against seaborn's)."""

from __future__ import annotations

import functools
import importlib.util
import sys

import numpy as np

DEFERRED_MODULES = ("fontTools.subset",)
"""Modules matplotlib's PDF backend imports (``matplotlib.backends._backend_pdf_ps``) but uses only to embed Type 42
fonts; the figures embed Type 3 fonts (matplotlib's default), so these load on first use instead (a tenth of a
CPU-second per figure job)."""


def defer_import(name: str) -> None:
    """Put a module in ``sys.modules`` that is executed on first attribute access (:class:`importlib.util.LazyLoader`),
    so that importing it costs nothing until it is used; nothing when it is already imported or cannot be found."""
    if name in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:  # its package is missing: the import that needs it says so
        return
    if spec is None or spec.loader is None:
        return
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


@functools.cache
def _drawing_modules():
    """matplotlib on Agg, and what saving a figure as PNG and PDF imports, loaded once with the cyclic garbage
    collector paused (:func:`upfl.startup.paused_gc`: the objects they create all live on)."""
    from ..startup import paused_gc

    with paused_gc(freeze=True):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        for name in DEFERRED_MODULES:
            defer_import(name)
        import matplotlib.backends.backend_pdf  # noqa: F401
        import PIL.PngImagePlugin  # noqa: F401
    return plt


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (selected before pyplot is first imported)."""
    import matplotlib

    plt = _drawing_modules()
    matplotlib.use("Agg")
    return plt


WHITEGRID_STYLE = {
    "figure.facecolor": "white",
    "axes.labelcolor": ".15",
    "xtick.direction": "out",
    "ytick.direction": "out",
    "xtick.color": ".15",
    "ytick.color": ".15",
    "axes.axisbelow": True,
    "grid.linestyle": "-",
    "text.color": ".15",
    "font.family": ["sans-serif"],
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"],
    "lines.solid_capstyle": "round",
    "patch.edgecolor": "w",
    "patch.force_edgecolor": True,
    "xtick.top": False,
    "ytick.right": False,
    "axes.grid": True,
    "axes.facecolor": "white",
    "axes.edgecolor": ".8",
    "grid.color": ".8",
    "axes.spines.left": True,
    "axes.spines.bottom": True,
    "axes.spines.right": True,
    "axes.spines.top": True,
    "xtick.bottom": False,
    "ytick.left": False,
}
"""seaborn 0.13's ``axes_style("whitegrid")`` (its ``image.cmap``, seaborn's own "rocket", left out: no figure
draws an image)."""

PAPER_SIZES = {
    "axes.linewidth": 1.25,
    "grid.linewidth": 1,
    "lines.linewidth": 1.5,
    "lines.markersize": 6,
    "patch.linewidth": 1,
    "xtick.major.width": 1.25,
    "ytick.major.width": 1.25,
    "xtick.minor.width": 1,
    "ytick.minor.width": 1,
    "xtick.major.size": 6,
    "ytick.major.size": 6,
    "xtick.minor.size": 4,
    "ytick.minor.size": 4,
}
FONT_SIZES = {
    "font.size": 12,
    "axes.labelsize": 12,
    "axes.titlesize": 12,
    "xtick.labelsize": 11,
    "ytick.labelsize": 11,
    "legend.fontsize": 11,
    "legend.title_fontsize": 12,
}
"""seaborn 0.13's base plotting context; its "paper" context scales every size by 0.8, fonts then by the font scale."""

DEEP_COLOURS = (
    "#4C72B0",
    "#DD8452",
    "#55A868",
    "#C44E52",
    "#8172B3",
    "#937860",
    "#DA8BC3",
    "#8C8C8C",
    "#CCB974",
    "#64B5CD",
)
COLOURBLIND_COLOURS = (
    "#0173B2",
    "#DE8F05",
    "#029E73",
    "#D55E00",
    "#CC78BC",
    "#CA9161",
    "#FBAFE4",
    "#949494",
    "#ECE133",
    "#56B4E9",
)
"""seaborn's "deep" (the colour cycle of its theme) and "colorblind" palettes."""
COLOUR_CODES = {"b": 0, "g": 2, "r": 3, "m": 4, "y": 8, "c": 9}
"""The single-letter colours seaborn's theme maps onto "deep" (index into :data:`DEEP_COLOURS`); "k" is 0.1 grey."""


def theme_rc(font_scale: float) -> dict:
    """The rcParams of ``seaborn.set_theme(style="whitegrid", context="paper", font_scale=...)``, without importing
    seaborn (whose import pulls in scipy.stats, over half a second per figure job). Sizes are multiplied in
    seaborn's order (size x 0.8, then fonts x the scale), so the floats, and the files drawn, are the same."""
    from cycler import cycler
    from matplotlib.colors import to_rgb

    sizes = {k: v * 0.8 for k, v in {**PAPER_SIZES, **FONT_SIZES}.items()}
    sizes.update({k: sizes[k] * font_scale for k in FONT_SIZES})
    return {**sizes, **WHITEGRID_STYLE, "axes.prop_cycle": cycler("color", [to_rgb(c) for c in DEEP_COLOURS])}


def set_theme(font_scale: float) -> None:
    """Apply :func:`theme_rc` and seaborn's colour codes (``"b"`` is deep blue, ``"k"`` 0.1 grey)."""
    import matplotlib as mpl
    from matplotlib.colors import to_rgb

    pyplot()
    mpl.rcParams.update(theme_rc(font_scale))
    codes = {code: to_rgb(DEEP_COLOURS[i]) for code, i in COLOUR_CODES.items()}
    for code, rgb in {**codes, "k": (0.1, 0.1, 0.1)}.items():
        mpl.colors.ColorConverter.colors[code] = rgb  # item by item: the mapping clears its cache on each


def small_text() -> float:
    """The figures' smallest text (points): the tick labels' size of the theme set, which legends, notes and
    annotations use too (they were 'small' and 'x-small', 6 and 7 pt: 6-8 px in the report's viewer, which shows a
    figure about 1150 px wide). A figure's panels are laid out so that this size stays at 9 px or more there
    (:data:`upfl.report.figures.MAX_PANEL_COLUMNS`)."""
    import matplotlib as mpl

    return float(mpl.rcParams["xtick.labelsize"])


def colour_palette(name: str, n_colors: int | None = None) -> list[tuple[float, float, float]]:
    """seaborn's ``color_palette(name, n_colors)`` for the two palettes the figures use: "colorblind" (its ten
    colours, cycled to ``n_colors``) and a matplotlib colormap such as "viridis" (``n_colors`` evenly spaced inner
    samples)."""
    from matplotlib.colors import to_rgb

    if name == "colorblind":
        n = len(COLOURBLIND_COLOURS) if n_colors is None else n_colors
        return [to_rgb(COLOURBLIND_COLOURS[i % len(COLOURBLIND_COLOURS)]) for i in range(n)]
    import matplotlib

    if n_colors is None:
        raise ValueError(f"colour_palette: the colormap {name!r} needs n_colors")
    samples = matplotlib.colormaps[name](np.linspace(0, 1, n_colors + 2)[1:-1])[:, :3]
    return [to_rgb(tuple(row)) for row in samples]


@functools.cache
def _bisected_wrap_text():
    """A :class:`matplotlib.text.Text` whose ``wrap=True`` line breaks are found by bisection: matplotlib measures the
    line of the first 2, 3, 4 ... words until one is too wide, a new measurement of a longer string each (fifty per
    line of a long note, in each of the layout, PNG and PDF renderers: a fifth of the privacy trade-off figure's
    CPU time). A line's width grows with each word added, so the first too-wide prefix found by bisection is the
    one the scan finds, and the lines, and the files drawn, are the same."""
    from matplotlib.text import Text

    class BisectedWrapText(Text):
        def _get_wrapped_text(self):
            if not self.get_wrap() or self.get_usetex():
                return super()._get_wrapped_text()
            line_width = self._get_wrap_line_width()
            wrapped_lines = []
            for unwrapped_line in self.get_text().split("\n"):
                words = unwrapped_line.split(" ")
                while words:
                    if len(words) == 1:
                        wrapped_lines.append(words.pop(0))
                        continue
                    low, high = 2, len(words) + 1  # the first prefix length in [low, high) too wide; high: none is
                    while low < high:
                        mid = (low + high) // 2
                        if self._get_rendered_text_width(" ".join(words[:mid])) > line_width:
                            high = mid
                        else:
                            low = mid + 1
                    taken = low - 1 if low <= len(words) else len(words)
                    wrapped_lines.append(" ".join(words[:taken]))
                    words = words[taken:]
            return "\n".join(wrapped_lines)

    return BisectedWrapText


def wrapped_figure_text(fig, x: float, y: float, text: str, **kwargs):
    """``fig.text(x, y, text, wrap=True, **kwargs)`` drawn by :func:`_bisected_wrap_text`'s class: the same lines
    at a fraction of the measuring."""
    artist = fig.text(x, y, text, wrap=True, **kwargs)
    artist.__class__ = _bisected_wrap_text()
    return artist
