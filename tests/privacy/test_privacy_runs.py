"""Private runs: noise only in training rounds, keyed streams that leave device draws unchanged, epsilons in
summary.json."""

import csv
import json

import pytest
import torch

from upfl import config as cfgmod
from upfl.data import generate_synthetic, load_leaf
from upfl.draws import rounds as draws
from upfl.engine import simulation
from upfl.privacy import NoGuaranteeError, clip_to_norm, release_counts


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return str(generate_synthetic("synthetic_1_1", tmp_path_factory.mktemp("d") / "s", data_seed=2, num_devices=6))


def make_cfg(data, tmp_path, **over):
    doc = {
        "data": {"path": data, "feature_scaling": "unit_norm"},
        "rounds": 6,
        "threads": 1,
        "model": {"name": "binary_logreg"},
        "algorithm": {"name": "upcycled", "mu": 0.1, "lam": 0.04},
        "devices": {"frac": 0.5, "straggler": 0.5},
        "solver": {"epochs": 3},
        "checkpoint": {"every": 0, "dir": str(tmp_path / "ck")},
    }
    for key, value in over.items():
        cfgmod.set_key(doc, key, value)
    return cfgmod.from_dict(doc)


OUTPUT = {"privacy.mechanism": "output", "privacy.sigma": 0.05, "privacy.tau": 10.0}
OBJECTIVE = {"privacy.mechanism": "objective", "privacy.alpha": 5.0}


def rows(out):
    with open(out / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("mech", [OUTPUT, OBJECTIVE], ids=["output", "objective"])
def test_private_run_keeps_device_draws_is_reproducible_and_differs(data, tmp_path, mech):
    plain = simulation.run(make_cfg(data, tmp_path), tmp_path / "plain", log=lambda *_: None)
    cfg = make_cfg(data, tmp_path, **mech)
    a = simulation.run(cfg, tmp_path / "a", log=lambda *_: None)
    b = simulation.run(cfg, tmp_path / "b", log=lambda *_: None)
    ra, rb, rp = rows(tmp_path / "a"), rows(tmp_path / "b"), rows(tmp_path / "plain")
    drop_wall = lambda rs: [{k: v for k, v in r.items() if "wall" not in k} for r in rs]  # noqa: E731
    assert drop_wall(ra) == drop_wall(rb)
    for key in ("kind", "devices", "local_steps", "data_accesses"):
        assert [r[key] for r in ra] == [r[key] for r in rp]
    assert a["final"]["train_loss"] != plain["final"]["train_loss"]
    assert a["privacy"]["mechanism"] == mech["privacy.mechanism"]
    assert a["privacy"] == b["privacy"]
    json.dumps(a["privacy"], allow_nan=False)


@pytest.mark.parametrize("algorithm", ["upcycled", "fedprox"])
def test_output_noise_is_drawn_once_per_release_and_only_in_training_rounds(data, tmp_path, monkeypatch, algorithm):
    calls = []
    real = simulation.output_perturbation

    def counting(W, tau, sigma, gen=None, noise=None):
        calls.append(W.shape[0])
        return real(W, tau, sigma, gen, noise)

    monkeypatch.setattr(simulation, "output_perturbation", counting)
    over = dict(OUTPUT)
    if algorithm == "fedprox":
        over.update({"algorithm.name": "fedprox", "algorithm.lam": None})
    cfg = make_cfg(data, tmp_path, **over)
    summary = simulation.run(cfg, tmp_path / algorithm, log=lambda *_: None)
    expected = release_counts(cfg, len(load_leaf(data).train_users))
    assert sum(calls) == sum(expected) > 0
    participated = sum(int(r["devices"]) for r in rows(tmp_path / algorithm) if r["kind"] == "train")
    assert participated == sum(expected)
    assert [d["releases"] for d in summary["privacy"]["devices"]] == expected


def test_output_noise_has_std_sigma_around_the_clipped_model(data, tmp_path):
    cfg = make_cfg(data, tmp_path, **{**OUTPUT, "privacy.sigma": 0.7, "privacy.tau": 0.01})
    sim = simulation.Simulation(cfg, load_leaf(data), torch.device("cpu"))
    local = torch.full((2, sim.model.num_params), 5.0)
    draws = torch.stack([sim.output_noise(local, k, [0, 1]) for k in range(1, 401)])
    clipped = clip_to_norm(local, 0.01)
    assert float((draws.mean(0) - clipped).abs().max()) < 5 * 0.7 / 400**0.5
    assert abs(float((draws - clipped).std()) - 0.7) < 0.02


def test_objective_noise_enters_the_local_solve_as_a_linear_term(data, tmp_path, monkeypatch):
    seen = {}
    cfg = make_cfg(data, tmp_path, **OBJECTIVE)
    sim = simulation.Simulation(cfg, load_leaf(data), torch.device("cpu"))
    real = sim.local_solve

    def spy(*args, linear_term=None, **kw):
        seen["linear"] = linear_term
        return real(*args, linear_term=linear_term, **kw)

    sim.local_solve = spy
    w0 = sim.model.init_params(torch.Generator().manual_seed(0))
    sim.training_round(w0, 3)
    chosen = draws.sample_clients(cfg.seed, 3, len(sim.devices), cfg.devices.frac)
    assert seen["linear"].shape == (len(chosen), sim.model.num_params)
    assert torch.equal(seen["linear"], sim.objective_noise(3, chosen))
    assert not torch.equal(sim.objective_noise(3, chosen), sim.objective_noise(4, chosen))


def test_objective_perturbation_refuses_when_theorem_c2_condition_fails(data, tmp_path):
    cfg = make_cfg(data, tmp_path, **{**OBJECTIVE, "algorithm.mu": 1e-4})
    with pytest.raises(NoGuaranteeError, match="allow_no_guarantee"):
        simulation.run(cfg, tmp_path / "refused", log=lambda *_: None)
    assert not (tmp_path / "refused").exists()
    cfg = make_cfg(data, tmp_path, **{**OBJECTIVE, "algorithm.mu": 1e-4, "privacy.allow_no_guarantee": True})
    summary = simulation.run(cfg, tmp_path / "allowed", log=lambda *_: None)
    assert summary["privacy"]["epsilon_bar"]["theorem_c2"] is None


def test_per_device_sigma_list_of_wrong_length_is_a_named_error(data, tmp_path):
    cfg = make_cfg(data, tmp_path, **{**OUTPUT, "privacy.sigma": [0.1, 0.2]})
    with pytest.raises(cfgmod.ConfigError, match="privacy.sigma"):
        simulation.run(cfg, tmp_path / "bad", log=lambda *_: None)


def test_private_run_marks_its_training_metrics_outside_the_guarantee(data, tmp_path):
    """By default a private run computes train_loss/train_acc on the devices' private data and says so in every
    row of metrics.csv and in its privacy block; release_train_metrics: false leaves them out, test metrics and
    the model's trajectory unchanged. A non-private run's metrics.csv has no such column."""
    marked = simulation.run(make_cfg(data, tmp_path, **OUTPUT), tmp_path / "marked", log=lambda *_: None)
    kept = simulation.run(
        make_cfg(data, tmp_path, **OUTPUT, **{"privacy.release_train_metrics": False}),
        tmp_path / "kept",
        log=lambda *_: None,
    )
    simulation.run(make_cfg(data, tmp_path), tmp_path / "plain", log=lambda *_: None)
    rm, rk = rows(tmp_path / "marked"), rows(tmp_path / "kept")
    assert {r["train_metrics"] for r in rm} == {"outside_privacy_guarantee"}
    assert all(float(r["train_loss"]) > 0 for r in rm)
    assert {r["train_metrics"] for r in rk} == {"not_computed"}
    assert {(r["train_loss"], r["train_acc"]) for r in rk} == {("", "")}
    assert [r["test_acc"] for r in rk] == [r["test_acc"] for r in rm]
    assert "train_metrics" not in rows(tmp_path / "plain")[0]
    assert marked["privacy"]["released_outside_the_guarantee"] == ["train_loss", "train_acc"]
    assert marked["privacy"]["neighbouring_relation"].startswith("replace-one")
    assert kept["privacy"]["train_metrics"] == "not_computed" and kept["final"]["train_loss"] is None
    assert kept["diverged"] is False


def test_release_train_metrics_enters_the_hash_of_private_configs_only(data, tmp_path):
    plain, plain_off = make_cfg(data, tmp_path), make_cfg(data, tmp_path, **{"privacy.release_train_metrics": False})
    assert cfgmod.config_hash(plain) == cfgmod.config_hash(plain_off)
    private = make_cfg(data, tmp_path, **OUTPUT)
    private_off = make_cfg(data, tmp_path, **OUTPUT, **{"privacy.release_train_metrics": False})
    assert cfgmod.config_hash(private) != cfgmod.config_hash(private_off)
