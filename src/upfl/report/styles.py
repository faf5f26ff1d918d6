"""How the report shows each algorithm: its label in tables and legends and its one colour in every figure.

Colours: Okabe-Ito (colour-blind safe) for the paper's three algorithms.
:data:`upfl.report.paper_numbers.ALGORITHM_LABELS`, :data:`upfl.report.ablations.BASE_LABELS` and
:data:`upfl.report.figures.ALGORITHM_COLOURS` are read from this table.
"""

from __future__ import annotations

ALGORITHM_STYLES: dict[str, tuple[str, str]] = {
    "fedavg": ("FedAvg", "#0072B2"),
    "fedprox": ("FedProx", "#E69F00"),
    "upcycled": ("Upcycled-FL", "#009E73"),
    "fedavgm": ("FedAvgM", "#CC79A7"),
    "fednova": ("FedNova", "#56B4E9"),
    "scaffold": ("SCAFFOLD", "#D55E00"),
    "fedadam": ("FedAdam", "#8C564B"),
    "fedyogi": ("FedYogi", "#7F7F7F"),
    "feddyn": ("FedDyn", "#BCBD22"),
    "pfedme": ("pFedMe", "#17BECF"),
}
"""Algorithm name -> (display label, colour); the base algorithms in the order the report lists them."""

PAPER_ALGORITHMS = ("fedavg", "fedprox", "upcycled")
"""The paper's three algorithms, in its order: their figures' legends use the display label."""
