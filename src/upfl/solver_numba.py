"""Compiled CPU local solver for multinomial and binary logistic regression (numba).

The same contract and the same arithmetic as :func:`upfl.solver.local_solve` (the local step of
Algorithm 1 line 4, which Algorithm 2 runs at odd iterations): every sampled device starts from
the global model and runs momentum SGD on

    F_i(w) + mu/2 ||w - w_global||^2 (+ <n_i, w>)

over its batch plan. At each step the gradient is that of the mean loss over the real samples of
the batch (index -1 pads the last batch of an epoch; cross-entropy for ``logreg``, the log loss for
``binary_logreg``; with ``model.softmax_before_loss`` the cross-entropy of the softmax of the logits,
:func:`softmax_first_residual`), plus ``mu (w - w_global)``, plus the device's linear term; then
``buf = momentum * buf + g`` and ``w -= lr * buf``.

Devices are independent, so they run in parallel (``numba.prange`` over worker threads, each with a
fixed list of devices): the result does not depend on the number of threads or on scheduling.
Arithmetic is float32 (as the torch path), without fastmath, so repeat runs are bit-identical. Every
accumulator is float32 too (logits, the softmax sum, the binary coefficient): zeros and ones are made in the
arrays' type, because numba types ``x * 0`` or ``x + 1`` with a float32 ``x`` as float64, which made the
binary kernel's logits mixed-precision and 25% slower (15.3 against 20.3 ns per sample-step).

:func:`personal_solve` is pFedMe's bi-level local solve (Dinh et al. 2020, Algorithm 1) on the same
kernels and layout; the selected solver carries it as ``local_solve.personal_solve``.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Callable

import numba
import numpy as np
import torch

from .models import BIAS_FEATURE_SCALE, BinaryLogisticRegression
from .caches import BoundedCache

if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"
"""Numba's own thread pool, whose idle workers sleep, unless the user names a layer. The OpenMP layer's idle
workers spin after every solve; with two bundles on two cores they take the other job's core, and a bundle
ran 1.5-2x slower (measured: 18 runs of Table 1, train 4.7 s under OpenMP, 1.6 s under workqueue). Results
do not depend on the layer (each worker runs a fixed list of devices)."""

DTYPE = np.float32
"""Working precision: float32 like the torch path (parameters, momentum buffer, gradient)."""
FLOAT32_MAX = float(np.finfo(np.float32).max)


@numba.njit(nogil=True, cache=True)
def batch_gradient(wt, x, y, rows, inv_count, gt, xt, zt, softmax_first):
    """Gradient of sum_b inv_count * CE(softmax(W^T x_b + b), y_b) over the real rows of one batch; with
    ``softmax_first`` of CE(softmax(p_b), y_b), p_b = softmax(W^T x_b + b) (:func:`softmax_first_residual`).

    ``wt`` and the output ``gt`` are (C, d + 1) = ``[W^T | b]``; ``rows`` holds sample indices (-1 is
    padding, skipped); ``xt`` (d, B) and ``zt`` (C, B) are scratch. The logits are computed with the
    batch as the inner (vectorised) axis, the weight gradient with the features as the inner axis.
    """
    d = x.shape[1]
    num_classes = y.shape[1]
    nb = rows.shape[0]
    for b in range(nb):
        r = rows[b]
        if r >= 0:
            for j in range(d):
                xt[j, b] = x[r, j]
        else:
            for j in range(d):
                xt[j, b] = 0
    for c in range(num_classes):
        bias = wt[c, d]
        for b in range(nb):
            zt[c, b] = bias
        for j in range(d):
            wv = wt[c, j]
            for b in range(nb):
                zt[c, b] += wv * xt[j, b]
    for b in range(nb):
        r = rows[b]
        if r < 0:
            continue
        m = zt[0, b]
        for c in range(1, num_classes):
            m = max(m, zt[c, b])
        total = wt.dtype.type(0)
        for c in range(num_classes):
            zt[c, b] = np.exp(zt[c, b] - m)
            total += zt[c, b]
        if softmax_first:
            softmax_first_residual(zt, b, total, y[r], inv_count)
        else:
            for c in range(num_classes):
                zt[c, b] = (zt[c, b] / total - y[r, c]) * inv_count
    gt[:] = 0
    for b in range(nb):
        r = rows[b]
        if r < 0:
            continue
        for c in range(num_classes):
            resid = zt[c, b]
            for j in range(d):
                gt[c, j] += resid * x[r, j]
            gt[c, d] += resid


@numba.njit(nogil=True, cache=True)
def softmax_first_residual(zt, b, total, y_row, inv_count):
    """Column ``b`` of ``zt`` (exp(z_c - max) summing to ``total``) to inv_count * p_c (g_c - <p, g>), with
    p = softmax(z), g = softmax(p) - y: the gradient of CE(softmax(p), y) in z (:mod:`upfl.models`)."""
    num_classes = zt.shape[0]
    top = zt[0, b] / total
    for c in range(num_classes):
        zt[c, b] = zt[c, b] / total
        top = max(top, zt[c, b])
    second = zt.dtype.type(0)
    for c in range(num_classes):
        second += np.exp(zt[c, b] - top)
    dot = zt.dtype.type(0)
    for c in range(num_classes):
        dot += zt[c, b] * (np.exp(zt[c, b] - top) / second - y_row[c])
    for c in range(num_classes):
        p = zt[c, b]
        zt[c, b] = p * ((np.exp(p - top) / second - y_row[c]) - dot) * inv_count


@numba.njit(nogil=True, cache=True)
def binary_coefficient(z, y_pos, inv_count):
    """inv_count * d/dz log(1 + exp(-s z)) = -s / (1 + exp(s z)) * inv_count, s = 2 y - 1 (y the label-1 indicator)."""
    one = DTYPE(1)
    sign = y_pos + y_pos - one
    return -sign / (one + np.exp(sign * z)) * inv_count


@numba.njit(nogil=True, cache=True)
def binary_batch_gradient(wt, x, y, rows, inv_count, gt):
    """Gradient of sum_b inv_count * log(1 + exp(-s_b <theta, x~_b>)), s_b = 2 y_b - 1, over the real rows.

    :class:`upfl.models.BinaryLogisticRegression`: ``wt`` and the output ``gt`` are (1, P) = theta,
    ``x`` holds the features x~ (bias already folded in), ``y`` the one-hot labels (column 1 = positive).
    Four real rows at a time: their dot products are four independent sums (each in feature order, so the
    result equals a row-by-row loop bit for bit) that the CPU overlaps; rows are added to ``gt`` in order.
    """
    p = x.shape[1]
    nb = rows.shape[0]
    gt[:] = 0
    b = 0
    while b < nb:
        if b + 3 < nb and min(rows[b], rows[b + 1], rows[b + 2], rows[b + 3]) >= 0:
            r0, r1, r2, r3 = rows[b], rows[b + 1], rows[b + 2], rows[b + 3]
            z0 = wt.dtype.type(0)
            z1, z2, z3 = z0, z0, z0
            for j in range(p):
                wj = wt[0, j]
                z0 += wj * x[r0, j]
                z1 += wj * x[r1, j]
                z2 += wj * x[r2, j]
                z3 += wj * x[r3, j]
            c0 = binary_coefficient(z0, y[r0, 1], inv_count)
            c1 = binary_coefficient(z1, y[r1, 1], inv_count)
            c2 = binary_coefficient(z2, y[r2, 1], inv_count)
            c3 = binary_coefficient(z3, y[r3, 1], inv_count)
            for j in range(p):
                gt[0, j] += c0 * x[r0, j]
            for j in range(p):
                gt[0, j] += c1 * x[r1, j]
            for j in range(p):
                gt[0, j] += c2 * x[r2, j]
            for j in range(p):
                gt[0, j] += c3 * x[r3, j]
            b += 4
            continue
        r = rows[b]
        if r >= 0:
            z = wt.dtype.type(0)
            for j in range(p):
                z += wt[0, j] * x[r, j]
            c = binary_coefficient(z, y[r, 1], inv_count)
            for j in range(p):
                gt[0, j] += c * x[r, j]
        b += 1


@numba.njit(nogil=True, cache=True)
def momentum_step(wt, buf, gt, wg, lin, has_lin, mu, lr, momentum):
    """g = grad + mu (w - w_global) (+ n_i); buf = momentum buf + g; w -= lr buf (torch.optim.SGD order).

    All arrays are (C, d + 1); ``gt`` is overwritten with g.
    """
    w1, b1, g1, wg1 = wt.ravel(), buf.ravel(), gt.ravel(), wg.ravel()
    if mu != 0:
        for p in range(w1.shape[0]):
            g1[p] += mu * (w1[p] - wg1[p])
    if has_lin:
        lin1 = lin.ravel()
        for p in range(w1.shape[0]):
            g1[p] += lin1[p]
    for p in range(w1.shape[0]):
        b1[p] = momentum * b1[p] + g1[p]
        w1[p] -= lr * b1[p]


@numba.njit(nogil=True, cache=True)
def inverse_count(rows):
    """1 / (real samples of the batch ``rows``, at least 1) in float32: the weight of each sample in the batch
    mean, as the torch path's ``mask / mask.sum()``."""
    count = 0
    for b in range(rows.shape[0]):
        if rows[b] >= 0:
            count += 1
    return np.float32(1.0) / np.float32(max(count, 1))


@numba.njit(nogil=True, cache=True)
def device_solve(wt, wg, x, y, plan, lin, has_lin, hyper, binary, softmax_first):
    """One device's local solve (Algorithm 1 line 4) from the global model along ``plan`` (steps, B), into ``wt``.

    ``wt`` (overwritten with the local model), ``wg`` and ``lin`` are (C, d + 1) = ``[W^T | b]``, or (1, P) = theta
    when ``binary``; each batch's mean is over its real samples (:func:`inverse_count`); ``hyper`` holds (mu, lr,
    momentum).
    """
    mu, lr, momentum = hyper[0], hyper[1], hyper[2]
    w1, wg1 = wt.ravel(), wg.ravel()
    for p in range(w1.shape[0]):
        w1[p] = wg1[p]
    buf = np.zeros_like(wt)
    gt = np.empty_like(wt)
    xt = np.empty((x.shape[1], plan.shape[1]), dtype=wt.dtype)
    zt = np.empty((y.shape[1], plan.shape[1]), dtype=wt.dtype)
    for s in range(plan.shape[0]):
        inv_count = inverse_count(plan[s])
        if binary:
            binary_batch_gradient(wt, x, y, plan[s], inv_count, gt)
        else:
            batch_gradient(wt, x, y, plan[s], inv_count, gt, xt, zt, softmax_first)
        momentum_step(wt, buf, gt, wg, lin, has_lin, mu, lr, momentum)


@numba.njit(parallel=True, nogil=True, cache=True)
def solve_devices(out, wg, x, y, x_rows, plan, plan_offsets, lin, has_lin, hyper,
                  assignment, worker_offsets, binary, softmax_first):
    """Fill ``out[i]`` (C, d + 1) with device i's local model from its rows ``x[x_rows[i, 0]:x_rows[i, 1]]``;
    worker t runs ``assignment[worker_offsets[t]:...]``."""
    for t in numba.prange(worker_offsets.shape[0] - 1):
        for q in range(worker_offsets[t], worker_offsets[t + 1]):
            i = assignment[q]
            a, b, s0, s1 = x_rows[i, 0], x_rows[i, 1], plan_offsets[i], plan_offsets[i + 1]
            device_solve(out[i], wg, x[a:b], y[a:b], plan[s0:s1], lin[i], has_lin, hyper, binary, softmax_first)


@numba.njit(nogil=True, cache=True)
def solve_devices_serial(out, wg, x, y, x_rows, plan, plan_offsets, lin, has_lin, hyper, binary, softmax_first):
    """:func:`solve_devices` on the calling thread, device after device: the same numbers (devices are
    independent), without the parallel kernel, whose compile costs several seconds more (a fresh clone's first
    run, and every single-threaded pipeline job, needs only this one)."""
    for i in range(out.shape[0]):
        a, b, s0, s1 = x_rows[i, 0], x_rows[i, 1], plan_offsets[i], plan_offsets[i + 1]
        device_solve(out[i], wg, x[a:b], y[a:b], plan[s0:s1], lin[i], has_lin, hyper, binary, softmax_first)


@numba.njit(nogil=True, cache=True)
def device_personal_solve(local, theta, wg, x, y, plan, hyper, personal_steps, binary, softmax_first):
    """One device's pFedMe local solve (Dinh et al. 2020, Algorithm 1) from the global model along ``plan``.

    Per batch row: ``personal_steps`` times {g = grad f(theta; batch) + lambda (theta - w); theta -= eta_p g},
    then w -= eta lambda (w - theta). ``hyper`` holds (lambda, eta_p, eta lambda); ``local`` (w) and ``theta``
    are overwritten.
    """
    lam, personal_lr, mix = hyper[0], hyper[1], hyper[2]
    w1, t1, wg1 = local.ravel(), theta.ravel(), wg.ravel()
    for p in range(w1.shape[0]):
        w1[p] = wg1[p]
        t1[p] = wg1[p]
    gt = np.empty_like(theta)
    xt = np.empty((x.shape[1], plan.shape[1]), dtype=theta.dtype)
    zt = np.empty((y.shape[1], plan.shape[1]), dtype=theta.dtype)
    g1 = gt.ravel()
    for s in range(plan.shape[0]):
        inv_count = inverse_count(plan[s])
        for _ in range(personal_steps):
            if binary:
                binary_batch_gradient(theta, x, y, plan[s], inv_count, gt)
            else:
                batch_gradient(theta, x, y, plan[s], inv_count, gt, xt, zt, softmax_first)
            for p in range(t1.shape[0]):
                g1[p] += lam * (t1[p] - w1[p])
                t1[p] -= personal_lr * g1[p]
        for p in range(w1.shape[0]):
            w1[p] -= mix * (w1[p] - t1[p])


@numba.njit(parallel=True, nogil=True, cache=True)
def personal_devices(local, theta, wg, x, y, x_rows, plan, plan_offsets, hyper, personal_steps,
                     assignment, worker_offsets, binary, softmax_first):
    """:func:`solve_devices` for :func:`device_personal_solve`: fill ``local[i]`` and ``theta[i]``."""
    for t in numba.prange(worker_offsets.shape[0] - 1):
        for q in range(worker_offsets[t], worker_offsets[t + 1]):
            i = assignment[q]
            a, b, s0, s1 = x_rows[i, 0], x_rows[i, 1], plan_offsets[i], plan_offsets[i + 1]
            device_personal_solve(local[i], theta[i], wg, x[a:b], y[a:b], plan[s0:s1], hyper,
                                  personal_steps, binary, softmax_first)


@numba.njit(nogil=True, cache=True)
def personal_devices_serial(local, theta, wg, x, y, x_rows, plan, plan_offsets, hyper,
                            personal_steps, binary, softmax_first):
    """:func:`personal_devices` on the calling thread (see :func:`solve_devices_serial`)."""
    for i in range(local.shape[0]):
        a, b, s0, s1 = x_rows[i, 0], x_rows[i, 1], plan_offsets[i], plan_offsets[i + 1]
        device_personal_solve(local[i], theta[i], wg, x[a:b], y[a:b], plan[s0:s1], hyper,
                              personal_steps, binary, softmax_first)


MT19937_WORDS = 624
RANDPERM_SWAP_LIMIT = (2**32 - 1) // 20
"""torch.randperm on the CPU shuffles n < this by Fisher-Yates with ``random() % (n - i)`` (a larger n draws 64-bit
numbers); :func:`batch_plans` falls back to :func:`upfl.solver.batch_plan` beyond it."""


@numba.njit(nogil=True, cache=True)
def mt19937_seed(state, seed):
    """The Mersenne Twister state (uint32) that torch's CPU generator holds after ``manual_seed(seed)`` (its low
    32 bits)."""
    state[0] = np.uint32(seed & 0xFFFFFFFF)
    for j in range(1, MT19937_WORDS):
        prev = state[j - 1]
        state[j] = np.uint32(1812433253) * (prev ^ (prev >> np.uint32(30))) + np.uint32(j)


@numba.njit(nogil=True, cache=True)
def mt19937_twist(state):
    """The next 624 words of the Mersenne Twister state, in place (the reference generator's order)."""
    upper, lower, matrix, one = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF), np.uint32(1)
    shift = 397
    for k in range(MT19937_WORDS - shift):
        y = (state[k] & upper) | (state[k + 1] & lower)
        state[k] = state[k + shift] ^ (y >> one) ^ (matrix * (y & one))
    for k in range(MT19937_WORDS - shift, MT19937_WORDS - 1):
        y = (state[k] & upper) | (state[k + 1] & lower)
        state[k] = state[k + shift - MT19937_WORDS] ^ (y >> one) ^ (matrix * (y & one))
    y = (state[MT19937_WORDS - 1] & upper) | (state[0] & lower)
    state[MT19937_WORDS - 1] = state[shift - 1] ^ (y >> one) ^ (matrix * (y & one))


@numba.njit(nogil=True, cache=True)
def mt19937_outputs(state, out):
    """The 32-bit outputs of the 624 state words (tempering), into ``out``."""
    for i in range(MT19937_WORDS):
        y = state[i]
        y ^= y >> np.uint32(11)
        y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
        y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
        y ^= y >> np.uint32(18)
        out[i] = y


@numba.njit(nogil=True, cache=True)
def shuffle_plans(seeds, sizes, epochs, plan, offsets):
    """Fill ``plan[offsets[i]:offsets[i + 1]]`` with device i's batch plan, as :func:`upfl.solver.batch_plan` with a
    generator seeded ``seeds[i]``: per epoch torch.randperm's shuffle (z = random() % (n - i), swap positions i and
    i + z, for i = 0..n-2), the epoch's ceil(n / B) rows padded with -1. The generator's outputs are made 624 at
    a time (one twist, then their tempering), as the reference generator makes them."""
    width = plan.shape[1]
    state = np.empty(MT19937_WORDS, dtype=np.uint32)
    outputs = np.empty(MT19937_WORDS, dtype=np.uint32)
    flat = plan.ravel()
    for d in range(seeds.shape[0]):
        n = sizes[d]
        span = (n + width - 1) // width * width
        mt19937_seed(state, seeds[d])
        used = MT19937_WORDS
        start = offsets[d] * width
        for _ in range(epochs[d]):
            for j in range(n):
                flat[start + j] = j
            for j in range(n, span):
                flat[start + j] = -1
            j = 0
            while j < n - 1:
                if used == MT19937_WORDS:
                    mt19937_twist(state)
                    mt19937_outputs(state, outputs)
                    used = 0
                stop = min(n - 1, j + MT19937_WORDS - used)
                for i in range(j, stop):
                    a = start + i
                    b = a + np.int64(outputs[used] % np.uint32(n - i))
                    used += 1
                    flat[a], flat[b] = flat[b], flat[a]
                j = stop
            start += span


def batch_plans(sizes: list[int], epochs: list[int], batch_size: int,
                generators: list[torch.Generator]) -> list[torch.Tensor]:
    """:func:`upfl.solver.batch_plan` in one compiled call, the same plans bit for bit; the generators must be freshly
    seeded (their ``initial_seed`` is all that is read). Views of one int32 array (a kept plan keeps its round's
    array)."""
    if max(sizes, default=0) >= RANDPERM_SWAP_LIMIT:
        from .solver import batch_plan
        return batch_plan(sizes, epochs, batch_size, generators)
    steps = [-(-n // batch_size) * e for n, e in zip(sizes, epochs)]
    offsets = offsets_of(steps)
    plan = np.empty((int(offsets[-1]), batch_size), dtype=np.int32)
    shuffle_plans(np.array([g.initial_seed() for g in generators], dtype=np.uint64), np.array(sizes, dtype=np.int64),
                  np.array(epochs, dtype=np.int64), plan, offsets)
    whole = torch.from_numpy(plan)
    bounds = offsets.tolist()
    return [whole[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


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


def to_class_major(params: np.ndarray, dim: int) -> np.ndarray:
    """Flat ``[W.ravel() (d, C), b]`` rows (..., P) to the solver's (..., C, d + 1) = ``[W^T | b]``."""
    lead = params.shape[:-1]
    classes = params.shape[-1] // (dim + 1)
    weights = params[..., :dim * classes].reshape(*lead, dim, classes)
    return np.ascontiguousarray(np.concatenate([np.swapaxes(weights, -1, -2), params[..., dim * classes:, None]], -1))


def from_class_major(params: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_class_major`: (..., C, d + 1) to flat (..., P)."""
    lead = params.shape[:-2]
    weights = np.swapaxes(params[..., :-1], -1, -2).reshape(*lead, -1)
    return np.ascontiguousarray(np.concatenate([weights, params[..., -1]], -1))


class KeptArrays(BoundedCache):
    """Arrays made from tensors that a process hands the kernels again and again, kept for the last ``size`` sets.

    A run hands the solver the same per-device tensors every round and the evaluation the same training and test
    tensors every iteration (its data set, never changed): with full participation the solver's concatenated
    features x~ and labels are made once instead of every round (0.14 ms of a 5.5 ms round of 30 devices), and the
    evaluation's transposed rows once per run. Entries are keyed by the tensors' identities and version counters
    (an in-place change makes a new key) and keep the tensors alive, so an identity is never reused while its
    entry exists. At most ``max_bytes`` (the arrays and the tensors they keep) are held.
    """

    def __init__(self, size: int = 4, max_bytes: int = 256 << 20):
        super().__init__(max_bytes, max_entries=size)

    def get(self, groups: list[tuple[torch.Tensor, ...]], tag: tuple, make: Callable[[], tuple],
            any_order: bool = False) -> tuple:
        """``make()`` (a tuple of arrays and other values) for the tensor ``groups`` and ``tag`` (what else it
        depends on), kept; with ``any_order`` the same groups in another order are the same entry."""
        ids = [tuple((id(t), t._version) for t in group) for group in groups]
        key = (tag, *(sorted(ids) if any_order else ids))
        return super().get(key, lambda: (make(), groups))[0]


DEVICE_ROWS = KeptArrays()
"""The solver's concatenated device rows (:func:`pack`)."""
EVALUATION_ROWS = KeptArrays()
"""The evaluation's transposed rows and labels (:func:`evaluate`)."""


def device_rows(model, xs, ys, binary) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, int]]]:
    """(x, y, rows of each device: id(x_i) -> (first, end)), x holding x~ for the binary model, float32; a device
    set seen again in another order (full participation samples every device, in a new order each round) reads
    its rows from the same arrays."""
    x = torch.cat(xs)
    x = (model.features(x) if binary else x).numpy().astype(DTYPE, copy=False)
    ends = np.cumsum([int(t.shape[0]) for t in xs]).tolist()
    rows = {id(t): (end - int(t.shape[0]), end) for t, end in zip(xs, ends)}
    return x, torch.cat(ys).numpy().astype(DTYPE, copy=False), rows


def row_blocks(xs, ys) -> tuple[torch.Tensor, torch.Tensor, np.ndarray] | None:
    """(x, y, (k, 2) row ranges) when every x_i is a block of rows of one contiguous tensor x and y_i the same rows
    of one y (the simulation's devices are views of its pooled training rows, :class:`upfl.simulation.Simulation`);
    else None."""
    x, y = xs[0]._base, ys[0]._base
    if (x is None or y is None or x.shape[0] != y.shape[0] or x.shape[1:] != xs[0].shape[1:]
            or y.shape[1:] != ys[0].shape[1:] or not (x.is_contiguous() and y.is_contiguous())):
        return None
    stride_x, stride_y, start_x, start_y = x.stride(0), y.stride(0), x.storage_offset(), y.storage_offset()
    rows = []
    for xi, yi in zip(xs, ys):
        if xi._base is not x or yi._base is not y or xi.shape[0] != yi.shape[0]:
            return None
        first, rest = divmod(xi.storage_offset() - start_x, stride_x)
        if rest or (yi.storage_offset() - start_y) != first * stride_y:
            return None
        rows.append((first, first + xi.shape[0]))
    return x, y, np.array(rows, dtype=np.int64).reshape(len(xs), 2)


def joined_plans(plans: list[torch.Tensor]) -> np.ndarray:
    """The plans as one int32 (steps, B) array: the rows of the array they are views of when they lie back to back in
    it (a round's plans drawn together by :func:`batch_plans`), else their concatenation."""
    base, width = plans[0]._base, plans[0].shape[1]
    if (base is not None and base.dim() == 2 and base.shape[1] == width and base.is_contiguous()
            and all(p._base is base and p.is_contiguous() for p in plans)):
        start = plans[0].storage_offset()
        end = start
        for p in plans:
            if p.storage_offset() != end:
                break
            end += p.numel()
        else:
            return base.numpy()[start // width:end // width]
    return np.concatenate([p.numpy() for p in plans]).astype(np.int32, copy=False)


def pack(model, w_global, xs, ys, plans, threads):
    """The kernels' shared inputs: (wg, x, y, (k, 2) row ranges of the devices in x, int32 plan, plan offsets), the schedule
    (assignment, worker offsets, binary, softmax first; no assignment for one worker), the layout function, its inverse and the
    devices' step counts. Devices that are row blocks of one pooled tensor (:func:`row_blocks`) read their rows from
    that tensor's arrays, made once per run; other device sets have theirs made per set (:data:`DEVICE_ROWS`)."""
    steps = [int(p.shape[0]) for p in plans]
    workers = max(1, min(len(xs), threads or numba.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    binary = isinstance(model, BinaryLogisticRegression)
    tag = (binary, getattr(model, "bias", None))
    blocks = row_blocks(xs, ys)
    if blocks is not None:
        pooled_x, pooled_y, x_rows = blocks
        x, y, _ = DEVICE_ROWS.get([(pooled_x, pooled_y)], tag,
                                  lambda: device_rows(model, [pooled_x], [pooled_y], binary))
    else:
        x, y, rows = DEVICE_ROWS.get(list(zip(xs, ys)), tag, lambda: device_rows(model, xs, ys, binary),
                                     any_order=True)
        x_rows = np.array([rows[id(t)] for t in xs], dtype=np.int64).reshape(len(xs), 2)
    plan = joined_plans(plans)
    dim = x.shape[1]
    layout = (lambda a: np.ascontiguousarray(a[..., None, :])) if binary else (lambda a: to_class_major(a, dim))
    flat = (lambda a: np.ascontiguousarray(a[:, 0, :])) if binary else from_class_major
    wg = layout(w_global.numpy().astype(DTYPE, copy=False))
    inputs = (wg, x, y, x_rows, plan, offsets_of(steps))
    kind = (binary, bool(getattr(model, "softmax_before_loss", False)))
    schedule = (*balance(steps, workers), *kind) if workers > 1 else (None, None, *kind)
    return inputs, schedule, layout, flat, steps


def several_workers(schedule) -> bool:
    """Whether :func:`pack`'s schedule spreads the devices over more than one worker thread (the parallel kernels)."""
    return schedule[1] is not None and schedule[1].shape[0] > 2


def local_solve(model, w_global: torch.Tensor, xs: list[torch.Tensor], ys: list[torch.Tensor],
                plans: list[torch.Tensor], mu: float, lr: float, momentum: float,
                linear_term: torch.Tensor | None = None, generator: torch.Generator | None = None,
                threads: int = 0) -> tuple[torch.Tensor, int]:
    """:func:`upfl.solver.local_solve` for :class:`upfl.models.LogisticRegression` and
    :class:`upfl.models.BinaryLogisticRegression` on the CPU.

    Returns the (k, P) local models (float32, input device order) and the total SGD steps.
    ``generator`` is ignored (the model draws nothing); ``threads`` > 0 caps the worker threads
    (default: numba's thread count).
    """
    inputs, schedule, layout, flat, steps = pack(model, w_global, xs, ys, plans, threads)
    k, wg = len(xs), inputs[0]
    has_lin = linear_term is not None
    lin = layout(linear_term.numpy().astype(DTYPE, copy=False)) if has_lin else np.zeros((k, 0, 0), DTYPE)
    hyper = np.array([mu, lr, momentum], dtype=DTYPE)
    out = np.empty((k,) + wg.shape, dtype=DTYPE)
    if several_workers(schedule):
        solve_devices(out, *inputs, lin, has_lin, hyper, *schedule)
    else:
        solve_devices_serial(out, *inputs, lin, has_lin, hyper, *schedule[2:])
    return torch.from_numpy(flat(out)), sum(steps)


def personal_solve(model, w_global: torch.Tensor, xs: list[torch.Tensor], ys: list[torch.Tensor],
                   plans: list[torch.Tensor], lr: float, personal_lambda: float, personal_lr: float,
                   personal_steps: int, generator: torch.Generator | None = None,
                   threads: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """:func:`upfl.algorithms.pfedme.personal_solve` (pFedMe's local solve, Dinh et al. 2020, Algorithm 1)
    for the two logistic-regression models on the CPU: ((k, P) local models w_i, (k, P) personal models
    theta_i, total SGD steps times ``personal_steps``), float32, input device order."""
    inputs, schedule, _, flat, steps = pack(model, w_global, xs, ys, plans, threads)
    local, theta = (np.empty((len(xs),) + inputs[0].shape, dtype=DTYPE) for _ in range(2))
    hyper = np.array([personal_lambda, personal_lr, lr * personal_lambda], dtype=DTYPE)
    if several_workers(schedule):
        personal_devices(local, theta, *inputs, hyper, personal_steps, *schedule)
    else:
        personal_devices_serial(local, theta, *inputs, hyper, personal_steps, *schedule[2:])
    return torch.from_numpy(flat(local)), torch.from_numpy(flat(theta)), sum(steps) * personal_steps


EVALUATION_BLOCK = 64
"""Rows whose logits the evaluation computes together (the rows are the inner, vectorised axis)."""


@numba.njit(nogil=True, cache=True)
def block_logits(wt, xt, r0, m, fscale, binary, z):
    """Logits of rows r0..r0+m-1 into ``z[:, :m]``: per row and class one feature-order sum, from the bias
    (multinomial) or from 0 (binary, features times ``fscale``, the folded bias last). ``xt`` is (d, n): the rows
    are the inner axis, so the CPU adds a feature to many rows' sums at once, each sum still in feature order."""
    d = xt.shape[0]
    if binary:
        for b in range(m):
            z[0, b] = 0
        for j in range(d):
            wj = wt[0, j]
            xr = xt[j, r0:r0 + m]
            for b in range(m):
                z[0, b] += wj * (xr[b] * fscale)
        if wt.shape[1] > d:
            bias = wt[0, d] * fscale
            for b in range(m):
                z[0, b] += bias
    else:
        for c in range(wt.shape[0]):
            bias = wt[c, d]
            for b in range(m):
                z[c, b] = bias
            for j in range(d):
                wj = wt[c, j]
                xr = xt[j, r0:r0 + m]
                for b in range(m):
                    z[c, b] += wj * xr[b]


@numba.njit(nogil=True, cache=True)
def evaluate_rows(wt, xt, labels, binary, scale, softmax_first):
    """Summed loss and number of correct predictions of one model on the rows of ``xt`` (d, n) (one pass).

    Logits in the model's float32 (a model that overflows gives a non-finite loss, as under torch, and its run
    is diverged), the loss from them in float64; the logits of :data:`EVALUATION_BLOCK` rows at a time
    (:func:`block_logits`).

    Multinomial: ``wt`` (C, d + 1) = ``[W^T | b]``, cross-entropy of softmax(W^T x + b) (with ``softmax_first``
    of the softmax of p = softmax(W^T x + b), in float64), prediction the first largest logit. Binary: ``wt`` (1, P) = theta on x~ = ``[x, 1] * scale`` (P = d + 1) or ``x * scale``
    (P = d), log loss log(1 + exp(-s z)) with s = 2 y - 1, prediction 1 when z > 0.
    """
    n = xt.shape[1]
    classes = wt.shape[0]
    fscale = wt.dtype.type(scale)
    z = np.empty((classes, EVALUATION_BLOCK), dtype=wt.dtype)
    loss = 0.0
    correct = 0
    for r0 in range(0, n, EVALUATION_BLOCK):
        m = min(EVALUATION_BLOCK, n - r0)
        block_logits(wt, xt, r0, m, fscale, binary, z)
        for k in range(m):
            label = labels[r0 + k]
            if binary:
                t = z[0, k]
                s = -(2.0 * label - 1.0) * np.float64(t)
                loss += max(s, 0.0) + np.log1p(np.exp(-abs(s)))
                correct += (t > 0) == (label == 1)
            else:
                best = 0
                for c in range(1, classes):
                    if z[c, k] > z[best, k]:
                        best = c
                top = np.float64(z[best, k])
                finite = np.isfinite(top)
                if softmax_first and finite:
                    loss += softmax_first_loss(z[:, k], top, label)
                    correct += best == label
                    continue
                total = 0.0
                for c in range(classes):
                    if c == best and finite:
                        total += 1.0  # exp(top - top), exactly
                    else:
                        total += np.exp(np.float64(z[c, k]) - top)
                loss += top + np.log(total) - np.float64(z[label, k])
                correct += best == label
    return loss, correct


@numba.njit(nogil=True, cache=True)
def softmax_first_loss(z, top, label):
    """CE(softmax(p), label) with p = softmax(z) in float64, ``top`` the largest of the float32 logits ``z``."""
    classes = z.shape[0]
    p = np.empty(classes)
    total = 0.0
    for c in range(classes):
        p[c] = np.exp(np.float64(z[c]) - top)
        total += p[c]
    second = 0.0
    for c in range(classes):
        p[c] /= total
        second += np.exp(p[c])
    return np.log(second) - p[label]


def evaluate(model, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
    """``model.evaluate(params, x, y)`` (summed loss, correct predictions) of the two logistic-regression models
    in one compiled pass over the CPU tensors, without torch's per-operation cost: the same metric (float32 logits,
    the loss summed in float64: it differs from torch's float32 sums in the 7th significant digit)."""
    binary = isinstance(model, BinaryLogisticRegression)
    w = params.detach().numpy().astype(DTYPE, copy=False)
    if binary:
        wt, scale = np.ascontiguousarray(w[None, :]), (BIAS_FEATURE_SCALE if model.bias else 1.0)
    else:
        wt, scale = to_class_major(w, x.shape[1]), 1.0
    xt, labels = EVALUATION_ROWS.get([(x, y)], (), lambda: (np.ascontiguousarray(x.numpy().T, dtype=DTYPE),
                                                           np.ascontiguousarray(y.numpy(), dtype=np.int64)))
    loss, correct = evaluate_rows(wt, xt, labels, binary, scale, bool(getattr(model, "softmax_before_loss", False)))
    if abs(loss) > FLOAT32_MAX:  # torch's float32 sum overflows there: the loss is inf and the run diverged
        loss = math.inf
    return float(loss), int(correct)


local_solve.personal_solve = personal_solve
"""The selected solver carries pFedMe's local solve (:meth:`upfl.algorithms.pfedme.PFedMe.local_solve` uses it)."""
local_solve.evaluate = evaluate
"""... and the compiled evaluation of its models (:meth:`upfl.simulation.Simulation.evaluate_model` uses it)."""
local_solve.batch_plan = batch_plans
"""... and the compiled batch plans (:meth:`upfl.simulation.Simulation.training_round` draws with it)."""


@functools.lru_cache(maxsize=None)
def warm_up(threads: int = 0) -> None:
    """Compile the kernels, or load them from numba's cache, on a small problem (once per process and ``threads``:
    a bundle's runs share it).

    :func:`upfl.solver.select_local_solver` calls it, so that the compile (seconds, once per
    installation and source change) or the cache load (under a second) is not charged to the first
    training round of a run. ``threads`` as in :func:`local_solve`: 1 (a pipeline job's runs) needs only the
    single-threaded kernels, more the parallel ones (a round with a single device still uses the former, compiled
    then if needed).
    """
    k = max(1, min(2, threads or numba.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    problem = (None, torch.zeros(4), [torch.zeros(1, 1)] * k, [torch.tensor([[1.0, 0.0]])] * k,
               [torch.zeros(1, 1, dtype=torch.int32)] * k)
    local_solve(*problem, 1.0, 0.1, 0.5, threads=threads)
    personal_solve(*problem, 0.1, 1.0, 0.1, 1, threads=threads)
    batch_plans([2], [1], 1, [torch.Generator()])
    for binary in (False, True):
        evaluate_rows(np.zeros((1, 2), DTYPE), np.zeros((1, 1), DTYPE), np.zeros(1, np.int64), binary, 1.0, False)
