"""Divergence: a run whose weights or losses stop being finite is flagged, never reported as a result.

The simulation checks the global model after every iteration and the losses whenever it evaluates;
the first failure stops the run. ``summary.json`` then holds ``diverged`` (see :func:`diverged_entry`),
``final`` holds the failing iteration's metrics (``null`` where not finite), ``best`` is ``null``,
and ``upfl run`` exits with :data:`EXIT_DIVERGED`. The report keeps such runs out of means and
intervals and marks their cells ("diverged 2/3 seeds").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

EXIT_DIVERGED = 3
"""Exit status of ``upfl run`` for a diverged run (2: bad input; 4: the run's checkpoint is busy)."""


def weights_problem(w) -> str | None:
    """``None`` when every entry of ``w`` (an array or a tensor) is finite, else what is wrong (e.g.
    ``'weights: 12 of 42 entries NaN'``). A CPU vector is checked in numpy (one call instead of three torch
    operations, at every iteration); a GPU one is copied to the CPU only when something is wrong."""
    if not isinstance(w, np.ndarray):
        if w.device.type != "cpu":
            import torch

            if bool(torch.isfinite(w).all()):
                return None
            w = w.cpu()
        w = w.numpy()
    if np.isfinite(w).all():
        return None
    nan = int(np.isnan(w).sum())
    inf = int(w.size - int(np.isfinite(w).sum()) - nan)
    parts = ([f"{nan} NaN"] if nan else []) + ([f"{inf} infinite"] if inf else [])
    return f"weights: {' and '.join(parts)} of {w.size} entries"


def loss_problem(row: dict[str, Any], has_test: bool) -> str | None:
    """``None`` when the evaluated losses of ``row`` are finite (test only when a test split exists)."""
    for key in ("train_loss", "test_loss") if has_test else ("train_loss",):
        value = row.get(key)
        if value is not None and not math.isfinite(value):
            return f"{key} = {value}"
    return None


def diverged_entry(iteration: int, kind: str, what: str) -> dict[str, Any]:
    """The ``diverged`` value of ``summary.json`` for a run that failed at ``iteration``."""
    return {"iteration": iteration, "kind": kind, "what": what}
