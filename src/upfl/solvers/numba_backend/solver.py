"""Compiled CPU local solver for multinomial and binary logistic regression (numba).

The same contract and the same arithmetic as :func:`upfl.solvers.torch_backend.local_solve` (the local step of
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
Arithmetic is float32 (as the torch path) and repeat runs on one machine are bit-identical: every sum has an
order fixed by the code, and the one fast-math liberty (:data:`FUSED`) fuses a multiply and the add after it
into one fused multiply-add. The parameter updates (:func:`momentum_step`, :func:`personal_step`,
:func:`mix_step`) are torch's separate roundings: they set ``fastmath=False``, as numba hands a caller's fast-math
flags to the functions it calls that set none (and a function's flags reach every operation in it, an intrinsic's
vector code too: :func:`momentum_vectors` runs inside :func:`momentum_step`). Every accumulator is float32
(logits, the softmax sum, the binary coefficient): zeros and ones are made in the arrays' type, because numba
types ``x * 0`` or ``x + 1`` with a float32 ``x`` as float64.

The training kernels run in a padded layout laid out for the vector units (16 float32 lanes): a device's rows
are copied once per solve to ``[x, 1, 0 ...]`` (the multinomial bias as a feature; the binary model's x~ has
its bias folded in, and is multiplied by its label's sign, :func:`signed_rows`) of a multiple of 16 floats, the
parameters to rows of the same width, zeros past the model's, which stay zero (each array from a 64-byte
boundary, :func:`aligned_zeros`). Summation order at each step (:func:`batch_gradient`,
:func:`binary_batch_gradient`):

- a logit <w_c, [x_b, 1]> (:func:`row_dot`; :func:`block_dots` makes the same additions for 16 samples at
  once): lane l sums the products of columns l, l + 16, ... in column order, one fused multiply-add each; the
  16 lane sums are added by halving (lane i + 8 onto lane i, then i + 4, i + 2, i + 1);
- a full batch reads its rows with weights 1 / B, one with padding the real count's (:func:`batch_reads`);
- the softmax (or the binary coefficient -1 / (1 + exp(<theta, s x~>))) for all samples of the batch at once, the
  samples the lanes: exp(z_c - max) by :func:`exp32`, summed in class order, divided by the sum;
- a gradient entry (:func:`accumulate_pair` for two classes at a time, :func:`accumulate_rows` for an odd last
  one): coefficient times feature over the batch's rows, one fused multiply-add per row into four partial sums
  (rows 0, 4, 8, ...; 1, 5, ...; 2, 6, ...; 3, 7, ...), added as (s0 + s1) + (s2 + s3); padding rows have
  coefficient 0 and add nothing.

The evaluation (:func:`evaluate_rows`) takes 64 rows at a time, the rows the vector lanes: a logit is a float32 sum
in feature order from the bias (the binary model's weights and bias times its feature scale, rounded to float32),
one fused multiply-add per feature (:func:`pair_logits` for two classes at a time, :func:`block_logits`); a row's
loss is float32 (:func:`exp32`, :func:`log32`, :func:`log1p32`; for the multinomial model (max - z_label) + log of
the sum of exponentials in class order; for the binary model max(s, 0) + log1p(exp(-|s|)), the last product of
:func:`log1p32` fused with the addition); row r's loss is added to float64 partial sum r mod 64, the 64 partial
sums to the total in their order. Divisions in the kernels follow IEEE (``error_model="numpy"``:
no zero-division check, which would keep a loop from being vectorised).

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
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from ..compiled_draws import RANDPERM_SWAP_LIMIT, shuffle_plans, warm_up as warm_up_draws
from ..models import BIAS_FEATURE_SCALE, BinaryLogisticRegression
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
FUSED = {"contract"}
"""The kernels' one fast-math liberty: a multiply followed by an add may be one fused multiply-add (rounded once).
No reassociation: every sum keeps the order the code states."""
LOG2E, LN2_HIGH, LN2_LOW = 1.44269504088896341, 0.693359375, -2.12194440e-4
"""1 / ln 2 and ln 2 split into a part exact in float32 and the rest (Cody-Waite reduction of :func:`exp32`,
:func:`log32`)."""
SQRT2 = math.sqrt(2.0)
EXP_LOW, EXP_HIGH = -87.0, 88.0
"""The range of :func:`exp32`'s polynomial; below it exp is 0, above it inf."""
EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                  5.0000001201e-1)
"""Cephes' expf polynomial in Horner order (highest degree first): exp(r) = 1 + r + r^2 P(r) on |r| <= ln 2 / 2."""
LOG1P_POLYNOMIAL = (-3.2437588088214397e-3, 1.9850272685289383e-2, -5.695732682943344e-2, 1.0603433847427368e-1,
                    -1.530546396970749e-1, 1.967589557170868e-1, -2.495412528514862e-1, 3.332996070384979e-1,
                    -4.999990165233612e-1, 1.0)
"""P(u) ~ log(1 + u) / u on [0, 1] in Horner order (degree 9, least relative error, rounded to float32; relative
error under 5e-9): :func:`log1p32`."""


LANES = 16
"""float32 lanes of the kernels' vectors (one 512-bit register): rows of the padded layout are a multiple long."""
VECTOR = ir.VectorType(ir.FloatType(), LANES)
INT64 = ir.IntType(64)


def array_data(context, builder, array_type, value):
    """An array argument's data pointer and shape (LLVM values) inside an intrinsic."""
    array = context.make_array(array_type)(context, builder, value)
    return array.data, array.shape


def as_int64(builder, value):
    """An integer LLVM value widened to 64 bits (indices and counts)."""
    return builder.sext(value, INT64) if value.type.width < 64 else value


def row_start(builder, data, row, width):
    """Pointer to element (``row``, 0) of a C-contiguous float32 matrix ``width`` wide."""
    return builder.gep(data, [builder.mul(row, width)], inbounds=True, source_etype=ir.FloatType())


def load_vector(builder, base, offset):
    """The :data:`LANES` floats from ``base + offset`` as one vector."""
    pointer = builder.gep(base, [offset], inbounds=True, source_etype=ir.FloatType())
    return builder.load(builder.bitcast(pointer, VECTOR.as_pointer()), align=4)


def store_vector(builder, vector, base, offset):
    """``vector`` to the :data:`LANES` floats from ``base + offset``."""
    pointer = builder.gep(base, [offset], inbounds=True, source_etype=ir.FloatType())
    builder.store(vector, builder.bitcast(pointer, VECTOR.as_pointer()), align=4)


def fused(builder, a, b, c):
    """a * b + c lane by lane, rounded once (``llvm.fma``)."""
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VECTOR, [VECTOR] * 3),
                                         f"llvm.fma.v{LANES}f32")
    return builder.call(fma, [a, b, c])


def splat(builder, value):
    """A vector of :data:`LANES` copies of the float32 LLVM value ``value``."""
    one = builder.insert_element(ir.Constant(VECTOR, None), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, ir.Constant(VECTOR, None),
                                  ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES))


def halving_sum(builder, vector):
    """Sum of the lanes: lanes i and i + 8 are added, then i and i + 4 of those, then i + 2, then i + 1."""
    width = LANES
    while width > 1:
        half = width // 2
        index = ir.IntType(32)
        low = builder.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(index, half), list(range(half))))
        high = builder.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(index, half), list(range(half, width))))
        vector = builder.fadd(low, high)
        width = half
    return builder.extract_element(vector, ir.Constant(ir.IntType(32), 0))


BIT_CASTS = {types.int32: (types.float32, ir.FloatType()), types.float32: (types.int32, ir.IntType(32)),
             types.int64: (types.float64, ir.DoubleType()), types.float64: (types.int64, INT64)}
"""The bit casts :func:`bit_cast` makes: each type to the type of the same width whose IEEE 754 bits it gives."""


@intrinsic
def bit_cast(typingctx, value):
    """``value``'s bits read as the other type of :data:`BIT_CASTS` (int32 <-> float32, int64 -> float64,
    float64 -> int64): a bit cast, which loops vectorise."""
    if value not in BIT_CASTS:
        return None
    result, ir_type = BIT_CASTS[value]

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir_type)

    return result(value), codegen


@intrinsic
def row_dot(typingctx, w, c, x, r):
    """<w[c], x[r]> of two float32 matrices of one padded width (a multiple of :data:`LANES`): lane l sums the
    products of columns l, l + 16, ... in column order (one fused multiply-add each), then :func:`halving_sum`."""
    signature = types.float32(w, c, x, r)

    def codegen(context, builder, sig, args):
        w_data, _ = array_data(context, builder, sig.args[0], args[0])
        x_data, x_shape = array_data(context, builder, sig.args[2], args[2])
        width = builder.extract_value(x_shape, 1)
        w_row = row_start(builder, w_data, as_int64(builder, args[1]), width)
        x_row = row_start(builder, x_data, as_int64(builder, args[3]), width)
        total = cgutils.alloca_once_value(builder, ir.Constant(VECTOR, [0.0] * LANES))
        with cgutils.for_range(builder, builder.udiv(width, ir.Constant(INT64, LANES))) as loop:
            offset = builder.mul(loop.index, ir.Constant(INT64, LANES))
            product = fused(builder, load_vector(builder, w_row, offset), load_vector(builder, x_row, offset),
                            builder.load(total))
            builder.store(product, total)
        return halving_sum(builder, builder.load(total))

    return signature, codegen


def shuffle_pair(builder, first, second, lanes):
    """The lanes ``lanes`` of ``first`` and ``second`` side by side (index >= LANES reads ``second``)."""
    index = ir.IntType(32)
    return builder.shuffle_vector(first, second, ir.Constant(ir.VectorType(index, len(lanes)), lanes))


def transposed_halving_sums(builder, vectors):
    """:func:`halving_sum` of each of :data:`LANES` vectors, the results as the lanes of one vector (the same
    additions in the same order for each; vectors side by side, so that every addition serves them all)."""
    width = LANES
    while len(vectors) > 1:
        half = width // 2
        merged = []
        for first, second in zip(vectors[0::2], vectors[1::2]):
            low, high = [], []
            for side in (0, LANES):
                for group in range(LANES // width):
                    low += [side + group * width + i for i in range(half)]
                    high += [side + group * width + half + i for i in range(half)]
            merged.append(builder.fadd(shuffle_pair(builder, first, second, low),
                                       shuffle_pair(builder, first, second, high)))
        vectors = merged
        width = half
    return vectors[0]


@intrinsic
def block_dots(typingctx, w, c, x, rows, q, z):
    """z[c, q + s] = <w[c], x[rows[q + s]]> for the :data:`LANES` samples s of a block, each exactly as
    :func:`row_dot`; the lane sums of the 16 samples are halved together (:func:`transposed_halving_sums`)."""
    signature = types.none(w, c, x, rows, q, z)

    def codegen(context, builder, sig, args):
        w_data, _ = array_data(context, builder, sig.args[0], args[0])
        x_data, x_shape = array_data(context, builder, sig.args[2], args[2])
        rows_data, _ = array_data(context, builder, sig.args[3], args[3])
        row_type = context.get_value_type(sig.args[3].dtype)
        z_data, z_shape = array_data(context, builder, sig.args[5], args[5])
        width = builder.extract_value(x_shape, 1)
        cls = as_int64(builder, args[1])
        first = as_int64(builder, args[4])
        w_row = row_start(builder, w_data, cls, width)
        x_rows = []
        for s in range(LANES):
            r = builder.load(builder.gep(rows_data, [builder.add(first, ir.Constant(INT64, s))], inbounds=True,
                                         source_etype=row_type))
            x_rows.append(row_start(builder, x_data, as_int64(builder, r), width))
        totals = [cgutils.alloca_once_value(builder, ir.Constant(VECTOR, [0.0] * LANES)) for _ in range(LANES)]
        with cgutils.for_range(builder, builder.udiv(width, ir.Constant(INT64, LANES))) as loop:
            offset = builder.mul(loop.index, ir.Constant(INT64, LANES))
            weights = load_vector(builder, w_row, offset)
            for x_row, total in zip(x_rows, totals):
                builder.store(fused(builder, weights, load_vector(builder, x_row, offset), builder.load(total)), total)
        sums = transposed_halving_sums(builder, [builder.load(total) for total in totals])
        z_row = row_start(builder, z_data, cls, builder.extract_value(z_shape, 1))
        store_vector(builder, sums, z_row, first)
        return context.get_dummy_value()

    return signature, codegen


def class_accumulate_rows(group):
    """An intrinsic (g, c, coef, x, rows, count) setting g[c + i] = sum over b < ``count`` of coef[c + i, b] x[rows[b]]
    for the ``group`` classes c + i (float32 matrices, g and x of one padded width): per column, four partial sums
    over b = 0, 4, 8, ... / 1, 5, ... / 2, 6, ... / 3, 7, ... (a fused multiply-add per row, in row order), added as
    (s0 + s1) + (s2 + s3); the columns are the vector lanes, two vectors of a row at a time (one for an odd last);
    the classes of a group and the vectors of a pass share the loads of the row indices and coefficients."""

    @intrinsic
    def accumulate(typingctx, g, c, coef, x, rows, count):
        signature = types.none(g, c, coef, x, rows, count)

        def codegen(context, builder, sig, args):
            g_data, _ = array_data(context, builder, sig.args[0], args[0])
            coef_data, coef_shape = array_data(context, builder, sig.args[2], args[2])
            x_data, x_shape = array_data(context, builder, sig.args[3], args[3])
            rows_data, _ = array_data(context, builder, sig.args[4], args[4])
            row_type = context.get_value_type(sig.args[4].dtype)
            width = builder.extract_value(x_shape, 1)
            classes = [builder.add(as_int64(builder, args[1]), ir.Constant(INT64, i)) for i in range(group)]
            g_rows = [row_start(builder, g_data, cls, width) for cls in classes]
            coef_width = builder.extract_value(coef_shape, 1)
            coef_rows = [row_start(builder, coef_data, cls, coef_width) for cls in classes]
            count = as_int64(builder, args[5])
            groups = builder.udiv(count, ir.Constant(INT64, 4))

            def accumulate_pass(offsets):
                partial = [[[cgutils.alloca_once(builder, VECTOR) for _ in range(4)] for _ in offsets]
                           for _ in range(group)]

                def add_row(k, b):
                    r = builder.load(builder.gep(rows_data, [b], inbounds=True, source_etype=row_type))
                    x_row = row_start(builder, x_data, as_int64(builder, r), width)
                    vectors = [load_vector(builder, x_row, offset) for offset in offsets]
                    for coef_row, class_partial in zip(coef_rows, partial):
                        weight = builder.load(builder.gep(coef_row, [b], inbounds=True, source_etype=ir.FloatType()))
                        weights = splat(builder, weight)
                        for vector, totals in zip(vectors, class_partial):
                            builder.store(fused(builder, weights, vector, builder.load(totals[k])), totals[k])

                for class_partial in partial:
                    for totals in class_partial:
                        for total in totals:
                            builder.store(ir.Constant(VECTOR, [0.0] * LANES), total)
                with cgutils.for_range(builder, groups) as quad:
                    first = builder.mul(quad.index, ir.Constant(INT64, 4))
                    for k in range(4):
                        add_row(k, builder.add(first, ir.Constant(INT64, k)))
                with cgutils.for_range_slice(builder, builder.mul(groups, ir.Constant(INT64, 4)), count,
                                             ir.Constant(INT64, 1)) as (b, _):
                    add_row(0, b)
                for g_row, class_partial in zip(g_rows, partial):
                    for offset, totals in zip(offsets, class_partial):
                        t = [builder.load(total) for total in totals]
                        store_vector(builder, builder.fadd(builder.fadd(t[0], t[1]), builder.fadd(t[2], t[3])),
                                     g_row, offset)

            chunks = builder.udiv(width, ir.Constant(INT64, LANES))
            with cgutils.for_range(builder, builder.udiv(chunks, ir.Constant(INT64, 2))) as pair:
                offset = builder.mul(pair.index, ir.Constant(INT64, 2 * LANES))
                accumulate_pass([offset, builder.add(offset, ir.Constant(INT64, LANES))])
            odd = builder.icmp_unsigned("!=", builder.urem(chunks, ir.Constant(INT64, 2)), ir.Constant(INT64, 0))
            with builder.if_then(odd):
                accumulate_pass([builder.mul(builder.sub(chunks, ir.Constant(INT64, 1)), ir.Constant(INT64, LANES))])
            return context.get_dummy_value()

        return signature, codegen

    return accumulate


accumulate_rows = class_accumulate_rows(1)
"""The gradient row of one class (:func:`class_accumulate_rows`)."""
accumulate_pair = class_accumulate_rows(2)
"""The gradient rows of two classes, sharing the loads of the batch's rows (:func:`class_accumulate_rows`)."""


@numba.njit(fastmath=FUSED, nogil=True, cache=True, inline="always")
def exp32(v):
    """exp(v) of a float32 in straight-line float32 arithmetic that a loop over samples vectorises (libm's expf
    is a call per value): exp(v) = 2^n exp(r), n = round(v / ln 2), r = v - n ln 2 in two parts (Cody-Waite), exp(r)
    by Cephes' expf polynomial (relative error under 2e-7), 2^n from its exponent bits. 0 below -87 (float32's
    normal range ends at exp(-87.3)), inf above 88, NaN stays NaN."""
    c = v if v > EXP_LOW else DTYPE(EXP_LOW)
    c = c if c < EXP_HIGH else DTYPE(EXP_HIGH)
    n = np.floor(c * DTYPE(LOG2E) + DTYPE(0.5))
    r = c - n * DTYPE(LN2_HIGH)
    r = r - n * DTYPE(LN2_LOW)
    p = DTYPE(EXP_POLYNOMIAL[0])
    p = p * r + DTYPE(EXP_POLYNOMIAL[1])
    p = p * r + DTYPE(EXP_POLYNOMIAL[2])
    p = p * r + DTYPE(EXP_POLYNOMIAL[3])
    p = p * r + DTYPE(EXP_POLYNOMIAL[4])
    p = p * r + DTYPE(EXP_POLYNOMIAL[5])
    p = p * (r * r) + r + DTYPE(1)
    e = p * bit_cast(np.int32((np.int32(n) + 127) << 23))
    e = e if v >= EXP_LOW else DTYPE(0)
    e = e if v <= EXP_HIGH else DTYPE(np.inf)
    return e if v == v else v


def splat_constant(value):
    """A vector of :data:`LANES` copies of float32(``value``)."""
    return ir.Constant(VECTOR, [float(DTYPE(value))] * LANES)


def vector_function(builder, name, args):
    """The LLVM intrinsic ``llvm.<name>`` on vectors of :data:`LANES` float32 (``fma``, ``floor``)."""
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VECTOR, [VECTOR] * len(args)),
                                              f"llvm.{name}.v{LANES}f32")
    return builder.call(function, args)


def vector_exp32(builder, v):
    """:func:`exp32` of each lane of ``v``: the same operations in the same order (a fused multiply-add where
    :func:`exp32` has a multiply followed by an add)."""
    low, high = splat_constant(EXP_LOW), splat_constant(EXP_HIGH)
    fma = lambda a, b, c: vector_function(builder, "fma", [a, b, c])
    c = builder.select(builder.fcmp_ordered(">", v, low), v, low)
    c = builder.select(builder.fcmp_ordered("<", c, high), c, high)
    n = vector_function(builder, "floor", [fma(c, splat_constant(LOG2E), splat_constant(0.5))])
    r = fma(n, splat_constant(-LN2_HIGH), c)
    r = fma(n, splat_constant(-LN2_LOW), r)
    p = splat_constant(EXP_POLYNOMIAL[0])
    for coefficient in EXP_POLYNOMIAL[1:]:
        p = fma(p, r, splat_constant(coefficient))
    p = builder.fadd(fma(p, builder.fmul(r, r), r), splat_constant(1.0))
    int_vector = ir.VectorType(ir.IntType(32), LANES)
    exponent = builder.add(builder.fptosi(n, int_vector), ir.Constant(int_vector, [127] * LANES))
    e = builder.fmul(p, builder.bitcast(builder.shl(exponent, ir.Constant(int_vector, [23] * LANES)), VECTOR))
    e = builder.select(builder.fcmp_ordered(">=", v, low), e, splat_constant(0.0))
    e = builder.select(builder.fcmp_ordered("<=", v, high), e, splat_constant(math.inf))
    return builder.select(builder.fcmp_ordered("==", v, v), e, v)


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
    return whole[first:first + rows * width].reshape(rows, width)


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


@numba.njit(nogil=True, cache=True)
def batch_buffers(outputs, batch):
    """Scratch of the training kernels for batches of ``batch`` rows with ``outputs`` logits each: (zt (outputs,
    batch), per-row max, per-row sum of exponentials, per-row weight in the batch mean (float32), row index with
    padding read as row 0 (int32, as the plans), per-row entry of the one-hot labels gathered from y (float32),
    the weights of a full batch (1 / ``batch`` each))."""
    full = np.full(batch, DTYPE(1) / DTYPE(max(batch, 1)))
    return (np.zeros((outputs, batch), DTYPE), np.zeros(batch, DTYPE), np.zeros(batch, DTYPE),
            np.zeros(batch, DTYPE), np.zeros(batch, np.int32), np.zeros(batch, DTYPE), full)


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


@intrinsic
def momentum_vectors(typingctx, w, buf, g, wg, lin, has_lin, mu, lr, momentum):
    """:func:`momentum_step`'s operations on 16 entries at a time, in one pass (``g`` is read, not written), over the
    arrays' first multiple of :data:`LANES` entries."""
    signature = types.none(w, buf, g, wg, lin, has_lin, mu, lr, momentum)

    def codegen(context, builder, sig, args):
        (w_data, w_shape), (buf_data, _), (g_data, _), (wg_data, _), (lin_data, _) = (
            array_data(context, builder, sig.args[i], args[i]) for i in range(5))
        has_lin = builder.icmp_unsigned("!=", args[5], ir.Constant(args[5].type, 0))
        mu, lr, momentum = (splat(builder, value) for value in args[6:9])
        vectors = builder.udiv(builder.extract_value(w_shape, 0), ir.Constant(INT64, LANES))

        def update(with_mu, with_lin):
            with cgutils.for_range(builder, vectors) as loop:
                offset = builder.mul(loop.index, ir.Constant(INT64, LANES))
                weights = load_vector(builder, w_data, offset)
                step = load_vector(builder, g_data, offset)
                if with_mu:
                    step = builder.fadd(step, builder.fmul(mu, builder.fsub(weights, load_vector(builder, wg_data,
                                                                                                   offset))))
                if with_lin:
                    step = builder.fadd(step, load_vector(builder, lin_data, offset))
                velocity = builder.fadd(builder.fmul(momentum, load_vector(builder, buf_data, offset)), step)
                store_vector(builder, velocity, buf_data, offset)
                store_vector(builder, builder.fsub(weights, builder.fmul(lr, velocity)), w_data, offset)

        with builder.if_else(builder.fcmp_unordered("!=", args[6], ir.Constant(args[6].type, 0.0))) as (
                nonzero, zero):
            for with_mu, branch in ((True, nonzero), (False, zero)):
                with branch:
                    with builder.if_else(has_lin) as (linear, plain):
                        with linear:
                            update(with_mu, True)
                        with plain:
                            update(with_mu, False)
        return context.get_dummy_value()

    return signature, codegen


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
def solve_devices(out, wg, x, y, x_rows, plan, plan_offsets, lin, has_lin, hyper,
                  assignment, worker_offsets, binary, softmax_first):
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


class PlanViews(list):
    """Batch plans drawn in one call: views of one int32 (sum of steps, B) array, one after the other."""

    rows: np.ndarray
    """The array; plan q is ``rows[starts[q]:starts[q + 1]]``."""
    starts: np.ndarray
    """int64, one more than there are plans."""
    steps: list[int]
    """Plan q's rows, ``starts[q + 1] - starts[q]``."""


def batch_plans(sizes: list[int], epochs: list[int], batch_size: int, seeds: list[int]) -> PlanViews:
    """:func:`upfl.solvers.torch_backend.seeded_batch_plan` in one compiled call, the same plans bit for bit (device i's
    generator seeded ``seeds[i]``): torch views of one int32 array (a kept plan keeps its round's array), which
    :class:`PlanViews` also hands over as it is."""
    if max(sizes, default=0) >= RANDPERM_SWAP_LIMIT:
        raise ValueError(f"a device of {max(sizes)} samples: the compiled batch plans reproduce torch.randperm below "
                         f"{RANDPERM_SWAP_LIMIT} samples only; use solver.backend: torch")
    steps = [-(-n // batch_size) * e for n, e in zip(sizes, epochs)]
    offsets = offsets_of(steps)
    plan = np.empty((int(offsets[-1]), batch_size), dtype=np.int32)
    shuffle_plans(np.asarray(seeds, dtype=np.uint64), np.array(sizes, dtype=np.int64), np.array(epochs, dtype=np.int64),
                  plan, offsets)
    views = PlanViews(torch.from_numpy(plan).split(steps))
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


def with_solver_rows(made: tuple, binary: bool) -> tuple:
    """:func:`device_rows`' (x, y, rows) and x's rows as the training kernels read them (:func:`solver_rows`), kept
    with them: the padded copy is made once per set of rows."""
    return (*made, solver_rows(made[0], made[1], binary))


def row_blocks(xs, ys) -> tuple[torch.Tensor, torch.Tensor, np.ndarray] | None:
    """(x, y, (k, 2) row ranges) when every x_i is a block of rows of one contiguous tensor x and y_i the same rows
    of one y (the simulation's devices are views of its pooled training rows, :class:`upfl.engine.simulation.Simulation`);
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
    """The plans as one int32 (steps, B) array (their concatenation)."""
    return np.concatenate([p.numpy() for p in plans]).astype(np.int32, copy=False)


def pack(model, w_global, xs, ys, plans, threads, pooled=None):
    """The kernels' shared inputs: (wg, x, y, (k, 2) row ranges of the devices in x, int32 plan, plan offsets), the schedule
    (assignment, worker offsets, binary, softmax first; no assignment for one worker), the layout function, its inverse and the
    devices' step counts. With ``pooled`` (:class:`upfl.solvers.torch_backend.PooledRound`, the simulation's rounds)
    the devices' rows are read from the pooled rows' arrays, made once per run, at the row ranges it names, and the
    plans are its joined ones; without it, devices that are row blocks of one pooled pair of tensors
    (:func:`row_blocks`: a caller's views of the simulation's rows) read that pair's arrays too, and other device
    sets have their rows made per set (:data:`DEVICE_ROWS`)."""
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
        made = lambda: with_solver_rows(device_rows(model, [source_x], [source_y], binary), binary)
        x, y, _, xp = DEVICE_ROWS.get([(source_x, source_y)], tag, made)
    else:
        x, y, rows, xp = DEVICE_ROWS.get(list(zip(xs, ys)), tag,
                                         lambda: with_solver_rows(device_rows(model, xs, ys, binary), binary),
                                         any_order=True)
        x_rows = np.array([rows[id(t)] for t in xs], dtype=np.int64).reshape(len(xs), 2)
    workers = max(1, min(len(steps), threads or numba.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    dim = x.shape[1]
    layout = (lambda a: np.ascontiguousarray(a[..., None, :])) if binary else (lambda a: to_class_major(a, dim))
    flat = (lambda a: np.ascontiguousarray(a[:, 0, :])) if binary else from_class_major
    wg = layout(w_global.numpy().astype(DTYPE, copy=False))
    inputs = (wg, xp, y, x_rows, plan, offsets)
    kind = (binary, bool(getattr(model, "softmax_before_loss", False)))
    schedule = (*balance(steps, workers), *kind) if workers > 1 else (None, None, *kind)
    return inputs, schedule, layout, flat, steps


def several_workers(schedule) -> bool:
    """Whether :func:`pack`'s schedule spreads the devices over more than one worker thread (the parallel kernels)."""
    return schedule[1] is not None and schedule[1].shape[0] > 2


def local_solve(model, w_global: torch.Tensor, xs: list[torch.Tensor], ys: list[torch.Tensor],
                plans: list[torch.Tensor], mu: float, lr: float, momentum: float,
                linear_term: torch.Tensor | None = None, generator: torch.Generator | None = None,
                threads: int = 0, pooled=None) -> tuple[torch.Tensor, int]:
    """:func:`upfl.solvers.torch_backend.local_solve` for :class:`upfl.models.LogisticRegression` and
    :class:`upfl.models.BinaryLogisticRegression` on the CPU.

    Returns the (k, P) local models (float32, input device order) and the total SGD steps.
    ``generator`` is ignored (the model draws nothing); ``threads`` > 0 caps the worker threads
    (default: numba's thread count); ``pooled``: the devices as blocks of pooled rows (:func:`pack`).
    """
    inputs, schedule, layout, flat, steps = pack(model, w_global, xs, ys, plans, threads, pooled)
    k, wg = len(steps), inputs[0]
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
                   threads: int = 0, pooled=None) -> tuple[torch.Tensor, torch.Tensor, int]:
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
    return torch.from_numpy(flat(local)), torch.from_numpy(flat(theta)), sum(steps) * personal_steps


@numba.njit(fastmath=FUSED, error_model="numpy", nogil=True, cache=True, inline="always")
def log32(v):
    """log(v) of a positive normal float32 in straight-line float32 arithmetic without a division, which a loop
    over rows vectorises: v = m 2^e with m in [sqrt(1/2), sqrt(2)) from the bits, log m = x - x^2 / 2 + x^3 P(x),
    x = m - 1, by Cephes' logf polynomial (relative error under 1e-7), plus e ln 2 in two parts. inf and NaN
    stay."""
    bits = bit_cast(v)
    e = (bits >> 23) - 127
    m = bit_cast(np.int32((bits & 0x7FFFFF) | (127 << 23)))
    big = m > DTYPE(SQRT2)
    m = m * DTYPE(0.5) if big else m
    ef = DTYPE(e + 1 if big else e)
    x = m - DTYPE(1)
    z = x * x
    p = DTYPE(7.0376836292e-2)
    p = p * x - DTYPE(1.1514610310e-1)
    p = p * x + DTYPE(1.1676998740e-1)
    p = p * x - DTYPE(1.2420140846e-1)
    p = p * x + DTYPE(1.4249322787e-1)
    p = p * x - DTYPE(1.6668057665e-1)
    p = p * x + DTYPE(2.0000714765e-1)
    p = p * x - DTYPE(2.4999993993e-1)
    p = p * x + DTYPE(3.3333331174e-1)
    y = p * x * z + ef * DTYPE(LN2_LOW)
    y = y - DTYPE(0.5) * z
    result = (x + y) + ef * DTYPE(LN2_HIGH)
    result = result if v < DTYPE(np.inf) else v
    return result if v == v else v


@numba.njit(fastmath=FUSED, error_model="numpy", nogil=True, cache=True, inline="always")
def log1p32(u):
    """log(1 + u) of a float32 u in [0, 1] as u P(u) (:data:`LOG1P_POLYNOMIAL`) in straight-line float32 arithmetic,
    one Horner chain of fused multiply-adds (within 1 unit in the last place); P(0) = 1, so that a tiny u gives u
    and 0 gives 0. :func:`block_log1p_exp` makes the same operations 16 values at a time."""
    p = DTYPE(LOG1P_POLYNOMIAL[0])
    p = p * u + DTYPE(LOG1P_POLYNOMIAL[1])
    p = p * u + DTYPE(LOG1P_POLYNOMIAL[2])
    p = p * u + DTYPE(LOG1P_POLYNOMIAL[3])
    p = p * u + DTYPE(LOG1P_POLYNOMIAL[4])
    p = p * u + DTYPE(LOG1P_POLYNOMIAL[5])
    p = p * u + DTYPE(LOG1P_POLYNOMIAL[6])
    p = p * u + DTYPE(LOG1P_POLYNOMIAL[7])
    p = p * u + DTYPE(LOG1P_POLYNOMIAL[8])
    p = p * u + DTYPE(LOG1P_POLYNOMIAL[9])
    return p * u


EVALUATION_BLOCK = 64
"""Rows whose logits and losses the evaluation computes together (the rows are the vector lanes: 4 vectors)."""


def vector_log1p32_plus(builder, u, addend):
    """``addend`` + :func:`log1p32` of ``u``, lane by lane: the same Horner chain of fused multiply-adds, and the last
    product fused with the addition (as a compiled ``a + log1p32(u)`` under :data:`FUSED`)."""
    p = splat_constant(LOG1P_POLYNOMIAL[0])
    for coefficient in LOG1P_POLYNOMIAL[1:]:
        p = vector_function(builder, "fma", [p, u, splat_constant(coefficient)])
    return vector_function(builder, "fma", [p, u, addend])


@intrinsic
def block_log1p_exp(typingctx, t, base, out):
    """out[k] = base[k] + log1p32(exp32(t[k])) for the :data:`EVALUATION_BLOCK` float32 values of a block (the
    binary log loss max(s, 0) + log1p(exp(-|s|))), as the compiled scalar expression (:func:`vector_exp32`,
    :func:`vector_log1p32_plus`); the block's four vectors in one straight line of code, so that their chains of
    dependent operations overlap (the loop that LLVM vectorises runs 8 lanes, one or two vectors at a time)."""
    signature = types.none(t, base, out)

    def codegen(context, builder, sig, args):
        t_data, _ = array_data(context, builder, sig.args[0], args[0])
        base_data, _ = array_data(context, builder, sig.args[1], args[1])
        out_data, _ = array_data(context, builder, sig.args[2], args[2])
        offsets = [ir.Constant(INT64, v * LANES) for v in range(EVALUATION_BLOCK // LANES)]
        values = [vector_log1p32_plus(builder, vector_exp32(builder, load_vector(builder, t_data, offset)),
                                      load_vector(builder, base_data, offset)) for offset in offsets]
        for value, offset in zip(values, offsets):
            store_vector(builder, value, out_data, offset)
        return context.get_dummy_value()

    return signature, codegen


def class_block_logits(group):
    """An intrinsic (w, c, xt, r0, z) setting z[c + i, k] = bias + sum_j w[c + i, j] xt[j, r0 + k] for the ``group``
    classes c + i and the :data:`EVALUATION_BLOCK` rows k (``w`` (C, P), ``xt`` (d, n) float32, C-contiguous,
    at least r0 + 64 columns; the bias w[c + i, d] where P > d, else 0): per row and class one sum in feature
    order from the bias, one fused multiply-add per feature, 16 rows to a vector; the classes of a group share
    the loads of the rows."""
    vectors = EVALUATION_BLOCK // LANES

    @intrinsic
    def logits(typingctx, w, c, xt, r0, z):
        signature = types.none(w, c, xt, r0, z)

        def codegen(context, builder, sig, args):
            w_data, w_shape = array_data(context, builder, sig.args[0], args[0])
            x_data, x_shape = array_data(context, builder, sig.args[2], args[2])
            z_data, z_shape = array_data(context, builder, sig.args[4], args[4])
            first = as_int64(builder, args[3])
            features, n = builder.extract_value(x_shape, 0), builder.extract_value(x_shape, 1)
            width = builder.extract_value(w_shape, 1)
            has_bias = builder.icmp_signed(">", width, features)
            bias_column = builder.select(has_bias, features, ir.Constant(INT64, 0))
            first_class = as_int64(builder, args[1])
            w_rows, totals = [], []
            for i in range(group):
                w_row = row_start(builder, w_data, builder.add(first_class, ir.Constant(INT64, i)), width)
                bias = builder.load(builder.gep(w_row, [bias_column], inbounds=True, source_etype=ir.FloatType()))
                bias = builder.select(has_bias, bias, ir.Constant(ir.FloatType(), 0.0))
                w_rows.append(w_row)
                totals.append([cgutils.alloca_once_value(builder, splat(builder, bias)) for _ in range(vectors)])
            with cgutils.for_range(builder, features) as loop:
                x_row = builder.gep(row_start(builder, x_data, loop.index, n), [first], inbounds=True,
                                    source_etype=ir.FloatType())
                rows = [load_vector(builder, x_row, ir.Constant(INT64, v * LANES)) for v in range(vectors)]
                for w_row, class_totals in zip(w_rows, totals):
                    weight = splat(builder, builder.load(builder.gep(w_row, [loop.index], inbounds=True,
                                                                     source_etype=ir.FloatType())))
                    for row, total in zip(rows, class_totals):
                        builder.store(fused(builder, weight, row, builder.load(total)), total)
            for i, class_totals in enumerate(totals):
                cls = builder.add(first_class, ir.Constant(INT64, i))
                z_row = row_start(builder, z_data, cls, builder.extract_value(z_shape, 1))
                for v, total in enumerate(class_totals):
                    store_vector(builder, builder.load(total), z_row, ir.Constant(INT64, v * LANES))
            return context.get_dummy_value()

        return signature, codegen

    return logits


block_logits = class_block_logits(1)
"""The logits of one class for a block of rows (:func:`class_block_logits`)."""
pair_logits = class_block_logits(2)
"""The logits of two classes for a block of rows, sharing the loads (:func:`class_block_logits`)."""


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
        rows, first, block_labels = xt, r0, labels[r0:r0 + EVALUATION_BLOCK]
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


def evaluator(model, sets: list[tuple[torch.Tensor, torch.Tensor]]) -> Callable[[torch.Tensor], list[tuple[float, int]]]:
    """A function of a parameter vector giving :func:`evaluate` on each (x, y) of ``sets`` (a run's training and test
    rows): the sets' transposed rows and labels are made once (:data:`EVALUATION_ROWS`), the parameters' layout once
    per call for all sets."""
    binary = isinstance(model, BinaryLogisticRegression)
    scale = (BIAS_FEATURE_SCALE if model.bias else 1.0) if binary else 1.0
    softmax_first = bool(getattr(model, "softmax_before_loss", False))
    rows = [EVALUATION_ROWS.get([(x, y)], (), lambda x=x, y=y: (np.ascontiguousarray(x.numpy().T, dtype=DTYPE),
                                                                np.ascontiguousarray(y.numpy(), dtype=np.int64)))
            for x, y in sets]
    dim = sets[0][0].shape[1] if sets else 0

    def evaluate_sets(params: torch.Tensor) -> list[tuple[float, int]]:
        w = params.detach().numpy().astype(DTYPE, copy=False)
        wt = np.ascontiguousarray(w[None, :]) if binary else to_class_major(w, dim)
        results = []
        for xt, labels in rows:
            loss, correct = evaluate_rows(wt, xt, labels, binary, scale, softmax_first)
            if abs(loss) > FLOAT32_MAX:  # torch's float32 sum overflows there: the loss is inf and the run diverged
                loss = math.inf
            results.append((float(loss), int(correct)))
        return results

    return evaluate_sets


def evaluate(model, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
    """``model.evaluate(params, x, y)`` (summed loss, correct predictions) of the two logistic-regression models
    in one compiled pass over the CPU tensors, without torch's per-operation cost: the same metric (float32 logits and
    per-row losses, :func:`evaluate_rows`; their total in float64: it differs from torch's float32 sum in the 7th
    significant digit)."""
    return evaluator(model, [(x, y)])(params)[0]


local_solve.personal_solve = personal_solve
"""The selected solver carries pFedMe's local solve (:meth:`upfl.algorithms.pfedme.PFedMe.local_solve` uses it)."""
local_solve.evaluate = evaluate
"""... and the compiled evaluation of its models (:meth:`upfl.engine.simulation.Simulation.evaluate_model` uses it)."""
local_solve.evaluator = evaluator
"""... and its evaluation of fixed sets (:class:`upfl.engine.simulation.Simulation` evaluates its rows with it)."""
local_solve.batch_plan = batch_plans
"""... and the compiled batch plans (:meth:`upfl.engine.simulation.Simulation.training_round` draws with it)."""
local_solve.reads_pooled_rows = True
"""... and it reads a round's devices as blocks of the pooled rows (``pooled``, :func:`pack`) where the caller has them."""


@functools.lru_cache(maxsize=None)
def warm_up(threads: int = 0) -> None:
    """Compile the kernels, or load them from numba's cache, on a small problem (once per process and ``threads``:
    a bundle's runs share it).

    :func:`upfl.solvers.torch_backend.select_local_solver` calls it, so that the compile (seconds, once per
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
    warm_up_draws()
    for binary in (False, True):
        evaluate_rows(np.zeros((1, 2), DTYPE), np.zeros((1, 1), DTYPE), np.zeros(1, np.int64), binary, 1.0, False)
