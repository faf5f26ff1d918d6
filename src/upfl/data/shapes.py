"""Per-device sample counts shaped like the paper's Table 2 rows (deterministic, seed-free).

The counts are quantiles of a named distribution, rounded with the largest-remainder rule so
that they sum exactly to the table's total; randomness (which images, users and classes fill a
device) is drawn elsewhere from the seeded ``data`` stream.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np


def normal_quantiles(n: int) -> np.ndarray:
    """The ``n`` standard-normal quantiles at probabilities ``(i + 0.5) / n``."""
    nd = NormalDist()
    return np.array([nd.inv_cdf((i + 0.5) / n) for i in range(n)])


def round_to_total(values: np.ndarray, total: int) -> np.ndarray:
    """Integers that sum to ``total``: floors, plus one for the largest fractional parts."""
    values = np.asarray(values, dtype=np.float64)
    scaled = values * (total / values.sum()) if values.sum() > 0 else np.full(len(values), total / len(values))
    base = np.floor(scaled).astype(np.int64)
    short = int(total - base.sum())
    order = np.argsort(-(scaled - base), kind="stable")
    base[order[:short]] += 1
    return base


def lognormal_sizes(n: int, total: int, minimum: int, median: float, maximum: int) -> np.ndarray:
    """Sorted counts with the given total, minimum, median and maximum (FEMNIST's Table 2 row).

    One device holds ``minimum``, one ``maximum``; the other ``n - 2`` are lognormal quantiles
    ``median * exp(sigma * z_i)`` clipped to ``[minimum, maximum]``, with ``sigma`` found by
    bisection so the counts sum to ``total``. Raises ``ValueError`` when no sigma can.
    """
    if n < 3:
        raise ValueError(f"need at least 3 devices for a min/median/max shape, got {n}")
    if not minimum <= median <= maximum:
        raise ValueError(f"need minimum <= median <= maximum, got {minimum}, {median}, {maximum}")
    body_total = total - minimum - maximum
    z = normal_quantiles(n - 2)

    def body(sigma: float) -> np.ndarray:
        return np.clip(median * np.exp(sigma * z), minimum, maximum)

    lo, hi = 0.0, 20.0
    if not body(lo).sum() <= body_total <= body(hi).sum():
        raise ValueError(
            f"no lognormal shape gives {n} devices totalling {total} with min {minimum}, "
            f"median {median}, max {maximum} (the body can sum to {body(lo).sum():.0f}"
            f"..{body(hi).sum():.0f}, needs {body_total})"
        )
    for _ in range(200):
        mid = (lo + hi) / 2
        if body(mid).sum() < body_total:
            lo = mid
        else:
            hi = mid
    sizes = np.concatenate([[minimum], round_to_total(body(hi), body_total), [maximum]])
    return np.sort(sizes)


def normal_sizes(n: int, total: int, std: float, minimum: int = 1) -> np.ndarray:
    """Sorted counts: normal quantiles with mean ``total / n`` and the given ``std``, summing to ``total``.

    The quantiles are rescaled to unit standard deviation (ddof 0), so the counts' std is ``std``
    up to rounding and the ``minimum`` floor.
    """
    if n < 1 or total < n * minimum:
        raise ValueError(f"cannot give {n} devices at least {minimum} samples each from {total}")
    z = normal_quantiles(n)
    z = z / z.std() if n > 1 else z
    raw = np.maximum(total / n + std * z, minimum)
    sizes = round_to_total(raw, total)
    return np.sort(np.maximum(sizes, minimum))


def proportional_sizes(weights: np.ndarray, total: int) -> np.ndarray:
    """``total`` split in proportion to ``weights`` (largest-remainder rounding)."""
    return round_to_total(np.asarray(weights, dtype=np.float64), total)


def leaf_train_count(n: int, train_fraction: float) -> int:
    """LEAF's split by sample: ``max(1, int(train_fraction * n))`` training samples (1 of 2)."""
    if n < 2:
        return n
    return 1 if n == 2 else max(1, int(train_fraction * n))


def leaf_total_for_train(train: int, train_fraction: float) -> int:
    """The largest device size whose LEAF split keeps exactly ``train`` training samples."""
    n = train
    while leaf_train_count(n + 1, train_fraction) <= train:
        n += 1
    if leaf_train_count(n, train_fraction) != train:
        raise ValueError(f"no device size gives {train} training samples at train fraction {train_fraction}")
    return n
