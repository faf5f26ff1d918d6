"""Output names and the paper's figures: an output named ``fig<N>[_part]`` is the paper's Figure N (that part), and
the report lists outputs in the paper's order. Torch- and pandas-free: the workflow's parse, the report and the
docs generators read it."""

from __future__ import annotations

import re


def paper_figure(name: str) -> tuple[int, str] | None:
    """An output named ``fig<N>[_part]``: (N, part), else None (not a figure of the paper)."""
    match = re.fullmatch(r"fig(\d+)(?:_(\w+))?", name)
    return (int(match.group(1)), (match.group(2) or "").replace("_", " ")) if match else None


def paper_order_label(name: str) -> str:
    """The report's first label column, which Snakemake sorts as text: 'Figure 02 (convergence)', ..., 'Figure 11',
    then outputs that are not in the paper ('More: lambda schedule')."""
    figure = paper_figure(name)
    if figure is None:
        return f"More: {name.replace('_', ' ')}"
    number, part = figure
    return f"Figure {number:02d}" + (f" ({part})" if part else "")


def table_menu_label(name: str) -> str:
    """A table's entry in the report's Tables menu, which Snakemake sorts as text: 'Table 1' and 'Table 2' for the
    outputs named ``table<N>`` (the paper's tables), then 'Tables, more: <name>' for the others."""
    match = re.fullmatch(r"table(\d+)", name)
    return f"Table {int(match.group(1))}" if match else f"Tables, more: {name.replace('_', ' ')}"
