"""Start-up and parse guards: what `snakemake -n` imports, the shortcuts the workflow's parse takes (each equal to
what it replaces), and the measured floor of the kernel benchmark. Timings are the benchmarks' job
(benchmarks/engine.py, benchmarks/pipeline.py), not these tests'."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from upfl.draws.rounds import training_rounds_before
from upfl.names import algorithm_names, is_training_iteration
from upfl.pipeline.plan import build_plan, tree_copy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import fma_floor  # noqa: E402

DRY_RUN = (
    "import json, sys\n"
    "from snakemake.cli import main\n"
    "sys.argv = ['snakemake', '-n', '--quiet', '--workflow-profile', 'none']\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as e:\n"
    "    rc = e.code\n"
    "print('DRYRUN=' + json.dumps({'rc': rc or 0, 'imported': [m for m in ('torch', 'numba', 'matplotlib') "
    "if m in sys.modules]}))\n"
)


@pytest.mark.workflow
def test_dry_run_of_the_full_config_imports_no_torch_and_no_numba(tmp_path):
    from test_workflow import workflow_copy

    wd = workflow_copy(tmp_path)
    proc = subprocess.run([sys.executable, "-c", DRY_RUN], cwd=wd, capture_output=True, text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DRYRUN=")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    info = json.loads(line.split("=", 1)[1])
    assert info == {"rc": 0, "imported": []}, proc.stderr[-3000:]


@pytest.mark.workflow
def test_a_fresh_dry_run_asks_for_no_runs_files_only_the_bundles_benchmark_files(tmp_path):
    """Snakemake matches each file asked for against every output of its bundle listed before it: the runs tables
    and targets of a fresh tree wait for each bundle's first output, its benchmark file, never a run's files."""
    from test_workflow import job_counts, workflow_copy

    wd = workflow_copy(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--workflow-profile", "none"], cwd=wd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    inputs, rule = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith(("rule ", "localrule ")):
            rule = line.split()[1].rstrip(":")
        elif rule and line.strip().startswith("input:"):
            inputs.setdefault(rule, []).extend(f.strip() for f in line.split(":", 1)[1].split(","))
    readers = [r for r in inputs if r in ("experiment_runs", "all")]
    assert sorted(readers) == ["all", "experiment_runs"] and job_counts(proc.stdout)["experiment_runs"] > 1
    asked = [f for r in readers for f in inputs[r]]
    assert not [f for f in asked if f.startswith("results/runs/")]
    assert any(f.startswith("results/benchmarks/bundles/") for f in inputs["experiment_runs"])


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_training_rounds_before_counts_the_training_iterations(algorithm):
    for t in range(0, 41):
        assert training_rounds_before(algorithm, t) == sum(is_training_iteration(algorithm, s) for s in range(1, t + 1))


def test_tree_copy_is_a_deep_copy_of_config_data():
    doc = {"a": [1, {"b": [2.5, None, "x"]}], "c": {"d": True}}
    copied = tree_copy(doc)
    assert copied == doc
    copied["a"][1]["b"].append(3)
    copied["c"]["d"] = False
    assert doc == {"a": [1, {"b": [2.5, None, "x"]}], "c": {"d": True}}


@pytest.mark.parametrize("features, machine, isa, lanes", [
    ({"avx512f", "avx2", "avx", "fma", "sse2"}, "x86_64", "AVX-512", 16),
    ({"avx2", "avx", "fma", "sse2"}, "x86_64", "AVX2 + FMA", 8),
    ({"avx", "sse2"}, "x86_64", "AVX", 8),
    ({"sse2"}, "x86_64", "SSE2", 4),
    ({"fp", "asimd"}, "aarch64", "NEON", 4),
    ({"fp", "asimd"}, "arm64", "NEON", 4),
])
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
