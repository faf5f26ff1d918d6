"""The kernels' float32 arithmetic: working precision, the one fast-math liberty, and exp, log and log1p in
straight-line float32 code that loops vectorise (:func:`exp32`, :func:`log32`, :func:`log1p32`)."""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

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
EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
"""Cephes' expf polynomial in Horner order (highest degree first): exp(r) = 1 + r + r^2 P(r) on |r| <= ln 2 / 2."""
LOG1P_POLYNOMIAL = (
    -3.2437588088214397e-3,
    1.9850272685289383e-2,
    -5.695732682943344e-2,
    1.0603433847427368e-1,
    -1.530546396970749e-1,
    1.967589557170868e-1,
    -2.495412528514862e-1,
    3.332996070384979e-1,
    -4.999990165233612e-1,
    1.0,
)
"""P(u) ~ log(1 + u) / u on [0, 1] in Horner order (degree 9, least relative error, rounded to float32; relative
error under 5e-9): :func:`log1p32`."""


INT64 = ir.IntType(64)


BIT_CASTS = {
    types.int32: (types.float32, ir.FloatType()),
    types.float32: (types.int32, ir.IntType(32)),
    types.int64: (types.float64, ir.DoubleType()),
    types.float64: (types.int64, INT64),
}
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
