"""The float32 arithmetic floor of one core, measured where the benchmark runs: a compiled probe of independent
fused multiply-add chains in the machine's widest vectors, and the instruction set it ran on.

The probe (:func:`fma_chains`) is one loop of ``CHAINS`` independent accumulators, each a vector of the native
float32 width (16 lanes with AVX-512, 8 with AVX or AVX2, 4 with NEON or SSE), every accumulator updated by one
``llvm.fma`` per iteration: nothing waits for anything but its own chain, so the loop runs at the FMA units'
throughput (2 FLOPs per lane and FMA). The width is chosen when the probe compiles, from the CPU numba compiles for
(``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` if set, else the host), so the floor is the one the kernels compiled on
the same machine can reach.

Run: python benchmarks/fma_floor.py     (prints the ISA and the floor in GFLOP/s, one thread, best of 20 runs)
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

CHAINS = 12
"""Independent accumulators: FMA latency (4 cycles) x 2 FMA ports = 8 in flight at least; 12 (x86) and 16 (ARM,
4 pipes) keep every port busy and fit the register file (16 ymm with AVX2, 32 zmm / 32 NEON registers)."""

ISA_ORDER = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse2", "SSE2"))
"""x86 feature flags from widest to narrowest and the name the report gives each."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (x86 ``flags``, ARM ``Features``); empty where unreadable."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def compile_features() -> set[str]:
    """The features numba compiles for: the host's, or ``NUMBA_CPU_FEATURES``/``NUMBA_CPU_NAME``'s when set."""
    import llvmlite.binding as llvm
    from numba.core import config

    if config.CPU_FEATURES:
        return {f[1:] for f in config.CPU_FEATURES.split(",") if f.startswith("+")}
    if config.CPU_NAME and config.CPU_NAME != "host":
        return cpu_name_features(config.CPU_NAME)
    return {name for name, on in llvm.get_host_cpu_features().items() if on}


def cpu_name_features(name: str) -> set[str]:
    """Vector features implied by an LLVM CPU name (numba's ``NUMBA_CPU_NAME``), for the few names this needs."""
    avx2 = {"haswell", "broadwell", "skylake", "znver1", "znver2", "znver3", "alderlake", "x86-64-v3"}
    avx512 = {
        "skylake-avx512",
        "cascadelake",
        "icelake-server",
        "icelake-client",
        "sapphirerapids",
        "znver4",
        "x86-64-v4",
        "tigerlake",
        "cooperlake",
    }
    if name in avx512:
        return {"avx512f", "avx2", "avx", "fma", "sse2"}
    if name in avx2:
        return {"avx2", "avx", "fma", "sse2"}
    return {"sse2"}


def isa_name(features: set[str], machine: str | None = None) -> str:
    """The widest float32 vector instruction set in ``features`` (AVX-512, AVX2, AVX, SSE2, NEON), or the machine."""
    machine = machine or platform.machine()
    if machine.lower() in ("arm64", "aarch64"):
        return "NEON" + (" (SVE)" if "sve" in features else "")
    for flag, name in ISA_ORDER:
        if flag in features:
            return name + (" + FMA" if flag in ("avx2", "avx") and "fma" in features else "")
    return machine


def native_lanes(features: set[str], machine: str | None = None) -> int:
    """float32 lanes of the widest vector register: 16 (AVX-512), 8 (AVX, AVX2), 4 (NEON, SSE)."""
    if "avx512f" in features:
        return 16
    if "avx" in features or "avx2" in features:
        return 8
    return 4


def make_probe(lanes: int, chains: int):
    """A compiled ``probe(iterations, seed) -> float32`` running ``chains`` independent FMA chains of ``lanes``-wide
    float32 vectors for ``iterations`` iterations; it returns a lane sum so that no chain is dropped."""
    import numba
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    vector = ir.VectorType(ir.FloatType(), lanes)

    @intrinsic
    def fma_loop(typingctx, iterations, seed):
        def codegen(context, builder, signature, args):
            count, start = args
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{lanes}f32"
            )
            one = builder.insert_element(ir.Constant(vector, None), start, ir.Constant(ir.IntType(32), 0))
            base = builder.shuffle_vector(
                one, ir.Constant(vector, None), ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
            )
            scale = ir.Constant(vector, [0.999999] * lanes)
            step = ir.Constant(vector, [1e-7] * lanes)
            slots = []
            for c in range(chains):
                slot = cgutils.alloca_once(builder, vector)
                builder.store(builder.fadd(base, ir.Constant(vector, [float(c)] * lanes)), slot)
                slots.append(slot)
            with cgutils.for_range(builder, count):
                values = [builder.load(slot) for slot in slots]
                for slot, value in zip(slots, values, strict=True):
                    builder.store(builder.call(fma, [value, scale, step]), slot)
            total = builder.load(slots[0])
            for slot in slots[1:]:
                total = builder.fadd(total, builder.load(slot))
            return builder.extract_element(total, ir.Constant(ir.IntType(32), 0))

        return types.float32(types.int64, types.float32), codegen

    @numba.njit(cache=False, nogil=True)
    def probe(iterations, seed):
        return fma_loop(iterations, seed)

    return probe


def measure_floor(repeats: int = 20, seconds: float = 0.05) -> dict:
    """One thread's float32 FMA peak (best of ``repeats`` timed runs of about ``seconds`` each: short runs, so that
    one of them finds the core's sibling idle on a shared machine) and the ISA."""
    import numpy as np

    machine = platform.machine()
    features = compile_features()
    lanes = native_lanes(features, machine)
    chains = 16 if machine.lower() in ("arm64", "aarch64") else CHAINS
    probe = make_probe(lanes, chains)
    probe(1000, np.float32(1.0))
    iterations = 1 << 16
    while True:
        t0 = time.perf_counter()
        probe(iterations, np.float32(1.0))
        if time.perf_counter() - t0 > seconds / 4:
            break
        iterations *= 2
    flops_per_iteration = 2 * lanes * chains
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        probe(iterations, np.float32(1.0))
        best = min(best, time.perf_counter() - t0)
    from numba.core import config

    return {
        "floor_gflops_measured": iterations * flops_per_iteration / best / 1e9,
        "isa": isa_name(features, machine),
        "isa_host": isa_name(cpu_flags(), machine),
        "probe_lanes": lanes,
        "probe_chains": chains,
        "probe_iterations": iterations,
        "compile_cpu": config.CPU_NAME or "host",
        "machine": machine,
        "cpu_model": cpu_model(),
    }


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    result = measure_floor()
    print(
        f"{result['isa']} ({result['cpu_model']}): float32 FMA floor of one thread "
        f"{result['floor_gflops_measured']:.1f} GFLOP/s "
        f"({result['probe_lanes']} lanes x {result['probe_chains']} chains)"
    )
