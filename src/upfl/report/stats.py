"""Small statistics for the report: Student t quantiles and paired confidence intervals.

The t quantile is scipy's (``scipy.special.stdtrit``, the inverse of Student's t CDF). The report's 95% intervals
over up to 30 degrees of freedom (every experiment's seeds) read it from :data:`T95`, scipy's values written out,
so that a table job does not import scipy (a sixth of a CPU-second); other levels and degrees of freedom ask scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

LEVEL = 0.95
"""The report's confidence level: every interval it prints is a two-sided 95% t interval."""

T95 = (
    12.706204736174694,  # 1
    4.302652729749462,  # 2
    3.1824463052837078,  # 3
    2.7764451051977934,  # 4
    2.5705818356363146,  # 5
    2.4469118511449786,  # 6
    2.364624251592784,  # 7
    2.306004135204166,  # 8
    2.262157162798205,  # 9
    2.228138851986274,  # 10
    2.200985160091639,  # 11
    2.1788128296672284,  # 12
    2.1603686564627913,  # 13
    2.144786687917804,  # 14
    2.131449545559776,  # 15
    2.1199052992212546,  # 16
    2.1098155778333156,  # 17
    2.1009220402410382,  # 18
    2.0930240544083087,  # 19
    2.085963447265864,  # 20
    2.0796138447276795,  # 21
    2.0738730679040254,  # 22
    2.0686576104190486,  # 23
    2.0638985616280245,  # 24
    2.0595385527532972,  # 25
    2.0555294386428735,  # 26
    2.0518305164802846,  # 27
    2.0484071417952454,  # 28
    2.045229642132703,  # 29
    2.0422724563012378,  # 30
)
"""``scipy.special.stdtrit(df, 0.975)`` for df = 1 .. 30 (the same floats: tests/report/test_report.py compares each
with scipy's), the critical value of :data:`LEVEL`'s interval."""


def t_quantile(level: float, df: int) -> float:
    """The two-sided critical value t* with P(|T| <= t*) = ``level`` (t_{(1+level)/2, df})."""
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level!r}")
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df!r}")
    if level == LEVEL and float(df).is_integer() and df <= len(T95):
        return T95[int(df) - 1]
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
