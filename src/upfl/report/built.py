"""What the report's front page says was built: read from the files under ``results/``, never from the config
of the ``snakemake --report`` call (a report made without ``--configfile`` after the quick preset describes the quick
preset's runs, not the full config's plan)."""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterable
from pathlib import Path


def built_runs(runs_csv: str | os.PathLike) -> int:
    """The number of runs in ``results/runs.csv`` (0 when it does not exist)."""
    try:
        with open(runs_csv, encoding="utf-8", newline="") as f:
            return max(0, sum(1 for row in csv.reader(f) if row and not row[0].startswith("#")) - 1)
    except OSError:
        return 0


def built_presets(markdown_files: Iterable[str | os.PathLike]) -> list[str]:
    """The presets named by the provenance lines of existing Markdown outputs (``...; preset quick; ...``): what
    a report of ``results/`` holds, whichever config the report command itself selects."""
    presets = set()
    for path in markdown_files:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError:
            continue
        for line in text.splitlines():
            found = re.search(r"; preset ([^;]+);", line) if line.startswith("Provenance: ") else None
            if found:
                presets.add(found.group(1).strip())
    return sorted(presets)
