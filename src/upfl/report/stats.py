"""Small statistics for the report: Student t quantiles and paired confidence intervals.

The t distribution's CDF for integer degrees of freedom has a closed form (Abramowitz and Stegun
26.7.3-4); the quantile is found by bisection on it, so the package needs no scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


def t_central_probability(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df`` >= 1 degrees of freedom (A&S 26.7.3-4)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df!r}")
    df = int(df)
    t = abs(float(t))
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for j in range(1, df // 2):
            term *= (2 * j - 1) / (2 * j) * c2
            total += term
        return s * total
    if df == 1:
        return 2.0 * theta / math.pi
    term = math.cos(theta)
    total = term
    for j in range(1, (df - 1) // 2):
        term *= (2 * j) / (2 * j + 1) * c2
        total += term
    return 2.0 / math.pi * (theta + s * total)


def t_quantile(level: float, df: int) -> float:
    """The two-sided critical value t* with P(|T| <= t*) = ``level`` (t_{(1+level)/2, df})."""
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level!r}")
    lo, hi = 0.0, 1.0
    while t_central_probability(hi, df) < level:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if t_central_probability(mid, df) < level:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Interval:
    """Mean of n values with a two-sided t confidence interval (NaN bounds when n < 2)."""

    n: int
    mean: float
    std: float
    low: float
    high: float

    @property
    def above_zero(self) -> bool | None:
        """True when the whole interval lies above 0; None when it is undefined (n < 2)."""
        if self.n < 2 or math.isnan(self.low):
            return None
        return self.low > 0


def mean_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Mean, sample std (ddof 1) and t interval mean +- t* s / sqrt(n) of ``values`` (NaNs dropped)."""
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    n = int(arr.size)
    if n == 0:
        return Interval(0, math.nan, math.nan, math.nan, math.nan)
    mean = float(arr.mean())
    if n < 2:
        return Interval(1, mean, math.nan, math.nan, math.nan)
    std = float(arr.std(ddof=1))
    half = t_quantile(level, n - 1) * std / math.sqrt(n)
    return Interval(n, mean, std, mean - half, mean + half)
