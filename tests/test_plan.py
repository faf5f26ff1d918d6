"""The workflow's plan (upfl.pipeline.plan), built in Python without Snakemake: run ids, shared runs, named errors."""

from pathlib import Path

import pytest
import yaml

from upfl.pipeline.plan import ExperimentError, build_plan, fmt_number, run_id

ROOT = Path(__file__).resolve().parents[1]


def test_run_config_errors_name_the_experiment_and_key():
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["experiments"]["table1"]["set"] = {"devices.stragler": 0.9}
    with pytest.raises(ExperimentError, match=r"experiments\.table1\.groups\[0\]\.runs\[0\].*devices\.stragler"):
        build_plan(config)


def test_run_paths_are_readable_and_shared_runs_are_one():
    plan = build_plan(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    rid = "synthetic_1_1/logreg/upcycled/mu1_lam0.43/s0.9_f0.3/T160/seed0"
    assert rid in plan.runs
    assert set(plan.runs[rid].experiments) == {"table1", "fig5", "straggler_sensitivity", "ablation_momentum",
                                                "upcycling_bases", "protocol_gap", "sensitivity"}
    exact = rid.replace("s0.9_f0.3", "s0.9_f0.3_exact_drop")
    assert plan.runs[exact].experiments == ["straggler_sensitivity"]
    assert plan.runs[exact].doc["devices"]["straggler_draw"] == "exact"
    draw = "synthetic_1_1_draw3/logreg/upcycled/mu1_lam0.43/s0.9_f0.3/T160/seed2"
    assert plan.runs[draw].experiments == ["table1_draws"]
    assert fmt_number(1e-5) == "1e-05" and fmt_number(1.0) == "1" and fmt_number(0.43) == "0.43"
    doc = {"algorithm": {"name": "upcycled", "mu": 0.5, "step": 0.7}, "model": {"name": "logreg"},
           "devices": {"straggler": 0.9, "frac": 0.3}, "rounds": 40,
           "privacy": {"mechanism": "output", "sigma": 0.8, "tau": 10}}
    assert run_id("synthetic_0_0", doc, 1) == "synthetic_0_0/logreg/upcycled/mu0.5_step0.7/output_sigma0.8_tau10/s0.9_f0.3/T40/seed1"
