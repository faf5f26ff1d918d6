"""The random draws of a run, compiled: the same numbers as :mod:`upfl.draws.streams` and torch, bit for bit,
many at a time.

- :func:`keyed_seeds`: :func:`upfl.draws.streams.derive_seed` of many key tuples in one call (SHA-256 of the same text;
  :func:`upfl.draws.streams.derive_seeds` calls it).
- The Mersenne Twister (mt19937) a CPU ``torch.Generator`` runs, seeded as ``manual_seed`` seeds it, and the draws
  the runs make from it: ``torch.randperm``'s shuffle (:func:`shuffle_plans`, the batch plans), ``torch.rand`` of
  float32 and ``torch.randint`` (:func:`round_draws`, the devices and stragglers of training rounds).

Torch-free (numba and numpy); every function compiles on first use and is kept in numba's cache.
"""

from __future__ import annotations

import numba
import numpy as np

from ..kernel_cache import guard_module, prepare

prepare(__file__)  # a writable cache folder before the kernels are decorated

MT19937_WORDS = 624
MT19937_SHIFT = 397
FIRST_OUTPUTS_LIMIT = MT19937_WORDS - MT19937_SHIFT
"""A freshly seeded generator's first outputs up to this many read words of the seeded state only
(:func:`mt19937_first_outputs`)."""
RANDPERM_SWAP_LIMIT = (2**32 - 1) // 20
"""torch.randperm on the CPU shuffles n < this by Fisher-Yates with ``random() % (n - i)`` (a larger n draws 64-bit
numbers); the compiled shuffles refuse sizes this large."""

SEED_MASK = (1 << 63) - 1

SHA256_ROUND_CONSTANTS = np.array(
    [
        0x428A2F98,
        0x71374491,
        0xB5C0FBCF,
        0xE9B5DBA5,
        0x3956C25B,
        0x59F111F1,
        0x923F82A4,
        0xAB1C5ED5,
        0xD807AA98,
        0x12835B01,
        0x243185BE,
        0x550C7DC3,
        0x72BE5D74,
        0x80DEB1FE,
        0x9BDC06A7,
        0xC19BF174,
        0xE49B69C1,
        0xEFBE4786,
        0x0FC19DC6,
        0x240CA1CC,
        0x2DE92C6F,
        0x4A7484AA,
        0x5CB0A9DC,
        0x76F988DA,
        0x983E5152,
        0xA831C66D,
        0xB00327C8,
        0xBF597FC7,
        0xC6E00BF3,
        0xD5A79147,
        0x06CA6351,
        0x14292967,
        0x27B70A85,
        0x2E1B2138,
        0x4D2C6DFC,
        0x53380D13,
        0x650A7354,
        0x766A0ABB,
        0x81C2C92E,
        0x92722C85,
        0xA2BFE8A1,
        0xA81A664B,
        0xC24B8B70,
        0xC76C51A3,
        0xD192E819,
        0xD6990624,
        0xF40E3585,
        0x106AA070,
        0x19A4C116,
        0x1E376C08,
        0x2748774C,
        0x34B0BCB5,
        0x391C0CB3,
        0x4ED8AA4A,
        0x5B9CCA4F,
        0x682E6FF3,
        0x748F82EE,
        0x78A5636F,
        0x84C87814,
        0x8CC70208,
        0x90BEFFFA,
        0xA4506CEB,
        0xBEF9A3F7,
        0xC67178F2,
    ],
    dtype=np.uint64,
)
SHA256_INITIAL = np.array(
    [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19], dtype=np.uint64
)


@numba.njit(nogil=True, cache=True, inline="always")
def rotate_right(x, n):
    """A 32-bit word (held in a uint64) rotated right by n bits."""
    return ((x >> np.uint64(n)) | (x << np.uint64(32 - n))) & np.uint64(0xFFFFFFFF)


@numba.njit(nogil=True, cache=True)
def sha256_compress(h, block, k_table, w):
    """One SHA-256 compression of the 64-byte ``block`` into the eight words ``h`` (FIPS 180-4, section 6.2.2);
    ``w``: scratch of 64 words (the message schedule)."""
    mask = np.uint64(0xFFFFFFFF)
    for t in range(16):
        w[t] = (
            (np.uint64(block[4 * t]) << np.uint64(24))
            | (np.uint64(block[4 * t + 1]) << np.uint64(16))
            | (np.uint64(block[4 * t + 2]) << np.uint64(8))
            | np.uint64(block[4 * t + 3])
        )
    for t in range(16, 64):
        s0 = rotate_right(w[t - 15], 7) ^ rotate_right(w[t - 15], 18) ^ (w[t - 15] >> np.uint64(3))
        s1 = rotate_right(w[t - 2], 17) ^ rotate_right(w[t - 2], 19) ^ (w[t - 2] >> np.uint64(10))
        w[t] = (w[t - 16] + s0 + w[t - 7] + s1) & mask
    a, b, c, d, e, f, g, hh = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    for t in range(64):
        s1 = rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25)
        choose = (e & f) ^ (~e & mask & g)
        t1 = (hh + s1 + choose + k_table[t] + w[t]) & mask
        s0 = rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22)
        majority = (a & b) ^ (a & c) ^ (b & c)
        t2 = (s0 + majority) & mask
        hh, g, f, e, d, c, b, a = g, f, e, (d + t1) & mask, c, b, a, (t1 + t2) & mask
    h[0] = (h[0] + a) & mask
    h[1] = (h[1] + b) & mask
    h[2] = (h[2] + c) & mask
    h[3] = (h[3] + d) & mask
    h[4] = (h[4] + e) & mask
    h[5] = (h[5] + f) & mask
    h[6] = (h[6] + g) & mask
    h[7] = (h[7] + hh) & mask


@numba.njit(nogil=True, cache=True)
def write_decimal(text, at, value):
    """``str(value)`` as ASCII into ``text`` from position ``at``; returns the position after it."""
    if value < 0:
        text[at] = 45  # "-"
        at += 1
        value = -value
    digits = 1
    rest = value // 10
    while rest:
        digits += 1
        rest //= 10
    for j in range(digits - 1, -1, -1):
        text[at + j] = 48 + value % 10
        value //= 10
    return at + digits


@numba.njit(nogil=True, cache=True)
def seeds_of(prefix, keys, k_table, initial, out):
    """out[r] = the first 8 bytes (little-endian) of SHA-256(prefix + "/".join(str(key) for key in keys[r])), its
    top bit cleared: :func:`upfl.draws.streams.derive_seed` when ``prefix`` is ``"<seed>/<stream>/"``."""
    text = np.zeros(prefix.shape[0] + keys.shape[1] * 21 + 72, dtype=np.uint8)
    text[: prefix.shape[0]] = prefix
    h = np.empty(8, dtype=np.uint64)
    w = np.empty(64, dtype=np.uint64)
    for r in range(keys.shape[0]):
        at = prefix.shape[0]
        for j in range(keys.shape[1]):
            if j:
                text[at] = 47  # "/"
                at += 1
            at = write_decimal(text, at, keys[r, j])
        length = at
        blocks = (length + 8) // 64 + 1
        text[length : blocks * 64] = 0
        text[length] = 0x80
        bits = length * 8
        for j in range(8):
            text[blocks * 64 - 1 - j] = (bits >> (8 * j)) & 0xFF
        h[:] = initial
        for b in range(blocks):
            sha256_compress(h, text[b * 64 : (b + 1) * 64], k_table, w)
        first, second = h[0], h[1]
        value = np.uint64(0)
        for j in range(4):  # the digest's bytes 0-7 are h[0] and h[1] big-endian; read them little-endian
            value |= ((first >> np.uint64(24 - 8 * j)) & np.uint64(0xFF)) << np.uint64(8 * j)
            value |= ((second >> np.uint64(24 - 8 * j)) & np.uint64(0xFF)) << np.uint64(8 * j + 32)
        out[r] = value & np.uint64(SEED_MASK)


def keyed_seeds(prefix: str, keys) -> np.ndarray:
    """:func:`seeds_of` of ``prefix`` (ASCII) and every row of ``keys`` (an (n, K) integer array, K >= 1), uint64."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    out = np.empty(keys.shape[0], dtype=np.uint64)
    if keys.shape[0]:
        seeds_of(
            np.frombuffer(prefix.encode("ascii"), dtype=np.uint8), keys, SHA256_ROUND_CONSTANTS, SHA256_INITIAL, out
        )
    return out


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
    shift = MT19937_SHIFT
    for k in range(MT19937_WORDS - shift):
        y = (state[k] & upper) | (state[k + 1] & lower)
        state[k] = state[k + shift] ^ (y >> one) ^ (matrix * (y & one))
    for k in range(MT19937_WORDS - shift, MT19937_WORDS - 1):
        y = (state[k] & upper) | (state[k + 1] & lower)
        state[k] = state[k + shift - MT19937_WORDS] ^ (y >> one) ^ (matrix * (y & one))
    y = (state[MT19937_WORDS - 1] & upper) | (state[0] & lower)
    state[MT19937_WORDS - 1] = state[shift - 1] ^ (y >> one) ^ (matrix * (y & one))


@numba.njit(nogil=True, cache=True, inline="always")
def mt19937_temper(y):
    """MT19937's tempering of one state word into a 32-bit output."""
    y ^= y >> np.uint32(11)
    y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
    y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
    y ^= y >> np.uint32(18)
    return y


@numba.njit(nogil=True, cache=True)
def mt19937_outputs(state, out):
    """The 32-bit outputs of the 624 state words (tempering), into ``out``."""
    for i in range(MT19937_WORDS):
        out[i] = mt19937_temper(state[i])


@numba.njit(nogil=True, cache=True)
def mt19937_first_outputs(state, seed, into):
    """``into`` := the first outputs of a generator seeded ``seed`` (at most :data:`FIRST_OUTPUTS_LIMIT`): output k
    of the first twist reads seeded words k, k + 1 and k + 397 only, so the seeding stops at word 397 + len(into)
    and the twist at word len(into) - 1 (the same numbers as :func:`mt19937_seed`, :func:`mt19937_twist` and
    :func:`mt19937_outputs`). ``state``: scratch of 624 words."""
    count = into.shape[0]
    state[0] = np.uint32(seed & 0xFFFFFFFF)
    for j in range(1, MT19937_SHIFT + count):
        prev = state[j - 1]
        state[j] = np.uint32(1812433253) * (prev ^ (prev >> np.uint32(30))) + np.uint32(j)
    upper, lower, matrix, one = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF), np.uint32(1)
    for k in range(count):
        y = (state[k] & upper) | (state[k + 1] & lower)
        into[k] = mt19937_temper(state[k + MT19937_SHIFT] ^ (y >> one) ^ (matrix * (y & one)))


@numba.njit(nogil=True, cache=True)
def next_outputs(state, outputs, used, into):
    """Fill ``into`` with the generator's next outputs (``outputs[used:]`` first, then a twist and tempering per
    624); returns the new ``used``."""
    j = 0
    while j < into.shape[0]:
        if used == MT19937_WORDS:
            mt19937_twist(state)
            mt19937_outputs(state, outputs)
            used = 0
        count = min(into.shape[0] - j, MT19937_WORDS - used)
        into[j : j + count] = outputs[used : used + count]
        used += count
        j += count
    return used


@numba.njit(nogil=True, cache=True, fastmath=False)
def remainders(raw, bound, z):
    """z[q] = raw[q] % (bound - q): float64 division, exact for 32-bit operands (the rounded quotient of a < 2^32
    by d < 2^32 never reaches the next integer), so the loop is vector code."""
    for q in range(raw.shape[0]):
        a = np.float64(raw[q])
        d = np.float64(bound - q)
        z[q] = np.int64(a - np.trunc(a / d) * d)


@numba.njit(nogil=True, cache=True)
def randperm_into(perm, state, outputs, used, raw, z):
    """``perm`` (length n) := torch.randperm(n)'s shuffle of 0..n-1 (for i = 0..n-2: swap positions i and
    i + random() % (n - i)) with the generator's next n - 1 outputs; returns the new ``used``. ``raw`` and ``z``:
    scratch of at least n - 1 entries."""
    n = perm.shape[0]
    for j in range(n):
        perm[j] = j
    if n < 2:
        return used
    used = next_outputs(state, outputs, used, raw[: n - 1])
    remainders(raw[: n - 1], n, z)
    for i in range(n - 1):
        b = i + z[i]
        perm[i], perm[b] = perm[b], perm[i]
    return used


@numba.njit(nogil=True, cache=True)
def shuffle_plans(seeds, sizes, epochs, plan, offsets):
    """Fill ``plan[offsets[i]:offsets[i + 1]]`` with device i's batch plan, as :func:`upfl.draws.batch_plans.batch_plan`
    with a generator seeded ``seeds[i]``: per epoch torch.randperm's shuffle (:func:`randperm_into`), the epoch's
    ceil(n / B) rows padded with -1."""
    width = plan.shape[1]
    state = np.empty(MT19937_WORDS, dtype=np.uint32)
    outputs = np.empty(MT19937_WORDS, dtype=np.uint32)
    longest = 1
    for d in range(sizes.shape[0]):  # not sizes.max(): loaded from the cache, this kernel then needs no arraymath
        longest = max(longest, sizes[d])
    raw = np.empty(longest, dtype=np.uint32)
    z = np.empty(longest, dtype=np.int64)
    flat = plan.ravel()
    for d in range(seeds.shape[0]):
        n = sizes[d]
        span = (n + width - 1) // width * width
        mt19937_seed(state, seeds[d])
        used = MT19937_WORDS
        start = offsets[d] * width
        for _ in range(epochs[d]):
            used = randperm_into(flat[start : start + n], state, outputs, used, raw, z)
            flat[start + n : start + span] = -1
            start += span


@numba.njit(nogil=True, cache=True)
def round_draws(sampling_seeds, straggler_seeds, high, chosen, uniform, short):
    """The device and straggler draws of training rounds r = 0, 1, ... (:mod:`upfl.draws.rounds`), N devices:
    ``chosen[r]`` = torch.randperm(N)[:m] (m = chosen.shape[1]) from a generator seeded ``sampling_seeds[r]``;
    ``uniform[r]`` = torch.rand(N) (float32: the output's low 24 bits times 2^-24) and then ``short[r]`` =
    torch.randint(1, high, (N,)) (1 + output % (high - 1)) from one generator seeded ``straggler_seeds[r]``. Both
    generators' outputs come from :func:`mt19937_first_outputs` while 2N fit in its limit."""
    n = uniform.shape[1]
    state = np.empty(MT19937_WORDS, dtype=np.uint32)
    outputs = np.empty(MT19937_WORDS, dtype=np.uint32)
    perm = np.empty(n, dtype=np.int64)
    raw = np.empty(max(2 * n, 1), dtype=np.uint32)
    z = np.empty(max(n, 1), dtype=np.int64)
    scale = np.float32(1.0 / (1 << 24))
    span = np.uint32(high - 1)
    first_only = 2 * n <= FIRST_OUTPUTS_LIMIT
    for r in range(sampling_seeds.shape[0]):
        if first_only:
            for j in range(n):
                perm[j] = j
            if n > 1:
                mt19937_first_outputs(state, sampling_seeds[r], raw[: n - 1])
                remainders(raw[: n - 1], n, z)
                for i in range(n - 1):
                    b = i + z[i]
                    perm[i], perm[b] = perm[b], perm[i]
            mt19937_first_outputs(state, straggler_seeds[r], raw[: 2 * n])
        else:
            mt19937_seed(state, sampling_seeds[r])
            randperm_into(perm, state, outputs, MT19937_WORDS, raw, z)
            mt19937_seed(state, straggler_seeds[r])
            next_outputs(state, outputs, MT19937_WORDS, raw[: 2 * n])
        chosen[r, :] = perm[: chosen.shape[1]]
        for j in range(n):
            uniform[r, j] = np.float32(raw[j] & np.uint32(0xFFFFFF)) * scale
            short[r, j] = 1 + np.int64(raw[n + j] % span)


def warm_up() -> None:
    """Compile the draws, or load them from numba's cache, on a small problem (the solver's warm-up calls it, so that
    a run's first round is not charged for it)."""
    keyed_seeds("0/sampling/", np.zeros((1, 1), dtype=np.int64))
    round_draws(
        np.zeros(1, dtype=np.uint64),
        np.zeros(1, dtype=np.uint64),
        2,
        np.empty((1, 1), dtype=np.int64),
        np.empty((1, 2), dtype=np.float32),
        np.empty((1, 2), dtype=np.int64),
    )
    shuffle_plans(
        np.zeros(1, dtype=np.uint64),
        np.full(1, 2, dtype=np.int64),
        np.ones(1, dtype=np.int64),
        np.empty((2, 1), dtype=np.int32),
        np.array([0, 2], dtype=np.int64),
    )


guard_module(globals())  # a damaged cache file is removed and its kernel compiled again
