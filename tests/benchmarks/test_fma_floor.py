"""benchmarks/fma_floor.py, the measured floor of the kernel benchmark: the ISA and vector width it names, and the
probe's arithmetic. Timings are the benchmarks' job (benchmarks/engine.py, benchmarks/pipeline.py), not these tests'."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import fma_floor  # noqa: E402


@pytest.mark.parametrize(
    "features, machine, isa, lanes",
    [
        ({"avx512f", "avx2", "avx", "fma", "sse2"}, "x86_64", "AVX-512", 16),
        ({"avx2", "avx", "fma", "sse2"}, "x86_64", "AVX2 + FMA", 8),
        ({"avx", "sse2"}, "x86_64", "AVX", 8),
        ({"sse2"}, "x86_64", "SSE2", 4),
        ({"fp", "asimd"}, "aarch64", "NEON", 4),
        ({"fp", "asimd"}, "arm64", "NEON", 4),
    ],
)
def test_isa_and_vector_width_follow_the_cpu_features(features, machine, isa, lanes):
    assert fma_floor.isa_name(features, machine) == isa
    assert fma_floor.native_lanes(features, machine) == lanes


def test_floor_probe_measures_a_positive_rate_and_names_the_isa():
    result = fma_floor.measure_floor(repeats=1, seconds=0.01)
    assert result["floor_gflops_measured"] > 0
    assert result["isa"] == fma_floor.isa_name(fma_floor.compile_features(), result["machine"])
    assert result["probe_lanes"] in (4, 8, 16)


def test_floor_probe_returns_the_fma_chains_value():
    """The probe's arithmetic: each chain is x <- x * 0.999999 + 1e-7 (float32, fused), the result the lane-0 sum."""
    import numpy as np

    probe = fma_floor.make_probe(8, 3)
    expected = np.float32(0)
    for c in range(3):
        x = np.float32(1.0 + c)
        for _ in range(5):
            x = np.float32(np.float64(x) * np.float64(np.float32(0.999999)) + np.float64(np.float32(1e-7)))
        expected = np.float32(expected + x)
    assert probe(5, np.float32(1.0)) == expected
