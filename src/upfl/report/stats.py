"""Small statistics for the report: Student t quantiles and paired confidence intervals.

The t quantile is scipy's (``scipy.special.stdtrit``, the inverse of Student's t CDF), imported when an interval
is computed so that commands without one start without scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

LEVEL = 0.95
"""The report's confidence level: every interval it prints is a two-sided 95% t interval."""


def t_quantile(level: float, df: int) -> float:
    """The two-sided critical value t* with P(|T| <= t*) = ``level`` (t_{(1+level)/2, df})."""
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level!r}")
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df!r}")
    from scipy.special import stdtrit

    return float(stdtrit(df, (1 + level) / 2))


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


def mean_interval(values: ArrayLike, level: float = LEVEL) -> Interval:
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


def std_from_interval(low: float, high: float, n: int, level: float = LEVEL) -> float:
    """The sample std behind a t interval ``mean +- t* s / sqrt(n)`` of ``n`` values (NaN when n < 2)."""
    if n < 2:
        return math.nan
    return (high - low) / 2 / t_quantile(level, n - 1) * math.sqrt(n)


def welch_interval(a: Interval, b: Interval, level: float = LEVEL) -> tuple[float, float, float]:
    """Difference of two means ``a.mean - b.mean`` of independent samples with Welch's t interval (unequal
    variances, Welch-Satterthwaite degrees of freedom): (difference, low, high); NaN bounds when either has n < 2."""
    diff = a.mean - b.mean
    if a.n < 2 or b.n < 2:
        return diff, math.nan, math.nan
    va, vb = a.std**2 / a.n, b.std**2 / b.n
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    df = se**4 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
    from scipy.special import stdtrit

    half = float(stdtrit(df, (1 + level) / 2)) * se
    return diff, diff - half, diff + half
