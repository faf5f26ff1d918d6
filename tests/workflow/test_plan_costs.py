"""The plan says what it will cost before it starts: a dry run prints one line per part (runs, training jobs,
core-hours on this machine's measured rounds) while the workflow is parsed, before Snakemake builds its DAG."""

import os

import pytest
import yaml

from fixtures_workflow import snakemake, workflow_copy
from upfl.measured import save_machine_costs
from upfl.pipeline import costs
from upfl.pipeline.bundles import form_bundles
from upfl.pipeline.plan import build_plan

pytestmark = pytest.mark.workflow

CONFIG = """\
preset: full
seeds: [0, 1]
run_defaults:
  device: cpu
  solver: {epochs: 2, batch_size: 32, lr: 0.05, momentum: 0.5}
  devices: {frac: 0.3}
job_defaults: {runs_per_job: 3}
datasets:
  synthetic_iid: {source: synthetic}
experiments:
  first:
    set: {devices.straggler: 0.9}
    groups:
      - datasets: [synthetic_iid]
        runs:
          - {algorithm: fedprox, rounds: 30, mu: [0.5, 1]}
          - {algorithm: upcycled, rounds: 60, mu: 1, lam: 0.43}
"""


def test_a_dry_run_prints_the_plans_cost_per_part(tmp_path):
    wd = workflow_copy(tmp_path)
    (wd / "config" / "config.yaml").write_text(CONFIG)
    save_machine_costs(costs.machine_cache_path(), {"logreg": {"train_cpu_s": 40.0, "eval_cpu_s": 1.0}})
    plan = build_plan(yaml.safe_load(CONFIG))
    bundles = form_bundles(plan.runs)
    measured = {"logreg": {"train_cpu_s": 40.0, "eval_cpu_s": 1.0}}
    seconds = sum(costs.run_core_seconds(r.doc, measured) for r in plan.runs.values())
    assert os.environ["UPFL_ROUND_COSTS"] == str(costs.machine_cache_path())  # the snakemake process reads it too
    proc = snakemake(wd, "-n", "--cores", "2")
    err = proc.stderr
    line = (
        f"plan synthetic: {len(plan.runs)} runs in {len(bundles)} training jobs, about {costs.hours_text(seconds)} "
        "core-hours on this CPU"
    )
    assert line in err.splitlines()
    assert "plan costs: per-round costs measured on this machine" in err
    assert "FEMNIST" not in err and "Sent140" not in err  # a part without runs has no line
