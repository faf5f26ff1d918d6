"""Batched local solver: k devices run SGD with momentum on F_i(w) + mu/2 ||w - w_global||^2 (+ <n_i, w>) together.

Devices are sorted by their number of SGD steps, so at step s the active devices are a prefix and
finished devices cost nothing. Batch orders are drawn up front (one permutation per epoch per device).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from ..draws.batch_plans import RoundPlans
from ..errors import ConfigError
from ..models import BinaryLogisticRegression, LogisticRegression

CHUNK_STEPS = 64


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


def local_solve(
    model,
    w_global: torch.Tensor,
    xs: list[torch.Tensor],
    ys: list[torch.Tensor],
    plans: list[torch.Tensor],
    mu: float,
    lr: float,
    momentum: float,
    linear_term: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, int]:
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


@dataclasses.dataclass(frozen=True)
class CompiledSolver:
    """The compiled logistic-regression solver (:mod:`upfl.solvers.numba_backend`): called, it is the local solve
    of Algorithm 1 line 4 (the :func:`local_solve` contract); beside it a run takes pFedMe's compiled local solve,
    the compiled evaluation of its models (of fixed sets: ``evaluator``), the compiled :func:`seeded_batch_plan`,
    and that it reads a round's devices as blocks of the pooled rows (``pooled``, a :class:`PooledRound`)."""

    solve: Callable[..., tuple[torch.Tensor, int]]
    personal_solve: Callable[..., tuple[torch.Tensor, torch.Tensor, int]]
    evaluate: Callable[..., tuple[float, int]]
    evaluator: Callable[..., Callable[[torch.Tensor], list[tuple[float, int]]]]
    batch_plan: Callable[..., Any]
    reads_pooled_rows: bool = True

    def __call__(self, *args, **kwargs) -> tuple[torch.Tensor, int]:
        return self.solve(*args, **kwargs)


def numba_solver(threads: int = 0, entries: tuple[str, ...] | None = None) -> CompiledSolver | None:
    """The :class:`CompiledSolver`, its kernels for ``entries`` (:data:`upfl.solvers.numba_backend.SOLVER_ENTRIES`,
    all by default; a run names its algorithm's :attr:`upfl.algorithms.base.Algorithm.solver_entry`) compiled or
    loaded from numba's cache now, the others on first use; None when numba does not import. ``threads`` > 0 caps
    the worker threads of its solves."""
    from ..startup import paused_gc

    with paused_gc():
        try:
            from . import numba_backend as solver_numba
        except ImportError:
            return None
        solver_numba.warm_up(threads, *(() if entries is None else (tuple(entries),)))
    return CompiledSolver(
        solve=functools.partial(solver_numba.local_solve, threads=threads) if threads else solver_numba.local_solve,
        personal_solve=(
            functools.partial(solver_numba.personal_solve, threads=threads) if threads else solver_numba.personal_solve
        ),
        evaluate=solver_numba.evaluate,
        evaluator=solver_numba.evaluator,
        batch_plan=solver_numba.batch_plans,
    )


def select_local_solver(
    backend: str, model, device: torch.device, threads: int = 0, entries: tuple[str, ...] | None = None
) -> Callable:
    """The local solver of Algorithm 1 line 4 for ``solver.backend`` (``auto``, ``torch`` or ``numba``).

    Both solvers share the :func:`local_solve` contract and arithmetic. ``numba`` needs numba, a
    :class:`upfl.models.LogisticRegression` or :class:`upfl.models.BinaryLogisticRegression` and the
    CPU; ``auto`` takes it when all three hold, else ``torch``. ``threads`` > 0 caps numba's worker threads;
    ``entries``: the compiled entry points to load now (:func:`numba_solver`).
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
        compiled = numba_solver(threads, entries)
        reason = "numba requested but numba is not installed (pip install numba)"
    if compiled is not None:
        return compiled
    if backend == "auto":
        return local_solve
    raise ConfigError(f"solver.backend: {reason}; use solver.backend: torch or auto")
