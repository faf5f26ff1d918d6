"""What a plan will cost (upfl.pipeline.costs): the per-part lines the workflow prints before its DAG, the per-round
costs they read (this machine's cache, else the source tree's benchmark files) and the estimate of one run."""

import json

import pytest

from upfl.measured import save_machine_costs
from upfl.pipeline import costs
from upfl.pipeline.bundles import form_bundles
from upfl.pipeline.plan import build_plan

CONFIG = {
    "seeds": [0, 1],
    "run_defaults": {"solver": {"epochs": 20}, "devices": {"frac": 0.3}, "evaluation": {"every": 1}},
    "job_defaults": {"runs_per_job": 1},
    "datasets": {
        "synthetic_1_1": {"source": "paper"},
        "sent140": {"source": "sent140"},
    },
    "experiments": {
        "mixed": {
            "groups": [
                {
                    "datasets": ["synthetic_1_1"],
                    "runs": [{"algorithm": "fedprox", "rounds": 10, "mu": 1}],
                },
                {
                    "datasets": ["sent140"],
                    "job": {"runs_per_job": 4, "threads": 2},
                    "runs": [
                        {"algorithm": "fedavg", "rounds": 150, "model": "lstm"},
                        {"algorithm": "upcycled_fedavg", "rounds": 300, "model": "lstm", "step": 0.7},
                    ],
                },
            ],
            "outputs": [],
        }
    },
}

COSTS = {"logreg": {"train_cpu_s": 0.5, "eval_cpu_s": 0.1}, "lstm": {"train_cpu_s": 60.0, "eval_cpu_s": 5.0}}


def test_a_run_costs_its_training_rounds_and_its_evaluations():
    doc = {"algorithm": {"name": "fedprox"}, "rounds": 10, "model": {"name": "logreg"}}
    assert costs.run_core_seconds(doc, COSTS) == pytest.approx(10 * 0.5 + 11 * 0.1)
    # Upcycled-FL trains every other iteration; twice the devices and half the epochs cost the same per round.
    up = {**doc, "algorithm": {"name": "upcycled"}, "rounds": 20, "devices": {"frac": 0.6}, "solver": {"epochs": 10}}
    assert costs.run_core_seconds(up, COSTS) == pytest.approx(10 * 0.5 + 21 * 0.1)
    last = {**doc, "evaluation": {"every": 1, "last": 3}}
    assert costs.run_core_seconds(last, COSTS) == pytest.approx(10 * 0.5 + 4 * 0.1)
    assert costs.run_core_seconds({**doc, "model": {"name": "cnn"}}, COSTS) is None


def test_the_plan_lines_give_runs_jobs_hours_and_advise_a_gpu_for_a_long_part():
    plan = build_plan(CONFIG)
    bundles = form_bundles(plan.runs)
    single = [r for r in plan.runs if not any(r in b.run_ids for b in bundles.values())]
    jobs = [b.run_ids for b in bundles.values()] + [[r] for r in single]
    lines = costs.plan_cost_lines(plan.runs, jobs, CONFIG["datasets"], COSTS, "measured here")
    assert len(lines) == 3 and lines[-1] == "plan costs: measured here"
    synthetic, sent140 = lines[0], lines[1]
    synthetic_s = 2 * (10 * 0.5 + 11 * 0.1)
    assert (
        synthetic
        == f"plan synthetic: 2 runs in 2 training jobs, about {costs.hours_text(synthetic_s)} core-hours on this CPU"
    )
    assert "GPU" not in synthetic
    lstm_s = 2 * ((150 * 60 + 151 * 5) + (150 * 60 + 301 * 5))
    hours = costs.hours_text(lstm_s)
    assert sent140.startswith(f"plan Sent140: 4 runs in 1 training job, about {hours} core-hours on this CPU; a GPU")
    assert "profiles/" in sent140 and "device" in sent140


def test_a_model_never_measured_is_named_not_counted_as_free():
    plan = build_plan(CONFIG)
    lines = costs.plan_cost_lines(plan.runs, [[r] for r in plan.runs], CONFIG["datasets"], {}, "none")
    assert "the runs of model lstm, whose rounds were never measured" in lines[1]


def test_this_machines_cache_is_preferred_and_another_machines_ignored(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "real_data.json").write_text(
        json.dumps(
            {
                "round_paper_sized": {
                    "scale": 1.0,
                    "floor": {"cpu_model": "Some CPU", "isa": "AVX2 + FMA"},
                    "lstm": {"loop": {"train_cpu_s": 50.0, "eval_cpu_s": 4.0}, "vmap": {"train_cpu_s": 90.0}},
                }
            }
        )
    )
    (bench / "engine.json").write_text(
        json.dumps({"numba": {"fedprox80": {"per_training_round_s": 0.001, "per_evaluation_s": 0.0002}}})
    )
    cache = tmp_path / "cache" / "round_costs.json"
    assert costs.round_costs(cache, tmp_path / "nothing") == ({}, costs.round_costs(cache, tmp_path / "none")[1])
    assert costs.round_costs(cache, tmp_path / "nothing")[1].startswith("no measured round found")
    found, source = costs.round_costs(cache, bench)
    assert found == {
        "lstm": {"train_cpu_s": 50.0, "eval_cpu_s": 4.0},
        "logreg": {"train_cpu_s": 0.001, "eval_cpu_s": 0.0002},
    }
    assert "measured on an Some CPU (AVX2 + FMA), committed in benchmarks/results/" in source
    save_machine_costs(cache, {"lstm": {"train_cpu_s": 20.0, "eval_cpu_s": 2.0}})
    save_machine_costs(cache, {"mlp": {"train_cpu_s": 1.0, "eval_cpu_s": 0.1}})  # kept beside the lstm's
    found, source = costs.round_costs(cache, bench)
    assert found["lstm"]["train_cpu_s"] == 20.0 and found["mlp"]["train_cpu_s"] == 1.0
    assert found["logreg"]["train_cpu_s"] == 0.001 and source.startswith("per-round costs measured on this machine")
    other = json.loads(cache.read_text())
    other["machine"]["cpu_model"] = "another CPU"
    cache.write_text(json.dumps(other))
    assert costs.round_costs(cache, bench)[0]["lstm"]["train_cpu_s"] == 50.0
    cache.write_text("{not json")
    assert costs.round_costs(cache, bench)[0]["lstm"]["train_cpu_s"] == 50.0


def test_the_cache_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("UPFL_ROUND_COSTS", str(tmp_path / "c.json"))  # as tests/conftest.py does for every test
    assert costs.machine_cache_path() == tmp_path / "c.json"
    monkeypatch.delenv("UPFL_ROUND_COSTS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert costs.machine_cache_path() == tmp_path / "upfl" / "round_costs.json"


def test_hours_are_rounded_for_people():
    assert [costs.hours_text(h * 3600) for h in (0.0034, 0.34, 2.34, 11.3)] == ["0.00", "0.3", "2.3", "11"]
