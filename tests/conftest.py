"""Fixtures shared by several test files."""

import pytest

from upfl.data import generate_synthetic


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A root folder that is also the working directory, with a small synthetic data set in it."""
    monkeypatch.chdir(tmp_path)
    data = generate_synthetic("synthetic_1_1", tmp_path / "data" / "s11", data_seed=3, num_devices=8)
    (tmp_path / "runs").mkdir()
    return tmp_path, data


@pytest.fixture(autouse=True)
def no_measured_costs(tmp_path_factory, monkeypatch):
    """What a developer's benchmarks measured (upfl.measured: ``batching: auto``'s choice, the plan's costs) stays out
    of the tests: each sees an empty cache of its own unless it sets one."""
    monkeypatch.setenv("UPFL_ROUND_COSTS", str(tmp_path_factory.mktemp("measured") / "round_costs.json"))
