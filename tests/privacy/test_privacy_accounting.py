"""Privacy accounting: Theorem C.1/C.2 closed forms, dp-accounting's exact Gaussian composition, release
counts against a real run's draws, the named refusals, and ``upfl privacy`` on a tiny data set."""

import itertools
import json
import math

import numpy as np
import pytest
import yaml

import upfl.draws.rounds as draws
import upfl.engine.simulation as simulation
from fixtures_runs import metrics_rows
from upfl import config as cfgmod
from upfl.cli import main
from upfl.data import generate_synthetic, load_leaf
from upfl.draws.batch_plans import DrawCache
from upfl.models import build_model
from upfl.privacy import (
    NO_GLM,
    NO_GUARANTEE,
    SGD_CAVEAT,
    NoGuaranteeError,
    PrivacyParameterError,
    gaussian_epsilon,
    output_epsilons,
    participation,
    pld_epsilon,
    privacy_report,
    rdp_epsilon,
    release_counts,
    theorem_c1_epsilon,
    theorem_c2_condition,
    theorem_c2_epsilon,
    training_rounds,
)
from upfl.privacy.accounting import analytic_gaussian_epsilon, pld_tractable


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("privdata")
    return str(generate_synthetic("synthetic_iid", root / "iid", data_seed=5, num_devices=6))


def make_doc(data, **over):
    doc = {
        "data": {"path": data, "feature_scaling": "unit_norm"},
        "rounds": 8,
        "model": {"name": "binary_logreg"},
        "algorithm": {"name": "upcycled", "mu": 0.1, "lam": 0.04},
        "devices": {"frac": 1.0},
        "solver": {"epochs": 1},
        "privacy": {"mechanism": "output", "sigma": 0.8, "tau": 10.0},
    }
    for key, value in over.items():
        cfgmod.set_key(doc, key, value)
    return doc


def make_cfg(data, **over):
    return cfgmod.from_dict(make_doc(data, **over))


def report_for(cfg, **kw):
    ds = load_leaf(cfg.data.path)
    return privacy_report(cfg, ds, build_model(cfg.model.name, ds, cfg.model.options), **kw)


# ----------------------------------------------------------------------------- output perturbation


def test_reference_case_paper_closed_form_and_exact_value():
    # z = sigma / sensitivity = 1: sigma = 1, tau = 1, |D| = 1 makes the paper's s = tau / (sigma |D|) = 1.
    assert theorem_c1_epsilon(40, sigma=1.0, tau=1.0, n_train=1, delta=1e-5) == pytest.approx(50.35, abs=0.005)
    assert gaussian_epsilon(1.0, 40, 1e-5) == pytest.approx(46.21, abs=0.005)
    assert rdp_epsilon(1.0, 40, 1e-5) == pytest.approx(48.80, abs=0.005)


def test_exact_composition_agrees_with_pld_accountant():
    # M Gaussian releases of multiplier z = one of z / sqrt(M); PLD composes the 40 releases numerically.
    exact = gaussian_epsilon(1.0, 40, 1e-5)
    assert pld_epsilon(1.0, 40, 1e-5) == pytest.approx(exact, rel=1e-6)
    assert gaussian_epsilon(2.0 / math.sqrt(40), 1, 1e-5) == pytest.approx(gaussian_epsilon(2.0, 40, 1e-5), rel=1e-12)


def test_analytic_gaussian_epsilon_is_dp_accountings_float_for_float():
    # The accountant's own search on scipy.special.log_ndtr: the same float as dp_accounting.get_epsilon_gaussian
    # (not merely close), over a log grid of multipliers and deltas and the edges, its errors included.
    import dp_accounting

    def outcome(fn, sigma, delta):
        try:
            value = fn(sigma, delta)
        except (ValueError, RuntimeError) as e:
            return type(e).__name__, str(e)
        return type(value).__name__, repr(value)

    sigmas = [10 ** (k / 7) for k in range(-21, 22)] + [0.0, 1e-300, 1e300, math.inf, -1.0, 0.011180339887498949]
    deltas = [10 ** (-k / 2) for k in range(1, 25)] + [0.0, 1.0, 0.5, 1e-300, -0.1, 1.5]
    for sigma, delta in itertools.product(sigmas, deltas):
        with np.errstate(all="ignore"):  # both divide by zero at the edges alike
            assert outcome(analytic_gaussian_epsilon, sigma, delta) == outcome(
                dp_accounting.get_epsilon_gaussian, sigma, delta
            ), (sigma, delta)


def test_gaussian_epsilon_is_kept_per_process_in_a_bounded_cache():
    gaussian_epsilon.cache_clear()
    first = gaussian_epsilon(0.7, 12, 1e-5)
    assert gaussian_epsilon(0.7, 12, 1e-5) == first
    info = gaussian_epsilon.cache_info()
    assert (info.hits, info.misses, info.maxsize) == (1, 1, 4096)
    for m in range(1, 4200):
        gaussian_epsilon(0.7, m, 1e-5)
    assert gaussian_epsilon.cache_info().currsize == 4096


def test_theorem_c1_closed_form_by_hand_and_inverts_its_delta_form():
    M, sigma, tau, n, delta = 25, 0.7, 3.0, 40, 1e-3
    rho = M * tau**2 / (2 * sigma**2 * n**2)
    eps = theorem_c1_epsilon(M, sigma, tau, n, delta)
    assert eps == pytest.approx(2 * math.sqrt(rho * math.log(1000.0)) + rho, rel=1e-12)
    # Theorem C.1's first form: delta = exp(-rho (eps / (2 rho) - 1/2)^2) for eps >= rho.
    assert math.exp(-rho * (eps / (2 * rho) - 0.5) ** 2) == pytest.approx(delta, rel=1e-9)


def test_epsilons_monotone_in_noise_and_releases():
    zs = [0.3, 0.5, 1.0, 2.0, 5.0]
    for M in (1, 10, 80):
        eps = [gaussian_epsilon(z, M, 1e-3) for z in zs]
        assert all(a > b for a, b in itertools.pairwise(eps))
    for z in (0.5, 1.0, 4.0):
        eps = [gaussian_epsilon(z, M, 1e-3) for M in (1, 2, 5, 20, 100)]
        assert all(a < b for a, b in itertools.pairwise(eps))
        r = [rdp_epsilon(z, M, 1e-3) for M in (1, 5, 100)]
        assert all(a < b for a, b in itertools.pairwise(r))
    assert gaussian_epsilon(1.0, 0, 1e-3) == 0.0


def test_sound_bound_never_below_paper_sensitivity_and_closed_form_never_below_exact():
    for M in (1, 7, 80):
        for sigma in (0.1, 0.8, 3.0):
            for tau in (0.5, 10.0):
                for n in (1, 45, 500):
                    e = output_epsilons(M, sigma, tau, n, 1e-3, cross_check=("rdp",))
                    assert e["sound"] >= e["paper_sensitivity"]
                    assert e["paper_formula"] >= e["paper_sensitivity"] - 1e-9
                    assert e["sound_rdp"] >= e["sound"] - 1e-9


def test_sound_sensitivity_is_twice_tau():
    e = output_epsilons(40, sigma=2.0, tau=1.0, n_train=100, delta=1e-5)
    assert e["sound"] == pytest.approx(gaussian_epsilon(1.0, 40, 1e-5), rel=1e-12)  # z = 2 / (2 * 1)
    assert e["paper_sensitivity"] == pytest.approx(gaussian_epsilon(200.0, 40, 1e-5), rel=1e-12)  # z = 2 * 100 / 1


def test_pld_guard_skips_intractable_grids_instantly():
    assert not pld_tractable(0.05, 1)
    assert pld_epsilon(0.05, 1, 1e-3) is None
    assert pld_tractable(1.0, 40)


def test_bad_parameters_give_named_errors():
    with pytest.raises(PrivacyParameterError, match="sigma"):
        theorem_c1_epsilon(10, -1.0, 1.0, 10, 1e-3)
    with pytest.raises(PrivacyParameterError, match="tau"):
        output_epsilons(10, 1.0, 0.0, 10, 1e-3)
    for delta in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(PrivacyParameterError, match="delta"):
            gaussian_epsilon(1.0, 10, delta)
    with pytest.raises(PrivacyParameterError, match="releases"):
        gaussian_epsilon(1.0, -1, 1e-3)
    with pytest.raises(PrivacyParameterError, match="alpha"):
        theorem_c2_epsilon(3, 0.0, 50, 0.1, 1.0, 0.25)
    assert issubclass(PrivacyParameterError, cfgmod.ConfigError)


# ----------------------------------------------------------------------------- objective perturbation


def test_theorem_c2_epsilon_hand_values():
    # 3 releases: 3 * (2*10*1*0.1 + 2.8*0.25) / (50*0.1) = 3 * 2.7 / 5
    assert theorem_c2_epsilon(3, alpha=10.0, n_train=50, mu=0.1, u1=1.0, u2=0.25) == pytest.approx(1.62, rel=1e-12)
    assert theorem_c2_epsilon(0, 10.0, 50, 0.1, 1.0, 0.25) == 0.0
    assert theorem_c2_epsilon(2, 20.0, 200, 1.0, 1.0, 0.25) == pytest.approx(2 * (40 + 0.7) / 200, rel=1e-12)
    assert theorem_c2_condition(5, 0.1, 0.25) and not theorem_c2_condition(4, 0.1, 0.25)


def test_objective_report_uses_mi_terms_and_states_assumptions(tiny_data):
    cfg = make_cfg(
        tiny_data,
        **{"privacy.mechanism": "objective", "privacy.alpha": 10.0, "privacy.sigma": None, "privacy.tau": None},
    )
    rep = report_for(cfg)
    assert rep["delta"] == 0.0 and rep["assumptions"]["holds"] and rep["assumptions"]["glm"]
    assert (rep["assumptions"]["u1"], rep["assumptions"]["u2"]) == (1.0, 0.25)
    assert rep["assumptions"]["max_feature_norm"] <= 1 + 1e-6
    assert SGD_CAVEAT in rep["notes"]
    for d in rep["devices"]:
        assert d["releases"] == 4  # 8 iterations, odd ones: 1, 3, 5, 7
        assert d["theorem_c2"] == pytest.approx(4 * (2 * 10 * 0.1 + 2.8 * 0.25) / (d["n_train"] * 0.1))
        assert d["theorem_c2_paper_sum"] == pytest.approx(d["theorem_c2"] * 5 / 4)
    assert rep["epsilon_bar"]["theorem_c2"] == pytest.approx(
        sum(d["theorem_c2"] for d in rep["devices"]) / len(rep["devices"])
    )
    json.dumps(rep, allow_nan=False)


def test_objective_refuses_when_condition_fails_unless_allowed(tiny_data):
    ds = load_leaf(tiny_data)
    sizes = sorted(len(ds.train_y[u]) for u in ds.train_users)
    # u2 <= 0.5 |D| mu  <=>  |D| >= 0.5 / mu: fail on the smaller half of the devices only.
    mu = 0.5 / (sizes[len(sizes) // 2] - 0.5)
    over = {
        "privacy.mechanism": "objective",
        "privacy.alpha": 10.0,
        "privacy.sigma": None,
        "privacy.tau": None,
        "algorithm.mu": mu,
    }
    with pytest.raises(NoGuaranteeError, match="allow_no_guarantee"):
        report_for(make_cfg(tiny_data, **over))
    rep = report_for(make_cfg(tiny_data, **over, **{"privacy.allow_no_guarantee": True}))
    failing = [d for d in rep["devices"] if d["n_train"] < 0.5 / mu]
    assert failing and len(failing) < len(rep["devices"])
    assert all(d["theorem_c2"] is None and d["status"] == NO_GUARANTEE for d in failing)
    assert all(d["theorem_c2"] > 0 for d in rep["devices"] if d not in failing)
    assert rep["epsilon_bar"]["theorem_c2"] is None and rep["guarantee"] == NO_GUARANTEE
    json.dumps(rep, allow_nan=False)


def test_objective_refuses_unscaled_features(tiny_data):
    over = {
        "privacy.mechanism": "objective",
        "privacy.alpha": 10.0,
        "privacy.sigma": None,
        "privacy.tau": None,
        "data.feature_scaling": "none",
    }
    with pytest.raises(NoGuaranteeError, match="norm"):
        report_for(make_cfg(tiny_data, **over))


def test_objective_on_a_non_glm_reports_no_guarantee(tiny_data):
    cfg = make_cfg(
        tiny_data,
        **{
            "privacy.mechanism": "objective",
            "privacy.alpha": 10.0,
            "privacy.sigma": None,
            "privacy.tau": None,
            "model.name": "logreg",
        },
    )
    rep = report_for(cfg)
    assert rep["guarantee"] == NO_GLM
    assert all(d["status"] == NO_GLM and d["theorem_c2"] is None for d in rep["devices"])


# ----------------------------------------------------------------------------- release counts


def recorded_participation(cfg, monkeypatch, tmp_path):
    """Run the real engine and record (training round, device) of every local solve it draws batches for (with an
    empty draw cache, so that every plan is drawn: a batch seed is derived only for a plan not kept)."""
    seen = []
    monkeypatch.setattr(simulation, "DRAW_CACHE", DrawCache())
    real = simulation.derive_seeds

    def spy(seed, stream, keys):
        if stream == "batches":
            seen.extend(tuple(key) for key in keys)
        return real(seed, stream, keys)

    monkeypatch.setattr(simulation, "derive_seeds", spy)
    summary = simulation.run(cfg, tmp_path / "run", log=lambda s: None)
    monkeypatch.setattr(simulation, "derive_seeds", real)
    return seen, summary


@pytest.mark.parametrize("algorithm,policy", [("upcycled", "drop"), ("upcycled", "partial"), ("fedprox", "drop")])
def test_release_counts_match_a_real_runs_draws(tiny_data, tmp_path, monkeypatch, algorithm, policy):
    over = {
        "rounds": 9,
        "devices.frac": 0.5,
        "devices.straggler": 0.5,
        "devices.straggler_policy": policy,
        "solver.epochs": 2,
        "algorithm.name": algorithm,
        "checkpoint.every": 0,
        "seed": 11,
    }
    if algorithm != "upcycled":
        over["algorithm.lam"] = None
    cfg = make_cfg(tiny_data, **over)
    n = len(load_leaf(tiny_data).train_users)
    seen, summary = recorded_participation(cfg, monkeypatch, tmp_path)
    brute = [0] * n
    by_round: dict[int, list[int]] = {}
    for k, i in seen:
        brute[i] += 1
        by_round.setdefault(k, []).append(i)
    counts = release_counts(cfg, n)
    assert counts == brute
    K = training_rounds(cfg)
    assert K == (5 if algorithm == "upcycled" else 9) == summary["training_rounds"]
    assert [sorted(c) for c in participation(cfg, n)] == [sorted(by_round.get(k, [])) for k in range(1, K + 1)]
    devices = sum(int(r["devices"]) for r in metrics_rows(tmp_path / "run"))
    assert sum(counts) == devices
    if policy == "partial":  # partial stragglers still train and release
        assert all(len(c) == 3 for c in participation(cfg, n))


def test_release_counts_full_participation_and_lemma_5_1(tiny_data):
    n = 6
    for T in (1, 2, 7, 8, 160):
        up = make_cfg(tiny_data, rounds=T)
        assert release_counts(up, n) == [(T + 1) // 2] * n
        prox = make_cfg(tiny_data, rounds=T, **{"algorithm.name": "fedprox", "algorithm.lam": None})
        assert release_counts(prox, n) == [T] * n
    # epsilon after 2M iterations equals epsilon after 2M - 1 (the even iteration releases nothing)
    for M in (1, 4, 40):
        a = report_for(make_cfg(tiny_data, rounds=2 * M))
        b = report_for(make_cfg(tiny_data, rounds=2 * M - 1))
        assert a["devices"] == b["devices"] and a["epsilon_bar"] == b["epsilon_bar"]


def test_release_counts_drop_policy_brute_force_over_the_engine_draws(tiny_data):
    cfg = make_cfg(
        tiny_data,
        rounds=30,
        **{
            "devices.frac": 0.4,
            "devices.straggler": 0.3,
            "devices.straggler_policy": "drop",
            "solver.epochs": 3,
            "seed": 4,
        },
    )
    n = 30
    expected = [0] * n
    for t in range(1, 31, 2):
        k = (t + 1) // 2
        flags, _ = draws.draw_stragglers(4, k, n, 0.3, 3)
        for i in draws.sample_clients(4, k, n, 0.4):
            expected[i] += not flags[i]
    assert release_counts(cfg, n) == expected
    assert 0 < sum(expected) < 15 * 12


# ----------------------------------------------------------------------------- report and CLI


def test_output_report_per_device_sigma_and_epsilon_bar(tiny_data):
    ds = load_leaf(tiny_data)
    sizes = [len(ds.train_y[u]) for u in ds.train_users]
    sigmas = [0.5 + 0.1 * i for i in range(len(sizes))]
    cfg = make_cfg(tiny_data, **{"privacy.sigma": sigmas, "privacy.tau": 1.0, "privacy.delta": 1e-5})
    rep = report_for(cfg)
    assert [d["sigma"] for d in rep["devices"]] == sigmas
    for d, n, s in zip(rep["devices"], sizes, sigmas, strict=True):
        assert d["n_train"] == n and d["releases"] == 4
        assert d["sound"] == pytest.approx(gaussian_epsilon(s / 2.0, 4, 1e-5), rel=1e-12)
        assert d["paper_sensitivity"] == pytest.approx(gaussian_epsilon(s * n, 4, 1e-5), rel=1e-12)
        assert d["paper_formula"] == pytest.approx(theorem_c1_epsilon(4, s, 1.0, n, 1e-5), rel=1e-12)
        assert d["sound_rdp"] >= d["sound"]
    for k in ("sound", "paper_formula", "paper_sensitivity"):
        assert rep["epsilon_bar"][k] == pytest.approx(sum(d[k] for d in rep["devices"]) / len(sizes))
    json.dumps(rep, allow_nan=False)
    with pytest.raises(PrivacyParameterError, match="privacy.sigma"):
        report_for(make_cfg(tiny_data, **{"privacy.sigma": sigmas[:-1]}))


def test_non_private_report(tiny_data):
    rep = report_for(make_cfg(tiny_data, **{"privacy.mechanism": "none", "privacy.sigma": None, "privacy.tau": None}))
    assert rep["devices"] == [] and rep["guarantee"].startswith("none")


def test_cli_prints_table_and_writes_json(tiny_data, tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(make_doc(tiny_data)))
    out = tmp_path / "eps.json"
    assert main(["privacy", "--config", str(path), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    rep = json.loads(out.read_text())
    assert rep == json.loads(json.dumps(report_for(make_cfg(tiny_data))))
    assert "epsilon-bar" in text and "eps paper C.1" in text and "eps sound (2tau)" in text
    for d in rep["devices"]:
        assert d["device"] in text
    assert (
        main(
            [
                "privacy",
                "--config",
                str(path),
                "--set",
                "privacy.mechanism=objective",
                "--set",
                "privacy.alpha=20",
                "--set",
                "privacy.sigma=null",
                "--set",
                "privacy.tau=null",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "Theorem C.2" in text and "exact minimiser" in text and "(epsilon, 0)-DP" in text


def test_cli_refusal_is_a_named_error_exit(tiny_data, tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(
        yaml.safe_dump(
            make_doc(
                tiny_data,
                **{
                    "privacy.mechanism": "objective",
                    "privacy.alpha": 10.0,
                    "privacy.sigma": None,
                    "privacy.tau": None,
                    "algorithm.mu": 1e-4,
                },
            )
        )
    )
    assert main(["privacy", "--config", str(path)]) == 2
    assert "allow_no_guarantee" in capsys.readouterr().err
    assert main(["privacy", "--config", str(path), "--set", "privacy.allow_no_guarantee=true"]) == 0
    assert "NO GUARANTEE" in capsys.readouterr().out
