"""LLVM vector code of the kernels (numba intrinsics): :data:`LANES` float32 lanes per vector, the dot products,
gradient rows, momentum step and evaluation logits in the summation orders of :mod:`upfl.solvers.numba_backend`."""

from __future__ import annotations

import math

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .arithmetic import DTYPE, EXP_HIGH, EXP_LOW, EXP_POLYNOMIAL, INT64, LN2_HIGH, LN2_LOW, LOG1P_POLYNOMIAL, LOG2E

LANES = 16
"""float32 lanes of the kernels' vectors (one 512-bit register): rows of the padded layout are a multiple long."""
VECTOR = ir.VectorType(ir.FloatType(), LANES)


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
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VECTOR, [VECTOR] * 3), f"llvm.fma.v{LANES}f32")
    return builder.call(fma, [a, b, c])


def splat(builder, value):
    """A vector of :data:`LANES` copies of the float32 LLVM value ``value``."""
    one = builder.insert_element(ir.Constant(VECTOR, None), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(
        one, ir.Constant(VECTOR, None), ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
    )


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
            product = fused(
                builder, load_vector(builder, w_row, offset), load_vector(builder, x_row, offset), builder.load(total)
            )
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
        for first, second in zip(vectors[0::2], vectors[1::2], strict=True):
            low, high = [], []
            for side in (0, LANES):
                for group in range(LANES // width):
                    low += [side + group * width + i for i in range(half)]
                    high += [side + group * width + half + i for i in range(half)]
            merged.append(
                builder.fadd(shuffle_pair(builder, first, second, low), shuffle_pair(builder, first, second, high))
            )
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
            r = builder.load(
                builder.gep(
                    rows_data, [builder.add(first, ir.Constant(INT64, s))], inbounds=True, source_etype=row_type
                )
            )
            x_rows.append(row_start(builder, x_data, as_int64(builder, r), width))
        totals = [cgutils.alloca_once_value(builder, ir.Constant(VECTOR, [0.0] * LANES)) for _ in range(LANES)]
        with cgutils.for_range(builder, builder.udiv(width, ir.Constant(INT64, LANES))) as loop:
            offset = builder.mul(loop.index, ir.Constant(INT64, LANES))
            weights = load_vector(builder, w_row, offset)
            for x_row, total in zip(x_rows, totals, strict=True):
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
                partial = [
                    [[cgutils.alloca_once(builder, VECTOR) for _ in range(4)] for _ in offsets] for _ in range(group)
                ]

                def add_row(k, b):
                    r = builder.load(builder.gep(rows_data, [b], inbounds=True, source_etype=row_type))
                    x_row = row_start(builder, x_data, as_int64(builder, r), width)
                    vectors = [load_vector(builder, x_row, offset) for offset in offsets]
                    for coef_row, class_partial in zip(coef_rows, partial, strict=True):
                        weight = builder.load(builder.gep(coef_row, [b], inbounds=True, source_etype=ir.FloatType()))
                        weights = splat(builder, weight)
                        for vector, totals in zip(vectors, class_partial, strict=True):
                            builder.store(fused(builder, weights, vector, builder.load(totals[k])), totals[k])

                for class_partial in partial:
                    for totals in class_partial:
                        for total in totals:
                            builder.store(ir.Constant(VECTOR, [0.0] * LANES), total)
                with cgutils.for_range(builder, groups) as quad:
                    first = builder.mul(quad.index, ir.Constant(INT64, 4))
                    for k in range(4):
                        add_row(k, builder.add(first, ir.Constant(INT64, k)))
                with cgutils.for_range_slice(
                    builder, builder.mul(groups, ir.Constant(INT64, 4)), count, ir.Constant(INT64, 1)
                ) as (b, _):
                    add_row(0, b)
                for g_row, class_partial in zip(g_rows, partial, strict=True):
                    for offset, totals in zip(offsets, class_partial, strict=True):
                        t = [builder.load(total) for total in totals]
                        store_vector(
                            builder, builder.fadd(builder.fadd(t[0], t[1]), builder.fadd(t[2], t[3])), g_row, offset
                        )

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


def splat_constant(value):
    """A vector of :data:`LANES` copies of float32(``value``)."""
    return ir.Constant(VECTOR, [float(DTYPE(value))] * LANES)


def vector_function(builder, name, args):
    """The LLVM intrinsic ``llvm.<name>`` on vectors of :data:`LANES` float32 (``fma``, ``floor``)."""
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(VECTOR, [VECTOR] * len(args)), f"llvm.{name}.v{LANES}f32"
    )
    return builder.call(function, args)


def vector_exp32(builder, v):
    """:func:`exp32` of each lane of ``v``: the same operations in the same order (a fused multiply-add where
    :func:`exp32` has a multiply followed by an add)."""
    low, high = splat_constant(EXP_LOW), splat_constant(EXP_HIGH)

    def fma(a, b, c):
        return vector_function(builder, "fma", [a, b, c])

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


@intrinsic
def momentum_vectors(typingctx, w, buf, g, wg, lin, has_lin, mu, lr, momentum):
    """:func:`momentum_step`'s operations on 16 entries at a time, in one pass (``g`` is read, not written), over the
    arrays' first multiple of :data:`LANES` entries."""
    signature = types.none(w, buf, g, wg, lin, has_lin, mu, lr, momentum)

    def codegen(context, builder, sig, args):
        (w_data, w_shape), (buf_data, _), (g_data, _), (wg_data, _), (lin_data, _) = (
            array_data(context, builder, sig.args[i], args[i]) for i in range(5)
        )
        has_lin = builder.icmp_unsigned("!=", args[5], ir.Constant(args[5].type, 0))
        mu, lr, momentum = (splat(builder, value) for value in args[6:9])
        vectors = builder.udiv(builder.extract_value(w_shape, 0), ir.Constant(INT64, LANES))

        def update(with_mu, with_lin):
            with cgutils.for_range(builder, vectors) as loop:
                offset = builder.mul(loop.index, ir.Constant(INT64, LANES))
                weights = load_vector(builder, w_data, offset)
                step = load_vector(builder, g_data, offset)
                if with_mu:
                    step = builder.fadd(
                        step, builder.fmul(mu, builder.fsub(weights, load_vector(builder, wg_data, offset)))
                    )
                if with_lin:
                    step = builder.fadd(step, load_vector(builder, lin_data, offset))
                velocity = builder.fadd(builder.fmul(momentum, load_vector(builder, buf_data, offset)), step)
                store_vector(builder, velocity, buf_data, offset)
                store_vector(builder, builder.fsub(weights, builder.fmul(lr, velocity)), w_data, offset)

        with builder.if_else(builder.fcmp_unordered("!=", args[6], ir.Constant(args[6].type, 0.0))) as (nonzero, zero):
            for with_mu, branch in ((True, nonzero), (False, zero)):
                with branch, builder.if_else(has_lin) as (linear, plain):
                    with linear:
                        update(with_mu, True)
                    with plain:
                        update(with_mu, False)
        return context.get_dummy_value()

    return signature, codegen


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
        values = [
            vector_log1p32_plus(
                builder,
                vector_exp32(builder, load_vector(builder, t_data, offset)),
                load_vector(builder, base_data, offset),
            )
            for offset in offsets
        ]
        for value, offset in zip(values, offsets, strict=True):
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
                x_row = builder.gep(
                    row_start(builder, x_data, loop.index, n), [first], inbounds=True, source_etype=ir.FloatType()
                )
                rows = [load_vector(builder, x_row, ir.Constant(INT64, v * LANES)) for v in range(vectors)]
                for w_row, class_totals in zip(w_rows, totals, strict=True):
                    weight = splat(
                        builder,
                        builder.load(builder.gep(w_row, [loop.index], inbounds=True, source_etype=ir.FloatType())),
                    )
                    for row, total in zip(rows, class_totals, strict=True):
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
