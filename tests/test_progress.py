"""Progress with an ETA inside long work (upfl.progress): a bundle's lines say runs done of runs planned and the time
left; a long run's log says iterations done of planned and its own time left."""

import pytest

from upfl.data import generate_synthetic
from upfl.engine import simulation
from upfl.engine.simulation import run
from upfl.pipeline.bundle_trainer import run_config, train_bundle
from upfl.progress import duration_text, eta_seconds, progress_text


def test_eta_is_the_rate_so_far_times_what_is_left():
    assert eta_seconds(0, 10, 5.0) is None
    assert eta_seconds(2, 10, 30.0) == pytest.approx(120.0)
    assert eta_seconds(10, 10, 30.0) == 0.0
    assert [duration_text(s) for s in (None, 4.4, 61, 725, 11220)] == ["unknown", "4 s", "1m01s", "12m05s", "3h07m"]
    assert progress_text(3, 40, 30.0, "runs") == "3 of 40 runs done, ETA 6m10s"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=2, num_devices=6))


def entry(data, tmp_path, rid, seed):
    doc = {
        "rounds": 4,
        "algorithm": {"name": "fedprox", "mu": 1.0},
        "devices": {"frac": 0.5},
        "solver": {"epochs": 2},
        "device": "cpu",
        "evaluation": {"every": 2},
        "checkpoint": {"every": 0},
        "seed": seed,
    }
    return {"id": rid, "data": data, "out": str(tmp_path / rid), "log": str(tmp_path / f"{rid}.log"), "config": doc}


def test_a_bundle_says_runs_done_of_planned_and_an_eta(data, tmp_path):
    spec = {"bundle": "b", "runs": [entry(data, tmp_path, f"r{i}", i) for i in range(3)]}
    lines = []
    train_bundle(spec, store=None, echo=lines.append)
    done = [line for line in lines if line.startswith("[")]
    assert [line.split()[:3] for line in done] == [[f"[{i}/3]", "trained", f"r{i - 1}"] for i in (1, 2, 3)]
    assert [line.split("; ")[-1].split(", ETA")[0] for line in done] == [f"{i} of 3 runs done" for i in (1, 2, 3)]
    assert all(", ETA " in line for line in done) and done[-1].endswith("ETA 0 s")


def test_a_long_run_logs_every_iteration_done_and_its_eta(data, tmp_path, monkeypatch):
    """Each line once a logging interval has passed (here every iteration), evaluated or not; the metrics where
    evaluated. The log's lines are the run's only progress (no progress bar besides)."""
    monkeypatch.setattr(simulation, "LOG_INTERVAL_S", 0.0)
    lines = []
    run(run_config(entry(data, tmp_path, "long", 0), 1), tmp_path / "long", log=lines.append)
    iters = [line for line in lines if line.startswith("iter ")]
    assert [line.split()[1] for line in iters] == ["1/4", "2/4", "3/4", "4/4"]
    assert [("test_acc" in line) for line in iters] == [False, True, False, True]
    assert [line.split("; ")[-1].split(", ETA")[0] for line in iters] == [
        f"{t} of 4 iterations done" for t in range(1, 5)
    ]
    assert iters[-1].endswith("ETA 0 s")


def test_a_short_run_logs_one_line(data, tmp_path):
    lines = []
    run(run_config(entry(data, tmp_path, "short", 0), 1), tmp_path / "short", log=lines.append)
    assert [line.split()[1] for line in lines if line.startswith("iter ")] == ["4/4"]
