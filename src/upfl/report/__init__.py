"""The report: run folders to ``runs.csv``, the paper's tables (1, 2, time, privacy) and figures (2-12, trade-off).

``upfl report runs`` flattens run folders into one table; every other command reads that table
(and the runs' ``metrics.csv`` for curves and times). The paper's own numbers live in
``paper_values/*.csv``.
"""

from .collect import ReportError, apply_where, collect_runs, load_metrics, read_runs, select_experiment
from .figures import convergence_figure, lambda_sweep_figure
from .privacy_table import privacy_claims_frame, privacy_frame, write_privacy_table
from .privacy_tradeoff import privacy_tradeoff_figure
from .stats import mean_interval, t_quantile
from .tables import table1_frame, write_table1, write_table2
from .timing import time_frame, write_time

__all__ = [
    "ReportError",
    "apply_where",
    "collect_runs",
    "load_metrics",
    "read_runs",
    "select_experiment",
    "convergence_figure",
    "lambda_sweep_figure",
    "mean_interval",
    "t_quantile",
    "table1_frame",
    "write_table1",
    "write_table2",
    "time_frame",
    "write_time",
    "privacy_claims_frame",
    "privacy_frame",
    "privacy_tradeoff_figure",
    "write_privacy_table",
]
