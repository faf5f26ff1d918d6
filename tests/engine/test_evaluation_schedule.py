"""Evaluation at the iterations the outputs read (``evaluation.last``): tables are unchanged, figures keep curves.

Runs are made twice, evaluating every iteration and only the last ones; what a table reads (the final metrics, the
runs table's ``final_*``, the straggler-sensitivity table) must be the same bytes, and the rows not evaluated hold
empty metrics. The workflow's plan gives a run that a figure and a table share every iteration.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from upfl import config as cfgmod
from upfl.cli import main
from upfl.data import generate_synthetic
from upfl.engine.simulation import is_evaluated, run
from upfl.pipeline.plan import build_plan, shared_run_doc
from upfl.report.sensitivity import write_sensitivity

ROOT = Path(__file__).resolve().parents[2]
METRICS = ["train_loss", "train_acc", "test_loss", "test_acc"]
ROUNDS, LAST = 9, 3


def cfg_for(data: Path, alg: str, seed: int, last: int | None) -> cfgmod.RunConfig:
    algorithm = {"name": alg, "mu": 1.0, **({"lam": 0.43} if alg == "upcycled" else {})}
    return cfgmod.from_dict(
        {
            "data": {"path": str(data)},
            "rounds": ROUNDS,
            "seed": seed,
            "threads": 1,
            "algorithm": algorithm,
            "devices": {"frac": 0.5, "straggler": 0.5},
            "solver": {"epochs": 2},
            "evaluation": {"last": last},
            "checkpoint": {"every": 0},
        }
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """FedProx and Upcycled-FL, 2 seeds, each evaluated at every iteration and at the last 3; a runs table each."""
    root = tmp_path_factory.mktemp("schedule")
    data = generate_synthetic("synthetic_1_1", root / "synthetic_1_1", data_seed=0, num_devices=6)
    out: dict = {"root": root}
    for schedule, last in (("all", None), ("last", LAST)):
        specs = []
        for alg in ("fedprox", "upcycled"):
            for seed in (0, 1):
                folder = root / schedule / f"{alg}_s{seed}"
                run(cfg_for(data, alg, seed, last), folder, log=lambda m: None)
                out[schedule, alg, seed] = folder
                specs.append(f"sens:{folder}")
        csv = root / schedule / "runs.csv"
        assert main(["report", "runs", "--out", str(csv), *specs]) == 0
        out[schedule] = pd.read_csv(csv)
    return out


def test_is_evaluated_follows_every_and_last():
    full = cfgmod.EvaluationConfig()
    assert [t for t in range(1, 10) if is_evaluated(full, t, 9)] == list(range(1, 10))
    assert [t for t in range(1, 10) if is_evaluated(cfgmod.EvaluationConfig(last=3), t, 9)] == [7, 8, 9]
    assert [t for t in range(1, 10) if is_evaluated(cfgmod.EvaluationConfig(every=2, last=5), t, 9)] == [6, 8, 9]
    assert [t for t in range(1, 4) if is_evaluated(cfgmod.EvaluationConfig(last=10), t, 3)] == [1, 2, 3]


def test_rows_outside_the_last_iterations_are_present_with_empty_metrics(runs):
    for alg in ("fedprox", "upcycled"):
        m = pd.read_csv(runs["last", alg, 0] / "metrics.csv")
        assert m["iteration"].tolist() == list(range(ROUNDS + 1)), "one row per iteration, as before"
        skipped = m[(m["iteration"] > 0) & (m["iteration"] <= ROUNDS - LAST)]
        assert skipped[METRICS].isna().all().all()
        kept = m[(m["iteration"] == 0) | (m["iteration"] > ROUNDS - LAST)]
        assert kept[["test_loss", "test_acc"]].notna().all().all()


def test_evaluated_rows_and_final_metrics_are_the_same_bytes(runs):
    for alg in ("fedprox", "upcycled"):
        for seed in (0, 1):
            full = pd.read_csv(runs["all", alg, seed] / "metrics.csv", dtype=str)
            last = pd.read_csv(runs["last", alg, seed] / "metrics.csv", dtype=str)
            evaluated = last["test_acc"].notna()
            columns = [c for c in full.columns if c not in ("wall_s", "cum_wall_s")]
            assert full.loc[evaluated, columns].equals(last.loc[evaluated, columns])
            finals = [json.loads((runs[s, alg, seed] / "summary.json").read_text())["final"] for s in ("all", "last")]
            assert finals[0] == finals[1]


def test_the_tables_read_the_same_numbers(runs):
    full, last = runs["all"], runs["last"]
    for column in [f"final_{k}" for k in METRICS] + ["final_iteration"]:
        assert np.array_equal(full[column].to_numpy(), last[column].to_numpy()), column
    written = {}
    for schedule in ("all", "last"):
        prefix = runs["root"] / schedule / "sensitivity"
        write_sensitivity(runs[schedule], str(prefix), "provenance")
        written[schedule] = (Path(f"{prefix}.csv").read_bytes(), Path(f"{prefix}.md").read_bytes())
    assert written["all"] == written["last"]


def test_last_enters_the_config_hash_only_when_set(tmp_path):
    data = tmp_path / "d"
    hashes = [cfgmod.config_hash(cfg_for(data, "fedprox", 0, last)) for last in (None, 10, 3)]
    assert len(set(hashes)) == 3
    doc = cfgmod.hashed_document(cfg_for(data, "fedprox", 0, None))
    assert "last" not in doc["evaluation"], "runs made before the key keep their hash"


@pytest.mark.parametrize("value", [0, -2, 1.5, "final"])
def test_bad_last_names_the_key(tmp_path, value):
    with pytest.raises(cfgmod.ConfigError, match=r"evaluation\.last"):
        cfgmod.from_dict({"data": {"path": str(tmp_path)}, "evaluation": {"last": value}})


def test_a_run_shared_with_a_figure_evaluates_every_iteration():
    a = {"rounds": 8, "evaluation": {"every": 1}}
    b = copy.deepcopy(a)
    b["evaluation"]["last"] = 10
    c = copy.deepcopy(a)
    c["evaluation"]["last"] = 20
    assert shared_run_doc(a, b) is a and shared_run_doc(b, a) is a
    assert shared_run_doc(b, c) is c and shared_run_doc(b, b) is b
    assert shared_run_doc(a, {**a, "rounds": 9}) is None
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    plan = build_plan(config)
    shared = plan.runs["synthetic_1_1/logreg/upcycled/mu1_lam0.43/s0.9_f0.3/T160/seed0"]
    assert "straggler_sensitivity" in shared.experiments and "fig5" in shared.experiments
    assert "last" not in shared.doc["evaluation"]
    draw = plan.runs["synthetic_1_1_draw3/logreg/upcycled/mu1_lam0.43/s0.9_f0.3/T160/seed2"]
    assert draw.doc["evaluation"]["last"] == 10
