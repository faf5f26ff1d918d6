"""The padded layout of the training kernels (rows a multiple of :data:`~upfl.solvers.numba_backend.vectors.LANES`
float32 long, from a 64-byte boundary) and the class-major layout of the multinomial parameters."""

from __future__ import annotations

import functools

import numba
import numpy as np

from .arithmetic import DTYPE
from .vectors import LANES


@numba.njit(nogil=True, cache=True)
def padded_width(width):
    """``width`` rounded up to a multiple of :data:`LANES`: the row length of the padded layout."""
    return -(-width // LANES) * LANES


VECTOR_BYTES = LANES * 4
"""Bytes of one vector: the padded layout's arrays start at a multiple, so that no vector load spans two cache
lines (numba aligns arrays to 32 bytes only)."""


@numba.njit(nogil=True, cache=True)
def aligned_zeros(rows, width):
    """A zero (``rows``, ``width``) float32 matrix whose data starts at a multiple of :data:`VECTOR_BYTES`."""
    whole = np.zeros(rows * width + LANES, DTYPE)
    first = (-whole.ctypes.data) % VECTOR_BYTES // 4
    return whole[first : first + rows * width].reshape(rows, width)


@numba.njit(nogil=True, cache=True)
def padded_rows(x, bias):
    """``x`` (n, d) as rows of the padded layout: [x, 1, 0 ...] with ``bias`` (the multinomial model's bias feature),
    else [x, 0 ...]; the row length is :func:`padded_width` of d (+ 1)."""
    n, d = x.shape
    out = aligned_zeros(n, padded_width(d + 1 if bias else d))
    for i in range(n):
        for j in range(d):
            out[i, j] = x[i, j]
        if bias:
            out[i, d] = 1
    return out


@numba.njit(nogil=True, cache=True)
def signed_rows(x, y):
    """The binary model's rows x~ (n, P) as rows of the padded layout times their label's sign: [s x~, 0 ...],
    s = 2 y[:, 1] - 1 (``y`` one-hot). Then s <theta, x~> = <theta, s x~> and the log loss's gradient
    -s x~ / (1 + exp(s <theta, x~>)) = -(s x~) / (1 + exp(<theta, s x~>)) need no labels; a sign change is exact, so
    every rounding is that of the unsigned form."""
    out = padded_rows(x, False)
    for i in range(x.shape[0]):
        sign = y[i, 1] + y[i, 1] - DTYPE(1)
        for j in range(x.shape[1]):
            out[i, j] = sign * x[i, j]
    return out


@numba.njit(nogil=True, cache=True)
def solver_rows(x, y, binary):
    """The rows the training kernels read: ``x`` (n, d) float32 in the padded layout, with the multinomial model's bias
    feature (:func:`padded_rows`), or the binary model's x~ signed by its labels ``y`` (:func:`signed_rows`); made
    once per run for the pooled rows (:func:`pack`), a device's rows are a block of them."""
    return signed_rows(x, y) if binary else padded_rows(x, True)


@numba.njit(nogil=True, cache=True)
def padded(params, width):
    """(k, P) parameters as (k, ``width``) rows, zeros past P: in the padded layout their products and gradients
    are 0, so the padding stays 0 through every step."""
    out = aligned_zeros(params.shape[0], width)
    for i in range(params.shape[0]):
        for j in range(params.shape[1]):
            out[i, j] = params[i, j]
    return out


@numba.njit(nogil=True, cache=True)
def unpad(padded_params, out):
    """The first ``out.shape[1]`` columns of ``padded_params`` into ``out``."""
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = padded_params[i, j]


@functools.lru_cache(maxsize=64)
def class_major_order(dim: int, classes: int) -> np.ndarray:
    """The positions in a flat ``[W.ravel() (d, C), b]`` of the entries of ``[W^T | b]`` (C, d + 1), row by row."""
    order = np.empty((classes, dim + 1), dtype=np.int64)
    order[:, :dim] = np.arange(dim * classes).reshape(dim, classes).T
    order[:, dim] = dim * classes + np.arange(classes)
    return order.ravel()


@functools.lru_cache(maxsize=64)
def flat_order(dim: int, classes: int) -> np.ndarray:
    """The inverse permutation of :func:`class_major_order`."""
    return np.argsort(class_major_order(dim, classes))


def to_class_major(params: np.ndarray, dim: int) -> np.ndarray:
    """Flat ``[W.ravel() (d, C), b]`` rows (..., P) to the solver's (..., C, d + 1) = ``[W^T | b]`` (one gather)."""
    classes = params.shape[-1] // (dim + 1)
    return np.take(params, class_major_order(dim, classes), axis=-1).reshape(*params.shape[:-1], classes, dim + 1)


def from_class_major(params: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_class_major`: (..., C, d + 1) to flat (..., P) (one gather)."""
    classes, width = params.shape[-2:]
    return np.take(params.reshape(*params.shape[:-2], classes * width), flat_order(width - 1, classes), axis=-1)
