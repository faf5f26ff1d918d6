"""When a run writes checkpoints: by time (``checkpoint.seconds``), by count (``checkpoint.every``), or never.

Each test counts the checkpoints a run writes (the writes go through :meth:`upfl.engine.checkpoints.Checkpoint.save`),
and resumes from the one a run left behind to check the result is the uninterrupted run's, byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures_runs import metrics_without_time
from upfl import config as cfgmod
from upfl.data import generate_synthetic
from upfl.engine.checkpoints import Checkpoint, open_checkpoint
from upfl.engine.simulation import InjectedStop, checkpoint_due, run


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return generate_synthetic("synthetic_1_1", tmp_path_factory.mktemp("data") / "s11", data_seed=3, num_devices=8)


def cfg_for(data: Path, **checkpoint) -> cfgmod.RunConfig:
    return cfgmod.from_dict(
        {
            "data": {"path": str(data)},
            "rounds": 8,
            "algorithm": {"name": "upcycled", "mu": 0.1, "lam": 0.5},
            "devices": {"frac": 0.5, "straggler": 0.5},
            "solver": {"epochs": 2},
            "seed": 0,
            "checkpoint": checkpoint,
        }
    )


@pytest.fixture
def saved_iterations(monkeypatch) -> list[int]:
    """The iteration of every checkpoint written while the test runs."""
    seen: list[int] = []
    original = Checkpoint.save

    def save(self, state):
        seen.append(state["t"])
        original(self, state)

    monkeypatch.setattr(Checkpoint, "save", save)
    return seen


def test_defaults_checkpoint_by_time_every_30_seconds():
    c = cfgmod.RunConfig().checkpoint
    assert (c.seconds, c.every) == (30.0, None)


def test_a_short_run_with_the_defaults_writes_no_checkpoint(data, tmp_path, saved_iterations):
    run(cfg_for(data), tmp_path / "out", log=lambda m: None)
    assert saved_iterations == []
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["checksums.json", "metrics.csv", "summary.json"]


def test_seconds_0_checkpoints_after_every_training_round(data, tmp_path, saved_iterations):
    run(cfg_for(data, seconds=0), tmp_path / "out", log=lambda m: None)
    assert saved_iterations == [1, 3, 5, 7], "upcycled, T = 8: training rounds at odd t"


def test_every_k_adds_a_count_trigger_to_the_time_trigger(data, tmp_path, saved_iterations):
    run(cfg_for(data, every=2), tmp_path / "out", log=lambda m: None)
    assert saved_iterations == [3, 7], "training rounds 2 and 4 end at t = 3 and 7"


def test_every_0_turns_checkpoints_off_even_with_seconds_0(data, tmp_path, saved_iterations):
    run(cfg_for(data, seconds=0, every=0), tmp_path / "out", log=lambda m: None)
    assert saved_iterations == []


def test_checkpoint_due_reads_both_triggers():
    by_time = cfgmod.CheckpointConfig(seconds=5.0)
    assert not checkpoint_due(by_time, 7, 4.9) and checkpoint_due(by_time, 7, 5.0)
    both = cfgmod.CheckpointConfig(seconds=5.0, every=3)
    assert checkpoint_due(both, 6, 0.0) and not checkpoint_due(both, 7, 0.0) and checkpoint_due(both, 7, 6.0)


@pytest.mark.parametrize(
    "key, value", [("checkpoint.seconds", -1), ("checkpoint.every", -1), ("checkpoint.seconds", "often")]
)
def test_bad_values_name_the_key(data, key, value):
    doc = {"data": {"path": str(data)}}
    cfgmod.set_key(doc, key, value)
    with pytest.raises(cfgmod.ConfigError, match=key.replace(".", r"\.")):
        cfgmod.from_dict(doc)


def test_checkpoint_keys_leave_the_config_hash_alone(data):
    hashes = {
        cfgmod.config_hash(cfg_for(data, **c)) for c in ({}, {"seconds": 0}, {"seconds": 600, "every": 3}, {"every": 0})
    }
    assert len(hashes) == 1


def test_resume_from_a_time_checkpoint_gives_the_uninterrupted_bytes(data, tmp_path):
    cfg = cfg_for(data, seconds=0)
    run(cfg, tmp_path / "whole", log=lambda m: None)
    with pytest.raises(InjectedStop):
        run(cfg, tmp_path / "cut", log=lambda m: None, stop_after=4)
    assert open_checkpoint(cfg, tmp_path / "cut", data).file.exists()
    run(cfg, tmp_path / "cut", log=lambda m: None)
    assert metrics_without_time(tmp_path / "whole") == metrics_without_time(tmp_path / "cut")
