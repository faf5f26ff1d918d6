"""The devices' batch plans (one shuffle per epoch, Algorithm 1 line 4's local SGD) and the process's cache of
draws (:class:`DrawCache`): a draw is a function of its key, so runs that share a seed reuse it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .bounded_cache import BoundedCache
from .streams import seeded_generator

if TYPE_CHECKING:
    import torch


def batch_plan(
    sizes: list[int], epochs: list[int], batch_size: int, generators: list[torch.Generator]
) -> list[torch.Tensor]:
    """Per device, a (steps_i, B) int32 tensor of sample indices (-1 pads the last batch of each epoch).

    Each epoch visits the device's samples in a uniform random order: one ``torch.randperm`` per epoch from
    the device's generator (O(n), about 10x cheaper than sorting random keys for a device of 27,000 samples).
    int32 halves the plans a process keeps (:class:`DrawCache`); the solvers index with them as they are.
    """
    import torch

    plans = []
    for n, e, g in zip(sizes, epochs, generators, strict=True):
        nb = math.ceil(n / batch_size)
        padded = torch.full((e, nb * batch_size), -1, dtype=torch.int32)
        padded[:, :n] = torch.stack([torch.randperm(n, generator=g) for _ in range(e)])
        plans.append(padded.view(e * nb, batch_size))
    return plans


def seeded_batch_plan(sizes: list[int], epochs: list[int], batch_size: int, seeds: list[int]) -> list[torch.Tensor]:
    """:func:`batch_plan` with device i's generator seeded ``seeds[i]`` (a seed of
    :func:`upfl.draws.streams.derive_seed`)."""
    return batch_plan(sizes, epochs, batch_size, [seeded_generator(int(s)) for s in seeds])


def joined_plan(plans: list) -> np.ndarray:
    """The plans as one int32 (steps, B) array: the rows of the tensor they are views of when they lie back to back
    in it (a round's plans drawn together), else their concatenation (arrays: always)."""
    if all(isinstance(p, np.ndarray) for p in plans):
        return joined_arrays(plans)
    if any(isinstance(p, np.ndarray) for p in plans):
        return np.concatenate([p if isinstance(p, np.ndarray) else p.numpy() for p in plans]).astype(np.int32)
    import torch

    base, width = plans[0]._base, plans[0].shape[1]
    if (
        base is not None
        and base.dim() == 2
        and base.shape[1] == width
        and base.is_contiguous()
        and all(p._base is base and p.is_contiguous() for p in plans)
    ):
        start = end = plans[0].storage_offset()
        for p in plans:
            if p.storage_offset() != end:
                break
            end += p.numel()
        else:
            return base[start // width : end // width].numpy()
    return torch.cat(plans).to(torch.int32).numpy()


def joined_arrays(plans: list[np.ndarray]) -> np.ndarray:
    """:func:`joined_plan` of arrays: the rows of the array they are views of when they lie back to back in it."""
    base = plans[0].base
    if isinstance(base, np.ndarray) and base.ndim == 2 and base.flags.c_contiguous and base.dtype == np.int32:
        origin, row_bytes = base.__array_interface__["data"][0], base.strides[0]
        start = end = (plans[0].__array_interface__["data"][0] - origin) // row_bytes
        for p in plans:
            if p.base is not base or p.shape[1:] != base.shape[1:] or not p.flags.c_contiguous:
                break
            if p.__array_interface__["data"][0] != origin + end * row_bytes:
                break
            end += p.shape[0]
        else:
            return base[start:end]
    return np.concatenate(plans).astype(np.int32, copy=False)


class RoundPlans(NamedTuple):
    """The batch plans of a round's devices, separately and joined (the compiled solver reads the joined ones)."""

    plans: list[torch.Tensor]
    """Per device, (steps_i, B) int32 sample indices (:func:`batch_plan`)."""
    joined: np.ndarray
    """The plans one after the other, (sum of steps_i, B) int32."""
    offsets: np.ndarray
    """int64: device i's plan is ``joined[offsets[i]:offsets[i + 1]]``."""
    steps: list[int]
    """Device i's number of SGD steps, ``offsets[i + 1] - offsets[i]``."""


def round_plans(plans: list[torch.Tensor], drawn=None, first: int = 0) -> RoundPlans:
    """:class:`RoundPlans` of ``plans``: ``drawn[first:first + len(plans)]`` where they came from one draw call that
    made :class:`upfl.solvers.numba_backend.PlanViews` ``drawn`` (their joined rows are a slice of its array)."""
    if drawn is None:
        steps = [int(p.shape[0]) for p in plans]
        return RoundPlans(plans, joined_plan(plans), np.cumsum([0] + steps, dtype=np.int64), steps)
    end = first + len(plans)
    starts = drawn.starts[first : end + 1]
    return RoundPlans(plans, drawn.rows[starts[0] : starts[-1]], starts - starts[0], drawn.steps[first:end])


def drawn_kind(draw: Callable) -> str:
    """What a plan-drawing function is called, part of a kept plan's key: the same numbers come as tensors from
    :func:`seeded_batch_plan` and as arrays from the compiled solver's, and a run reads the kind its solver draws."""
    return f"{getattr(draw, '__module__', '')}.{getattr(draw, '__qualname__', type(draw).__name__)}"


class DrawCache(BoundedCache):
    """Draws kept across the runs of one process, at most ``max_bytes`` of them (least recently used dropped first).

    Every draw of a run comes from a keyed stream (:mod:`upfl.draws.streams`), so a draw is a function of its key: a
    device's batch plan in training round k depends only on (seed, k, device, its sample count, its epochs, the
    batch size), its privacy noise only on (seed, k, device, the number of parameters). The runs of a bundle
    that share a seed (other algorithms, other mu, other noise scales, the same draws) reuse them instead of
    drawing them again. Entries are tensors or tuples of tensors and are only read (never written in place).
    """

    def __init__(self, max_bytes: int = 512 << 20):
        super().__init__(max_bytes)

    def plans(
        self,
        seed: int,
        wanted: list[tuple[int, int, int, int]],
        batch_size: int,
        seeds_of: Callable[[list[tuple[int, int]]], Sequence[int] | np.ndarray],
        draw: Callable = seeded_batch_plan,
    ) -> list[torch.Tensor]:
        """:func:`batch_plan` of each (training round k, device, its sample count, its epochs) of ``wanted``, kept or
        drawn from the seeds ``seeds_of([(k, device), ...])`` (called once, for the plans not kept); the plans not
        kept are drawn together, in one call of ``draw`` (:func:`seeded_batch_plan`, or the compiled solver's
        ``batch_plan``: the same numbers)."""
        kind = drawn_kind(draw)
        keys = [("plan", kind, seed, k, i, n, e, batch_size) for k, i, n, e in wanted]
        kept: list[tuple[Any, ...] | None] = [self.entries.get(key) for key in keys]
        missing = [j for j, entry in enumerate(kept) if entry is None]
        for key, entry in zip(keys, kept, strict=True):
            if entry is not None:
                self.entries.move_to_end(key)
        if not missing:
            return [entry[0] for entry in kept if entry is not None]
        seeds = seeds_of([wanted[j][:2] for j in missing])
        drawn = draw([wanted[j][2] for j in missing], [wanted[j][3] for j in missing], batch_size, seeds)
        for j, value in zip(missing, drawn, strict=True):
            self.put(keys[j], value, value.nbytes)
            kept[j] = (value,)
        return drawn if len(missing) == len(wanted) else [entry[0] for entry in kept if entry is not None]

    def round_plans(
        self,
        seed: int,
        rounds: list[tuple[int, list[int], list[int], list[int]]],
        batch_size: int,
        seeds_of: Callable[[list[tuple[int, int]]], Sequence[int] | np.ndarray],
        draw: Callable = seeded_batch_plan,
    ) -> list[RoundPlans]:
        """:class:`RoundPlans` of each (training round k, its devices, their sample counts, their epochs) of
        ``rounds``, each kept as one entry (a later run of the seed with the same devices finds a round's in one
        look-up; its bytes count twice against the bound); the plans of the rounds not kept are found or drawn by
        :meth:`plans`, all in one call."""
        kind = drawn_kind(draw)
        keys = [("round_plans", kind, seed, k, tuple(d), tuple(n), tuple(e), batch_size) for k, d, n, e in rounds]
        found: list[tuple[Any, int] | None] = [self.entries.get(key) for key in keys]
        todo = [j for j, entry in enumerate(found) if entry is None]
        wanted = [(rounds[j][0], i, n, e) for j in todo for i, n, e in zip(*rounds[j][1:], strict=True)]
        plans = self.plans(seed, wanted, batch_size, seeds_of, draw) if wanted else []
        drawn = plans if hasattr(plans, "starts") else None
        made, at = {}, 0
        for j in todo:
            count = len(rounds[j][1])
            made[j] = round_plans(plans[at : at + count], drawn, at)
            at += count
        for j, key in enumerate(keys):
            if j in made:  # the plans, the joined rows (their bytes again) and the offsets
                self.put(key, made[j], 2 * made[j].joined.nbytes + made[j].offsets.nbytes)
            elif key in self.entries:
                self.entries.move_to_end(key)
        return [made[j] if entry is None else entry[0] for j, entry in enumerate(found)]


DRAW_CACHE = DrawCache()
"""The process's draw cache (:class:`DrawCache`); it never changes a result, only how often draws are made."""
