"""The Snakemake workflow: lint, schema errors, the full grid's job count, a tiny end-to-end run, resume after SIGINT."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from upfl.experiments import ExperimentError, build_plan, fmt_number, run_id

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
pytestmark = pytest.mark.workflow


def workflow_copy(tmp_path: Path) -> Path:
    """A copy of the workflow (Snakefile, rules, config, profiles) in a temp folder."""
    wd = tmp_path / "wf"
    wd.mkdir()
    shutil.copy(ROOT / "Snakefile", wd)
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(ROOT / folder, wd / folder)
    return wd


def snakemake(wd: Path, *args: str, timeout: int = 600, check: bool = True,
              profile: bool = False) -> subprocess.CompletedProcess:
    """Run Snakemake in `wd`; without `profile` the workflow's default profile is switched off."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    profile_args = [] if profile else ["--workflow-profile", "none"]
    proc = subprocess.run(SNAKEMAKE + profile_args + list(args), cwd=wd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def job_counts(output: str) -> dict[str, int]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Job stats:"))
    counts = {}
    for line in lines[start + 3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def expected_training_runs(config: dict) -> int:
    """Distinct runs of the config (data set, model, algorithm, mu, lam, step, other settings, iterations, seed)."""
    preset = config.get("preset", "full")
    preset_seeds = False
    if preset != "full":
        preset_seeds = "seeds" in config["presets"][preset]
        config = {**config, **config["presets"][preset]}
    scale = config.get("round_scale", 1)
    excluded = set(config.get("exclude_sources", []))
    runs = set()
    skipped = set(config.get("exclude_experiments", []))
    for name, exp in config["experiments"].items():
        if name in skipped:
            continue
        settings = dict(exp.get("set", {}))
        seeds = config["seeds"] if preset_seeds else exp.get("seeds", config["seeds"])  # a preset's seeds win
        for group in exp["groups"]:
            for entry in group["runs"]:
                lists = [entry[k] for k in ("mu", "lam", "step") if isinstance(entry.get(k), list)]
                n = len(lists[0]) if lists else 1
                own = {**settings, **entry.get("set", {})}
                model = entry.get("model", own.pop("model.name", "logreg"))
                for i in range(n):
                    pick = {k: (entry[k][i] if isinstance(entry.get(k), list) else entry.get(k))
                            for k in ("mu", "lam", "step")}
                    for ds in group["datasets"]:
                        if config["datasets"][ds]["source"] in excluded:
                            continue
                        for seed in seeds:
                            runs.add((ds, model, entry["algorithm"], pick["mu"], pick["lam"], pick["step"],
                                      entry.get("schedule", "const"), tuple(sorted(own.items())),
                                      max(1, round(entry["rounds"] * scale)), seed))
    return len(runs)


NO_SOFTWARE_ENV_LINT = "Specify a conda environment or container for each rule."
"""The one lint we accept: the workflow deploys with `pip install -e .` (README), not with `--sdm conda` or
containers, which no test here could exercise (no conda, no container runtime on these machines)."""


def test_lint_is_clean(tmp_path):
    proc = snakemake(workflow_copy(tmp_path), "--lint", check=False)
    text = proc.stdout + proc.stderr
    lints = [line.strip()[2:].rstrip(":") for line in text.splitlines() if line.startswith("    * ")]
    assert "Congratulations" in text or lints, text[-3000:]
    assert set(lints) <= {NO_SOFTWARE_ENV_LINT}, text[-3000:]


@pytest.mark.parametrize("preset", ["full", "quick"])
def test_dry_run_lists_every_run_of_the_paper(tmp_path, preset):
    wd = workflow_copy(tmp_path)
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["preset"] = preset
    start = time.perf_counter()
    proc = snakemake(wd, "-n", "--config", f"preset={preset}")
    assert time.perf_counter() - start < 60
    counts = job_counts(proc.stdout)
    assert counts["train"] == expected_training_runs(config)
    skipped = set(config["presets"].get(preset, {}).get("exclude_experiments", []))
    used = {ds for name, exp in config["experiments"].items() if name not in skipped
            for group in exp["groups"] for ds in group["datasets"]}
    sources = [d["source"] for name, d in config["datasets"].items() if name in used]
    assert counts["synthetic_dataset"] == sources.count("synthetic")
    assert counts.get("leaf_dataset", 0) == (0 if preset == "quick" else 2)
    assert counts.get("fetch_archive", 0) == (0 if preset == "quick" else 4)
    # Synthetic: Figures 2 (two panels), 3 (two panels), 5, 8, 9, 11, the privacy trade-off; the privacy tables
    # of output and objective perturbation; with real data also Figures 4, 6, 7, 10, 12 (two panels) and the
    # real-data privacy table. One runs.csv per experiment: table1, fig2 (two), fig5, fig8, the three
    # synthetic privacy experiments; real data: fig4, fig6, fig7, fig10, fig12. Issue 10's ablations: the momentum
    # curves and the schedule figure, the momentum and bases tables, three more runs.csv.
    # Claims: the straggler sensitivity table, the claims page; the draws table and figure (not in quick).
    real = preset == "full"
    assert counts["figure"] == (17 if real else 11)
    assert counts["accuracy_table"] == 1 and counts["time_table"] == 1
    assert counts["privacy_table"] == (3 if real else 2)
    assert counts["ablation_table"] == 2
    assert counts["sensitivity_table"] == 1 and counts["claims"] == 1
    assert counts.get("draws_report", 0) == (1 if real else 0)
    assert counts["experiment_runs"] == (18 if real else 12)


def test_single_target_builds_only_what_it_needs(tmp_path):
    proc = snakemake(workflow_copy(tmp_path), "-n", "fig2")
    counts = job_counts(proc.stdout)
    # Figure 2 left: 3 algorithms on Synthetic(0.5,0.5) and on Femnist; right: 5 steps (FedProx shared); 3 seeds
    assert counts["train"] == 3 * 3 + 3 * 3 + 5 * 3
    assert counts["synthetic_dataset"] == 1 and "accuracy_table" not in counts


def _with(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_schema_rejects_a_misspelled_key_and_negative_mu(tmp_path):
    wd = workflow_copy(tmp_path)
    base = (ROOT / "config" / "config.yaml").read_text()
    bad = wd / "config" / "config.yaml"
    bad.write_text(_with(base, "run_defaults:", "run_defualts:"))
    proc = snakemake(wd, "-n", check=False)
    assert proc.returncode != 0 and "run_defualts" in proc.stdout + proc.stderr
    bad.write_text(_with(base, "mu: [0.1, 0.3, 0.5, 1]}", "mu: [-0.1, 0.3, 0.5, 1]}"))
    proc = snakemake(wd, "-n", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "'mu'" in text and "-0.1" in text


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
                                                "upcycling_bases"}
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


TINY = """\
preset: full
seeds: [0, 1]
run_defaults:
  device: cpu
  solver: {epochs: 2, batch_size: 32, lr: 0.05, momentum: 0.5}
  devices: {frac: 0.3}
  evaluation: {every: 1}
  checkpoint: {every: 1}
datasets:
  synthetic_iid: {source: synthetic}
  synthetic_1_1: {source: synthetic}
experiments:
  table1:
    set: {devices.straggler: 0.9}
    groups:
      - datasets: [synthetic_iid, synthetic_1_1]
        runs:
          - {algorithm: fedavg, rounds: ROUNDS}
          - {algorithm: fedprox, rounds: ROUNDS, mu: 1}
          - {algorithm: upcycled, rounds: UPROUNDS, mu: 1, lam: 0.43}
    outputs:
      - {kind: table1, name: table1}
      - {kind: time, name: time}
      - {kind: convergence, name: fig_tiny}
"""


def tiny_workflow(tmp_path: Path, rounds: int) -> Path:
    wd = workflow_copy(tmp_path)
    text = TINY.replace("UPROUNDS", str(2 * rounds)).replace("ROUNDS", str(rounds))
    (wd / "config" / "config.yaml").write_text(text)
    return wd


def test_tiny_preset_end_to_end_then_nothing_to_do(tmp_path):
    wd = tiny_workflow(tmp_path, rounds=3)
    snakemake(wd, "--cores", "2")
    for name in ("tables/table1.md", "tables/table2.md", "tables/time.md", "figures/fig_tiny.png", "runs.csv"):
        assert (wd / "results" / name).stat().st_size > 0, name
    assert (wd / "results" / "figures" / "fig_tiny.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (wd / "results" / "tables" / "table1.md").read_text()
    assert "Synthetic" in table or "synthetic" in table
    again = snakemake(wd, "--cores", "2", "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
    # `--report` reports what exists: a figure that was never built (a single target, another preset) is left out.
    for f in (wd / "results" / "figures").glob("fig_tiny.*"):
        f.unlink()
    snakemake(wd, "--report", "results/report.html")
    report = (wd / "results" / "report.html").read_text(encoding="utf-8")
    assert "table1.csv" in report and "fig_tiny.png" not in report


def test_sigint_in_the_middle_then_restart_finishes_cleanly(tmp_path):
    wd = tiny_workflow(tmp_path, rounds=400)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # A shell without job control starts background commands with SIGINT ignored, and an ignored signal
    # is inherited: restore the default so snakemake sees Ctrl-C as in a terminal, however pytest was started.
    proc = subprocess.Popen(SNAKEMAKE + ["--workflow-profile", "none", "--cores", "2"], cwd=wd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    runs = wd / "results" / "runs"
    deadline = time.time() + 300
    while time.time() < deadline and not list(runs.rglob("summary.json")):
        time.sleep(0.2)
    assert list(runs.rglob("summary.json")), "no run finished in time"
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out.decode(errors="replace")[-4000:]
    done_before = {p.parent for p in runs.rglob("summary.json")}
    total = 12
    assert len(done_before) < total, "the workflow finished before it could be interrupted"
    for summary in runs.rglob("summary.json"):
        assert (summary.parent / "metrics.csv").exists()
    # The restart a user types: the default profile (profiles/default, rerun-incomplete) reruns the
    # jobs the interrupt left incomplete.
    snakemake(wd, "--cores", "2", profile=True)
    done = [p.parent for p in runs.rglob("summary.json")]
    assert len(done) == total
    for d in done:
        rows = (d / "metrics.csv").read_text().splitlines()
        assert len(rows) == 1 + 1 + int(d.parent.name[1:]), d
    assert not list((wd / "results").rglob("*.tmp*"))
    again = snakemake(wd, "--cores", "2", "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
    # `--report` reports what exists: a figure that was never built (a single target, another preset) is left out.
    for f in (wd / "results" / "figures").glob("fig_tiny.*"):
        f.unlink()
    snakemake(wd, "--report", "results/report.html")
    report = (wd / "results" / "report.html").read_text(encoding="utf-8")
    assert "table1.csv" in report and "fig_tiny.png" not in report
