"""Progress of long work: how much is done of what is planned, and when the rest should end.

A bundle's job logs one line per finished run and a long run one line per logged iteration, each with an estimate of
the time left (ETA): the time so far per unit done, times the units left (:func:`eta_seconds`).
"""

from __future__ import annotations


def eta_seconds(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds until ``total`` units are done, at the rate of the ``done`` so far in ``elapsed_s``; None before any."""
    if done <= 0:
        return None
    return max(0, total - done) * elapsed_s / done


def duration_text(seconds: float | None) -> str:
    """A duration for people: ``45 s``, ``12m05s``, ``3h07m``; ``unknown`` for None."""
    if seconds is None:
        return "unknown"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_text(done: int, total: int, elapsed_s: float, unit: str) -> str:
    """``3 of 40 runs done, ETA 7m36s``: the units done of those planned and the time left."""
    return f"{done} of {total} {unit} done, ETA {duration_text(eta_seconds(done, total, elapsed_s))}"
