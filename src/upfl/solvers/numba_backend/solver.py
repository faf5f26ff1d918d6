"""The compiled solver's entry points: :func:`local_solve`, :func:`personal_solve`, :func:`evaluate`,
:func:`evaluator` and :func:`warm_up`, on float32 arrays or CPU torch tensors (what they return is of the global
model's kind); the kept arrays they make from them. Importing this module imports no torch."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numba
import numpy as np

from ...draws.bounded_cache import BoundedCache
from ...draws.compiled import warm_up as warm_up_draws
from ...models import BIAS_FEATURE_SCALE, BinaryLogisticRegression
from .arithmetic import DTYPE, FLOAT32_MAX
from .evaluation import evaluate_rows
from .layout import from_class_major, solver_rows, to_class_major
from .plans import balance, offsets_of
from .training import personal_devices, personal_devices_serial, solve_devices, solve_devices_serial

if TYPE_CHECKING:
    import torch

    Vector = np.ndarray | torch.Tensor
    """A float32 array, or a CPU tensor."""


def as_array(t) -> np.ndarray:
    """A CPU torch tensor's array (shared memory), or ``t`` itself as an array."""
    return t if isinstance(t, np.ndarray) else t.detach().numpy()


def like(array: np.ndarray, model):
    """``array`` as the kind of ``model`` (an array, or a torch tensor sharing its memory)."""
    if isinstance(model, np.ndarray):
        return array
    import torch

    return torch.from_numpy(array)


def joined(parts: list):
    """The concatenation of arrays, or of tensors."""
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    import torch

    return torch.cat(parts)


class KeptArrays:
    """Arrays made from tensors that a process hands the kernels again and again, kept for the last ``size`` sets.

    A run hands the solver the same per-device tensors every round and the evaluation the same training and test
    tensors every iteration (its data set, never changed): with full participation the solver's concatenated
    features x~ and labels are made once instead of every round (0.14 ms of a 5.5 ms round of 30 devices), and the
    evaluation's transposed rows once per run. Entries are keyed by the tensors' identities and version counters
    (an in-place change makes a new key; arrays, which have no counter, are never changed in place) and keep them
    alive, so an identity is never reused while its entry exists. At most ``max_bytes`` (the arrays and the tensors
    they keep) are held.
    """

    def __init__(self, size: int = 4, max_bytes: int = 256 << 20):
        self.kept = BoundedCache(max_bytes, max_entries=size)

    def get(self, groups: list[tuple], tag: tuple, make: Callable[[], tuple], any_order: bool = False) -> tuple:
        """``make()`` (a tuple of arrays and other values) for the tensor ``groups`` and ``tag`` (what else it
        depends on), kept; with ``any_order`` the same groups in another order are the same entry."""
        ids = [tuple((id(t), getattr(t, "_version", 0)) for t in group) for group in groups]
        key = (tag, *(sorted(ids) if any_order else ids))
        return self.kept.get(key, lambda: (make(), groups))[0]


DEVICE_ROWS = KeptArrays()
"""The solver's concatenated device rows (:func:`pack`)."""
EVALUATION_ROWS = KeptArrays()
"""The evaluation's transposed rows and labels (:func:`evaluate`)."""


def device_rows(model, xs, ys, binary) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, int]]]:
    """(x, y, rows of each device: id(x_i) -> (first, end)), x holding x~ for the binary model, float32; a device
    set seen again in another order (full participation samples every device, in a new order each round) reads
    its rows from the same arrays."""
    rows_x = as_array(joined(xs)).astype(DTYPE, copy=False)
    x = (model.features_array(rows_x) if binary else rows_x).astype(DTYPE, copy=False)
    ends = np.cumsum([int(t.shape[0]) for t in xs]).tolist()
    rows = {id(t): (end - int(t.shape[0]), end) for t, end in zip(xs, ends, strict=True)}
    return x, as_array(joined(ys)).astype(DTYPE, copy=False), rows


def with_solver_rows(made: tuple, binary: bool) -> tuple:
    """:func:`device_rows`' (x, y, rows) and x's rows as the training kernels read them (:func:`solver_rows`), kept
    with them: the padded copy is made once per set of rows."""
    return (*made, solver_rows(made[0], made[1], binary))


def row_blocks(xs, ys) -> tuple[Any, Any, np.ndarray] | None:
    """(x, y, (k, 2) row ranges) when every x_i is a block of rows of one contiguous tensor x and y_i the same rows
    of one y (the simulation's devices are views of its pooled training rows,
    :class:`upfl.engine.simulation.Simulation`); else None (arrays: the simulation hands their pooled rows)."""
    x, y = getattr(xs[0], "_base", None), getattr(ys[0], "_base", None)
    if (
        x is None
        or y is None
        or x.shape[0] != y.shape[0]
        or x.shape[1:] != xs[0].shape[1:]
        or y.shape[1:] != ys[0].shape[1:]
        or not (x.is_contiguous() and y.is_contiguous())
    ):
        return None
    stride_x, stride_y, start_x, start_y = x.stride(0), y.stride(0), x.storage_offset(), y.storage_offset()
    rows = []
    for xi, yi in zip(xs, ys, strict=True):
        if xi._base is not x or yi._base is not y or xi.shape[0] != yi.shape[0]:
            return None
        first, rest = divmod(xi.storage_offset() - start_x, stride_x)
        if rest or (yi.storage_offset() - start_y) != first * stride_y:
            return None
        rows.append((first, first + xi.shape[0]))
    return x, y, np.array(rows, dtype=np.int64).reshape(len(xs), 2)


def joined_plans(plans: list) -> np.ndarray:
    """The plans as one int32 (steps, B) array (their concatenation)."""
    return np.concatenate([as_array(p) for p in plans]).astype(np.int32, copy=False)


Inputs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""The kernels' shared inputs (:func:`pack`): wg, x, y, the devices' row ranges in x, the plan, its offsets."""
Schedule = tuple[np.ndarray | None, np.ndarray | None, bool, bool]
"""Assignment, worker offsets (None for one worker), binary, softmax first (:func:`pack`)."""


def pack(
    model, w_global, xs, ys, plans, threads, pooled=None
) -> tuple[Inputs, Schedule, Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray], list[int]]:
    """The kernels' shared inputs: (wg, x, y, (k, 2) row ranges of the devices in x, int32 plan, plan offsets), the
    schedule (assignment, worker offsets, binary, softmax first; no assignment for one worker), the layout function, its
    inverse and the devices' step counts. With ``pooled`` (:class:`upfl.solvers.selection.PooledRound`, the
    simulation's rounds) the devices' rows are read from the pooled rows' arrays, made once per run, at the row ranges
    it names, and the plans are its joined ones; without it, devices that are row blocks of one pooled pair of tensors
    (:func:`row_blocks`: a caller's views of the simulation's rows) read that pair's arrays too, and other device sets
    have their rows made per set (:data:`DEVICE_ROWS`)."""
    binary = isinstance(model, BinaryLogisticRegression)
    tag = (binary, getattr(model, "bias", None))
    if pooled is not None:
        source_x, source_y, x_rows = pooled.x, pooled.y, pooled.rows
        plan, offsets, steps = pooled.plans.joined, pooled.plans.offsets, pooled.plans.steps
    else:
        steps = [int(p.shape[0]) for p in plans]
        plan, offsets = joined_plans(plans), offsets_of(steps)
        source_x, source_y, x_rows = row_blocks(xs, ys) or (None, None, None)
    if source_x is not None:

        def made():
            return with_solver_rows(device_rows(model, [source_x], [source_y], binary), binary)

        x, y, _, xp = DEVICE_ROWS.get([(source_x, source_y)], tag, made)
    else:
        x, y, rows, xp = DEVICE_ROWS.get(
            list(zip(xs, ys, strict=True)),
            tag,
            lambda: with_solver_rows(device_rows(model, xs, ys, binary), binary),
            any_order=True,
        )
        x_rows = np.array([rows[id(t)] for t in xs], dtype=np.int64).reshape(len(xs), 2)
    most = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # an option numba sets at run time
    workers = max(1, min(len(steps), threads or numba.get_num_threads(), most))
    dim = x.shape[1]
    layout = (lambda a: np.ascontiguousarray(a[..., None, :])) if binary else (lambda a: to_class_major(a, dim))
    flat = (lambda a: np.ascontiguousarray(a[:, 0, :])) if binary else from_class_major
    wg = layout(as_array(w_global).astype(DTYPE, copy=False))
    inputs: Inputs = (wg, xp, y, x_rows, plan, offsets)
    binary_kind, softmax_first = binary, bool(getattr(model, "softmax_before_loss", False))
    assignment, worker_offsets = balance(steps, workers) if workers > 1 else (None, None)
    schedule: Schedule = (assignment, worker_offsets, binary_kind, softmax_first)
    return inputs, schedule, layout, flat, steps


def several_workers(schedule) -> bool:
    """Whether :func:`pack`'s schedule spreads the devices over more than one worker thread (the parallel kernels)."""
    return schedule[1] is not None and schedule[1].shape[0] > 2


def local_solve(
    model,
    w_global: Vector,
    xs: list[Vector],
    ys: list[Vector],
    plans: list[Vector],
    mu: float,
    lr: float,
    momentum: float,
    linear_term: Vector | None = None,
    generator: Any = None,
    threads: int = 0,
    pooled=None,
) -> tuple[Vector, int]:
    """:func:`upfl.solvers.torch_backend.local_solve` for :class:`upfl.models.LogisticRegression` and
    :class:`upfl.models.BinaryLogisticRegression` on the CPU.

    Returns the (k, P) local models (float32, input device order) and the total SGD steps.
    ``generator`` is ignored (the model draws nothing); ``threads`` > 0 caps the worker threads
    (default: numba's thread count); ``pooled``: the devices as blocks of pooled rows (:func:`pack`).
    """
    inputs, schedule, layout, flat, steps = pack(model, w_global, xs, ys, plans, threads, pooled)
    k, wg = len(steps), inputs[0]
    has_lin = linear_term is not None
    lin = (
        layout(as_array(linear_term).astype(DTYPE, copy=False))
        if linear_term is not None
        else np.zeros((k, 0, 0), DTYPE)
    )
    hyper = np.array([mu, lr, momentum], dtype=DTYPE)
    out = np.empty((k,) + wg.shape, dtype=DTYPE)
    if several_workers(schedule):
        solve_devices(out, *inputs, lin, has_lin, hyper, *schedule)
    else:
        solve_devices_serial(out, *inputs, lin, has_lin, hyper, *schedule[2:])
    return like(flat(out), w_global), sum(steps)


def personal_solve(
    model,
    w_global: Vector,
    xs: list[Vector],
    ys: list[Vector],
    plans: list[Vector],
    lr: float,
    personal_lambda: float,
    personal_lr: float,
    personal_steps: int,
    generator: Any = None,
    threads: int = 0,
    pooled=None,
) -> tuple[Vector, Vector, int]:
    """:func:`upfl.algorithms.pfedme.personal_solve` (pFedMe's local solve, Dinh et al. 2020, Algorithm 1)
    for the two logistic-regression models on the CPU: ((k, P) local models w_i, (k, P) personal models
    theta_i, total SGD steps times ``personal_steps``), float32, input device order."""
    inputs, schedule, _, flat, steps = pack(model, w_global, xs, ys, plans, threads, pooled)
    local, theta = (np.empty((len(steps),) + inputs[0].shape, dtype=DTYPE) for _ in range(2))
    hyper = np.array([personal_lambda, personal_lr, lr * personal_lambda], dtype=DTYPE)
    if several_workers(schedule):
        personal_devices(local, theta, *inputs, hyper, personal_steps, *schedule)
    else:
        personal_devices_serial(local, theta, *inputs, hyper, personal_steps, *schedule[2:])
    return like(flat(local), w_global), like(flat(theta), w_global), sum(steps) * personal_steps


def evaluator(model, sets: list[tuple[Vector, Vector]]) -> Callable[[Vector], list[tuple[float, int]]]:
    """A function of a parameter vector giving :func:`evaluate` on each (x, y) of ``sets`` (a run's training and test
    rows): the sets' transposed rows and labels are made once (:data:`EVALUATION_ROWS`), the parameters' layout once
    per call for all sets."""
    binary = isinstance(model, BinaryLogisticRegression)
    scale = (BIAS_FEATURE_SCALE if model.bias else 1.0) if binary else 1.0
    softmax_first = bool(getattr(model, "softmax_before_loss", False))

    def transposed(x, y) -> tuple[np.ndarray, np.ndarray]:
        return np.ascontiguousarray(as_array(x).T, dtype=DTYPE), np.ascontiguousarray(as_array(y), dtype=np.int64)

    rows = [EVALUATION_ROWS.get([(x, y)], (), functools.partial(transposed, x, y)) for x, y in sets]
    dim = sets[0][0].shape[1] if sets else 0

    def evaluate_sets(params) -> list[tuple[float, int]]:
        w = as_array(params).astype(DTYPE, copy=False)
        wt = np.ascontiguousarray(w[None, :]) if binary else to_class_major(w, dim)
        results = []
        for xt, labels in rows:
            loss, correct = evaluate_rows(wt, xt, labels, binary, scale, softmax_first)
            if abs(loss) > FLOAT32_MAX:  # torch's float32 sum overflows there: the loss is inf and the run diverged
                loss = math.inf
            results.append((float(loss), int(correct)))
        return results

    return evaluate_sets


def evaluate(model, params: Vector, x: Vector, y: Vector) -> tuple[float, int]:
    """``model.evaluate(params, x, y)`` (summed loss, correct predictions) of the two logistic-regression models
    in one compiled pass over the CPU tensors, without torch's per-operation cost: the same metric (float32 logits and
    per-row losses, :func:`evaluate_rows`; their total in float64: it differs from torch's float32 sum in the 7th
    significant digit)."""
    return evaluator(model, [(x, y)])(params)[0]


SOLVER_ENTRIES = ("local_solve", "personal_solve")
"""The training entry points :func:`warm_up` can load (:attr:`upfl.algorithms.base.Algorithm.solver_entry`)."""


@functools.cache
def warm_up(threads: int = 0, entries: tuple[str, ...] = SOLVER_ENTRIES) -> None:
    """Compile the kernels, or load them from numba's cache, on a small problem (once per process, ``threads`` and
    ``entries``: a bundle's runs share it): the training kernels of ``entries`` (a run loads the one its algorithm
    trains with, ``upfl kernels warm-up`` every one), the draws and the evaluation.

    :func:`upfl.solvers.selection.select_local_solver` calls it, so that the compile (seconds, once per
    installation and source change) or the cache load (under a second) is not charged to the first
    training round of a run. ``threads`` as in :func:`local_solve`: 1 (a pipeline job's runs) needs only the
    single-threaded kernels, more the parallel ones (a round with a single device still uses the former, compiled
    then if needed).
    """
    most = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # an option numba sets at run time
    k = max(1, min(2, threads or numba.get_num_threads(), most))
    problem: tuple[None, Any, list[Any], list[Any], list[Any]] = (
        None,
        np.zeros(4, DTYPE),
        [np.zeros((1, 1), DTYPE)] * k,
        [np.array([[1.0, 0.0]], DTYPE)] * k,
        [np.zeros((1, 1), np.int32)] * k,
    )
    unknown = set(entries) - set(SOLVER_ENTRIES)
    if unknown:
        raise ValueError(f"warm_up: unknown solver entries {sorted(unknown)}; known: {', '.join(SOLVER_ENTRIES)}")
    if "local_solve" in entries:
        local_solve(*problem, 1.0, 0.1, 0.5, threads=threads)
    if "personal_solve" in entries:
        personal_solve(*problem, 0.1, 1.0, 0.1, 1, threads=threads)
    warm_up_draws()
    for binary in (False, True):
        evaluate_rows(np.zeros((1, 2), DTYPE), np.zeros((1, 1), DTYPE), np.zeros(1, np.int64), binary, 1.0, False)
