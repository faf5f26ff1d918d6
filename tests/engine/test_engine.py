"""Engine tests: Eq. (5), FedAvg/FedProx equivalence, batched solver vs a plain loop, determinism, resume."""

import json

import pytest
import torch

from fixtures_runs import metrics_rows, metrics_without_time
from upfl import config as cfgmod
from upfl.algorithms import upcycle_coefficient, upcycle_step, weighted_average
from upfl.cli import main
from upfl.data import generate_synthetic, load_leaf
from upfl.draws.batch_plans import batch_plan
from upfl.draws.rounds import draw_stragglers, sample_clients
from upfl.engine.simulation import InjectedStop, run
from upfl.models import LogisticRegression
from upfl.solvers.torch_backend import local_solve


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=3, num_devices=8))


def make_cfg(data, tmp_path, **over):
    doc = {
        "data": {"path": data},
        "rounds": 6,
        "algorithm": {"name": "upcycled", "mu": 1.0, "lam": 0.43},
        "devices": {"frac": 0.5, "straggler": 0.5},
        "solver": {"epochs": 3},
        "checkpoint": {"every": 1, "dir": str(tmp_path / "ck")},
    }
    for key, value in over.items():
        cfgmod.set_key(doc, key, value)
    return cfgmod.from_dict(doc)


def test_upcycle_step_is_eq5_bit_exact():
    a = torch.tensor([1.0, -2.0, 3.5])
    b = torch.tensor([0.5, 0.25, -1.0])
    c = 1.0 / (1.0 + 0.43)
    assert torch.equal(upcycle_step(a, b, c), a + c * (a - b))
    assert upcycle_coefficient(0.7, 4, "inv_sqrt", 10) == 0.7 / 2
    assert upcycle_coefficient(0.7, 4, "horizon", 16) == 0.7 / 4


def test_upcycle_step_on_the_cpu_gives_torchs_float32_numbers():
    g = torch.Generator().manual_seed(3)
    for scale in (1e-30, 1e-3, 1.0, 1e3):
        a, b = torch.randn(2, 610, generator=g) * scale
        for c in (0.699, 1.0 / 1.43, 1e-4 / 3, 7.0 / 3):
            got = upcycle_step(a, b, c)
            assert got.dtype == torch.float32 and torch.equal(got, a + c * (a - b))
    a64, b64 = a.double(), b.double()
    assert torch.equal(upcycle_step(a64, b64, 0.699), a64 + 0.699 * (a64 - b64))


def test_one_round_matches_hand_computed_full_batch_gradient_step():
    torch.manual_seed(0)
    model = LogisticRegression(3, 2)
    w0 = torch.randn(model.num_params)
    xs = [torch.randn(5, 3), torch.randn(7, 3)]
    ys_lab = [torch.randint(0, 2, (5,)), torch.randint(0, 2, (7,))]
    ys = [torch.eye(2)[y] for y in ys_lab]
    plans = [torch.arange(5).view(1, 5), torch.arange(7).view(1, 7)]
    plans = [torch.nn.functional.pad(p, (0, 7 - p.shape[1]), value=-1) for p in plans]
    local, steps = local_solve(model, w0, xs, ys, plans, mu=0.0, lr=0.1, momentum=0.5)
    assert steps == 2
    expected = []
    for x, y in zip(xs, ys_lab, strict=True):
        w = w0.clone().requires_grad_(True)
        W, b = w[:6].view(3, 2), w[6:]
        torch.nn.functional.cross_entropy(x @ W + b, y).backward()
        expected.append(w0 - 0.1 * w.grad)
    torch.testing.assert_close(local, torch.stack(expected), rtol=0, atol=1e-6)
    agg = weighted_average(local, torch.tensor([5.0, 7.0]))
    torch.testing.assert_close(agg, (5 * expected[0] + 7 * expected[1]) / 12, rtol=0, atol=1e-6)


def reference_local_solve(x, y, w0, plan, mu, lr, momentum):
    """Plain per-device torch.optim.SGD loop with autograd."""
    w = w0.clone().requires_grad_(True)
    opt = torch.optim.SGD([w], lr=lr, momentum=momentum)
    for batch in plan:
        idx = batch[batch >= 0]
        opt.zero_grad()
        W, b = w[:-2].view(-1, 2), w[-2:]
        loss = torch.nn.functional.cross_entropy(x[idx] @ W + b, y[idx]) + mu / 2 * (w - w0).pow(2).sum()
        loss.backward()
        opt.step()
    return w.detach()


def test_batched_solver_matches_per_device_loop_with_stragglers_and_uneven_sizes():
    g = torch.Generator().manual_seed(1)
    model = LogisticRegression(4, 2)
    sizes, epochs = [3, 40, 17, 65], [2, 5, 1, 3]
    xs = [torch.randn(n, 4, generator=g) for n in sizes]
    labels = [torch.randint(0, 2, (n,), generator=g) for n in sizes]
    w0 = torch.randn(model.num_params, generator=g) * 0.1
    plans = batch_plan(sizes, epochs, 8, [torch.Generator().manual_seed(i) for i in range(4)])
    local, _ = local_solve(model, w0, xs, [torch.eye(2)[y] for y in labels], plans, mu=0.3, lr=0.05, momentum=0.5)
    for i in range(4):
        ref = reference_local_solve(xs[i], labels[i], w0, plans[i], 0.3, 0.05, 0.5)
        torch.testing.assert_close(local[i], ref, rtol=0, atol=1e-6)


def test_fedprox_mu0_equals_fedavg_exactly(small_data, tmp_path):
    a = run(
        make_cfg(small_data, tmp_path, **{"algorithm.name": "fedavg", "algorithm.mu": 0.0, "algorithm.lam": None}),
        tmp_path / "a",
        log=lambda s: None,
    )
    b = run(
        make_cfg(small_data, tmp_path, **{"algorithm.name": "fedprox", "algorithm.mu": 0.0, "algorithm.lam": None}),
        tmp_path / "b",
        log=lambda s: None,
    )
    assert a["final"] == b["final"]


def test_same_seed_same_metrics_and_shared_device_draws(small_data, tmp_path):
    cfg = make_cfg(small_data, tmp_path)
    run(cfg, tmp_path / "r1", log=lambda s: None)
    run(cfg, tmp_path / "r2", log=lambda s: None)
    assert metrics_without_time(tmp_path / "r1") == metrics_without_time(tmp_path / "r2")
    assert sample_clients(0, 3, 30, 0.3) == sample_clients(0, 3, 30, 0.3)
    assert sample_clients(0, 3, 30, 0.3) != sample_clients(0, 4, 30, 0.3)
    assert len(sample_clients(0, 1, 30, 0.3)) == 9
    flags, ep = draw_stragglers(0, 2, 30, 0.9, 20)
    assert all(1 <= e <= 19 for e, f in zip(ep, flags, strict=True) if f) and all(
        e == 20 for e, f in zip(ep, flags, strict=True) if not f
    )


def test_resume_after_interruption_gives_same_metrics(small_data, tmp_path):
    cfg = make_cfg(small_data, tmp_path, rounds=9)
    with pytest.raises(InjectedStop):
        run(cfg, tmp_path / "cut", log=lambda s: None, stop_after=6)
    assert not (tmp_path / "cut" / "metrics.csv").exists()
    resumed = run(cfg, tmp_path / "cut", log=lambda s: None)
    full = run(make_cfg(small_data, tmp_path / "other", rounds=9), tmp_path / "full", log=lambda s: None)
    assert resumed["final"] == full["final"]
    assert metrics_without_time(tmp_path / "cut") == metrics_without_time(tmp_path / "full")


def test_config_errors_name_the_key(small_data, tmp_path):
    with pytest.raises(cfgmod.ConfigError, match="algorithm.muu"):
        cfgmod.from_dict({"data": {"path": small_data}, "algorithm": {"muu": 1}})
    with pytest.raises(cfgmod.ConfigError, match="solver.epochs"):
        cfgmod.from_dict(
            {
                "data": {"path": small_data},
                "algorithm": {"lam": 0.1, "mu": 1},
                "devices": {"straggler": 0.5},
                "solver": {"epochs": 1},
            }
        )
    with pytest.raises(cfgmod.ConfigError, match="algorithm.mu"):
        cfgmod.from_dict({"data": {"path": small_data}, "algorithm": {"mu": -1, "lam": 0.1}})


def test_malformed_dataset_and_bad_flags_write_nothing(tmp_path, capsys, small_data):
    bad = tmp_path / "bad"
    (bad / "train").mkdir(parents=True)
    (bad / "test").mkdir()
    doc = {"users": ["a"], "num_samples": [2], "user_data": {"a": {"x": [[1.0, 2.0], [1.0]], "y": [0, 1]}}}
    (bad / "train" / "d.json").write_text(json.dumps(doc))
    (bad / "test" / "d.json").write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert main(["run", "--data", str(bad), "--algorithm", "fedavg", "--out", str(out)]) == 2
    assert "ragged" in capsys.readouterr().err
    doc["user_data"]["a"] = {"x": [[1.0], [2.0]], "y": [0, -1]}
    (bad / "train" / "d.json").write_text(json.dumps(doc))
    assert main(["run", "--data", str(bad), "--algorithm", "fedavg", "--out", str(out)]) == 2
    assert "labels must be >= 0" in capsys.readouterr().err
    assert (
        main(["run", "--data", small_data, "--algorithm", "upcycled", "--mu", "1", "--lam", "-1", "--out", str(out)])
        == 2
    )
    assert "algorithm.lam: must be >= 0" in capsys.readouterr().err
    assert not out.exists()


def test_synthetic_generator_statistics(tmp_path):
    iid = load_leaf(generate_synthetic("synthetic_iid", tmp_path / "iid"))
    het = load_leaf(generate_synthetic("synthetic_1_1", tmp_path / "h"))
    hom = load_leaf(generate_synthetic("synthetic_0_0", tmp_path / "z"))
    for ds in (iid, het):
        for u in ds.users:
            n_tr, n_te = len(ds.train_y[u]), len(ds.test_y[u])
            assert n_tr + n_te >= 50 and n_tr == int(0.9 * (n_tr + n_te))

    def spread(ds):
        return float(torch.tensor([ds.train_y[u].mean() for u in ds.users]).std())

    assert spread(het) > spread(hom) > spread(iid)
    assert iid.meta["parameters"]["num_classes"] == 2 and iid.feature_shape == (20,)


def test_drop_policy_keeps_model_on_empty_round_and_schedules_run(small_data, tmp_path):
    s = run(
        make_cfg(
            small_data,
            tmp_path,
            **{"devices.straggler": 1.0, "devices.straggler_policy": "drop", "algorithm.schedule": "inv_sqrt"},
        ),
        tmp_path / "d",
        log=lambda m: None,
    )
    rows = metrics_rows(tmp_path / "d")
    assert all(r["devices"] == "0" for r in rows)
    assert len({(r["train_loss"], r["train_acc"]) for r in rows}) == 1
    assert s["final"]["train_acc"] == float(rows[0]["train_acc"])


def test_set_items_are_yaml_values_and_bad_items_are_named_errors():
    doc = cfgmod.apply_settings(
        {"algorithm": {"name": "fedprox"}}, ["algorithm.mu=0.5", "privacy.sigma=[1, 2]", "model.name=mlp"]
    )
    assert doc == {"algorithm": {"name": "fedprox", "mu": 0.5}, "privacy": {"sigma": [1, 2]}, "model": {"name": "mlp"}}
    with pytest.raises(cfgmod.ConfigError, match=r"--set 'algorithm.mu': expected KEY=VALUE"):
        cfgmod.apply_settings({}, ["algorithm.mu"])
    with pytest.raises(cfgmod.ConfigError, match=r"--set privacy.sigma: value '\[1' is not valid YAML"):
        cfgmod.apply_settings({}, ["privacy.sigma=[1"])
