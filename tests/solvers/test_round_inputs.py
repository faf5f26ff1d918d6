"""The compiled solver's round inputs: batch plans drawn in one compiled call from the devices' seeds, device rows
read from the run's pooled rows at the ranges the simulation hands over, plans joined without a copy. Each fast path
must give the bytes of the plain one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fixtures_runs import metrics_without_time
from upfl import config as cfgmod
from upfl.algorithms.updates import size_weights
from upfl.data import generate_synthetic, load_leaf
from upfl.draws.batch_plans import DrawCache, batch_plan, joined_plan, round_plans, seeded_batch_plan
from upfl.draws.streams import derive_seed, derive_seeds, generator
from upfl.engine import simulation
from upfl.engine.simulation import Simulation, run
from upfl.solvers import numba_backend as solver_numba
from upfl.solvers.numba_backend import layout, solver
from upfl.solvers.selection import PooledRound


def numbers(plan) -> np.ndarray:
    """A plan's numbers (the torch solver's plans are tensors, the compiled solver's arrays)."""
    return plan if isinstance(plan, np.ndarray) else plan.numpy()


@pytest.mark.parametrize("batch_size", [1, 3, 8, 32, 5000])
def test_compiled_batch_plans_are_torchs_plans(batch_size):
    sizes = [1, 2, 7, 8, 9, 31, 32, 33, 250, 1700]
    epochs = [3, 1, 4, 2, 5, 1, 3, 2, 6, 2]
    seeds = [derive_seed(10 + i, "batches", 4, i) for i in range(len(sizes))]

    want = batch_plan(sizes, epochs, batch_size, [generator(10 + i, "batches", 4, i) for i in range(len(sizes))])
    got = solver_numba.batch_plans(sizes, epochs, batch_size, seeds)
    assert [p.dtype for p in got] == [np.int32] * len(sizes)
    assert all(np.array_equal(a.numpy(), b) for a, b in zip(want, got, strict=True))
    assert all(
        torch.equal(a, b) for a, b in zip(want, seeded_batch_plan(sizes, epochs, batch_size, seeds), strict=True)
    )
    assert torch.equal(want[3], batch_plan([8], [2], batch_size, [generator(13, "batches", 4, 3)])[0])


def seeds_of(keys):
    return derive_seeds(7, "batches", keys)


def test_draw_cache_draws_the_plans_it_does_not_keep_together():
    cache = DrawCache()
    sizes, epochs = [30, 17, 25, 9], [4, 5, 4, 2]
    calls = []

    def draw(*args):
        calls.append(len(args[0]))
        return solver_numba.batch_plans(*args)

    first = cache.plans(7, [(3, 1, 17, 5), (3, 3, 9, 2)], 8, seeds_of, draw)
    both = cache.plans(7, [(3, i, n, e) for i, n, e in zip(range(4), sizes, epochs, strict=True)], 8, seeds_of, draw)
    assert calls == [2, 2], "only the plans of devices 0 and 2 are drawn the second time"
    assert both[1] is first[0] and both[3] is first[1]
    want = batch_plan(sizes, epochs, 8, [generator(7, "batches", 3, i) for i in range(4)])
    assert all(np.array_equal(a.numpy(), b) for a, b in zip(want, both, strict=True))


def test_round_plans_of_several_rounds_are_drawn_in_one_call_and_kept_per_round():
    cache = DrawCache()
    rounds = [(3, [0, 1, 2, 3], [30, 17, 25, 9], [4, 5, 4, 2]), (4, [2, 0], [25, 30], [1, 3])]
    calls = []

    def draw(*args):
        calls.append(len(args[0]))
        return solver_numba.batch_plans(*args)

    kept_first = cache.plans(7, [(3, 2, 25, 4)], 8, seeds_of, draw)
    got = cache.round_plans(7, rounds, 8, seeds_of, draw)
    again = cache.round_plans(7, rounds[1:], 8, seeds_of, draw)
    assert calls == [1, 5], "the five plans not kept, of both rounds, in one call"
    assert again[0] is got[1] and got[0].plans[2] is kept_first[0]
    for (k, devices, sizes, epochs), plans in zip(rounds, got, strict=True):
        want = batch_plan(sizes, epochs, 8, [generator(7, "batches", k, i) for i in devices])
        assert np.array_equal(plans.joined, torch.cat(want).numpy())
        assert plans.offsets.tolist() == np.cumsum([0] + [p.shape[0] for p in want]).tolist()
        assert all(np.array_equal(a, b.numpy()) for a, b in zip(plans.plans, want, strict=True))
    nothing_kept = DrawCache(max_bytes=0).round_plans(7, rounds, 8, seeds_of, draw)
    assert all(np.array_equal(a.joined, b.joined) for a, b in zip(nothing_kept, got, strict=True))


def test_joined_plans_equal_their_concatenation():
    sizes, epochs = [30, 17, 25, 9], [4, 5, 4, 2]
    seeds = [derive_seed(1, "batches", 2, i) for i in range(4)]
    compiled = solver_numba.batch_plans(sizes, epochs, 8, seeds)
    plain = seeded_batch_plan(sizes, epochs, 8, seeds)
    for plans in (compiled, compiled[1:3], [compiled[2], compiled[0]], plain, plain[:1], [compiled[0], plain[1]]):
        concatenated = np.concatenate([numbers(p) for p in plans])
        assert np.array_equal(joined_plan(plans), concatenated) and joined_plan(plans).dtype == np.int32
        assert np.array_equal(solver.joined_plans(plans), concatenated)
        assert np.array_equal(round_plans(plans).joined, concatenated)
    assert np.shares_memory(joined_plan(compiled), compiled[0]), "back-to-back views are read in place"
    assert not np.shares_memory(joined_plan([compiled[2], compiled[0]]), compiled[0]), "out of order: a copy"


def test_row_blocks_find_pooled_rows_and_refuse_other_tensors():
    pooled_x, pooled_y = torch.arange(40.0).reshape(10, 4).clone(), torch.eye(2)[torch.arange(10) % 2]
    xs, ys = list(torch.split(pooled_x, [3, 0, 5, 2])), list(torch.split(pooled_y, [3, 0, 5, 2]))
    x, y, rows = solver.row_blocks([xs[2], xs[0], xs[3]], [ys[2], ys[0], ys[3]])
    assert x is pooled_x and y is pooled_y and rows.tolist() == [[3, 8], [0, 3], [8, 10]]
    assert solver.row_blocks([xs[0].clone()], [ys[0]]) is None
    assert solver.row_blocks([xs[0]], [ys[2]]) is None, "labels of other rows"
    assert solver.row_blocks([pooled_x[:, :2]], [pooled_y]) is None
    flat = torch.arange(40.0)
    assert solver.row_blocks([flat.view(10, 4)[:3]], [ys[0]]) is None, "rows of a view of another shape"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return str(generate_synthetic("synthetic_1_1", tmp_path_factory.mktemp("d") / "s11", data_seed=2, num_devices=10))


@pytest.mark.parametrize("model", ["logreg", "binary_logreg"])
def test_a_round_on_pooled_rows_equals_a_round_on_separate_tensors(data, model):
    cfg = cfgmod.from_dict(
        {
            "data": {"path": data},
            "rounds": 4,
            "seed": 3,
            "model": {"name": model},
            "algorithm": {"name": "fedprox", "mu": 0.5},
            "devices": {"frac": 0.5, "straggler": 0.5},
            "solver": {"epochs": 3, "backend": "numba"},
            "checkpoint": {"every": 0},
        }
    )
    sim = Simulation(cfg, load_leaf(data), torch.device("cpu"))
    w = sim.model.init_params(generator(3, "init"))
    chosen = [4, 1, 7, 2]
    plans = batch_plan(
        [sim.device_sizes[i] for i in chosen],
        [3, 1, 2, 3],
        sim.batch_size,
        [generator(3, "batches", 1, i) for i in chosen],
    )
    rows = PooledRound(sim.train_x, sim.train_onehot, sim.row_ranges[chosen], round_plans(plans))
    assert all(torch.equal(sim.train_x[a:b], sim.xs[i]) for (a, b), i in zip(rows.rows, chosen, strict=True))
    pooled, _ = sim.local_solve(
        sim.model, w, [sim.xs[i] for i in chosen], [sim.ys[i] for i in chosen], plans, 0.5, 0.05, 0.5, pooled=rows
    )
    separate, _ = sim.local_solve(
        sim.model, w, [sim.xs[i].clone() for i in chosen], [sim.ys[i].clone() for i in chosen], plans, 0.5, 0.05, 0.5
    )
    assert torch.equal(pooled, separate)
    personal = sim.local_solve.personal_solve(
        sim.model, w, [sim.xs[i] for i in chosen], [sim.ys[i] for i in chosen], plans, 0.05, 15.0, 0.01, 2, pooled=rows
    )
    plain = sim.local_solve.personal_solve(
        sim.model, w, [sim.xs[i] for i in chosen], [sim.ys[i] for i in chosen], plans, 0.05, 15.0, 0.01, 2
    )
    assert all(torch.equal(a, b) for a, b in zip(personal[:2], plain[:2], strict=True)) and personal[2] == plain[2]


def test_a_run_with_the_compiled_inputs_gives_the_plain_inputs_bytes(data, tmp_path, monkeypatch):
    cfg = cfgmod.from_dict(
        {
            "data": {"path": data},
            "rounds": 6,
            "seed": 1,
            "algorithm": {"name": "upcycled", "mu": 1.0, "lam": 0.43},
            "devices": {"frac": 0.3, "straggler": 0.9},
            "solver": {"epochs": 5, "backend": "numba"},
            "checkpoint": {"every": 0},
        }
    )
    run(cfg, tmp_path / "fast", log=lambda m: None)
    init = Simulation.__post_init__

    def plain(self):
        init(self)
        self.batch_plan, self.reads_pooled_rows = seeded_batch_plan, False
        self.xs, self.ys = [x.copy() for x in self.xs], [y.copy() for y in self.ys]

    monkeypatch.setattr(Simulation, "__post_init__", plain)
    run(cfg, tmp_path / "plain", log=lambda m: None)
    lines = [metrics_without_time(tmp_path / side) for side in ("fast", "plain")]
    assert lines[0] == lines[1]


def test_rounds_drawn_in_blocks_give_the_bytes_of_rounds_drawn_one_by_one(data, tmp_path, monkeypatch):
    cfg = cfgmod.from_dict(
        {
            "data": {"path": data},
            "rounds": 7,
            "seed": 2,
            "algorithm": {"name": "upcycled", "mu": 1.0, "lam": 0.43},
            "devices": {"frac": 0.3, "straggler": 0.9},
            "solver": {"epochs": 4, "backend": "numba"},
            "checkpoint": {"every": 0},
        }
    )
    draws_of = []
    block = Simulation.draw_block

    def recorded(self, first):
        got = block(self, first)
        draws_of.append(sorted(got))
        return got

    monkeypatch.setattr(Simulation, "draw_block", recorded)
    monkeypatch.setattr(simulation, "DRAW_CACHE", DrawCache(max_bytes=0))
    run(cfg, tmp_path / "block", log=lambda m: None)
    assert draws_of == [[1, 2, 3, 4]], "one block: the run's four training rounds"
    monkeypatch.setattr(simulation, "PLAN_BLOCK_BYTES", 0)
    run(cfg, tmp_path / "single", log=lambda m: None)
    assert draws_of[1:] == [[1], [2], [3], [4]]
    lines = [metrics_without_time(tmp_path / side) for side in ("block", "single")]
    assert lines[0] == lines[1]


def test_the_rounds_inputs_are_the_plain_ones(data):
    cfg = cfgmod.from_dict(
        {
            "data": {"path": data},
            "rounds": 5,
            "seed": 4,
            "algorithm": {"name": "fedprox", "mu": 1.0},
            "devices": {"frac": 0.5, "straggler": 0.5},
            "solver": {"epochs": 3, "backend": "numba"},
            "checkpoint": {"every": 0},
        }
    )
    sim = Simulation(cfg, load_leaf(data), torch.device("cpu"))
    for k in range(1, 6):
        rnd = sim.client_round(k)
        assert torch.equal(
            rnd.weights, size_weights(torch.tensor([sim.device_sizes[i] for i in rnd.chosen], dtype=torch.float32))
        )
        assert all(torch.equal(sim.train_x[a:b], x) for (a, b), x in zip(rnd.pooled.rows, rnd.xs, strict=True))
        assert np.array_equal(rnd.pooled.plans.joined, np.concatenate([numbers(p) for p in rnd.plans]))
        assert rnd.pooled.plans.steps == rnd.steps


def test_class_major_layout_is_a_permutation_and_its_inverse():
    dim, classes = 3, 4
    flat = np.arange(2 * (dim + 1) * classes, dtype=np.float32).reshape(2, -1)
    major = layout.to_class_major(flat, dim)
    weights = flat[:, : dim * classes].reshape(2, dim, classes)
    assert np.array_equal(major[:, :, :dim], weights.transpose(0, 2, 1))
    assert np.array_equal(major[:, :, dim], flat[:, dim * classes :])
    assert major.flags.c_contiguous and np.array_equal(layout.from_class_major(major), flat)


def test_runs_on_one_data_set_object_share_its_pooled_rows(data):
    ds = load_leaf(data)
    doc = {
        "data": {"path": data},
        "rounds": 2,
        "algorithm": {"name": "fedprox", "mu": 1.0},
        "solver": {"backend": "numba"},
        "checkpoint": {"every": 0},
    }
    first, second = (Simulation(cfgmod.from_dict(doc), ds, torch.device("cpu")) for _ in range(2))
    scaled = Simulation(
        cfgmod.from_dict({**doc, "data": {"path": data, "feature_scaling": "unit_norm"}}), ds, torch.device("cpu")
    )
    other = Simulation(cfgmod.from_dict(doc), load_leaf(data), torch.device("cpu"))
    assert first.train_x is second.train_x and first.test_x is second.test_x
    assert all(a is b for a, b in zip(first.xs, second.xs, strict=True))
    assert first.xs is not second.xs, "each run has its own lists"
    assert scaled.train_x is not first.train_x and not torch.equal(scaled.train_x, first.train_x)
    assert other.train_x is not first.train_x and torch.equal(other.train_x, first.train_x)
    assert torch.equal(other.train_onehot, first.train_onehot) and torch.equal(other.test_y, first.test_y)
    assert all(torch.equal(x, torch.as_tensor(ds.train_x[u])) for x, u in zip(first.xs, ds.train_users, strict=True))


def test_round_plans_of_one_draw_are_slices_of_its_array():
    rounds = [(3, [0, 1, 2, 3], [30, 17, 25, 9], [4, 5, 4, 2]), (4, [2, 0], [25, 30], [1, 3]), (5, [1], [17], [2])]
    got = DrawCache().round_plans(7, rounds, 8, seeds_of, solver_numba.batch_plans)
    for (k, devices, sizes, epochs), plans in zip(rounds, got, strict=True):
        want = round_plans(seeded_batch_plan(sizes, epochs, 8, derive_seeds(7, "batches", [[k, i] for i in devices])))
        assert np.array_equal(plans.joined, want.joined) and plans.joined.dtype == np.int32
        assert plans.offsets.tolist() == want.offsets.tolist() and plans.steps == want.steps
        assert all(np.array_equal(a, b.numpy()) for a, b in zip(plans.plans, want.plans, strict=True))
    assert got[0].joined.base is got[2].joined.base is not None, "the rounds' joined plans are slices of one array"
