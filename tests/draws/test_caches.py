"""Per-process caches of a bundle (batch plans, round draws): they change how often things are drawn, never a number."""

import pytest
import torch

from fixtures_runs import metrics_without_time
from upfl import config as cfgmod
from upfl.data import generate_synthetic
from upfl.draws import rounds as draws
from upfl.draws.batch_plans import DrawCache, batch_plan
from upfl.draws.streams import derive_seed, generator
from upfl.engine import simulation


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=5, num_devices=8))


def test_plan_cache_gives_the_plans_batch_plan_draws_and_keeps_to_its_budget():
    cache = DrawCache(max_bytes=1250)  # plans of 16, 15, 16 and 4 steps x 8 samples x 4 bytes: 1632 bytes
    sizes, epochs = [30, 17, 25, 9], [4, 5, 4, 2]
    fresh = batch_plan(sizes, epochs, 8, [generator(7, "batches", 3, i) for i in range(4)])
    assert all(p.dtype == torch.int32 for p in fresh)
    made = []

    def seeds_of(keys):
        made.extend(i for _, i in keys)
        return [derive_seed(7, "batches", k, i) for k, i in keys]

    got = cache.plans(7, [(3, i, n, e) for i, n, e in zip(range(4), sizes, epochs, strict=True)], 8, seeds_of)
    assert all(torch.equal(a, b) for a, b in zip(got, fresh, strict=True)) and made == [0, 1, 2, 3]
    assert cache.bytes <= cache.max_bytes and len(cache.entries) < 4  # the oldest plans were dropped
    again = cache.plans(7, [(3, 2, 25, 4), (3, 3, 9, 2)], 8, seeds_of)
    assert all(a is b for a, b in zip(again, got[2:], strict=True)) and made == [0, 1, 2, 3]  # reused: no seed derived
    other = cache.plans(7, [(4, 3, 9, 2)], 8, seeds_of)[0]
    assert torch.equal(other, batch_plan([9], [2], 8, [generator(7, "batches", 4, 3)])[0])


def make_cfg(data, **over):
    doc = {
        "data": {"path": data},
        "rounds": 8,
        "algorithm": {"name": "upcycled", "mu": 1.0, "lam": 0.43},
        "devices": {"frac": 0.5, "straggler": 0.5},
        "solver": {"epochs": 3},
        "checkpoint": {"every": 0},
    }
    for key, value in over.items():
        cfgmod.set_key(doc, key, value)
    return cfgmod.from_dict(doc)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_a_run_gives_the_same_numbers_with_warm_or_cold_caches(small_data, tmp_path, monkeypatch, backend):
    fedprox = make_cfg(
        small_data, **{"algorithm.name": "fedprox", "algorithm.lam": None, "rounds": 4, "solver.backend": backend}
    )
    upcycled = make_cfg(small_data, **{"solver.backend": backend})
    warm_cache = DrawCache()
    monkeypatch.setattr(simulation, "DRAW_CACHE", warm_cache)
    draws._round_draws.cache_clear()
    simulation.run(fedprox, tmp_path / "warm_up", log=lambda s: None)  # fills the caches with the shared rounds 1-4
    kept = len(warm_cache.entries)
    hits_before = draws._round_draws.cache_info().hits
    simulation.run(upcycled, tmp_path / "warm", log=lambda s: None)
    assert kept > 0 and draws._round_draws.cache_info().hits > hits_before
    monkeypatch.setattr(simulation, "DRAW_CACHE", DrawCache(max_bytes=0))  # nothing kept: every plan drawn
    draws._round_draws.cache_clear()
    simulation.run(upcycled, tmp_path / "cold", log=lambda s: None)
    assert metrics_without_time(tmp_path / "warm") == metrics_without_time(tmp_path / "cold")


@pytest.mark.parametrize(
    "mechanism,scale_key,first,second",
    [("objective", "privacy.alpha", 5.0, 20.0), ("output", "privacy.sigma", 0.5, 2.0)],
)
def test_private_runs_reuse_the_noise_draws_of_their_seed_and_give_the_same_numbers(
    small_data, tmp_path, monkeypatch, mechanism, scale_key, first, second
):
    """Runs that differ only in the noise scale share the draws of (seed, round, device): the second run of a
    process takes every noise draw from the cache, and its numbers equal a run with nothing kept."""
    private = {
        "privacy.mechanism": mechanism,
        "devices.frac": 1.0,
        "devices.straggler": 0.0,
        "rounds": 6,
        "model.name": "binary_logreg",
        "data.feature_scaling": "unit_norm",
    }
    if mechanism == "output":
        private["privacy.tau"] = 10.0
    warm_cache = DrawCache()
    monkeypatch.setattr(simulation, "DRAW_CACHE", warm_cache)
    simulation.run(make_cfg(small_data, **private, **{scale_key: first}), tmp_path / "first", log=lambda s: None)
    noise_keys = {k for k in warm_cache.entries if k[0] == f"{mechanism}_noise"}
    assert len(noise_keys) == 3  # training rounds 1-3 of the upcycled run, every device in each
    simulation.run(make_cfg(small_data, **private, **{scale_key: second}), tmp_path / "warm", log=lambda s: None)
    assert {k for k in warm_cache.entries if k[0] == f"{mechanism}_noise"} == noise_keys  # all reused
    monkeypatch.setattr(simulation, "DRAW_CACHE", DrawCache(max_bytes=0))
    simulation.run(make_cfg(small_data, **private, **{scale_key: second}), tmp_path / "cold", log=lambda s: None)
    assert metrics_without_time(tmp_path / "warm") == metrics_without_time(tmp_path / "cold")
    assert metrics_without_time(tmp_path / "warm") != metrics_without_time(tmp_path / "first")


def test_the_rounds_draws_are_timed_apart_from_training(small_data, tmp_path, monkeypatch):
    """The first run of a seed in a process makes its rounds' draws, the later ones find them kept: so a run's
    training time (``time.train_s``, ``upcycle_s``, metrics.csv's ``wall_s``) leaves them out, and ``time.draw_s``
    holds them. A clock that moves only while the draws are made: every draw block adds one second to draw_s and
    none to training."""

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

    clock = Clock()
    make_plans = simulation.DRAW_CACHE.round_plans

    def slow_plans(*args, **kwargs):
        clock.now += 1.0
        return make_plans(*args, **kwargs)

    monkeypatch.setattr(simulation, "time", clock)
    monkeypatch.setattr(simulation.DRAW_CACHE, "round_plans", slow_plans)
    blocks = []
    draw_block = simulation.Simulation.draw_block
    monkeypatch.setattr(
        simulation.Simulation, "draw_block", lambda sim, first: blocks.append(first) or draw_block(sim, first)
    )
    summary = simulation.run(make_cfg(small_data, seed=11), tmp_path / "run", log=lambda s: None)
    times = summary["time"]
    assert blocks and times["draw_s"] == float(len(blocks))
    assert times["train_s"] == times["upcycle_s"] == times["eval_s"] == 0.0
    assert times["total_s"] == times["draw_s"]
    metrics = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    header = metrics[0].split(",")
    assert {float(line.split(",")[header.index("wall_s")]) for line in metrics[1:]} == {0.0}
