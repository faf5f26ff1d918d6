"""The Snakemake workflow: lint, schema errors, the full grid's job count, a tiny end-to-end run, resume after
SIGINT."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fixtures_workflow import (
    ROOT,
    SNAKEMAKE,
    assert_nothing_to_be_done,
    expected_training_runs,
    job_counts,
    snakemake,
    trained_runs,
    workflow_copy,
)
from upfl.pipeline.bundles import form_bundles
from upfl.pipeline.plan import build_plan

pytestmark = pytest.mark.workflow


def test_lint_is_clean(tmp_path):
    """`make lint`'s workflow check (tools/workflow_lint.py) on a copy: no lint but the accepted one."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "workflow_lint.py"), str(workflow_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "workflow lint: clean" in proc.stdout, proc.stdout + proc.stderr


SCREEN = 80 * 24
"""A terminal screen of characters: no job's command line is longer."""


@pytest.mark.parametrize("preset", ["full", "quick"])
def test_no_job_prints_a_command_line_longer_than_a_screen(tmp_path, preset):
    """Long lists (runs, bundle specs) reach a job through files, not its command line."""
    proc = snakemake(workflow_copy(tmp_path), "-n", "--printshellcmds", "--config", f"preset={preset}")
    commands = [ln for ln in proc.stdout.splitlines() if ln.startswith("Shell command:")]
    assert len(commands) > 10
    longest = max(commands, key=len)
    assert len(longest) <= SCREEN, f"{len(longest)} characters: {longest[:300]}..."


@pytest.mark.parametrize("preset", ["full", "quick"])
def test_dry_run_lists_every_run_of_the_paper(tmp_path, preset):
    wd = workflow_copy(tmp_path)
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["preset"] = preset
    proc = snakemake(wd, "-n", "--config", f"preset={preset}")
    counts = job_counts(proc.stdout)
    assert trained_runs(counts, config) == expected_training_runs(config)
    bundles = form_bundles(build_plan(config).runs)
    assert counts.get("train", 0) == 0 and sum(n.startswith("train_bundle_") for n in counts) == len(bundles)
    assert counts["bundle_specs"] == 1 and not (wd / "results").exists()  # a dry run writes nothing
    # The full config trains on the paper's four released sets (16 files, 4 conversions) and generates the
    # fresh draws of table1_draws; the quick preset stays offline on the generator's draws.
    preset_cfg = config["presets"].get(preset, {}) if preset != "full" else {}
    skipped = set(preset_cfg.get("exclude_experiments", []))
    datasets = preset_cfg.get("datasets", config["datasets"])
    used = {
        ds
        for name, exp in config["experiments"].items()
        if name not in skipped
        for group in exp["groups"]
        for ds in group["datasets"]
    }
    sources = [datasets[ds]["source"] for ds in used if ds in datasets]
    # The generator's draws: one job per setting writes all its draws (rule synthetic_dataset_<setting>).
    generated = [ds for ds in used if ds in datasets and datasets[ds]["source"] == "synthetic"]
    settings = {datasets[ds].get("setting", ds) for ds in generated}
    synth_jobs = {rule: n for rule, n in counts.items() if rule.startswith("synthetic_dataset_")}
    assert synth_jobs == {f"synthetic_dataset_{s}": 1 for s in settings}
    assert counts.get("paper_dataset", 0) == sources.count("paper") == (0 if preset == "quick" else 4)
    assert counts.get("leaf_dataset", 0) == (0 if preset == "quick" else 2)
    # LEAF: by_class, sent140, glove, FEMNIST's device index (2); the paper's synthetic sets: one job per set
    assert counts.get("fetch_archive", 0) == (0 if preset == "quick" else 3 + 2)
    assert counts.get("fetch_paper_set", 0) == (0 if preset == "quick" else 4)
    # One report job per experiment (its runs table, tables and figures): table1, fig2 (two), fig5, fig8, the three
    # synthetic privacy experiments, the two ablations, the straggler sensitivity and protocol gap experiments;
    # real data: fig4, fig6, fig7, fig10, fig12; the draws, the sensitivity grid and its held-out seeds (not in
    # quick). One job writes results/runs.csv and the claims page; one Table 2.
    real = preset == "full"
    plan = build_plan(config)
    reports = {rule: n for rule, n in counts.items() if rule.startswith("report_")}
    assert reports == {f"report_{e}": 1 for e in plan.experiments} and len(reports) == (21 if real else 13)
    assert counts["all_runs"] == 1 and counts["table2"] == 1 and "claims" not in counts  # claims: all_runs writes it
    for kind in ("figure", "accuracy_table", "experiment_runs", "draws_report"):
        assert kind not in counts


DRY_RUN = (
    "import json, sys\n"
    "from snakemake.cli import main\n"
    "sys.argv = ['snakemake', '-n', '--quiet', '--workflow-profile', 'none', '--config', 'preset=' + sys.argv[1]]\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as e:\n"
    "    rc = e.code\n"
    "print('DRYRUN=' + json.dumps({'rc': rc or 0, 'planned': 'upfl.pipeline.plan' in sys.modules, "
    "'imported': [m for m in ('torch', 'numba', 'matplotlib') if m in sys.modules]}))\n"
)


@pytest.mark.parametrize("preset", ["full", "quick"])
def test_dry_run_plans_in_upfl_and_imports_no_torch_numba_or_matplotlib(tmp_path, preset):
    """``snakemake -n`` (the parse Snakemake and every cluster job repeat) plans with upfl.pipeline.plan in the
    Snakemake process and imports none of the heavy packages."""
    wd = workflow_copy(tmp_path)
    proc = subprocess.run([sys.executable, "-c", DRY_RUN, preset], cwd=wd, capture_output=True, text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DRYRUN=")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    info = json.loads(line.split("=", 1)[1])
    assert info == {"rc": 0, "planned": True, "imported": []}, proc.stderr[-3000:]


def job_priorities(output: str) -> dict[str, set[int]]:
    """Per rule, the priorities its jobs carry in a dry run's job list (Snakemake omits the default 0)."""
    priorities: dict[str, set[int]] = {}
    rule = None
    for line in output.splitlines():
        if re.match(r"(local)?rule \S+:$", line):
            rule = line.split()[1].rstrip(":")
            priorities.setdefault(rule, set())
        elif rule and line.strip().startswith("priority:"):
            priorities[rule].add(int(line.split(":")[1]))
    return priorities


def test_report_jobs_come_before_any_waiting_bundle(tmp_path):
    proc = snakemake(workflow_copy(tmp_path), "-n", "--cores", "2", "--config", "preset=quick")
    priorities = job_priorities(proc.stdout)
    bundle = set().union(*(p for rule, p in priorities.items() if rule.startswith("train_bundle_")))
    reports = ["all_runs", "table2", *(rule for rule in priorities if rule.startswith("report_"))]
    assert bundle and len(reports) > 2 and set(reports) <= set(priorities)
    for rule in reports:
        assert priorities[rule] and min(priorities[rule]) > max(bundle), rule
    # The kernels' warm-up runs with the data jobs, and the CPU bundles wait for it.
    assert min(priorities["warm_up_kernels"]) > max(bundle)
    assert re.search(r"rule train_bundle_\S+:\n    input: [^\n]*resources/kernels/numba\.json", proc.stdout)


def test_single_target_builds_only_what_it_needs(tmp_path):
    proc = snakemake(workflow_copy(tmp_path), "-n", "fig2")
    counts = job_counts(proc.stdout)
    # Figure 2 left: 3 algorithms on Synthetic(0.5,0.5) and on Femnist; right: 5 steps (FedProx shared); 3 seeds.
    # Bundles hold runs of other experiments too: at least these runs, far fewer than the paper's.
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert 3 * 3 + 3 * 3 + 5 * 3 <= trained_runs(counts, config) < expected_training_runs(config) / 3
    # A bundle may span data sets (one per first experiment and job settings): Table 1's bundle holding the
    # Synthetic(0.5,0.5) runs (200 runs per job) holds runs of all four paper sets, so all four are made; no
    # table is: only the report jobs of Figure 2's two experiments run.
    assert counts["paper_dataset"] == 4 and "report_table1" not in counts
    assert {r for r in counts if r.startswith("report_")} == {"report_fig2_convergence", "report_fig2_lambda"}
    assert counts["fetch_paper_set"] == 4, "four paper sets, each its four files in one job"
    assert counts["fetch_archive"] == 1 + 2, "by_class and FEMNIST's index"


def _with(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_schema_rejects_a_misspelled_key_and_negative_mu(tmp_path):
    wd = workflow_copy(tmp_path)
    base = (ROOT / "config" / "config.yaml").read_text()
    bad = wd / "config" / "config.yaml"
    bad.write_text(_with(base, "run_defaults:", "run_defualts:"))
    proc = snakemake(wd, "-n", check=False)
    text = proc.stdout + proc.stderr
    # The key, what is allowed and the closest known key; not the schema (Snakemake's message ran 2,000 lines).
    assert proc.returncode != 0 and "config: run_defualts: unknown key; allowed: " in text
    assert "did you mean 'run_defaults'?" in text and len(text.splitlines()) < 20 and "$schema" not in text
    bad.write_text(_with(base, "mu: [0.1, 0.3, 0.5, 1]}", "mu: [-0.1, 0.3, 0.5, 1]}"))
    proc = snakemake(wd, "-n", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and len(text.splitlines()) < 20
    assert re.search(
        r"config: experiments\.\w+\.groups\[\d+\]\.runs\[\d+\]\.mu\[0\]: value -0\.1 is not allowed; "
        r"allowed: numbers >= 0",
        text,
    )


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


def embedded_files(report: str) -> dict[str, str]:
    """The files a Snakemake report embeds (its ``results`` entries' base64 data URIs), by file name, as text."""
    import base64

    found = re.search(r"var results = (\{.*?\});\n", report, re.S)
    assert found, "report.html: no embedded results"
    out = {}
    for entry in json.loads(found.group(1)).values():
        head, _, data = entry["data_uri"].partition(";base64,")
        if head.startswith("data:text/"):
            out[entry["filename"]] = base64.b64decode(data).decode("utf-8")
    return out


def test_tiny_preset_end_to_end_then_nothing_to_do(tmp_path):
    wd = tiny_workflow(tmp_path, rounds=3)
    snakemake(wd, "--cores", "2")
    for name in ("tables/table1.md", "tables/table2.md", "tables/time.md", "figures/fig_tiny.png", "runs.csv"):
        assert (wd / "results" / name).stat().st_size > 0, name
    assert (wd / "results" / "figures" / "fig_tiny.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (wd / "results" / "tables" / "table1.md").read_text()
    assert "Synthetic" in table or "synthetic" in table
    again = snakemake(wd, "--cores", "2", "-n")
    assert_nothing_to_be_done(again)
    # Its upfl jobs were forked by the run's fork server (upfl.pipeline.forkserver), which took every one.
    served = (wd / "results" / "logs" / "fork_server.log").read_text()
    assert "declined" not in served and served.count("{'status': 0}") >= 5, served
    # The kernels' warm-up ran once before the bundles. Its record is their `ancient`, `temp` input: only its
    # existence orders them, and it is gone once they are done, so it never makes a finished bundle out of date.
    assert not (wd / "results" / "kernels" / "numba.json").exists()
    assert "numba" in (wd / "results" / "logs" / "kernels" / "warm_up.log").read_text()
    # `--report` reports what exists: a figure that was never built (a single target, another preset) is left out.
    for f in (wd / "results" / "figures").glob("fig_tiny.*"):
        f.unlink()
    snakemake(wd, "--report", "results/report.html")
    report = (wd / "results" / "report.html").read_text(encoding="utf-8")
    results = re.search(r"var results = (\{.*?\});\n", report, re.S)
    reported = {entry["filename"] for entry in json.loads(results.group(1)).values()} if results else set()
    # (the page's list of rules still names the figure: an output of table1's report job, with the tables)
    assert "table1.csv" in reported and "fig_tiny.png" not in reported
    # The tables and the claims page are inside the report as formatted HTML, each with its CSV beside it.
    pages = embedded_files(report)
    assert {"table1.html", "table1.csv", "claims.html", "claims.csv", "table2.html", "time.html"} <= set(pages)
    table1, claims = pages["table1.html"], pages["claims.html"]
    assert "<h1>Table 1: training (testing) accuracy" in table1 and "<table>" in table1 and "<th>" in table1
    assert "<table>" in claims and "<th>Verdict</th>" in claims
    assert re.search(
        r"<td><strong>(holds|does not hold|inconclusive|too few seeds \(\d+\)|not measured here)"
        r"</strong>",
        claims,
    )
    assert "Summary: " in claims and "preview, not the paper's data" in claims
    # The front page carries the claims summary and the number of planned runs.
    page = (wd / "results" / "tables" / "claims.md").read_text(encoding="utf-8")
    summary = next(ln for ln in page.splitlines() if ln.startswith("Summary: "))[len("Summary: ") :]
    assert summary.split(" (of ")[0] in report


def test_the_fork_server_changes_no_number(tmp_path, monkeypatch):
    """The tiny preset with its jobs forked by the fork server and with each job its own process: the same runs
    (every value but the clocks) and the same tables and figure data (but the provenance line's time)."""
    made = {}
    for name, switch in (("served", "1"), ("own", "0")):
        monkeypatch.setenv("UPFL_FORK_SERVER", switch)
        (tmp_path / name).mkdir()
        made[name] = tiny_workflow(tmp_path / name, rounds=3)
        snakemake(made[name], "--cores", "2")
    served, own = made["served"] / "results", made["own"] / "results"
    assert "{'status': 0}" in (served / "logs" / "fork_server.log").read_text()
    assert not (own / "logs" / "fork_server.log").exists()
    clocks = {"wall_s", "cum_wall_s"}
    runs = sorted(p.relative_to(served) for p in served.rglob("metrics.csv"))
    assert len(runs) == 12
    for rel in runs:
        a, b = (list(csv.DictReader((root / rel).open())) for root in (served, own))
        assert [{k: v for k, v in row.items() if k not in clocks} for row in a] == [
            {k: v for k, v in row.items() if k not in clocks} for row in b
        ], rel
        a, b = (json.loads((root / rel.parent / "summary.json").read_text()) for root in (served, own))
        assert {k: v for k, v in a.items() if k != "time"} == {k: v for k, v in b.items() if k != "time"}, rel
    for rel in ("tables/table1.csv", "tables/table2.csv", "figures/fig_tiny.csv"):
        a, b = (
            [ln for ln in (root / rel).read_text().splitlines() if "provenance" not in ln] for root in (served, own)
        )
        assert a == b and len(a) > 2, rel


@pytest.mark.parametrize("runs_per_job", [1, 4])
def test_sigint_in_the_middle_then_restart_finishes_cleanly(tmp_path, runs_per_job):
    """One run per job, and bundles of about 4 runs: an interrupted bundle restarts, its finished runs are
    restored (not retrained) and its interrupted run resumes from its checkpoint."""
    # A bundle trains its runs one after another: shorter runs still leave most of them unfinished.
    wd = tiny_workflow(tmp_path, rounds=400 if runs_per_job == 1 else 120)
    config = wd / "config" / "config.yaml"
    config.write_text(config.read_text() + f"job_defaults: {{runs_per_job: {runs_per_job}}}\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # A shell without job control starts background commands with SIGINT ignored, and an ignored signal
    # is inherited: restore the default so snakemake sees Ctrl-C as in a terminal, however pytest was started.
    proc = subprocess.Popen(
        SNAKEMAKE + ["--workflow-profile", "none", "--cores", "2"],
        cwd=wd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    runs = wd / "results" / "runs"
    bundle_logs = wd / "results" / "logs" / "bundles"

    def finished_one() -> bool:
        """A run finished: its summary (one run per job), or a bundle's report of it (after the store has it)."""
        if runs_per_job == 1:
            return bool(list(runs.rglob("summary.json")))
        return any("] trained " in p.read_text() for p in bundle_logs.glob("*.log"))

    deadline = time.time() + 300
    while time.time() < deadline and not finished_one():
        time.sleep(0.2)
    assert finished_one(), "no run finished in time"
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out.decode(errors="replace")[-4000:]
    done_before = {p.parent for p in runs.rglob("summary.json")}
    interrupted = list(runs.rglob(".checkpoints/*/state.npz"))
    logs_before = {p: p.read_text() for p in bundle_logs.glob("*.log")} if runs_per_job > 1 else {}
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
    if runs_per_job > 1:
        # Every run is reported once, as trained or restored; a rerun bundle restores (does not retrain) the
        # runs that had finished before the interrupt; the interrupted runs resume from their checkpoints. A run
        # has finished for its bundle when the bundle reported it, after saving it to the finished-run store: a
        # restart trusts the store, not a run folder, so a run whose files were written when the interrupt came,
        # but not yet stored, is trained again (to the same result).
        reported_before = {
            line.split()[2]
            for text in logs_before.values()
            for line in text.splitlines()
            if line.startswith("[") and line.split()[1] in ("trained", "restored")
        }
        assert reported_before and {runs / rid for rid in reported_before} <= done_before
        status = {}
        for log in bundle_logs.glob("*.log"):
            rerun = logs_before.get(log) != log.read_text()
            for line in log.read_text().splitlines():
                if line.startswith("["):
                    _, state, rid = line.split()[:3]
                    status[rid] = state
                    assert not (rerun and state == "trained" and rid in reported_before), line
        assert len(status) == total and set(status.values()) <= {"trained", "restored"}, status
        run_logs = "".join(p.read_text() for p in (wd / "results" / "logs" / "train").rglob("*.log"))
        assert ("resuming from" in run_logs) == bool(interrupted)
    again = snakemake(wd, "--cores", "2", "-n")
    assert_nothing_to_be_done(again)


BUNDLED = """\
preset: full
seeds: [0, 1]
run_defaults:
  device: cpu
  solver: {epochs: 2, batch_size: 32, lr: 0.05, momentum: 0.5}
  devices: {frac: 0.3}
  evaluation: {every: 1}
  checkpoint: {every: 1}
job_defaults: {runs_per_job: 3}
datasets:
  synthetic_iid: {source: synthetic}
experiments:
  first:
    set: {devices.straggler: 0.9}
    groups:
      - datasets: [synthetic_iid]
        runs:
          - {algorithm: fedavg, rounds: 3}
          - {algorithm: fedprox, rounds: 3, mu: [0.5, 1]}
  second:
    set: {devices.straggler: 0.5}
    groups:
      - datasets: [synthetic_iid]
        runs:
          - {algorithm: fedprox, rounds: 3, mu: 1}
          - {algorithm: upcycled, rounds: 6, mu: 1, lam: LAM}
  shared:
    set: {devices.straggler: 0.9}
    groups:
      - datasets: [synthetic_iid]
        runs:
          - {algorithm: fedavg, rounds: 3}
"""


def trained_in_logs(wd: Path) -> list[str]:
    """Run ids that `upfl run-many` reported as trained (not restored) in the bundle logs."""
    ids = []
    for log in (wd / "results" / "logs" / "bundles").glob("*.log"):
        ids += [line.split()[2] for line in log.read_text().splitlines() if line.split()[1:2] == ["trained"]]
    return ids


def test_bundled_runs_train_once_and_an_edit_retrains_only_the_changed_runs(tmp_path):
    wd = workflow_copy(tmp_path)
    config_file = wd / "config" / "config.yaml"
    config_file.write_text(BUNDLED.replace("LAM", "0.43"))
    config = yaml.safe_load(config_file.read_text())
    plan = build_plan(config)
    assert len(plan.runs) == 10 and len(plan.runs[next(r for r in plan.runs if "fedavg" in r)].experiments) == 2
    snakemake(wd, "--cores", "2")
    first = trained_in_logs(wd)
    assert sorted(first) == sorted(plan.runs)  # every run trained, the shared fedavg runs once
    for rid in plan.runs:
        assert (wd / "results" / "runs" / rid / "summary.json").exists()
        assert "final iteration" in (wd / "results" / "logs" / "train" / f"{rid}.log").read_text()
    stamps = {rid: (wd / "results" / "runs" / rid / "summary.json").stat().st_mtime_ns for rid in plan.runs}
    for log in (wd / "results" / "logs" / "bundles").glob("*.log"):
        log.unlink()

    # Edit one experiment: `second`'s Upcycled-FL lambda. Only bundles holding its new runs are scheduled.
    config_file.write_text(BUNDLED.replace("LAM", "0.21"))
    edited = build_plan(yaml.safe_load(config_file.read_text()))
    new = sorted(set(edited.runs) - set(plan.runs))
    assert len(new) == 2 and all("lam0.21" in r for r in new)
    bundles = form_bundles(edited.runs)
    dry = snakemake(wd, "--cores", "2", "-n")
    scheduled = [name[len("train_bundle_") :] for name in job_counts(dry.stdout) if name.startswith("train_bundle_")]
    assert scheduled and all(set(bundles[b].run_ids) & set(new) for b in scheduled), scheduled
    assert all(bundles[b].experiment == "second" for b in scheduled)
    snakemake(wd, "--cores", "2")
    assert sorted(trained_in_logs(wd)) == new
    for rid in plan.runs:
        if rid in edited.runs and plan.runs[rid].experiments[0] != "second":
            assert (wd / "results" / "runs" / rid / "summary.json").stat().st_mtime_ns == stamps[rid], rid
    again = snakemake(wd, "--cores", "2", "-n")
    assert_nothing_to_be_done(again)


def test_a_fresh_dry_run_asks_for_no_runs_files_only_the_bundles_benchmark_files(tmp_path):
    """Snakemake matches each file asked for against every output of its bundle listed before it: the runs tables
    and targets of a fresh tree wait for each bundle's first output, its benchmark file, never a run's files."""
    proc = snakemake(workflow_copy(tmp_path), "-n")
    inputs: dict[str, list[str]] = {}
    rule = None
    for line in proc.stdout.splitlines():
        if line.startswith(("rule ", "localrule ")):
            rule = line.split()[1].rstrip(":")
        elif rule and line.strip().startswith("input:"):
            inputs.setdefault(rule, []).extend(f.strip() for f in line.split(":", 1)[1].split(","))
    readers = [r for r in inputs if r.startswith("report_") or r == "all"]
    assert "all" in readers and len(readers) > 2
    asked = [f for r in readers for f in inputs[r]]
    assert not [f for f in asked if f.startswith("results/runs/")]
    assert all(any(f.startswith("results/benchmarks/bundles/") for f in inputs[r]) for r in readers if r != "all")


def test_a_runs_file_named_as_a_target_is_made_by_its_bundle(tmp_path):
    """A bundle declares its benchmark file, not its runs' files (the parse pays for each declared file), but a run's
    file named on the command line is declared by its bundle: `snakemake results/runs/<id>/summary.json` trains it."""
    wd = workflow_copy(tmp_path)
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    plan = build_plan({**config, "preset": "quick"})
    rid = sorted(plan.runs)[0]
    bundle = next(b for b in form_bundles(plan.runs).values() if rid in b.run_ids)
    for target in (f"results/runs/{rid}/summary.json", f"./results/runs/{rid}/metrics.csv"):
        proc = snakemake(wd, "-n", target, "--configfile", "config/quick.yaml")
        assert job_counts(proc.stdout)[f"train_bundle_{bundle.name}"] == 1
        outputs = re.search(rf"rule train_bundle_{bundle.name}:\n(?:    .*\n)*?    output: (.*)\n", proc.stdout)
        assert outputs and outputs.group(1).split(", ") == [
            f"results/benchmarks/bundles/{bundle.name}.tsv",
            os.path.normpath(target),
        ]
