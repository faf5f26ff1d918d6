"""A run on the compiled solver holds its models as float32 arrays and imports no torch (upfl.engine.simulation's
``arrays``): its numbers are those of the same run on tensors, bit for bit, resumed or not; the weighted average has
one summation order, whatever holds the models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fixtures_runs import cfg_for, metrics_without_time
from upfl.algorithms.updates import average, weighted_average, weighted_sum
from upfl.draws.normal import emulates_torch
from upfl.engine import simulation
from upfl.engine.simulation import InjectedStop, Simulation, run

ROOT = Path(__file__).resolve().parents[2]

IMPORTS = """
import json, sys
import upfl.cli
status = upfl.cli.main(sys.argv[1:])
print("TORCH=" + json.dumps("torch" in sys.modules))
"""


def run_argv(data: Path, out: Path, *flags: str) -> list[str]:
    """``upfl run``'s arguments for a short run of ``data`` into ``out`` with ``flags``."""
    return ["run", "--data", str(data), "--out", str(out), "--seed", "3", "--frac", "0.5", "--epochs", "2", *flags]


def run_in_fresh_process(data: Path, out: Path, *flags: str) -> bool:
    """``upfl run`` in a new interpreter; whether it imported torch."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NUMBA_NUM_THREADS": "1"}
    argv = run_argv(data, out, *flags)
    proc = subprocess.run([sys.executable, "-c", IMPORTS, *argv], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("TORCH=")[-1])


@pytest.mark.parametrize(
    "flags",
    [
        ("--algorithm", "fedprox", "--mu", "0.5", "--rounds", "6"),
        ("--algorithm", "upcycled_fedavg", "--step", "0.5", "--rounds", "7", "--checkpoint-every", "1"),
    ],
)
def test_a_compiled_run_imports_no_torch_and_gives_the_bytes_of_a_run_on_tensors(world, monkeypatch, flags):
    root, data = world
    imported = run_in_fresh_process(data, root / "runs" / "arrays", *flags)
    assert imported == (not emulates_torch()), "torch is imported where the initial draw needs it, only there"
    monkeypatch.setattr(simulation, "on_arrays", lambda *args: False)
    from upfl.cli import main

    assert main(run_argv(data, root / "runs" / "tensors", *flags)) == 0
    assert metrics_without_time(root / "runs" / "arrays") == metrics_without_time(root / "runs" / "tensors")
    summaries = [json.loads((root / "runs" / side / "summary.json").read_text()) for side in ("arrays", "tensors")]
    assert summaries[0]["device"] == summaries[1]["device"] == "cpu"
    assert summaries[0]["torch_version"] == summaries[1]["torch_version"] == torch.__version__


def test_which_runs_hold_arrays(world):
    _, data = world
    ds = simulation.load_leaf(data)

    def arrays(**over) -> bool:
        return Simulation(cfg_for(data, **over), ds, "cpu", allow_arrays=True).arrays

    assert arrays() == emulates_torch()
    assert arrays(**{"algorithm.name": "upcycled", "algorithm.lam": 0.5}) == emulates_torch()
    assert not arrays(**{"solver.backend": "torch"}), "the torch solver trains on tensors"
    assert not arrays(**{"algorithm.name": "scaffold", "algorithm.mu": 0.0}), "an algorithm with state"
    assert not arrays(**{"privacy.mechanism": "output", "privacy.tau": 1.0, "privacy.sigma": 0.1}), "noise: torch"
    assert not arrays(**{"data.feature_scaling": "unit_norm"})
    assert not Simulation(cfg_for(data), ds, "cpu").arrays, "only where the caller allows it"


def test_an_interrupted_run_on_arrays_resumes_to_the_uninterrupted_bytes(world):
    root, data = world
    cfg = cfg_for(data, **{"algorithm.name": "upcycled", "algorithm.lam": 0.5, "rounds": 7})
    with pytest.raises(InjectedStop):
        run(cfg, root / "runs" / "cut", log=lambda m: None, stop_after=3)
    assert list((root / "runs" / "cut").rglob("state.npz"))
    logs: list[str] = []
    run(cfg, root / "runs" / "cut", log=logs.append)
    assert any("resuming" in line for line in logs)
    run(
        cfg_for(data, **{"algorithm.name": "upcycled", "algorithm.lam": 0.5, "rounds": 7, "checkpoint.every": 0}),
        root / "runs" / "whole",
        log=lambda m: None,
    )
    assert metrics_without_time(root / "runs" / "cut") == metrics_without_time(root / "runs" / "whole")


def test_the_weighted_average_sums_in_float64_in_device_order_and_rounds_once():
    rng = np.random.default_rng(5)
    models = rng.standard_normal((9, 610)).astype(np.float32)
    sizes = rng.integers(1, 400, 9).astype(np.float32)
    weights = sizes / sizes.sum()
    exact = sum(np.float64(w) * m.astype(np.float64) for w, m in zip(weights, models, strict=True))
    got = weighted_sum(models, weights)
    assert got.dtype == np.float32 and np.array_equal(got, exact.astype(np.float32))
    as_tensors = average(torch.from_numpy(models), torch.from_numpy(weights))
    assert np.array_equal(as_tensors.numpy(), got), "tensors on the CPU take the same sums"
    assert np.array_equal(
        weighted_average(models, sizes), weighted_average(torch.from_numpy(models), torch.from_numpy(sizes)).numpy()
    )
    assert np.array_equal(weighted_sum(models[:1], np.ones(1, np.float32)), models[0])
