"""What the report's front page says was built: read from the files under ``results/``, never from the config
of the ``snakemake --report`` call (a report made without ``--configfile`` after the quick preset describes the quick
preset's runs, not the full config's plan)."""

from __future__ import annotations

import csv
import os

from .render import PROVENANCE_PREFIX


def built_runs(runs_csv: str | os.PathLike) -> int:
    """The number of runs in ``results/runs.csv`` (0 when it does not exist)."""
    try:
        with open(runs_csv, encoding="utf-8", newline="") as f:
            return max(0, sum(1 for row in csv.reader(f) if row and not row[0].startswith("#")) - 1)
    except OSError:
        return 0


def built_preset(table_csv: str | os.PathLike) -> str | None:
    """The preset a table was built for, from its provenance line (``...; preset quick; ...``); None without one."""
    try:
        with open(table_csv, encoding="utf-8") as f:
            lines = [line for line in f if line.startswith(PROVENANCE_PREFIX)]
    except OSError:
        return None
    for part in (lines[-1][len(PROVENANCE_PREFIX):].split("; ") if lines else []):
        if part.startswith("preset "):
            return part[len("preset "):].strip()
    return None
