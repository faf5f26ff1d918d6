"""Batched local solver: k devices run SGD with momentum on F_i(w) + mu/2 ||w - w_global||^2 (+ <n_i, w>) together.

Devices are sorted by their number of SGD steps, so at step s the active devices are a prefix and
finished devices cost nothing. Batch orders are drawn up front (one permutation per epoch per device).
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch

from .caches import BoundedCache
from ..errors import ConfigError
from ..models import BinaryLogisticRegression, LogisticRegression
from ..draws.streams import seeded_generator

CHUNK_STEPS = 64


def batch_plan(sizes: list[int], epochs: list[int], batch_size: int, generators: list[torch.Generator]) -> list[torch.Tensor]:
    """Per device, a (steps_i, B) int32 tensor of sample indices (-1 pads the last batch of each epoch).

    Each epoch visits the device's samples in a uniform random order: one ``torch.randperm`` per epoch from
    the device's generator (O(n), about 10x cheaper than sorting random keys for a device of 27,000 samples).
    int32 halves the plans a process keeps (:class:`DrawCache`); the solvers index with them as they are.
    """
    plans = []
    for n, e, g in zip(sizes, epochs, generators):
        nb = math.ceil(n / batch_size)
        padded = torch.full((e, nb * batch_size), -1, dtype=torch.int32)
        padded[:, :n] = torch.stack([torch.randperm(n, generator=g) for _ in range(e)])
        plans.append(padded.view(e * nb, batch_size))
    return plans


def seeded_batch_plan(sizes: list[int], epochs: list[int], batch_size: int, seeds: list[int]) -> list[torch.Tensor]:
    """:func:`batch_plan` with device i's generator seeded ``seeds[i]`` (a seed of :func:`upfl.draws.streams.derive_seed`)."""
    return batch_plan(sizes, epochs, batch_size, [seeded_generator(int(s)) for s in seeds])


def joined_plan(plans: list[torch.Tensor]) -> torch.Tensor:
    """The plans as one int32 (steps, B) tensor: the rows of the tensor they are views of when they lie back to back
    in it (a round's plans drawn together), else their concatenation."""
    base, width = plans[0]._base, plans[0].shape[1]
    if (base is not None and base.dim() == 2 and base.shape[1] == width and base.is_contiguous()
            and all(p._base is base and p.is_contiguous() for p in plans)):
        start = end = plans[0].storage_offset()
        for p in plans:
            if p.storage_offset() != end:
                break
            end += p.numel()
        else:
            return base[start // width:end // width]
    return torch.cat(plans).to(torch.int32)


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


class PooledRound(NamedTuple):
    """A round's devices as blocks of a run's pooled training rows, with their joined plans: what the compiled
    solver reads instead of recovering it from the per-device tensors (``local_solve(..., pooled=...)``)."""

    x: torch.Tensor
    """The run's pooled features, (N, ...) (every device's rows, one after the other)."""
    y: torch.Tensor
    """The same rows' one-hot labels, (N, C)."""
    rows: np.ndarray
    """(k, 2) int64: device i's rows are ``x[rows[i, 0]:rows[i, 1]]``."""
    plans: RoundPlans
    """The devices' batch plans."""


def round_plans(plans: list[torch.Tensor], drawn=None, first: int = 0) -> RoundPlans:
    """:class:`RoundPlans` of ``plans``: ``drawn[first:first + len(plans)]`` where they came from one draw call that
    made :class:`upfl.solvers.numba_backend.PlanViews` ``drawn`` (their joined rows are a slice of its array)."""
    if drawn is None:
        steps = [int(p.shape[0]) for p in plans]
        return RoundPlans(plans, joined_plan(plans).numpy(), np.cumsum([0] + steps, dtype=np.int64), steps)
    end = first + len(plans)
    starts = drawn.starts[first:end + 1]
    return RoundPlans(plans, drawn.rows[starts[0]:starts[-1]], starts - starts[0], drawn.steps[first:end])


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

    def plans(self, seed: int, wanted: list[tuple[int, int, int, int]], batch_size: int,
              seeds_of: Callable[[list[tuple[int, int]]], Sequence[int]], draw: Callable = seeded_batch_plan
              ) -> list[torch.Tensor]:
        """:func:`batch_plan` of each (training round k, device, its sample count, its epochs) of ``wanted``, kept or
        drawn from the seeds ``seeds_of([(k, device), ...])`` (called once, for the plans not kept); the plans not
        kept are drawn together, in one call of ``draw`` (:func:`seeded_batch_plan`, or the compiled solver's
        ``batch_plan``: the same numbers)."""
        keys = [("plan", seed, k, i, n, e, batch_size) for k, i, n, e in wanted]
        kept = [self.entries.get(key) for key in keys]
        missing = [j for j, entry in enumerate(kept) if entry is None]
        for key, entry in zip(keys, kept):
            if entry is not None:
                self.entries.move_to_end(key)
        if not missing:
            return [entry[0] for entry in kept]
        seeds = seeds_of([wanted[j][:2] for j in missing])
        drawn = draw([wanted[j][2] for j in missing], [wanted[j][3] for j in missing], batch_size, seeds)
        for j, value in zip(missing, drawn):
            self.put(keys[j], value, value.nbytes)
            kept[j] = (value,)
        return drawn if len(missing) == len(wanted) else [entry[0] for entry in kept]

    def round_plans(self, seed: int, rounds: list[tuple[int, list[int], list[int], list[int]]], batch_size: int,
                    seeds_of: Callable[[list[tuple[int, int]]], Sequence[int]], draw: Callable = seeded_batch_plan
                    ) -> list[RoundPlans]:
        """:class:`RoundPlans` of each (training round k, its devices, their sample counts, their epochs) of
        ``rounds``, each kept as one entry (a later run of the seed with the same devices finds a round's in one
        look-up; its bytes count twice against the bound); the plans of the rounds not kept are found or drawn by
        :meth:`plans`, all in one call."""
        keys = [("round_plans", seed, k, tuple(d), tuple(n), tuple(e), batch_size) for k, d, n, e in rounds]
        found = [self.entries.get(key) for key in keys]
        todo = [j for j, entry in enumerate(found) if entry is None]
        wanted = [(rounds[j][0], i, n, e) for j in todo for i, n, e in zip(*rounds[j][1:])]
        plans = self.plans(seed, wanted, batch_size, seeds_of, draw) if wanted else []
        drawn = plans if hasattr(plans, "starts") else None
        made, at = {}, 0
        for j in todo:
            count = len(rounds[j][1])
            made[j] = round_plans(plans[at:at + count], drawn, at)
            at += count
        for j, key in enumerate(keys):
            if j in made:  # the plans, the joined rows (their bytes again) and the offsets
                self.put(key, made[j], 2 * made[j].joined.nbytes + made[j].offsets.nbytes)
            elif key in self.entries:
                self.entries.move_to_end(key)
        return [made[j] if entry is None else entry[0] for j, entry in enumerate(found)]


DRAW_CACHE = DrawCache()
"""The process's draw cache (:class:`DrawCache`); it never changes a result, only how often draws are made."""


def pad_devices(xs: list[torch.Tensor], ys: list[torch.Tensor], plans: list[torch.Tensor], dev: torch.device):
    """Devices sorted by steps (descending) into padded tensors: x (k, n_max+1, ...), y (k, n_max+1, C),
    batch indices (k, s_max, B) into them (padding points at the zero row n_max), the float mask of real
    samples, the order, its inverse and the sorted step counts."""
    k = len(xs)
    steps = torch.tensor([p.shape[0] for p in plans])
    order = torch.argsort(steps, descending=True, stable=True)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(k)
    n_max = max(x.shape[0] for x in xs)
    x_pad = torch.zeros((k, n_max + 1) + tuple(xs[0].shape[1:]), dtype=xs[0].dtype, device=dev)
    y_pad = torch.zeros((k, n_max + 1, ys[0].shape[1]), dtype=ys[0].dtype, device=dev)
    s_max = int(steps.max())
    b = plans[0].shape[1]
    idx = torch.full((k, s_max, b), -1, dtype=torch.long)
    for j, i in enumerate(order.tolist()):
        n = xs[i].shape[0]
        x_pad[j, :n], y_pad[j, :n] = xs[i], ys[i]
        idx[j, : plans[i].shape[0]] = plans[i]
    mask_all = (idx >= 0).to(y_pad.dtype).to(dev)
    idx = torch.where(idx >= 0, idx, n_max).to(dev)
    return x_pad, y_pad, idx, mask_all, order, inverse, steps[order].tolist()


def local_solve(model, w_global: torch.Tensor, xs: list[torch.Tensor], ys: list[torch.Tensor],
                plans: list[torch.Tensor], mu: float, lr: float, momentum: float,
                linear_term: torch.Tensor | None = None,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, int]:
    """Run every device's plan from ``w_global``; return the (k, P) local models and the total SGD steps.

    ``ys`` are one-hot (n_i, C) float tensors; ``linear_term`` (k, P) adds n_i to each gradient.
    ``generator`` (the round's ``dropout`` stream) is passed to models that draw randomness
    (``model.needs_generator``).
    """
    extra = {"generator": generator} if getattr(model, "needs_generator", False) else {}
    k = len(xs)
    dev = w_global.device
    x_pad, y_pad, idx, mask_all, order, inverse, sorted_steps = pad_devices(xs, ys, plans, dev)
    s_max = sorted_steps[0]
    w = w_global.expand(k, -1).clone()
    buf = torch.zeros_like(w)
    lin = None if linear_term is None else linear_term[order.to(linear_term.device)]
    rows = torch.arange(k, device=dev).view(k, 1, 1)
    active = k
    for s0 in range(0, s_max, CHUNK_STEPS):
        s1 = min(s0 + CHUNK_STEPS, s_max)
        xc, yc, mc = x_pad[rows, idx[:, s0:s1]], y_pad[rows, idx[:, s0:s1]], mask_all[:, s0:s1]
        mc = mc / mc.sum(-1, keepdim=True).clamp_min(1)
        for s in range(s0, s1):
            while sorted_steps[active - 1] <= s:
                active -= 1
            j = s - s0
            wa, ba = w[:active], buf[:active]
            g = model.loss_and_grad(wa, xc[:active, j], yc[:active, j], mc[:active, j], **extra)
            if mu:
                g.add_(wa - w_global, alpha=mu)
            if lin is not None:
                g.add_(lin[:active])
            ba.mul_(momentum).add_(g)
            wa.sub_(ba, alpha=lr)
    return w[inverse.to(dev)], sum(sorted_steps)


def numba_solver(threads: int = 0) -> Callable | None:
    """The compiled logistic-regression solver (:mod:`upfl.solvers.numba_backend`), compiled or loaded from
    numba's cache now; None when numba does not import. It carries pFedMe's compiled local solve as
    ``.personal_solve``, the compiled evaluation of its models as ``.evaluate`` (of fixed sets: ``.evaluator``),
    the compiled :func:`seeded_batch_plan` as ``.batch_plan``, and ``.reads_pooled_rows`` (it takes ``pooled``, a
    :class:`PooledRound`)."""
    try:
        from . import numba_backend as solver_numba
    except ImportError:
        return None
    solver_numba.warm_up(threads)
    if not threads:
        return solver_numba.local_solve
    solve = functools.partial(solver_numba.local_solve, threads=threads)
    solve.personal_solve = functools.partial(solver_numba.personal_solve, threads=threads)
    solve.evaluate = solver_numba.evaluate
    solve.evaluator = solver_numba.evaluator
    solve.batch_plan = solver_numba.batch_plans
    solve.reads_pooled_rows = True
    return solve


def select_local_solver(backend: str, model, device: torch.device, threads: int = 0) -> Callable:
    """The local solver of Algorithm 1 line 4 for ``solver.backend`` (``auto``, ``torch`` or ``numba``).

    Both solvers share the :func:`local_solve` contract and arithmetic. ``numba`` needs numba, a
    :class:`upfl.models.LogisticRegression` or :class:`upfl.models.BinaryLogisticRegression` and the
    CPU; ``auto`` takes it when all three hold, else ``torch``. ``threads`` > 0 caps numba's worker threads.
    """
    if backend not in ("auto", "torch", "numba"):
        raise ConfigError(f"solver.backend: unknown backend {backend!r}; choose auto, torch or numba")
    if backend == "torch":
        return local_solve
    compiled = None
    if type(model) not in (LogisticRegression, BinaryLogisticRegression):
        reason = f"numba supports only the logreg and binary_logreg models, not {type(model).__name__}"
    elif torch.device(device).type != "cpu":
        reason = f"numba runs on the CPU only, not on {device}"
    else:
        compiled = numba_solver(threads)
        reason = "numba requested but numba is not installed (pip install numba)"
    if compiled is not None:
        return compiled
    if backend == "auto":
        return local_solve
    raise ConfigError(f"solver.backend: {reason}; use solver.backend: torch or auto")
