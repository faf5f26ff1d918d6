"""The compiled draws (upfl.draws.compiled) give torch's and upfl.draws.streams's numbers bit for bit: seeds derived
many at a time, torch.randperm's shuffle, and the device and straggler draws of training rounds."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from upfl.draws import compiled as compiled_draws
from upfl.draws import rounds as draws
from upfl.draws.streams import derive_seed, derive_seeds, generator


@pytest.mark.parametrize("seed,stream", [(0, "batches"), (7, "sampling"), (-3, "stragglers"), (2**40 + 5, "noise")])
def test_derived_seeds_are_derive_seeds_numbers(seed, stream):
    rng = np.random.default_rng(abs(seed) + 1)
    for width in (1, 2, 3, 9):
        keys = rng.integers(-(10**6), 10**12, size=(40, width)).tolist() + [[0] * width, [10**18] * width]
        got = derive_seeds(seed, stream, keys)
        assert got.dtype == np.uint64
        assert got.tolist() == [derive_seed(seed, stream, *row) for row in keys]
    assert derive_seeds(seed, stream, []).shape == (0,)


def test_derived_seeds_refuse_an_unknown_stream():
    with pytest.raises(ValueError, match="unknown random stream 'batch'"):
        derive_seeds(0, "batch", [[1]])


def test_derived_seeds_without_numba_are_the_same(monkeypatch):
    keys = [[k, i] for k in range(1, 4) for i in range(5)]
    compiled = derive_seeds(11, "batches", keys)
    monkeypatch.setitem(sys.modules, "upfl.draws.compiled", None)  # the import fails: one by one in Python
    assert derive_seeds(11, "batches", keys).tolist() == compiled.tolist()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 30, 623, 624, 625, 1300, 5000])
def test_compiled_randperm_is_torchs(n):
    state = np.empty(compiled_draws.MT19937_WORDS, dtype=np.uint32)
    outputs = np.empty_like(state)
    raw, z = np.empty(max(n, 1), dtype=np.uint32), np.empty(max(n, 1), dtype=np.int64)
    for seed in (0, 1, 12345, 2**32 + 7, derive_seed(3, "sampling", n)):
        g = torch.Generator()
        g.manual_seed(seed)
        want = [torch.randperm(n, generator=g).numpy() for _ in range(3)]  # one generator, three shuffles
        compiled_draws.mt19937_seed(state, seed)
        used, got = compiled_draws.MT19937_WORDS, []
        for _ in range(3):
            perm = np.empty(n, dtype=np.int64)
            used = compiled_draws.randperm_into(perm, state, outputs, used, raw, z)
            got.append(perm)
        assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))


def test_float64_remainders_are_integer_remainders():
    raw = np.array([0, 1, 2**32 - 1, 2**32 - 2, 2**31, 123456789, 4294967291, 3000000000] * 4, dtype=np.uint32)
    for bound in (len(raw), 1000, 4093, 2**31, 2**32 - 1):
        z = np.empty(len(raw), dtype=np.int64)
        compiled_draws.remainders(raw, bound, z)
        assert z.tolist() == [int(a) % (bound - q) for q, a in enumerate(raw.tolist())]


def torch_round(seed, k, n, frac, prob, epochs, draw):
    chosen = draws.sample_clients(seed, k, n, frac)
    flags, per_device = draws.draw_stragglers(seed, k, n, prob, epochs, draw=draw, chosen=chosen)
    return tuple(chosen), tuple(flags), tuple(per_device)


@pytest.mark.parametrize("draw", ["bernoulli", "exact"])
@pytest.mark.parametrize(
    "n,frac,prob,epochs",
    [
        (30, 0.3, 0.9, 20),
        (30, 1.0, 0.5, 1),
        (1, 0.1, 0.0, 2),
        (7, 0.5, 1.0, 3),
        (100, 0.25, 0.33, 10),
        (1000, 0.02, 0.9, 40),
    ],
)
def test_block_draws_are_torchs_draws(draw, n, frac, prob, epochs):
    for seed in (0, 3, 2**33 + 1):
        block = draws.block_draws(seed, 17, n, frac, prob, epochs, draw)
        assert len(block) == draws.DRAW_BLOCK_ROUNDS
        for k, got in enumerate(block, start=17):
            assert got == torch_round(seed, k, n, frac, prob, epochs, draw)
            assert all(type(v) is int for v in got[0] + got[2]) and all(type(f) is bool for f in got[1])


def test_round_draws_without_numba_are_the_same(monkeypatch):
    compiled = draws.block_draws(5, 1, 30, 0.3, 0.9, 20, "exact")
    draws.block_draws.cache_clear()
    monkeypatch.setitem(sys.modules, "upfl.draws.compiled", None)
    try:
        assert draws.block_draws(5, 1, 30, 0.3, 0.9, 20, "exact") == compiled
    finally:
        draws.block_draws.cache_clear()


def test_a_rounds_draws_come_from_its_block():
    for k in (1, 16, 17, 40):
        assert draws._round_draws(9, k, 30, 0.3, 0.9, 20, "bernoulli") == torch_round(
            9, k, 30, 0.3, 0.9, 20, "bernoulli"
        )
    with pytest.raises(ValueError, match="devices.straggler_draw"):
        draws.block_draws(9, 1, 30, 0.3, 0.9, 20, "some")


def test_uniforms_compare_with_the_probability_in_float32():
    p = float(np.float32(0.9))  # a probability float32 holds exactly, and the one just above it
    above = float(np.nextafter(np.float32(0.9), np.float32(1)))
    for prob in (p, above, 0.9):
        block = draws.block_draws(1, 1, 50, 0.5, prob, 5, "bernoulli")
        for k, (_, flags, _) in enumerate(block, start=1):
            u = torch.rand(50, generator=generator(1, "stragglers", k))
            assert list(flags) == (u < prob).tolist()


def test_a_fresh_generators_first_outputs_need_no_full_twist():
    state, outputs = np.empty(624, dtype=np.uint32), np.empty(624, dtype=np.uint32)
    for seed in (0, 5, 2**31 + 3, derive_seed(1, "stragglers", 2)):
        compiled_draws.mt19937_seed(state, seed)
        compiled_draws.mt19937_twist(state)
        compiled_draws.mt19937_outputs(state, outputs)
        for count in (0, 1, 60, compiled_draws.FIRST_OUTPUTS_LIMIT):
            first = np.empty(count, dtype=np.uint32)
            compiled_draws.mt19937_first_outputs(np.empty(624, dtype=np.uint32), seed, first)
            assert np.array_equal(first, outputs[:count])
