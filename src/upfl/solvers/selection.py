"""Which local solver a run trains with (:func:`select_local_solver`): the compiled one
(:mod:`upfl.solvers.numba_backend`, :class:`CompiledSolver`) or torch's
(:func:`upfl.solvers.torch_backend.local_solve`), and what the compiled one reads a round's devices from
(:class:`PooledRound`). Importing this module imports no torch: a run on the compiled solver never needs it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..draws.batch_plans import RoundPlans
from ..errors import ConfigError
from ..models import LINEAR_MODELS


class PooledRound(NamedTuple):
    """A round's devices as blocks of a run's pooled training rows, with their joined plans: what the compiled
    solver reads instead of recovering it from the per-device tensors (``local_solve(..., pooled=...)``)."""

    x: Any
    """The run's pooled features, (N, ...) (every device's rows, one after the other)."""
    y: Any
    """The same rows' one-hot labels, (N, C)."""
    rows: np.ndarray
    """(k, 2) int64: device i's rows are ``x[rows[i, 0]:rows[i, 1]]``."""
    plans: RoundPlans
    """The devices' batch plans."""


def device_type(device) -> str:
    """``'cpu'``, ``'cuda'``, ... of a ``torch.device`` or a device name (``'cuda:1'``)."""
    return getattr(device, "type", None) or str(device).partition(":")[0]


def torch_local_solve() -> Callable:
    """:func:`upfl.solvers.torch_backend.local_solve` (torch is imported here)."""
    from .torch_backend import local_solve

    return local_solve


@dataclasses.dataclass(frozen=True)
class CompiledSolver:
    """The compiled logistic-regression solver (:mod:`upfl.solvers.numba_backend`): called, it is the local solve
    of Algorithm 1 line 4 (the :func:`upfl.solvers.torch_backend.local_solve` contract); beside it a run takes
    pFedMe's compiled local solve, the compiled evaluation of its models (of fixed sets: ``evaluator``), the compiled
    :func:`upfl.draws.batch_plans.seeded_batch_plan`, and that it reads a round's devices as blocks of the pooled rows
    (``pooled``, a :class:`PooledRound`)."""

    solve: Callable[..., tuple[Any, int]]
    personal_solve: Callable[..., tuple[Any, Any, int]]
    evaluate: Callable[..., tuple[float, int]]
    evaluator: Callable[..., Callable[[Any], list[tuple[float, int]]]]
    batch_plan: Callable[..., Any]
    reads_pooled_rows: bool = True

    def __call__(self, *args, **kwargs) -> tuple[Any, int]:
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
    backend: str, model, device, threads: int = 0, entries: tuple[str, ...] | None = None
) -> Callable:
    """The local solver of Algorithm 1 line 4 for ``solver.backend`` (``auto``, ``torch`` or ``numba``).

    Both solvers share the :func:`upfl.solvers.torch_backend.local_solve` contract and arithmetic. ``numba`` needs
    numba, a
    :class:`upfl.models.LogisticRegression` or :class:`upfl.models.BinaryLogisticRegression` and the
    CPU; ``auto`` takes it when all three hold, else ``torch``. ``threads`` > 0 caps numba's worker threads;
    ``entries``: the compiled entry points to load now (:func:`numba_solver`).
    """
    if backend not in ("auto", "torch", "numba"):
        raise ConfigError(f"solver.backend: unknown backend {backend!r}; choose auto, torch or numba")
    if backend == "torch":
        return torch_local_solve()
    compiled = None
    if type(model) not in LINEAR_MODELS:
        reason = f"numba supports only the logreg and binary_logreg models, not {type(model).__name__}"
    elif device_type(device) != "cpu":
        reason = f"numba runs on the CPU only, not on {device}"
    else:
        compiled = numba_solver(threads, entries)
        reason = "numba requested but numba is not installed (pip install numba)"
    if compiled is not None:
        return compiled
    if backend == "auto":
        return torch_local_solve()
    raise ConfigError(f"solver.backend: {reason}; use solver.backend: torch or auto")
