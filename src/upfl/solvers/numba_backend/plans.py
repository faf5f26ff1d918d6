"""Batch plans drawn in one compiled call (:func:`batch_plans`) and the assignment of devices to worker threads
(:func:`balance`)."""

from __future__ import annotations

import numpy as np

from ...draws.compiled import RANDPERM_SWAP_LIMIT, shuffle_plans


class PlanViews(list):
    """Batch plans drawn in one call: views of one int32 (sum of steps, B) array, one after the other."""

    rows: np.ndarray
    """The array; plan q is ``rows[starts[q]:starts[q + 1]]``."""
    starts: np.ndarray
    """int64, one more than there are plans."""
    steps: list[int]
    """Plan q's rows, ``starts[q + 1] - starts[q]``."""


def batch_plans(sizes: list[int], epochs: list[int], batch_size: int, seeds: list[int]) -> PlanViews:
    """:func:`upfl.draws.batch_plans.seeded_batch_plan` in one compiled call, the same plans bit for bit (device i's
    generator seeded ``seeds[i]``): views of one int32 array (a kept plan keeps its round's array), which
    :class:`PlanViews` also hands over as it is."""
    if max(sizes, default=0) >= RANDPERM_SWAP_LIMIT:
        raise ValueError(
            f"a device of {max(sizes)} samples: the compiled batch plans reproduce torch.randperm below "
            f"{RANDPERM_SWAP_LIMIT} samples only; use solver.backend: torch"
        )
    steps = [-(-n // batch_size) * e for n, e in zip(sizes, epochs, strict=True)]
    offsets = offsets_of(steps)
    plan = np.empty((int(offsets[-1]), batch_size), dtype=np.int32)
    shuffle_plans(
        np.asarray(seeds, dtype=np.uint64),
        np.array(sizes, dtype=np.int64),
        np.array(epochs, dtype=np.int64),
        plan,
        offsets,
    )
    views = PlanViews(np.split(plan, offsets[1:-1]))
    views.rows, views.starts, views.steps = plan, offsets, steps
    return views


def balance(costs: list[int], workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Longest-processing-time assignment of devices to ``workers``: (device order, worker offsets).

    Deterministic (ties broken by device index); only the wall time depends on it, not the result.
    """
    loads = [0] * workers
    lists: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(len(costs)), key=costs.__getitem__, reverse=True):  # stable: ties keep index order
        t = loads.index(min(loads))
        loads[t] += costs[i]
        lists[t].append(i)
    offsets = np.cumsum([0] + [len(ls) for ls in lists]).astype(np.int64)
    return np.array([i for ls in lists for i in ls], dtype=np.int64), offsets


def offsets_of(lengths: list[int]) -> np.ndarray:
    return np.cumsum([0] + lengths).astype(np.int64)
