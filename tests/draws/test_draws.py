"""Round draws (upfl.draws.rounds): the straggler switches ``devices.straggler_draw`` (bernoulli, exact) and the
per-algorithm straggler policy, and the count of training rounds before an iteration."""

import json

import pytest

from fixtures_runs import metrics_rows
from upfl import config as cfgmod
from upfl.data import generate_synthetic
from upfl.draws import rounds as draws
from upfl.draws.rounds import training_rounds_before
from upfl.engine.simulation import run
from upfl.names import algorithm_names, is_training_iteration
from upfl.pipeline.plan import ExperimentError, build_plan

ALGORITHMS = {
    "fedavg": {"name": "fedavg"},
    "fedprox": {"name": "fedprox", "mu": 1.0},
    "upcycled": {"name": "upcycled", "mu": 1.0, "lam": 0.43},
}


def cfg_for(algorithm: str, **devices) -> cfgmod.RunConfig:
    doc = {
        "data": {"path": "unused"},
        "seed": 7,
        "rounds": 40,
        "algorithm": dict(ALGORITHMS[algorithm]),
        "devices": {"frac": 0.3, "straggler": 0.9, **devices},
        "solver": {"epochs": 20},
    }
    return cfgmod.from_dict(doc)


@pytest.mark.parametrize(
    "num_devices,frac,prob,expected",
    [(30, 0.3, 0.9, 8), (30, 0.3, 0.3, 3), (10, 0.5, 0.5, 3), (50, 0.2, 0.25, 3), (30, 1.0, 0.0, 0), (30, 0.3, 1.0, 9)],
)
def test_exact_draw_gives_round_kp_stragglers_in_every_round(num_devices, frac, prob, expected):
    cfg = cfg_for("fedprox", frac=frac, straggler=prob, straggler_draw="exact")
    assert draws.exact_straggler_count(len(draws.sample_clients(7, 1, num_devices, frac)), prob) == expected
    for k in range(1, 301):
        chosen, flags, epochs = draws.round_stragglers(cfg, k, num_devices)
        stragglers = [i for i in chosen if flags[i]]
        assert len(stragglers) == expected
        assert not any(flags[i] for i in range(num_devices) if i not in chosen)
        assert all(1 <= epochs[i] <= 19 for i in stragglers)
        assert all(epochs[i] == 20 for i in chosen if i not in stragglers)


def test_bernoulli_draw_is_the_authors_independent_coin():
    """9 sampled devices at p = 0.9: about 0.9^9 = 39% of rounds without a device that runs all E epochs."""
    cfg = cfg_for("fedprox")
    counts = [
        sum(flags[i] for i in chosen)
        for chosen, flags, _ in (draws.round_stragglers(cfg, k, 30) for k in range(1, 3001))
    ]
    assert len(set(counts)) > 3
    assert abs(sum(c == 9 for c in counts) / len(counts) - 0.9**9) < 0.04
    assert abs(sum(counts) / len(counts) - 8.1) < 0.1


@pytest.mark.parametrize("draw", ["bernoulli", "exact"])
def test_same_seed_same_draws_across_algorithms(draw):
    per_alg = {}
    for alg in ALGORITHMS:
        cfg = cfg_for(alg, straggler_draw=draw)
        per_alg[alg] = [draws.round_stragglers(cfg, k, 30) for k in range(1, 41)]
    assert per_alg["fedavg"] == per_alg["fedprox"] == per_alg["upcycled"]
    other_seed = cfgmod.from_dict({**cfgmod.to_dict(cfg_for("fedprox", straggler_draw=draw)), "seed": 8})
    assert [draws.round_stragglers(other_seed, k, 30) for k in range(1, 41)] != per_alg["fedprox"]


def test_exact_and_bernoulli_share_the_sampled_devices_and_the_stragglers_epochs():
    a, b = cfg_for("fedprox"), cfg_for("fedprox", straggler_draw="exact")
    for k in range(1, 21):
        ca, fa, ea = draws.round_stragglers(a, k, 30)
        cb, fb, eb = draws.round_stragglers(b, k, 30)
        assert ca == cb
        assert all(ea[i] == eb[i] for i in ca if fa[i] and fb[i])


def test_per_algorithm_policy_fedavg_drops_fedprox_keeps_partial_work():
    policy = {"fedavg": "drop", "default": "partial"}
    avg, prox = cfg_for("fedavg", straggler_policy=policy), cfg_for("fedprox", straggler_policy=policy)
    assert (avg.devices.straggler_policy, prox.devices.straggler_policy) == ("drop", "partial")
    for k in range(1, 21):
        chosen, flags, _ = draws.round_stragglers(prox, k, 30)
        assert draws.round_participants(prox, k, 30)[0] == chosen
        assert draws.round_participants(avg, k, 30)[0] == [i for i in chosen if not flags[i]]


@pytest.mark.parametrize(
    "devices,message",
    [
        ({"straggler_draw": "coin"}, r"devices.straggler_draw: must be one of bernoulli, exact; got 'coin'"),
        ({"straggler_policy": "keep"}, r"devices.straggler_policy: must be one of partial, drop or a mapping"),
        ({"straggler_policy": {"fedavg": "drop"}}, r"no entry for 'fedprox' and no 'default'"),
        (
            {"straggler_policy": {"fedprx": "drop", "default": "partial"}},
            r"devices.straggler_policy.fedprx: not an algorithm",
        ),
        ({"straggler_policy": {"default": "half"}}, r"devices.straggler_policy.default: must be one of partial, drop"),
    ],
)
def test_bad_straggler_settings_are_named_errors(devices, message):
    with pytest.raises(cfgmod.ConfigError, match=message):
        cfg_for("fedprox", **devices)


def test_summary_records_the_switches_and_the_draws_replay_the_run(tmp_path):
    data = str(generate_synthetic("synthetic_1_1", tmp_path / "d", data_seed=1, num_devices=10))
    rows = {}
    for alg, rounds in (("fedprox", 6), ("upcycled", 12)):
        doc = {
            "data": {"path": data},
            "rounds": rounds,
            "algorithm": ALGORITHMS[alg],
            "seed": 3,
            "devices": {"frac": 0.5, "straggler": 0.5, "straggler_draw": "exact", "straggler_policy": "drop"},
            "solver": {"epochs": 3},
            "checkpoint": {"every": 0},
        }
        summary = run(cfgmod.from_dict(doc), tmp_path / alg, log=lambda m: None)
        saved = json.loads((tmp_path / alg / "summary.json").read_text())
        assert saved["config"]["devices"]["straggler_draw"] == "exact"
        assert saved["config"]["devices"]["straggler_policy"] == "drop"
        assert saved["stragglers"] == summary["stragglers"]
        assert saved["stragglers"]["draw"] == "exact" and saved["stragglers"]["training_rounds"] == 6
        assert (
            saved["stragglers"]["stragglers_per_round_min"]
            == saved["stragglers"]["stragglers_per_round_max"]
            == draws.exact_straggler_count(5, 0.5)
            == 3
        )
        rows[alg] = [int(r["devices"]) for r in metrics_rows(tmp_path / alg) if r["kind"] == "train"]
    assert rows["fedprox"] == rows["upcycled"] == [5 - 3] * 6


def test_workflow_resolves_a_per_algorithm_policy_and_names_non_default_switches():
    config = {
        "seeds": [0],
        "run_defaults": {"devices": {"frac": 0.3, "straggler_policy": {"fedavg": "drop", "default": "partial"}}},
        "datasets": {"s": {"source": "synthetic", "setting": "synthetic_1_1"}},
        "experiments": {
            "e": {
                "set": {"devices.straggler": 0.9},
                "groups": [
                    {
                        "datasets": ["s"],
                        "runs": [
                            {"algorithm": "fedavg", "rounds": 4},
                            {"algorithm": "fedprox", "rounds": 4, "mu": 1},
                            {
                                "algorithm": "fedprox",
                                "rounds": 4,
                                "mu": 1,
                                "set": {"devices.straggler_draw": "exact", "devices.straggler_policy": "drop"},
                            },
                        ],
                    }
                ],
            }
        },
    }
    plan = build_plan(config)
    ids = sorted(plan.runs)
    assert ids == [
        "s/logreg/fedavg/mu0/s0.9_f0.3_drop/T4/seed0",
        "s/logreg/fedprox/mu1/s0.9_f0.3/T4/seed0",
        "s/logreg/fedprox/mu1/s0.9_f0.3_exact_drop/T4/seed0",
    ]
    assert plan.runs[ids[1]].doc["devices"]["straggler_policy"] == "partial"
    config["run_defaults"]["devices"]["straggler_policy"] = {"fedavg": "drop"}
    with pytest.raises(ExperimentError, match=r"experiments.e.groups\[0\].runs\[1\]: .*no entry for 'fedprox'"):
        build_plan(config)


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_training_rounds_before_counts_the_training_iterations(algorithm):
    for t in range(0, 41):
        assert training_rounds_before(algorithm, t) == sum(is_training_iteration(algorithm, s) for s in range(1, t + 1))
