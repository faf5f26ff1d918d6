"""The report: run folders to ``runs.csv``, the paper's tables (1, 2, time, privacy) and figures (2-12, trade-off).

``upfl report runs`` flattens run folders into one table; every other command reads that table
(and the runs' ``metrics.csv`` for curves and times). The paper's own numbers live in
``paper_values/*.csv``.

The names below are imported from their modules on first use (PEP 562): a report job imports the modules it runs
on, not the figures, privacy and timing modules with every ``upfl.report.collect``.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "ReportError": "collect",
    "apply_where": "collect",
    "collect_runs": "collect",
    "load_metrics": "collect",
    "read_runs": "collect",
    "select_experiment": "collect",
    "convergence_figure": "figures",
    "lambda_sweep_figure": "figures",
    "mean_interval": "stats",
    "t_quantile": "stats",
    "table1_frame": "tables",
    "write_table1": "tables",
    "write_table2": "tables",
    "time_frame": "timing",
    "write_time": "timing",
    "privacy_claims_frame": "privacy_table",
    "privacy_frame": "privacy_table",
    "privacy_tradeoff_figure": "privacy_tradeoff",
    "write_privacy_table": "privacy_table",
}
"""Each public name and the module of ``upfl.report`` that defines it."""

__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
