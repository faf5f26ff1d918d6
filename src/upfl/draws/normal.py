"""``torch.randn`` of float32 on an x86 CPU, without torch: the same numbers, bit for bit.

A CPU ``torch.Generator`` seeded with ``manual_seed(s)`` runs the Mersenne Twister seeded with the low 32 bits of
``s``. ``torch.randn(n)`` of float32 with n >= 16, where torch's CPU kernels are its AVX2 or AVX-512 builds (every
x86 CPU with AVX2 and FMA), is Box-Muller over 16 values at a time (``normal_fill_AVX2`` in ATen's
``DistributionTemplates.h``):

- every value first holds a uniform u = (r & (2^24 - 1)) / 2^24 from one 32-bit output r;
- then for each block of 16, with u1 = 1 - u[j] and u2 = u[j + 8], j < 8: radius = sqrt(-2 log u1),
  theta = 2 pi u2, value[j] = radius cos(theta), value[j + 8] = radius sin(theta);
- when 16 does not divide n, 16 new uniforms replace the last 16 values and are transformed again.

log, sin and cos are the Cephes-style float32 approximations of ``avx_mathfun.h`` (``log256_ps``,
``sincos256_ps``), as torch's compiler built them: a multiply whose only use is an addition is one fused
multiply-add (:func:`fma32`, exact); every other operation is one float32 rounding.

Elsewhere (no AVX2, ``ATEN_CPU_CAPABILITY=default``, n < 16) torch draws otherwise: :func:`emulates_torch` is False
there and callers draw with torch.
"""

from __future__ import annotations

import os
import platform
from functools import cache, lru_cache

import numpy as np

F32 = np.float32
F64 = np.float64
BLOCK = 16
"""Values per Box-Muller block."""

LOG_POLYNOMIAL = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)
LOG_Q1, LOG_Q2 = -2.12194440e-4, 0.693359375
SQRT_HALF = 0.707106781186547524
FOUR_OVER_PI = 1.27323954473516
PI_OVER_FOUR_PARTS = (-0.78515625, -2.4187564849853515625e-4, -3.77489497744594108e-8)
COS_POLYNOMIAL = (2.443315711809948e-005, -1.388731625493765e-003, 4.166664568298827e-002)
SIN_POLYNOMIAL = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)


@cache
def emulates_torch() -> bool:
    """Whether :func:`standard_normal` gives torch's numbers on this machine: Linux on x86-64 with AVX2 and FMA,
    where torch runs its AVX2 or AVX-512 kernels (unless ``ATEN_CPU_CAPABILITY`` names another)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() not in ("", "avx2", "avx512"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return {"avx2", "fma"} <= flags
    except OSError:
        return False
    return False


def fma32(a: np.ndarray, b, c) -> np.ndarray:
    """a * b + c rounded once to float32 (a fused multiply-add), elementwise.

    The product of two float32 is exact in float64; the float64 sum s rounds to nearest, and rounding s to float32
    again is the single rounding of the exact value except where s lies exactly halfway between two float32: there
    the exact value's side of s (the float64 sum's error, from TwoSum) decides."""
    p = a.astype(F64) * np.asarray(b, dtype=F32).astype(F64)
    c64 = np.asarray(c, dtype=F32).astype(F64)
    s = p + c64
    back = s - p
    error = (p - (s - back)) + (c64 - back)
    r = s.astype(F32)
    r64 = r.astype(F64)
    other = np.where(s > r64, np.nextafter(r, F32(np.inf)), np.nextafter(r, F32(-np.inf)))
    halfway = (r64 != s) & ((r64 + other.astype(F64)) * 0.5 == s) & (error != 0)
    if not halfway.any():
        return r
    above = np.where(r64 > other.astype(F64), r, other)
    below = np.where(r64 > other.astype(F64), other, r)
    return np.where(halfway, np.where(error > 0, above, below), r).astype(F32)


def log_approx(x: np.ndarray) -> np.ndarray:
    """``log256_ps`` of positive normal float32 ``x``: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a
    polynomial in m - 1, plus e log 2 in two parts."""
    one = F32(1)
    bits = x.view(np.int32)
    e = ((bits >> 23) - 0x7F).astype(F32) + one
    m = ((bits & ~0x7F800000) | F32(0.5).view(np.int32)).view(F32)
    small = m < F32(SQRT_HALF)
    m = (m - one) + np.where(small, m, F32(0))
    e = e - np.where(small, one, F32(0))
    z = m * m
    y = np.full_like(m, F32(LOG_POLYNOMIAL[0]))
    for coefficient in LOG_POLYNOMIAL[1:]:
        y = fma32(y, m, F32(coefficient))
    y = fma32(y * m, z, e * F32(LOG_Q1))
    y = fma32(z, F32(-0.5), y)
    return fma32(e, F32(LOG_Q2), m + y)


def sincos_approx(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sincos256_ps`` of float32 ``x``: |x| reduced by multiples of pi/4 in three parts, then the two Cephes
    polynomials on [0, pi/4], swapped and signed by the octant."""
    sign_sin = x.view(np.uint32) & np.uint32(0x80000000)
    x = np.abs(x)
    j = (x * F32(FOUR_OVER_PI)).astype(np.int32)
    j = (j + 1) & ~1
    y = j.astype(F32)
    swap_sin = (j & 4).astype(np.uint32) << np.uint32(29)
    sin_first = (j & 2) == 0
    for part in PI_OVER_FOUR_PARTS:
        x = fma32(y, F32(part), x)
    sign_cos = (~(j - 2) & 4).astype(np.uint32) << np.uint32(29)
    sign_sin = sign_sin ^ swap_sin
    z = x * x
    c = np.full_like(x, F32(COS_POLYNOMIAL[0]))
    for coefficient in COS_POLYNOMIAL[1:]:
        c = fma32(c, z, F32(coefficient))
    c = fma32(c * z, z, -(z * F32(0.5))) + F32(1)
    s = np.full_like(x, F32(SIN_POLYNOMIAL[0]))
    for coefficient in SIN_POLYNOMIAL[1:]:
        s = fma32(s, z, F32(coefficient))
    s = fma32(s * z, x, x)
    sine = np.where(sin_first, s, c)
    cosine = np.where(sin_first, c, s)
    return (sine.view(np.uint32) ^ sign_sin).view(F32), (cosine.view(np.uint32) ^ sign_cos).view(F32)


def box_muller(u: np.ndarray) -> np.ndarray:
    """Blocks (b, 16) of uniforms to standard normals, as one ``normal_fill_16_AVX2`` per block."""
    radius = np.sqrt(F32(-2) * log_approx(F32(1) - u[:, :8]))
    sine, cosine = sincos_approx(F32(2.0 * np.pi) * u[:, 8:])
    return np.concatenate([radius * cosine, radius * sine], axis=1)


def uniforms(seed: int, count: int) -> np.ndarray:
    """The first ``count`` float32 uniforms of a CPU ``torch.Generator`` seeded with ``manual_seed(seed)``."""
    mt = np.random.MT19937(0)
    mt._legacy_seeding(int(seed) & 0xFFFFFFFF)  # the reference Mersenne Twister seeding (init_genrand)
    raw = mt.random_raw(count).astype(np.uint32)
    return ((raw & np.uint32(0xFFFFFF)).astype(F64) * 2.0**-24).astype(F32)


@lru_cache(maxsize=64)
def standard_normal(seed: int, n: int) -> np.ndarray:
    """``torch.randn(n, generator=g)`` (float32) for a CPU generator ``g`` fresh from ``manual_seed(seed)``, on a
    machine where :func:`emulates_torch`; n >= 16. Read-only, and drawn once per process for each (seed, n): the
    runs of a bundle that share a seed start from the same initial model."""
    if n < BLOCK:
        raise ValueError(f"standard_normal: torch draws fewer than {BLOCK} values by another method (n = {n})")
    tail = n % BLOCK
    u = uniforms(seed, n + (BLOCK if tail else 0))
    whole = n - tail
    out = box_muller(u[:whole].reshape(-1, BLOCK)).reshape(-1)
    if tail:
        out = np.concatenate([out[: n - BLOCK], box_muller(u[n:].reshape(1, BLOCK)).reshape(-1)])
    out.flags.writeable = False
    return out
