"""The training kernels: momentum SGD on a device's batch plan (Algorithm 1 line 4), pFedMe's bi-level solve, and
the loops over devices (parallel over worker threads, or serial)."""

from __future__ import annotations

import numba
import numpy as np

from .arithmetic import DTYPE, FUSED, exp32
from .layout import aligned_zeros, padded, unpad
from .vectors import LANES, accumulate_pair, accumulate_rows, block_dots, momentum_vectors, row_dot


@numba.njit(nogil=True, cache=True)
def batch_buffers(outputs, batch):
    """Scratch of the training kernels for batches of ``batch`` rows with ``outputs`` logits each: (zt (outputs,
    batch), per-row max, per-row sum of exponentials, per-row weight in the batch mean (float32), row index with
    padding read as row 0 (int32, as the plans), per-row entry of the one-hot labels gathered from y (float32),
    the weights of a full batch (1 / ``batch`` each))."""
    full = np.full(batch, DTYPE(1) / DTYPE(max(batch, 1)))
    return (
        np.zeros((outputs, batch), DTYPE),
        np.zeros(batch, DTYPE),
        np.zeros(batch, DTYPE),
        np.zeros(batch, DTYPE),
        np.zeros(batch, np.int32),
        np.zeros(batch, DTYPE),
        full,
    )


@numba.njit(nogil=True, cache=True)
def batch_rows(rows, inv_count, weight, safe):
    """Per row of the batch: its weight in the batch mean (``inv_count``, 0 for padding) and an index to read
    (padding reads row 0, whose products the weight 0 then drops)."""
    for b in range(rows.shape[0]):
        r = rows[b]
        weight[b] = inv_count if r >= 0 else 0
        safe[b] = max(r, 0)


@numba.njit(nogil=True, cache=True, inline="always")
def batch_reads(rows, buffers):
    """(rows to read, weight of each in the batch mean) of the batch ``rows``: a full batch reads its rows, each
    weighing 1 / B (the buffers' full weights); a batch with padding (-1) reads the indices and weights of
    :func:`batch_rows` (1 / real rows, 0 for padding)."""
    weight, safe, full = buffers[3], buffers[4], buffers[6]
    count = real_count(rows)
    if count == rows.shape[0]:
        return rows, full
    batch_rows(rows, DTYPE(1) / DTYPE(max(count, 1)), weight, safe)
    return safe, weight


@numba.njit(fastmath=FUSED, error_model="numpy", nogil=True, cache=True, inline="always")
def batch_gradient(wp, xp, y, safe, weight, gp, buffers, softmax_first):
    """Gradient of sum_b weight_b * CE(softmax(W^T x_b + b), y_b) over the rows of one batch; with
    ``softmax_first`` of CE(softmax(p_b), y_b), p_b = softmax(W^T x_b + b) (:func:`softmax_first_residual`).

    Padded layout: ``wp`` and the output ``gp`` are (C, Dp) = ``[W^T | b | 0]``, ``xp`` the rows ``[x, 1, 0]``
    (:func:`padded_rows`); ``safe`` and ``weight`` are the rows to read and their weights (:func:`batch_reads`;
    padding weighs 0). Logits by :func:`block_dots` (:func:`row_dot` for the last samples short of a block), the
    softmax over all samples at once (:func:`exp32`), the gradient by :func:`accumulate_rows`.
    """
    zt, top, total, _, _, label, _ = buffers
    nb = safe.shape[0]
    num_classes = zt.shape[0]
    blocks = nb - nb % LANES
    for c in range(num_classes):
        for q in range(0, blocks, LANES):
            block_dots(wp, c, xp, safe, q, zt)
        for b in range(blocks, nb):
            zt[c, b] = row_dot(wp, c, xp, safe[b])
    for b in range(nb):
        top[b] = zt[0, b]
        total[b] = 0
    for c in range(1, num_classes):
        for b in range(nb):
            top[b] = max(top[b], zt[c, b])
    for c in range(num_classes):
        for b in range(nb):
            e = exp32(zt[c, b] - top[b])
            zt[c, b] = e
            total[b] += e
    if softmax_first:
        for b in range(nb):
            if weight[b] != 0:
                softmax_first_residual(zt, b, total[b], y[safe[b]], weight[b])
            else:
                for c in range(num_classes):
                    zt[c, b] = 0
    else:
        for c in range(num_classes):
            for b in range(nb):
                label[b] = y[safe[b], c]
            for b in range(nb):
                zt[c, b] = (zt[c, b] / total[b] - label[b]) * weight[b]
    for c in range(0, num_classes - 1, 2):
        accumulate_pair(gp, c, zt, xp, safe, nb)
    if num_classes % 2:
        accumulate_rows(gp, num_classes - 1, zt, xp, safe, nb)


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


@numba.njit(fastmath=FUSED, error_model="numpy", nogil=True, cache=True, inline="always")
def binary_batch_gradient(wp, xp, safe, weight, gp, buffers):
    """Gradient of sum_b weight_b * log(1 + exp(-s_b <theta, x~_b>)), s_b = 2 y_b - 1, over the rows of one batch.

    :class:`upfl.models.BinaryLogisticRegression` in the padded layout: ``wp`` and the output ``gp`` are (1, Dp) =
    ``[theta | 0]``, ``xp`` the signed rows ``[s x~, 0]`` (bias already folded in, :func:`signed_rows`); ``safe``
    and ``weight`` as in :func:`batch_gradient`. Logits z'_b = <theta, s_b x~_b> by :func:`block_dots` and
    :func:`row_dot`, the coefficients -weight_b / (1 + exp(z'_b)) over all samples at once (:func:`exp32`), the
    gradient by :func:`accumulate_rows`.
    """
    zt = buffers[0]
    nb = safe.shape[0]
    one = DTYPE(1)
    blocks = nb - nb % LANES
    for q in range(0, blocks, LANES):
        block_dots(wp, 0, xp, safe, q, zt)
    for b in range(blocks, nb):
        zt[0, b] = row_dot(wp, 0, xp, safe[b])
    for b in range(nb):
        zt[0, b] = -one / (one + exp32(zt[0, b])) * weight[b]
    accumulate_rows(gp, 0, zt, xp, safe, nb)


@numba.njit(fastmath=False, nogil=True, cache=True)
def momentum_step(w, buf, g, wg, lin, has_lin, mu, lr, momentum):
    """g = grad + mu (w - w_global) (+ n_i); buf = momentum buf + g; w -= lr buf (torch.optim.SGD order), each
    operation rounded on its own, as torch's (numba's fast-math flags apply to every operation of a function, so the
    vector code runs in a function without them); the mu term only where mu != 0.

    All arrays are flat float32 of one length (in the padded layout a multiple of :data:`LANES`: all of it by
    :func:`momentum_vectors`; the entries past the last multiple by the same operations one at a time)."""
    momentum_vectors(w, buf, g, wg, lin, has_lin, mu, lr, momentum)
    for p in range(w.shape[0] - w.shape[0] % LANES, w.shape[0]):
        step = g[p] + mu * (w[p] - wg[p]) if mu != 0 else g[p]
        step = step + lin[p] if has_lin else step
        buf[p] = momentum * buf[p] + step
        w[p] -= lr * buf[p]


@numba.njit(nogil=True, cache=True)
def real_count(rows):
    """Real samples of the batch ``rows`` (not -1): 1 / max(count, 1) in float32 is the weight of each in the
    batch mean, as the torch path's ``mask / mask.sum()``."""
    count = 0
    for b in range(rows.shape[0]):
        count += rows[b] >= 0
    return count


@numba.njit(fastmath=FUSED, error_model="numpy", nogil=True, cache=True)
def device_solve(wt, wg, xp, y, plan, lin, has_lin, hyper, binary, softmax_first):
    """One device's local solve (Algorithm 1 line 4) from the global model along ``plan`` (steps, B), into ``wt``.

    ``xp`` holds the device's rows in the padded layout (:func:`solver_rows`), ``y`` its one-hot labels; ``wt``
    (overwritten with the local model), ``wg`` and ``lin`` are (C, d + 1) = ``[W^T | b]``, or (1, P) = theta when
    ``binary``; each batch's mean is over its real samples (:func:`batch_reads`); ``hyper`` holds (mu, lr,
    momentum). The parameters are copied to the padded layout (:func:`padded`).
    """
    mu, lr, momentum = hyper[0], hyper[1], hyper[2]
    width = xp.shape[1]
    wp = padded(wg, width)
    wg1 = padded(wg, width).ravel()
    lin1 = padded(lin, width).ravel() if has_lin else wg1
    w1 = wp.ravel()
    buf = np.zeros(w1.shape[0], DTYPE)
    gp = aligned_zeros(wp.shape[0], width)
    g1 = gp.ravel()
    buffers = batch_buffers(wt.shape[0], plan.shape[1])
    for s in range(plan.shape[0]):
        safe, weight = batch_reads(plan[s], buffers)
        if binary:
            binary_batch_gradient(wp, xp, safe, weight, gp, buffers)
        else:
            batch_gradient(wp, xp, y, safe, weight, gp, buffers, softmax_first)
        momentum_step(w1, buf, g1, wg1, lin1, has_lin, mu, lr, momentum)
    unpad(wp, wt)


@numba.njit(parallel=True, nogil=True, cache=True)
def solve_devices(
    out, wg, x, y, x_rows, plan, plan_offsets, lin, has_lin, hyper, assignment, worker_offsets, binary, softmax_first
):
    """Fill ``out[i]`` (C, d + 1) with device i's local model from its rows ``x[x_rows[i, 0]:x_rows[i, 1]]`` (``x`` the
    pooled rows in the padded layout, :func:`solver_rows`); worker t runs ``assignment[worker_offsets[t]:...]``."""
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


@numba.njit(fastmath=False, nogil=True, cache=True)
def personal_step(t1, g1, w1, lam, personal_lr):
    """pFedMe's inner step on flat arrays: g += lambda (theta - w); theta -= eta_p g."""
    for p in range(t1.shape[0]):
        g1[p] += lam * (t1[p] - w1[p])
        t1[p] -= personal_lr * g1[p]


@numba.njit(fastmath=False, nogil=True, cache=True)
def mix_step(w1, t1, mix):
    """pFedMe's outer step on flat arrays: w -= eta lambda (w - theta)."""
    for p in range(w1.shape[0]):
        w1[p] -= mix * (w1[p] - t1[p])


@numba.njit(fastmath=FUSED, error_model="numpy", nogil=True, cache=True)
def device_personal_solve(local, theta, wg, xp, y, plan, hyper, personal_steps, binary, softmax_first):
    """One device's pFedMe local solve (Dinh et al. 2020, Algorithm 1) from the global model along ``plan``.

    Per batch row: ``personal_steps`` times {g = grad f(theta; batch) + lambda (theta - w); theta -= eta_p g},
    then w -= eta lambda (w - theta). ``hyper`` holds (lambda, eta_p, eta lambda); ``local`` (w) and ``theta``
    are overwritten. ``xp`` holds the device's rows in the padded layout, as for :func:`device_solve`.
    """
    lam, personal_lr, mix = hyper[0], hyper[1], hyper[2]
    wp, tp = padded(wg, xp.shape[1]), padded(wg, xp.shape[1])
    w1, t1 = wp.ravel(), tp.ravel()
    gp = aligned_zeros(tp.shape[0], tp.shape[1])
    buffers = batch_buffers(theta.shape[0], plan.shape[1])
    g1 = gp.ravel()
    for s in range(plan.shape[0]):
        safe, weight = batch_reads(plan[s], buffers)
        for _ in range(personal_steps):
            if binary:
                binary_batch_gradient(tp, xp, safe, weight, gp, buffers)
            else:
                batch_gradient(tp, xp, y, safe, weight, gp, buffers, softmax_first)
            personal_step(t1, g1, w1, lam, personal_lr)
        mix_step(w1, t1, mix)
    unpad(wp, local)
    unpad(tp, theta)


@numba.njit(parallel=True, nogil=True, cache=True)
def personal_devices(
    local,
    theta,
    wg,
    x,
    y,
    x_rows,
    plan,
    plan_offsets,
    hyper,
    personal_steps,
    assignment,
    worker_offsets,
    binary,
    softmax_first,
):
    """:func:`solve_devices` for :func:`device_personal_solve`: fill ``local[i]`` and ``theta[i]``."""
    for t in numba.prange(worker_offsets.shape[0] - 1):
        for q in range(worker_offsets[t], worker_offsets[t + 1]):
            i = assignment[q]
            a, b, s0, s1 = x_rows[i, 0], x_rows[i, 1], plan_offsets[i], plan_offsets[i + 1]
            device_personal_solve(
                local[i], theta[i], wg, x[a:b], y[a:b], plan[s0:s1], hyper, personal_steps, binary, softmax_first
            )


@numba.njit(nogil=True, cache=True)
def personal_devices_serial(
    local, theta, wg, x, y, x_rows, plan, plan_offsets, hyper, personal_steps, binary, softmax_first
):
    """:func:`personal_devices` on the calling thread (see :func:`solve_devices_serial`)."""
    for i in range(local.shape[0]):
        a, b, s0, s1 = x_rows[i, 0], x_rows[i, 1], plan_offsets[i], plan_offsets[i + 1]
        device_personal_solve(
            local[i], theta[i], wg, x[a:b], y[a:b], plan[s0:s1], hyper, personal_steps, binary, softmax_first
        )
