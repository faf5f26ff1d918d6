"""The base algorithms and upcycling as a wrapper, against plain per-device reference loops written here."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from fixtures_runs import metrics_rows, metrics_without_time
from upfl import config as cfgmod
from upfl.algorithms import (
    ALGORITHMS,
    AlgorithmPrivacyError,
    ClientRound,
    algorithm_names,
    build_algorithm,
    is_upcycled,
)
from upfl.algorithms.fednova import momentum_work
from upfl.cli import main
from upfl.data import generate_synthetic, load_leaf
from upfl.data.leaf import write_leaf
from upfl.draws.batch_plans import batch_plan
from upfl.draws.rounds import round_participants
from upfl.draws.streams import generator
from upfl.engine.checkpoints import read_archive
from upfl.engine.simulation import InjectedStop, Simulation, run
from upfl.models import LogisticRegression
from upfl.names import DEFAULT_STEP
from upfl.solvers.torch_backend import local_solve

QUIET = {"log": lambda s: None}
BASE_OPTIONS = {
    "fedavg": {},
    "fedprox": {"mu": 0.5},
    "fedavgm": {"mu": 0.5, "server_momentum": 0.5},
    "fednova": {},
    "scaffold": {},
    "fedadam": {},
    "fedyogi": {},
    "feddyn": {"alpha": 0.1},
    "pfedme": {"personal_steps": 2},
}


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=3, num_devices=8))


@pytest.fixture(scope="module")
def equal_data(tmp_path_factory):
    """Six devices with 24 training samples each: with no stragglers every device runs the same steps."""
    g = np.random.default_rng(0)
    users = [f"u{i}" for i in range(6)]
    w = g.normal(size=(5, 3))
    x = {u: g.normal(size=(30, 5)).astype(np.float32) + i * 0.3 for i, u in enumerate(users)}
    y = {u: (x[u] @ w).argmax(1).astype(np.int64) for u in users}
    train = ({u: x[u][:24] for u in users}, {u: y[u][:24] for u in users})
    test = ({u: x[u][24:] for u in users}, {u: y[u][24:] for u in users})
    root = tmp_path_factory.mktemp("equal") / "equal"
    return str(write_leaf(root, users, train, test, {"name": "equal", "num_classes": 3}))


def make_cfg(data, tmp_path, name="fedprox", rounds=4, **algorithm):
    doc = {
        "data": {"path": data},
        "rounds": rounds,
        "algorithm": {"name": name, **algorithm},
        "devices": {"frac": 0.5, "straggler": 0.5},
        "solver": {"epochs": 2, "backend": "torch"},
        "checkpoint": {"every": 1, "dir": str(tmp_path / "ck")},
    }
    return cfgmod.from_dict(doc)


def training_rounds(cfg, data, rounds, w=None):
    """The global models after training rounds 1..rounds of ``cfg`` (the simulation's own training_round)."""
    sim = Simulation(cfg, load_leaf(data), torch.device("cpu"))
    w = sim.model.init_params(generator(cfg.seed, "init")) if w is None else w
    out = []
    for k in range(1, rounds + 1):
        w = sim.training_round(w, k)[0]
        out.append(w)
    return sim, out


def round_inputs(sim, k):
    """Round k's devices and batch plans, drawn as the simulation draws them."""
    c = sim.cfg
    chosen, epochs = round_participants(c, k, len(sim.devices))
    gens = [generator(c.seed, "batches", k, i) for i in chosen]
    plans = batch_plan([sim.xs[i].shape[0] for i in chosen], [epochs[i] for i in chosen], c.solver.batch_size, gens)
    return chosen, plans


def reference_local(x, y_onehot, w0, plan, lr, momentum, mu=0.0, linear=None):
    """One device: torch.optim.SGD with autograd on CE + mu/2 ||w - w0||^2 + <linear, w>."""
    classes = y_onehot.shape[1]
    labels = y_onehot.argmax(1)
    w = w0.clone().requires_grad_(True)
    opt = torch.optim.SGD([w], lr=lr, momentum=momentum)
    for batch in plan:
        idx = batch[batch >= 0]
        opt.zero_grad()
        weights, bias = w[:-classes].view(-1, classes), w[-classes:]
        loss = torch.nn.functional.cross_entropy(x[idx] @ weights + bias, labels[idx])
        loss = loss + mu / 2 * (w - w0).pow(2).sum() + (0 if linear is None else (linear * w).sum())
        loss.backward()
        opt.step()
    return w.detach()


def reference_locals(sim, w, k, mu=0.0, linears=None):
    chosen, plans = round_inputs(sim, k)
    c = sim.cfg.solver
    locals_ = torch.stack(
        [
            reference_local(
                sim.xs[i], sim.ys[i], w, plans[j], c.lr, c.momentum, mu, None if linears is None else linears[j]
            )
            for j, i in enumerate(chosen)
        ]
    )
    return chosen, plans, locals_, sim.sizes[chosen]


def test_registry_names_and_config_errors(small_data, tmp_path):
    assert set(ALGORITHMS) == {
        "fedavg",
        "fedprox",
        "fedavgm",
        "fednova",
        "scaffold",
        "fedadam",
        "fedyogi",
        "feddyn",
        "pfedme",
    }
    assert "upcycled" in algorithm_names() and "upcycled_scaffold" in algorithm_names()
    assert "upcycled_fedprox" not in algorithm_names()
    with pytest.raises(cfgmod.ConfigError, match="algorithm.name: unknown algorithm 'fedfoo'"):
        make_cfg(small_data, tmp_path, name="fedfoo")
    with pytest.raises(cfgmod.ConfigError, match="algorithm.server_momentum: not used by fedprox"):
        make_cfg(small_data, tmp_path, name="fedprox", server_momentum=0.5)
    with pytest.raises(cfgmod.ConfigError, match="algorithm.mu: scaffold has no proximal term"):
        make_cfg(small_data, tmp_path, name="scaffold", mu=0.1)
    assert make_cfg(small_data, tmp_path, name="upcycled_fedavg").algorithm.step == DEFAULT_STEP
    with pytest.raises(cfgmod.ConfigError, match="unknown config key 'algorithm.betaa'"):
        make_cfg(small_data, tmp_path, name="fedadam", betaa=0.1)
    assert make_cfg(small_data, tmp_path, name="upcycled_feddyn", lam=0.1).algorithm.alpha == 0.01


OTHER_VALUES = {
    "mu": 0.5,
    "server_lr": 0.37,
    "server_momentum": 0.7,
    "nesterov": False,
    "beta1": 0.5,
    "beta2": 0.9,
    "tau": 0.01,
    "alpha": 0.1,
    "personal_lambda": 5.0,
    "personal_steps": 2,
    "personal_lr": 0.05,
}
"""A value of each ``algorithm.*`` key other than its default (and than every class's ``server_lr_default``)."""


@pytest.mark.parametrize("base", list(ALGORITHMS))
def test_every_key_an_algorithm_declares_changes_its_training(small_data, tmp_path, base):
    """An algorithm's ``keys`` (and ``mu`` where ``uses_mu``) are what its code reads: each set to another value
    gives another global model after two training rounds; every other key is refused naming it."""
    cls = ALGORITHMS[base]
    _, (_, before) = training_rounds(make_cfg(small_data, tmp_path, name=base), small_data, 2)
    declared = cls.keys + (("mu",) if cls.uses_mu else ())
    for key in declared:
        _, (_, after) = training_rounds(
            make_cfg(small_data, tmp_path, name=base, **{key: OTHER_VALUES[key]}), small_data, 2
        )
        assert not torch.allclose(before, after), f"{base} does not read algorithm.{key}"
    for key in sorted(set(OTHER_VALUES) - set(declared)):
        with pytest.raises(cfgmod.ConfigError, match=f"algorithm.{key}"):
            make_cfg(small_data, tmp_path, name=base, **{key: OTHER_VALUES[key]})


@pytest.mark.parametrize("base", list(ALGORITHMS))
def test_objective_perturbation_is_admitted_exactly_for_the_fedprox_objective(base):
    """Theorem C.2 covers a local objective F_i(w) + mu/2 ||w - w_global||^2 (plus the noise term): an algorithm
    admits objective perturbation iff it has the proximal term and adds no linear term and no local problem of its
    own (SCAFFOLD's and FedDyn's corrections, pFedMe's Moreau envelope)."""
    from upfl.algorithms.base import Algorithm

    cls = ALGORITHMS[base]
    fedprox_form = cls.uses_mu and cls.linear_term is Algorithm.linear_term and cls.local_solve is Algorithm.local_solve
    assert (cls.privacy["objective"] is None) == fedprox_form, cls.privacy


def test_privacy_is_refused_where_the_analysis_does_not_apply(small_data, tmp_path):
    def cfg(name, mechanism, **alg):
        privacy = (
            {"mechanism": mechanism, "tau": 10, "sigma": 1.0}
            if mechanism == "output"
            else {"mechanism": mechanism, "alpha": 10}
        )
        return cfgmod.from_dict({"data": {"path": small_data}, "algorithm": {"name": name, **alg}, "privacy": privacy})

    with pytest.raises(
        AlgorithmPrivacyError,
        match="privacy.mechanism: output perturbation is not supported for "
        "scaffold: the device also releases its control-variate",
    ):
        cfg("scaffold", "output")
    with pytest.raises(AlgorithmPrivacyError, match="objective perturbation is not supported for upcycled_feddyn"):
        cfg("upcycled_feddyn", "objective", lam=0.1)
    with pytest.raises(AlgorithmPrivacyError, match="pfedme"):
        cfg("pfedme", "output")
    assert cfg("fedavgm", "objective", mu=0.1).privacy.mechanism == "objective"
    assert cfg("upcycled_fednova", "output", step=0.5).privacy.mechanism == "output"
    assert cfg("feddyn", "output").privacy.mechanism == "output"


@pytest.mark.parametrize("nesterov", [False, True])
def test_server_momentum_beta0_equals_its_base(small_data, tmp_path, nesterov):
    _, prox = training_rounds(make_cfg(small_data, tmp_path, "fedprox", mu=0.5), small_data, 3)
    _, mom = training_rounds(
        make_cfg(small_data, tmp_path, "fedavgm", mu=0.5, server_momentum=0.0, nesterov=nesterov), small_data, 3
    )
    for a, b in zip(prox, mom, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("nesterov", [False, True])
def test_server_momentum_matches_reference_loop(small_data, tmp_path, nesterov):
    cfg = make_cfg(small_data, tmp_path, "fedavgm", mu=0.5, server_momentum=0.7, nesterov=nesterov, server_lr=0.8)
    sim, got = training_rounds(cfg, small_data, 3)
    w = sim.model.init_params(generator(cfg.seed, "init"))
    v = torch.zeros_like(w)
    for k in range(1, 4):
        _, _, locals_, sizes = reference_locals(sim, w, k, mu=0.5)
        g = w - (sizes / sizes.sum()) @ locals_
        v = 0.7 * v + g
        w = w - 0.8 * ((g + 0.7 * v) if nesterov else v)
        torch.testing.assert_close(got[k - 1], w, rtol=0, atol=1e-5)


def test_fednova_equals_fedavg_when_every_device_runs_the_same_steps(equal_data, tmp_path):
    def cfg(name):
        return cfgmod.from_dict(
            {
                "data": {"path": equal_data},
                "algorithm": {"name": name},
                "devices": {"frac": 0.5, "straggler": 0.0},
                "solver": {"epochs": 3},
            }
        )

    sim, avg = training_rounds(cfg("fedavg"), equal_data, 4)
    assert len({p.shape[0] for p in round_inputs(sim, 1)[1]}) == 1
    _, nova = training_rounds(cfg("fednova"), equal_data, 4)
    for a, b in zip(avg, nova, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_fednova_matches_reference_loop_with_stragglers(small_data, tmp_path):
    cfg = make_cfg(small_data, tmp_path, "fednova")
    sim, got = training_rounds(cfg, small_data, 2)
    w = sim.model.init_params(generator(cfg.seed, "init"))
    rho = cfg.solver.momentum
    for k in (1, 2):
        _, plans, locals_, sizes = reference_locals(sim, w, k)
        assert len({p.shape[0] for p in plans}) > 1, "the test needs unequal local work"
        p = sizes / sizes.sum()
        work = []
        for plan in plans:  # ||a_i||_1 summed term by term: step s's gradient has weight sum_{r<=tau-1-s} rho^r
            tau = plan.shape[0]
            work.append(sum(sum(rho**r for r in range(tau - s)) for s in range(tau)))
        work = torch.tensor(work)
        torch.testing.assert_close(work, torch.tensor([momentum_work(pl.shape[0], rho) for pl in plans]))
        d = (w - locals_) / work.unsqueeze(1)
        w = w - (p @ work) * (p @ d)
        torch.testing.assert_close(got[k - 1], w, rtol=0, atol=1e-5)


def test_scaffold_on_a_hand_sized_case():
    """Two devices, full-batch plans, plain SGD: option II control variates by hand over two rounds."""
    model = LogisticRegression(2, 2)
    xs = [torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), torch.tensor([[-1.0, 0.5], [0.5, -1.0]])]
    labels = [torch.tensor([0, 1, 1]), torch.tensor([1, 0])]
    ys = [torch.eye(2)[y] for y in labels]
    plans = [torch.tensor([[0, 1, 2], [0, 1, 2]]), torch.tensor([[0, 1, -1]])]  # 2 and 1 local steps
    cfg = cfgmod.AlgorithmConfig(name="scaffold")
    alg = build_algorithm(cfgmod.RunConfig(algorithm=cfg), 3, model.num_params, 2)
    lr = 0.5
    w = torch.tensor([0.1, -0.2, 0.3, 0.0, 0.05, -0.05])
    c, ci = torch.zeros(6), torch.zeros(3, 6)
    chosen = [2, 0]
    for _ in range(2):
        rnd = ClientRound(chosen, xs, ys, plans, torch.tensor([3.0, 2.0]), model, local_solve, lr, 0.0, None)
        linear = alg.linear_term(w, rnd)
        local, _ = alg.local_solve(w, rnd, linear)
        alg.client_update(w, local, rnd)
        got = alg.server_update(w, local, rnd)
        ref_local = []
        for j, i in enumerate(chosen):
            y = w.clone()
            for _ in range(plans[j].shape[0]):
                y.requires_grad_(True)
                loss = torch.nn.functional.cross_entropy(xs[j] @ y[:4].view(2, 2) + y[4:], labels[j])
                (grad,) = torch.autograd.grad(loss, y)
                y = (y - lr * (grad + c - ci[i])).detach()
            ref_local.append(y)
        ref_local = torch.stack(ref_local)
        new_ci = torch.stack([ci[i] - c + (w - ref_local[j]) / (plans[j].shape[0] * lr) for j, i in enumerate(chosen)])
        c = c + (new_ci - ci[chosen]).sum(0) / 3
        ci[chosen] = new_ci
        w = (3 * ref_local[0] + 2 * ref_local[1]) / 5
        torch.testing.assert_close(local, ref_local, rtol=0, atol=1e-6)
        torch.testing.assert_close(got, w, rtol=0, atol=1e-6)
        torch.testing.assert_close(alg.control, c, rtol=0, atol=1e-6)
        torch.testing.assert_close(alg.device_controls, ci, rtol=0, atol=1e-6)
    assert alg.device_controls[1].abs().sum() == 0


def test_feddyn_matches_reference_loop(small_data, tmp_path):
    cfg = make_cfg(small_data, tmp_path, "feddyn", alpha=0.1)
    sim, got = training_rounds(cfg, small_data, 3)
    n = len(sim.devices)
    w = sim.model.init_params(generator(cfg.seed, "init"))
    h_dev, h = torch.zeros(n, w.numel()), torch.zeros_like(w)
    for k in range(1, 4):
        chosen, _ = round_inputs(sim, k)
        _, _, locals_, sizes = reference_locals(sim, w, k, mu=0.1, linears=-h_dev[chosen])
        h_dev[chosen] -= 0.1 * (locals_ - w)
        h = h - 0.1 / n * (locals_ - w).sum(0)
        w = (sizes / sizes.sum()) @ locals_ - h / 0.1
        torch.testing.assert_close(got[k - 1], w, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["fedadam", "fedyogi"])
def test_adaptive_server_optimisers_match_reference_loop(small_data, tmp_path, name):
    cfg = make_cfg(small_data, tmp_path, name, server_lr=0.05, beta1=0.8, beta2=0.9, tau=0.01)
    sim, got = training_rounds(cfg, small_data, 3)
    w = sim.model.init_params(generator(cfg.seed, "init"))
    m, v = torch.zeros_like(w), torch.full_like(w, 0.01**2)
    for k in range(1, 4):
        _, _, locals_, sizes = reference_locals(sim, w, k)
        delta = (sizes / sizes.sum()) @ locals_ - w
        m = 0.8 * m + 0.2 * delta
        v = 0.9 * v + 0.1 * delta**2 if name == "fedadam" else v - 0.1 * delta**2 * torch.sign(v - delta**2)
        w = w + 0.05 * m / (v.sqrt() + 0.01)
        torch.testing.assert_close(got[k - 1], w, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "numba"])
def test_pfedme_local_solve_matches_per_device_loop(small_data, tmp_path, backend):
    cfg = make_cfg(small_data, tmp_path, "pfedme", personal_steps=3, personal_lambda=5.0, personal_lr=0.02)
    cfg = cfgmod.from_dict({**cfgmod.to_dict(cfg), "solver": {**cfgmod.to_dict(cfg)["solver"], "backend": backend}})
    sim, got = training_rounds(cfg, small_data, 1)
    assert hasattr(sim.local_solve, "personal_solve") == (backend == "numba")
    w = sim.model.init_params(generator(cfg.seed, "init"))
    chosen, plans = round_inputs(sim, 1)
    classes = sim.num_classes
    locals_, personal = [], []
    for j, i in enumerate(chosen):
        local, theta = w.clone(), w.clone()
        labels = sim.ys[i].argmax(1)
        for batch in plans[j]:
            idx = batch[batch >= 0]
            for _ in range(3):
                t = theta.clone().requires_grad_(True)
                loss = torch.nn.functional.cross_entropy(
                    sim.xs[i][idx] @ t[:-classes].view(-1, classes) + t[-classes:], labels[idx]
                )
                (grad,) = torch.autograd.grad(loss, t)
                theta = theta - 0.02 * (grad + 5.0 * (theta - local))
            local = local - cfg.solver.lr * 5.0 * (local - theta)
        locals_.append(local)
        personal.append(theta)
    sizes = sim.sizes[chosen]
    torch.testing.assert_close(got[0], (sizes / sizes.sum()) @ torch.stack(locals_), rtol=0, atol=1e-5)
    torch.testing.assert_close(sim.algorithm.personal[chosen], torch.stack(personal), rtol=0, atol=1e-5)


@pytest.mark.parametrize("base", sorted(ALGORITHMS))
def test_upcycling_on_every_base_touches_no_data_at_even_iterations(small_data, tmp_path, monkeypatch, base):
    name = "upcycled" if base == "fedprox" else f"upcycled_{base}"
    options = {**BASE_OPTIONS[base], "step": 0.5}
    cfg = make_cfg(small_data, tmp_path, name, rounds=5, **options)
    inside = {"flag": False, "calls": 0, "rounds": 0}
    original_round = Simulation.training_round
    original_grad = LogisticRegression.loss_and_grad

    def counted_round(self, w, k):
        inside["flag"], inside["rounds"] = True, inside["rounds"] + 1
        try:
            return original_round(self, w, k)
        finally:
            inside["flag"] = False

    def guarded_grad(self, *args, **kwargs):
        assert inside["flag"], "a gradient was computed outside a training round"
        inside["calls"] += 1
        return original_grad(self, *args, **kwargs)

    monkeypatch.setattr(Simulation, "training_round", counted_round)
    monkeypatch.setattr(LogisticRegression, "loss_and_grad", guarded_grad)
    summary = run(cfg, tmp_path / name, **QUIET)
    assert inside["rounds"] == 3 and inside["calls"] > 0 and summary["training_rounds"] == 3
    rows = metrics_rows(tmp_path / name)
    assert [r["kind"] for r in rows] == ["init", "train", "upcycle", "train", "upcycle", "train"]
    assert all(r["devices"] == r["local_steps"] == r["data_accesses"] == "0" for r in rows if r["kind"] == "upcycle")
    assert all(int(r["data_accesses"]) == int(r["devices"]) > 0 for r in rows if r["kind"] == "train")
    assert all(np.isfinite(float(r["test_acc"])) for r in rows)


@pytest.mark.parametrize("name", ["scaffold", "upcycled_fedadam", "pfedme", "fedavgm"])
def test_checkpoint_resume_of_a_stateful_base_equals_an_uninterrupted_run(small_data, tmp_path, name):
    options = {**BASE_OPTIONS[name.removeprefix("upcycled_")], **({"step": 0.5} if is_upcycled(name) else {})}
    cfg = make_cfg(small_data, tmp_path, name, rounds=6, **options)
    with pytest.raises(InjectedStop):
        run(cfg, tmp_path / "cut", stop_after=3, **QUIET)
    state = read_archive(next(tmp_path.rglob("state.npz")))
    assert state["algorithm_state"] and all(isinstance(v, np.ndarray) for v in state["algorithm_state"].values())
    resumed = run(cfg, tmp_path / "cut", **QUIET)
    full = run(make_cfg(small_data, tmp_path / "other", name, rounds=6, **options), tmp_path / "full", **QUIET)
    assert resumed["final"] == full["final"]
    assert metrics_without_time(tmp_path / "cut") == metrics_without_time(tmp_path / "full")


def test_pfedme_reports_global_and_personal_accuracy(small_data, tmp_path):
    summary = run(make_cfg(small_data, tmp_path, "pfedme", personal_steps=2), tmp_path / "p", **QUIET)
    assert 0 <= summary["final"]["personal_test_acc"] <= 1 and 0 <= summary["final"]["test_acc"] <= 1
    rows = metrics_rows(tmp_path / "p")
    assert {"personal_train_acc", "personal_test_acc"} <= set(rows[0])
    assert all(0 <= float(r["personal_test_acc"]) <= 1 for r in rows if r["personal_test_acc"])


def test_cli_algorithm_and_set(small_data, tmp_path):
    out = tmp_path / "cli"
    assert (
        main(
            [
                "run",
                "--data",
                small_data,
                "--out",
                str(out),
                "--algorithm",
                "upcycled_fedavgm",
                "--rounds",
                "3",
                "--step",
                "0.5",
                "--epochs",
                "2",
                "--set",
                "algorithm.server_momentum=0.9",
                "--set",
                "algorithm.nesterov=false",
                "--checkpoint-every",
                "0",
            ]
        )
        == 0
    )
    alg = json.loads((out / "summary.json").read_text())["config"]["algorithm"]
    assert alg["name"] == "upcycled_fedavgm" and alg["server_momentum"] == 0.9 and alg["nesterov"] is False
    assert (
        main(
            [
                "run",
                "--data",
                small_data,
                "--out",
                str(tmp_path / "bad"),
                "--algorithm",
                "fedprox",
                "--set",
                "algorithm.tau=0.1",
            ]
        )
        == 2
    )


def fake_run(root, name, seed, accs, walls, straggler=0.9, **alg):
    """A run folder with a hand-made metrics.csv (one row per iteration) and summary.json."""
    from upfl.pipeline.plan import run_id

    doc = {
        "data": {"path": "/x/synthetic_1_1"},
        "algorithm": {"name": name, **alg},
        "devices": {"straggler": straggler, "frac": 0.3},
        "model": {"name": "logreg"},
        "rounds": len(accs),
    }
    out = root / run_id("synthetic_1_1", doc, seed)
    out.mkdir(parents=True)
    lines = [
        "iteration,kind,train_loss,train_acc,test_loss,test_acc,devices,local_steps,data_accesses,wall_s,cum_wall_s",
        "0,init,1,0,1,0,0,0,0,0,0",
    ]
    upcycled = is_upcycled(name)
    for t, (acc, wall) in enumerate(zip(accs, walls, strict=True), start=1):
        kind = "upcycle" if upcycled and t % 2 == 0 else "train"
        lines.append(f"{t},{kind},1,{acc},1,{acc},3,10,3,0.1,{wall}")
    (out / "metrics.csv").write_text("\n".join(lines) + "\n")
    final = {"iteration": len(accs), "train_loss": 1, "train_acc": accs[-1], "test_loss": 1, "test_acc": accs[-1]}
    (out / "summary.json").write_text(
        json.dumps(
            {
                "config": doc,
                "final": final,
                "best": final,
                "seed": seed,
                "training_rounds": (len(accs) + 1) // 2 if upcycled else len(accs),
            }
        )
    )
    return str(out)


def test_ablation_reports_pair_on_seed_and_measure_equal_wall_time(tmp_path):
    from upfl.report.ablations import bases_frame, momentum_frame, write_bases_table, write_momentum_table
    from upfl.report.collect import collect_runs

    pairs = []
    for seed, shift in ((0, 0.0), (1, 0.02), (2, 0.04)):
        pairs.append(fake_run(tmp_path, "fedprox", seed, [0.5, 0.6 + shift], [1.0, 2.0], mu=1.0))
        pairs.append(
            fake_run(
                tmp_path, "fedavgm", seed, [0.5, 0.65 + shift], [1.0, 2.0], mu=1.0, server_momentum=0.5, nesterov=True
            )
        )
        # Upcycled: 4 iterations; at FedProx's wall time (2.0 s) it has reached iteration 3
        pairs.append(
            fake_run(
                tmp_path,
                "upcycled",
                seed,
                [0.5, 0.55, 0.7 + shift, 0.8 + 2 * shift],
                [1.0, 1.01, 2.0, 2.01],
                mu=1.0,
                lam=0.43,
            )
        )
    runs = collect_runs([("ablation_momentum", p) for p in pairs])
    assert set(runs["algorithm_options"].fillna("")) == {"", "server_momentum=0.5;nesterov=True"}
    frame = momentum_frame(runs).set_index("variant")
    assert list(frame.index) == ["FedProx", "FedProx + momentum (β = 0.5, Nesterov)", "Upcycled-FL"]
    mom, up = frame.loc["FedProx + momentum (β = 0.5, Nesterov)"], frame.loc["Upcycled-FL"]
    assert mom["gain"] == pytest.approx(0.05) and mom["gain_high"] - mom["gain_low"] == pytest.approx(0, abs=1e-9)
    assert up["gain"] == pytest.approx(0.2 + 0.02) and up["n_pairs"] == 3  # 0.8 + 2s - (0.6 + s), s = 0, .02, .04
    assert up["wall_gain"] == pytest.approx(0.1)  # iteration 3 (0.7 + s) against FedProx's 0.6 + s
    assert up["gain_low"] < up["gain"] < up["gain_high"]
    write_momentum_table(runs, str(tmp_path / "t"), "prov")
    assert "Upcycled-FL" in (tmp_path / "t.md").read_text()

    base_pairs = [p for p in pairs if "/fedavgm/" not in p]
    bases = bases_frame(collect_runs([("upcycling_bases", p) for p in base_pairs]))
    row = bases.iloc[0]
    assert row["base"] == "fedprox" and row["verdict"] == "gain" and row["gain"] == pytest.approx(0.22)
    write_bases_table(collect_runs([("upcycling_bases", p) for p in base_pairs]), str(tmp_path / "b"), "prov")
    assert "FedProx" in (tmp_path / "b.md").read_text()


def test_momentum_figure_keeps_each_family_in_its_panel_and_colour(tmp_path):
    """FedProx (+ momentum) lines in FedProx's orange and its shades, Upcycled-FL (+ momentum) in its green; each
    family in its own panel; the figure's CSV records every line's colour."""
    from upfl.report.ablations import momentum_figure
    from upfl.report.collect import collect_runs
    from upfl.report.figures import ALGORITHM_COLOURS, csv_colour

    paths = []
    for seed in (0, 1):
        paths.append(fake_run(tmp_path, "fedprox", seed, [0.5, 0.6], [1.0, 2.0], mu=1.0))
        for beta in (0.3, 0.9):
            paths.append(
                fake_run(
                    tmp_path, "fedavgm", seed, [0.5, 0.62], [1.0, 2.0], mu=1.0, server_momentum=beta, nesterov=True
                )
            )
            paths.append(
                fake_run(
                    tmp_path,
                    "upcycled_fedavgm",
                    seed,
                    [0.5, 0.55, 0.7, 0.75],
                    [1.0, 1.01, 2.0, 2.01],
                    mu=1.0,
                    lam=0.43,
                    server_momentum=beta,
                    nesterov=True,
                )
            )
        paths.append(
            fake_run(tmp_path, "upcycled", seed, [0.5, 0.55, 0.7, 0.8], [1.0, 1.01, 2.0, 2.01], mu=1.0, lam=0.43)
        )
    runs = collect_runs([("ablation_momentum", p) for p in paths])
    momentum_figure(runs, str(tmp_path / "ablation_momentum_curves"), "prov")
    assert (tmp_path / "ablation_momentum_curves.png").stat().st_size > 0
    lines = pd.read_csv(tmp_path / "ablation_momentum_curves.csv", comment="#")
    colours = lines.groupby("variant")["colour"].first()
    panels = lines.groupby("variant")["panel"].first()
    assert colours["FedProx"] == csv_colour(ALGORITHM_COLOURS["FedProx"])
    assert colours["Upcycled-FL"] == csv_colour(ALGORITHM_COLOURS["Upcycled-FL"])
    assert colours.nunique() == len(colours) == 6
    assert {v for v in panels.index if panels[v] == "FedProx"} == {
        "FedProx",
        "FedProx + momentum (β = 0.3, Nesterov)",
        "FedProx + momentum (β = 0.9, Nesterov)",
    }
    assert set(lines["x_axis"]) == {"round", "time"}


@pytest.mark.parametrize("name", ["scaffold", "feddyn", "fednova"])
def test_compiled_solver_gives_the_torch_solver_numbers_for_corrected_objectives(small_data, tmp_path, name):
    options = BASE_OPTIONS[name]
    torch_cfg = make_cfg(small_data, tmp_path, name, **options)
    numba_cfg = cfgmod.from_dict(
        {**cfgmod.to_dict(torch_cfg), "solver": {**cfgmod.to_dict(torch_cfg)["solver"], "backend": "numba"}}
    )
    _, a = training_rounds(torch_cfg, small_data, 3)
    sim, b = training_rounds(numba_cfg, small_data, 3)
    assert sim.local_solve is not local_solve
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-5)
