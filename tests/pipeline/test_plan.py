"""The workflow's plan (upfl.pipeline.plan), built in Python without Snakemake: run ids, shared runs, named errors."""

from pathlib import Path

import pytest
import yaml

from upfl.pipeline.plan import ExperimentError, build_plan, fmt_number, resolve_preset, run_id, tree_copy

ROOT = Path(__file__).resolve().parents[2]


def test_run_config_errors_name_the_experiment_and_key():
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["experiments"]["table1"]["set"] = {"devices.stragler": 0.9}
    with pytest.raises(ExperimentError, match=r"experiments\.table1\.groups\[0\]\.runs\[0\].*devices\.stragler"):
        build_plan(config)


def test_run_paths_are_readable_and_shared_runs_are_one():
    plan = build_plan(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    rid = "synthetic_1_1/logreg/upcycled/mu1_lam0.43/s0.9_f0.3/T160/seed0"
    assert rid in plan.runs
    assert set(plan.runs[rid].experiments) == {
        "table1",
        "fig5",
        "straggler_sensitivity",
        "ablation_momentum",
        "upcycling_bases",
        "protocol_gap",
        "sensitivity",
    }
    exact = rid.replace("s0.9_f0.3", "s0.9_f0.3_exact_drop")
    assert plan.runs[exact].experiments == ["straggler_sensitivity"]
    assert plan.runs[exact].doc["devices"]["straggler_draw"] == "exact"
    draw = "synthetic_1_1_draw3/logreg/upcycled/mu1_lam0.43/s0.9_f0.3/T160/seed2"
    assert plan.runs[draw].experiments == ["table1_draws"]
    assert fmt_number(1e-5) == "1e-05" and fmt_number(1.0) == "1" and fmt_number(0.43) == "0.43"
    doc = {
        "algorithm": {"name": "upcycled", "mu": 0.5, "step": 0.7},
        "model": {"name": "logreg"},
        "devices": {"straggler": 0.9, "frac": 0.3},
        "rounds": 40,
        "privacy": {"mechanism": "output", "sigma": 0.8, "tau": 10},
    }
    assert (
        run_id("synthetic_0_0", doc, 1)
        == "synthetic_0_0/logreg/upcycled/mu0.5_step0.7/output_sigma0.8_tau10/s0.9_f0.3/T40/seed1"
    )


def _vary_config(vary, protocol="paper"):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["experiments"] = {
        "grid": {
            "seeds": [0],
            "set": {"devices.straggler": 0.9},
            "groups": [
                {
                    "datasets": ["synthetic_1_1"],
                    "protocol": protocol,
                    "vary": vary,
                    "runs": [
                        {"algorithm": "fedprox", "rounds": 80, "mu": 1},
                        {"algorithm": "upcycled", "rounds": 160, "mu": 1, "lam": 0.43},
                    ],
                }
            ],
        }
    }
    return config


def test_vary_adds_settings_one_knob_at_a_time_and_crossed_sharing_fedprox_runs():
    plan = build_plan(
        _vary_config(
            [
                {"solver.lr": [0.005, 0.1]},
                {"step": [0.5, 0.9]},
                {"round_scale": 0.5},
                {"solver.lr": 0.005, "step": [0.9, 1.0], "solver.epochs": 10},
                {"mu": 0.1, "lam": 0.04},
            ]
        )
    )
    ids = set(plan.experiments["grid"])
    fedprox = {r.split("/fedprox/")[1].rsplit("/seed", 1)[0] for r in ids if "/fedprox/" in r}
    upcycled = {r.split("/upcycled/")[1].rsplit("/seed", 1)[0] for r in ids if "/upcycled/" in r}
    # the step settings train Upcycled-FL only (FedProx has no coefficient: one run serves them all)
    assert fedprox == {
        "mu1/s0.9_f0.3/T80",
        "mu1_lr0.005/s0.9_f0.3/T80",
        "mu1_lr0.1/s0.9_f0.3/T80",
        "mu1/s0.9_f0.3/T40",
        "mu1_lr0.005_E10/s0.9_f0.3/T80",
        "mu0.1/s0.9_f0.3/T80",
    }
    assert upcycled == {
        "mu1_lam0.43/s0.9_f0.3/T160",
        "mu1_lam0.43_lr0.005/s0.9_f0.3/T160",
        "mu1_lam0.43_lr0.1/s0.9_f0.3/T160",
        "mu1_step0.5/s0.9_f0.3/T160",
        "mu1_step0.9/s0.9_f0.3/T160",
        "mu1_lam0.43/s0.9_f0.3/T80",
        "mu1_step0.9_lr0.005_E10/s0.9_f0.3/T160",
        "mu1_step1_lr0.005_E10/s0.9_f0.3/T160",
        "mu0.1_lam0.04/s0.9_f0.3/T160",
    }
    run = plan.runs["synthetic_1_1/logreg/upcycled/mu1_step1_lr0.005_E10/s0.9_f0.3/T160/seed0"]
    assert (
        run.doc["solver"]["lr"] == 0.005 and run.doc["solver"]["epochs"] == 10 and run.doc["algorithm"]["step"] == 1.0
    )
    assert "lam" not in run.doc["algorithm"]


def test_vary_under_the_authors_protocol_keeps_an_explicit_step_and_replaces_lam():
    plan = build_plan(_vary_config([{"step": 0.9}, {"mu": 0.3, "lam": 0.12}], protocol="authors"))
    ids = {r.rsplit("/seed", 1)[0] for r in plan.experiments["grid"]}
    assert {
        "synthetic_1_1/logreg_softmax_before_loss/upcycled/mu1_step0.7/s0.9_f0.3/T160",
        "synthetic_1_1/logreg_softmax_before_loss/upcycled/mu1_step0.9/s0.9_f0.3/T160",
        "synthetic_1_1/logreg_softmax_before_loss/upcycled/mu0.3_step0.7/s0.9_f0.3/T160",
    } <= ids


@pytest.mark.parametrize(
    "vary, message",
    [
        ([{"solver.lr": 0.01, "lr": 2}], r"groups\[0\]\.vary\[0\]\.lr: unknown key"),
        ([{"lam": 0.1, "step": 0.5}], r"vary\[0\]: lam and step both set"),
        ([{}], r"vary\[0\]: a setting is a non-empty mapping"),
        ([{"solver.lr": -1}], r"experiments\.grid\.groups\[0\]\.runs\[0\].*solver\.lr"),
    ],
)
def test_a_bad_vary_setting_is_named(vary, message):
    with pytest.raises(ExperimentError, match=message):
        build_plan(_vary_config(vary))


def test_solver_values_name_the_run_only_where_they_differ_from_run_defaults():
    doc = {
        "algorithm": {"name": "fedprox", "mu": 1},
        "model": {"name": "logreg"},
        "rounds": 80,
        "devices": {"straggler": 0.9, "frac": 0.3},
        "solver": {"lr": 0.05, "epochs": 10, "batch_size": 16},
    }
    defaults = {"lr": 0.05, "epochs": 20, "batch_size": 32, "momentum": 0.5}
    assert run_id("d", doc, 0, defaults) == "d/logreg/fedprox/mu1_E10_B16/s0.9_f0.3/T80/seed0"
    assert run_id("d", doc, 0) == "d/logreg/fedprox/mu1/s0.9_f0.3/T80/seed0"


def test_tree_copy_is_a_deep_copy_of_config_data():
    doc = {"a": [1, {"b": [2.5, None, "x"]}], "c": {"d": True}}
    copied = tree_copy(doc)
    assert copied == doc
    copied["a"][1]["b"].append(3)
    copied["c"]["d"] = False
    assert doc == {"a": [1, {"b": [2.5, None, "x"]}], "c": {"d": True}}


def test_the_config_check_fills_the_schemas_defaults_as_snakemakes_validate_does():
    """The workflow checks its config in one pass (upfl.pipeline.config_errors.check_workflow_config), which also
    fills the schema's defaults; Snakemake's snakemake.utils.validate filled them in a second pass."""
    import copy

    from snakemake.utils import validate

    from upfl.pipeline.config_errors import check_workflow_config

    schema = str(ROOT / "workflow" / "schemas" / "config.schema.yaml")
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for key in ("preset", "seeds", "round_scale", "job_defaults", "run_defaults", "resources_dir"):
        config.pop(key, None)
    ours, snakemakes = copy.deepcopy(config), copy.deepcopy(config)
    check_workflow_config(ours, schema)
    validate(snakemakes, schema=schema)
    assert ours == snakemakes and ours != config
    assert ours["preset"] == "full" and ours["resources_dir"] == "resources"
    config["round_scale"] = 2
    with pytest.raises(ExperimentError, match=r"^round_scale: value 2 is not allowed; allowed: numbers <= 1$"):
        check_workflow_config(config, schema)


def test_names_regex_matches_exactly_the_names_whatever_their_prefixes():
    import random
    import re

    from upfl.pipeline.plan import names_regex

    rng = random.Random(0)
    names = {"a", "ab", "abc", "b.c", "x/y", "x/yz", "x/yzq", "x/ya", "(", "a+b"}
    names |= {f"synthetic_{rng.choice('ab')}/mu{rng.randint(0, 99)}/seed{rng.randint(0, 9)}" for _ in range(500)}
    rx = re.compile(names_regex(names))
    assert all(rx.fullmatch(n) for n in names)
    others = (
        {n + "x" for n in names} | {n[:-1] for n in names} | {"", "x/", "ac", "b-c", "a+bb", "synthetic_c/mu1/seed1"}
    )
    assert not [o for o in others - names if rx.fullmatch(o)]
    assert names_regex([]) == "^$" and re.fullmatch(names_regex(["only"]), "only")


def test_the_gain_grid_reads_its_best_settings_again_on_held_out_seeds_that_the_quick_preset_leaves_out():
    """The sensitivity grid's output references experiment sensitivity_held_out, whose runs are on seeds 10-19 (none
    of the grid's seeds 0-9) and include each data set's in-sample best under the authors' protocol; the quick
    preset plans neither."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    plan = build_plan(config)
    assert plan.outputs["sensitivity"]["reference"] == "sensitivity_held_out"
    held = [plan.runs[r] for r in plan.experiments["sensitivity_held_out"]]
    grid = [plan.runs[r] for r in plan.experiments["sensitivity"]]
    assert {r.doc["seed"] for r in held} == set(range(10, 20)) and {r.doc["seed"] for r in grid} == set(range(10))
    best = "synthetic_1_1/logreg_softmax_before_loss/upcycled/mu1_step1_lr0.0025_E10/s0.9_f0.3/T160/seed"
    assert f"{best}0" in plan.experiments["sensitivity"] and f"{best}10" in plan.experiments["sensitivity_held_out"]
    quick = build_plan(resolve_preset({**config, "preset": "quick"}))
    assert not {"sensitivity", "sensitivity_held_out"} & set(quick.experiments)
