"""Looking changes nothing, and a change of a run setting reruns exactly its runs, whatever the clocks say.

A config with a preset (as config/config.yaml with config/quick.yaml) shares experiment names between the full
config and the preset: a dry run, a single target's dry run or a report of one config must not change what the
other considers up to date. Outputs stamped two days into the future (clock skew, rsync from another host) must
not hide a changed setting.
"""

import json
import os
import time
from pathlib import Path

import pytest

from fixtures_workflow import assert_nothing_to_be_done, job_counts, snakemake, workflow_copy

pytestmark = pytest.mark.workflow

MIXED = """\
preset: full
seeds: [0, 1]
run_defaults:
  device: cpu
  solver: {epochs: 1, batch_size: 32, lr: 0.05}
  devices: {frac: 0.5}
  evaluation: {every: 1}
job_defaults: {runs_per_job: 4}
datasets:
  synthetic_iid: {source: synthetic}
  synthetic_1_1: {source: synthetic}
experiments:
  table1:
    groups:
      - datasets: [synthetic_iid, synthetic_1_1]
        runs:
          - {algorithm: fedavg, rounds: 4}
          - {algorithm: upcycled, rounds: 8, mu: 1, lam: 0.43}
    outputs:
      - {kind: table1, name: table1}
      - {kind: convergence, name: fig_small}
presets:
  small:
    seeds: [0]
    round_scale: 0.5
"""


def mixed_workflow(tmp_path: Path) -> Path:
    wd = workflow_copy(tmp_path)
    (wd / "config" / "config.yaml").write_text(MIXED)
    (wd / "config" / "small.yaml").write_text("preset: small\n")
    return wd


def results_state(wd: Path) -> dict[str, tuple[int, int]]:
    """Every file under results/ (but the report) with its modification time and size."""
    return {
        str(p.relative_to(wd)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in (wd / "results").rglob("*")
        if p.is_file() and p.name != "report.html"
    }


def nothing_to_do(proc) -> bool:
    return "Nothing to be done" in proc.stdout + proc.stderr


@pytest.mark.parametrize("built, looked", [("small", "full"), ("full", "small")])
def test_looking_at_one_config_changes_nothing_another_considers_up_to_date(tmp_path, built, looked):
    wd = mixed_workflow(tmp_path)
    build_args = ["--configfile", "config/small.yaml"] if built == "small" else []
    look_args = ["--configfile", "config/small.yaml"] if looked == "small" else []
    snakemake(wd, "--cores", "2", *build_args)
    before = results_state(wd)
    plan = snakemake(wd, "-n", *look_args)  # the other config: everything of it is still to be done
    assert not nothing_to_do(plan) and job_counts(plan.stdout)
    snakemake(wd, "-n", "fig_small", *look_args)
    snakemake(wd, "--report", "results/report.html", *look_args)
    assert results_state(wd) == before, "a dry run or a report wrote under results/"
    again = snakemake(wd, "-n", *build_args)
    assert nothing_to_do(again), again.stdout[-3000:]
    # The report made by the other config describes what exists: the built preset and its runs.
    report = (wd / "results" / "report.html").read_text(encoding="utf-8")
    runs = sum(1 for line in (wd / "results" / "runs.csv").read_text().splitlines()[1:] if line)
    assert runs == (4 if built == "small" else 8)
    assert f"{runs} runs there now" in report and "config preset" in report
    assert f"preset ``{built}``" in report or "preset <code" in report or built in report


def test_a_changed_setting_reruns_its_runs_whatever_the_modification_times(tmp_path):
    wd = mixed_workflow(tmp_path)
    snakemake(wd, "--cores", "2", "--configfile", "config/small.yaml")
    summaries = sorted((wd / "results" / "runs").rglob("summary.json"))
    assert len(summaries) == 4
    before = {p: json.loads(p.read_text()) for p in summaries}
    # Clock skew: every output two days in the future, then lr 0.05 -> 0.5 in config.yaml.
    future = time.time() + 2 * 86400
    for p in (wd / "results").rglob("*"):
        os.utime(p, (future, future))
    config = wd / "config" / "config.yaml"
    config.write_text(config.read_text().replace("lr: 0.05", "lr: 0.5"))
    dry = snakemake(wd, "-n", "--configfile", "config/small.yaml")
    assert not nothing_to_do(dry), "a changed lr was hidden by the outputs' future modification times"
    assert any(name.startswith("train_bundle_") for name in job_counts(dry.stdout))
    snakemake(wd, "--cores", "2", "--configfile", "config/small.yaml")
    for p in summaries:
        after = json.loads(p.read_text())
        assert after["config"]["solver"]["lr"] == 0.5 and before[p]["config"]["solver"]["lr"] == 0.05
        assert after["config_hash"] != before[p]["config_hash"]
    table = (wd / "results" / "runs.csv").read_text()
    assert ",0.5," in table and ",0.05," not in table
    again = snakemake(wd, "-n", "--configfile", "config/small.yaml")
    assert nothing_to_do(again), again.stdout[-3000:]


def test_an_edited_run_is_restored_before_any_table_reads_it(tmp_path):
    wd = mixed_workflow(tmp_path)
    args = ("--configfile", "config/small.yaml")
    snakemake(wd, "--cores", "2", *args)
    victim = sorted((wd / "results" / "runs").rglob("summary.json"))[0]
    trained = victim.read_bytes()
    summary = json.loads(trained)
    summary["final"]["test_acc"] = 0.999  # valid JSON, other numbers
    victim.write_text(json.dumps(summary, indent=2))
    snakemake(wd, "--cores", "2", *args)
    assert victim.read_bytes() == trained
    log = "".join(p.read_text() for p in (wd / "results" / "logs" / "report").rglob("*.log"))
    assert f"{victim.parent.relative_to(wd)}: restored from the store" in log
    assert "0.999" not in (wd / "results" / "runs.csv").read_text()
    assert nothing_to_do(snakemake(wd, "-n", *args))


def test_choosing_the_preset_by_its_file_or_by_config_plans_the_same_nothing(tmp_path):
    """The two documented ways of choosing a preset (`--configfile config/small.yaml`, `--config preset=small`) plan
    the same jobs: after a build with one, the other has nothing to do (the report jobs' params name no config
    file, and no path of the clone)."""
    wd = mixed_workflow(tmp_path)
    snakemake(wd, "--cores", "2", "--configfile", "config/small.yaml")
    plan = snakemake(wd, "-n", "--config", "preset=small")
    assert_nothing_to_be_done(plan)
    snakemake(wd, "--report", "results/report.html", "--config", "preset=small")
    report = (wd / "results" / "report.html").read_text(encoding="utf-8")
    assert str(wd) not in report and str(wd.resolve()) not in report
    # The provenance lines still name the config files of the build that made them, relative to the workflow folder.
    table = (wd / "results" / "tables" / "table1.md").read_text(encoding="utf-8")
    assert "config config/config.yaml (sha256 " in table and "config config/small.yaml (sha256 " in table, table
