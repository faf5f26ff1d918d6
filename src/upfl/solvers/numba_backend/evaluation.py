"""The evaluation kernels: summed loss and correct predictions of the two logistic-regression models, 64 rows at a
time (:func:`evaluate_rows`)."""

from __future__ import annotations

import numba
import numpy as np

from .arithmetic import DTYPE, FUSED, exp32, log32
from .vectors import EVALUATION_BLOCK, block_log1p_exp, block_logits, pair_logits


@numba.njit(fastmath=FUSED, error_model="numpy", nogil=True, cache=True)
def multinomial_losses(z, labels, partial, top, picked, total, best):
    """Number of correct predictions (the first largest logit) of the rows k of a block, the rows the vector lanes;
    each row's cross-entropy of softmax(z[:, k]) added to ``partial[k]`` (float64). The loss in float32:
    top + log(sum_c exp(z_c - top)) - z_label as (top - z_label) + log32(sum), exp by :func:`exp32`, the sum in class
    order. ``top``, ``picked``, ``total`` and ``best`` (int32) are scratch of the block's length; a row with label -1
    (padding) adds 0 and counts as wrong."""
    for k in range(EVALUATION_BLOCK):
        top[k] = z[0, k]
        picked[k] = z[0, k]
        total[k] = 0
        best[k] = 0
    for c in range(1, z.shape[0]):
        for k in range(EVALUATION_BLOCK):
            larger = z[c, k] > top[k]
            top[k] = z[c, k] if larger else top[k]
            best[k] = c if larger else best[k]
            picked[k] = z[c, k] if labels[k] == c else picked[k]
    for c in range(z.shape[0]):
        for k in range(EVALUATION_BLOCK):
            total[k] += exp32(z[c, k] - top[k])
    correct = 0
    for k in range(EVALUATION_BLOCK):
        loss = (top[k] - picked[k]) + log32(total[k])
        partial[k] += np.float64(loss if labels[k] >= 0 else DTYPE(0))
        correct += best[k] == labels[k]
    return correct


@numba.njit(fastmath=FUSED, error_model="numpy", nogil=True, cache=True, inline="always")
def binary_losses(z, labels, partial, margin, tail):
    """Number of correct predictions (1 when z > 0) of the rows k of a block; each row's log loss
    log(1 + exp(s)) = max(s, 0) + log1p(exp(-|s|)), s = -(2 y - 1) z, in float32 (:func:`exp32`, :func:`log1p32`,
    the last product fused with the addition; the block's 64 at once, :func:`block_log1p_exp`), added to
    ``partial[k]`` (float64). ``margin`` and ``tail`` are float32 scratch of the block's length. A row with label -1
    (padding) adds 0 and counts as wrong."""
    correct = 0
    for k in range(EVALUATION_BLOCK):
        s = z[0, k] if labels[k] == 0 else -z[0, k]
        margin[k] = max(s, DTYPE(0))
        tail[k] = -abs(s)
    block_log1p_exp(tail, margin, tail)
    for k in range(EVALUATION_BLOCK):
        partial[k] += np.float64(tail[k] if labels[k] >= 0 else DTYPE(0))
        correct += np.int32(z[0, k] > 0) == labels[k]
    return correct


@numba.njit(error_model="numpy", nogil=True, cache=True)
def evaluate_rows(wt, xt, labels, binary, scale, softmax_first):
    """Summed loss and number of correct predictions of one model on the rows of ``xt`` (d, n) (one pass).

    :data:`EVALUATION_BLOCK` rows at a time, the rows the vector lanes (the last rows short of a block copied to a
    zero-padded block, label -1): float32 logits (:func:`pair_logits`, :func:`block_logits`; a model that overflows
    gives a non-finite loss, as under torch, and its run is diverged), float32 losses (:func:`multinomial_losses`,
    :func:`binary_losses`); row r's loss is added to partial sum r mod 64 (float64), the 64 partial sums to the
    total in their order at the end.

    Multinomial: ``wt`` (C, d + 1) = ``[W^T | b]``, cross-entropy of softmax(W^T x + b) (with ``softmax_first``
    of the softmax of p = softmax(W^T x + b), in float64, :func:`softmax_first_row`), prediction the first largest
    logit. Binary: ``wt`` (1, P) = theta on x~ = ``[x, 1] * scale`` (P = d + 1) or ``x * scale`` (P = d), the
    logit <theta * scale, [x, 1]> (the scale folded into the weights), log loss log(1 + exp(-s z)) with
    s = 2 y - 1, prediction 1 when z > 0.
    """
    d, n = xt.shape
    classes = wt.shape[0]
    w = wt * DTYPE(scale) if binary else wt
    z = np.empty((classes, EVALUATION_BLOCK), DTYPE)
    tail = np.zeros((d, EVALUATION_BLOCK), DTYPE)
    tail_labels = np.full(EVALUATION_BLOCK, -1, labels.dtype)
    top, picked = np.empty(EVALUATION_BLOCK, DTYPE), np.empty(EVALUATION_BLOCK, DTYPE)
    total, partial = np.empty(EVALUATION_BLOCK, DTYPE), np.zeros(EVALUATION_BLOCK)
    best = np.empty(EVALUATION_BLOCK, np.int32)
    correct = 0
    for r0 in range(0, n, EVALUATION_BLOCK):
        m = min(EVALUATION_BLOCK, n - r0)
        rows, first, block_labels = xt, r0, labels[r0 : r0 + EVALUATION_BLOCK]
        if m < EVALUATION_BLOCK:
            tail[:, :m] = xt[:, r0:]
            tail_labels[:m] = labels[r0:]
            rows, first, block_labels = tail, 0, tail_labels
        for c in range(0, classes - 1, 2):
            pair_logits(w, c, rows, first, z)
        if classes % 2:
            block_logits(w, classes - 1, rows, first, z)
        if binary:
            correct += binary_losses(z, block_labels, partial, top, total)
        elif softmax_first:
            for k in range(m):
                row_loss, prediction = softmax_first_row(z[:, k], block_labels[k])
                partial[k] += row_loss
                correct += prediction == block_labels[k]
        else:
            correct += multinomial_losses(z, block_labels, partial, top, picked, total, best)
    loss = 0.0
    for k in range(EVALUATION_BLOCK):
        loss += partial[k]
    return loss, correct


@numba.njit(nogil=True, cache=True)
def softmax_first_row(z, label):
    """(loss, prediction) of one row with ``softmax_first``: :func:`softmax_first_loss` where the largest logit is
    finite, else the plain cross-entropy (non-finite, as under torch)."""
    best = 0
    for c in range(1, z.shape[0]):
        if z[c] > z[best]:
            best = c
    top = np.float64(z[best])
    if np.isfinite(top):
        return softmax_first_loss(z, top, label), best
    total = 0.0
    for c in range(z.shape[0]):
        total += np.exp(np.float64(z[c]) - top)
    return top + np.log(total) - np.float64(z[label]), best


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
