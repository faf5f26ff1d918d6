"""torch.randn without torch (upfl.draws.normal): torch's own numbers on this machine, and an exact fused
multiply-add."""

from fractions import Fraction

import numpy as np
import pytest
import torch

from upfl.draws.normal import emulates_torch, fma32, standard_normal
from upfl.draws.streams import derive_seed


def nearest_float32(exact: Fraction) -> np.float32:
    """``exact`` rounded to the nearest float32, ties to even (by exact comparison)."""
    guess = np.float32(float(exact))
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - exact), int(c.view(np.int32)) & 1))


def test_fma32_rounds_once():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(3000).astype(np.float32)
    b = rng.standard_normal(3000).astype(np.float32)
    c = (rng.standard_normal(3000) * 10.0 ** rng.integers(-8, 3, 3000)).astype(np.float32)
    got = fma32(a, b, c)
    for x, y, z, r in zip(a, b, c, got, strict=True):
        expected = nearest_float32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
        assert r.view(np.int32) == expected.view(np.int32), (x, y, z)


def test_fma32_where_double_rounding_goes_wrong():
    """(1 + 2^-18)(1 - 2^-18) 2^-24 + (1 + 2^-23) = 1 + 3 2^-24 - 2^-60: float64 rounds it to 1 + 3 2^-24, halfway
    between the float32 1 + 2^-23 and 1 + 2^-22, and rounding that again gives the even 1 + 2^-22; the exact value
    lies below halfway, so the fused result is 1 + 2^-23."""
    a = np.array([1 + 2.0**-18], np.float32)
    b = np.array([(1 - 2.0**-18) * 2.0**-24], np.float32)
    c = np.array([1 + 2.0**-23], np.float32)
    assert np.float32(a[0].astype(np.float64) * b[0] + c[0]) == np.float32(1 + 2.0**-22)
    exact = Fraction(float(a[0])) * Fraction(float(b[0])) + Fraction(float(c[0]))
    assert fma32(a, b, c)[0] == nearest_float32(exact) == np.float32(1 + 2.0**-23)


@pytest.mark.parametrize("n", [16, 17, 31, 32, 600, 610, 7850])
def test_standard_normal_is_torch_randn(n):
    """The same float32 numbers as torch.randn on a fresh generator, for seeds as the runs derive them; where this
    machine's torch draws by another kernel, :func:`emulates_torch` says so (and the models draw with torch)."""
    same = []
    for s in range(60):
        seed = derive_seed(s, "init")
        g = torch.Generator()
        g.manual_seed(seed)
        drawn = torch.randn(n, generator=g).numpy()
        same.append(np.array_equal(drawn.view(np.int32), standard_normal(seed, n).view(np.int32)))
    assert all(same) == emulates_torch()
    assert emulates_torch() == (torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"))


def test_standard_normal_refuses_short_draws():
    with pytest.raises(ValueError, match="fewer than 16"):
        standard_normal(1, 15)


DRAWS = """
import json, sys
import torch
from upfl.draws.normal import emulates_torch, standard_normal
same = []
for seed in range(20):
    g = torch.Generator()
    g.manual_seed(seed * 7919 + 11)
    same.append(bool((torch.randn(610, generator=g).numpy() == standard_normal(seed * 7919 + 11, 610)).all()))
print(json.dumps([torch.backends.cpu.get_cpu_capability(), emulates_torch(), same]))
"""


@pytest.mark.parametrize("capability", ["avx2", "default"])
def test_torch_kernels_of_either_x86_kind_and_the_scalar_one(capability):
    """torch's AVX2 kernels (an AVX2-only machine's) draw the numbers of its AVX-512 ones, which standard_normal
    gives; its scalar kernels (no AVX2) draw others, and emulates_torch says so."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not emulates_torch():  # no AVX2 here: torch cannot run its vector kernels, and draws otherwise
        assert torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512")
        return
    env = {
        **os.environ,
        "ATEN_CPU_CAPABILITY": capability,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"),
    }
    proc = subprocess.run([sys.executable, "-c", DRAWS], env=env, capture_output=True, text=True, timeout=300)
    kind, emulated, same = json.loads(proc.stdout.strip().splitlines()[-1])
    assert kind == capability.upper() and emulated == (capability == "avx2")
    assert all(same) if capability == "avx2" else not any(same)
