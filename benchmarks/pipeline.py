"""The pipeline's wall time: the synthetic half of the paper from a clean results folder, bundled against
one run per job, measured in one go.

    python benchmarks/pipeline.py                  # quick preset and every synthetic experiment, both layouts
    python benchmarks/pipeline.py --parts quick    # the quick preset only
    python benchmarks/pipeline.py --layouts bundled --cores 2
    python benchmarks/pipeline.py --parts quick --layouts bundled --baseline TREE --repeats 2   # A/B, alternating

The synthetic part reads the paper's released data (`source: paper`, downloaded through the real code path):
`--paper-mirror DIR` (default ../shared/upstream beside the repository, when it exists) serves a mirror of the
authors' files on 127.0.0.1 for the run (`sources.paper.url`); without one the files come from GitHub.

Each (part, layout) runs `snakemake --cores N` in a fresh copy of the workflow (workflow/, config/,
profiles/; new resources/ and results/), so data generation, training, reports and Snakemake's own cost are
all in the wall time. Parts: `quick` (config/quick.yaml's preset) and `synthetic` (config/config.yaml with
the real-data sources excluded and the sensitivity grid left out (its own target, docs/experiments.md): every
other synthetic experiment of the config, found from the config, not from a
list here). Layouts: `bundled` (the config's `runs_per_job`) and `single` (every `runs_per_job` set to 1:
one `upfl run` job per run, the previous layout).

Figures per (part, layout): completed (false when `--max-seconds` stopped it), jobs, runs, wall time, time inside
runs (sum of the runs' `summary.json`
`time.total_s`), training-job time (sum of the Snakemake benchmark files of the training jobs), start-up
share (1 - time inside runs / training-job time), Snakemake's own CPU time (its main process: scheduling,
output checks; jobs not included), load average before and after, the timeline from Snakemake's log
(`timeline`: span, when the last training job started and ended, the tail of report jobs after it, busy and
idle core-seconds); for a layout stopped by
`--max-seconds`, `projected_wall_s` = wall time x planned runs / finished runs (an estimate at the rate it ran). Writes
benchmarks/results/pipeline.json (figures of parts not run this time are kept from the previous file).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from upfl.data.mirror import serve_folder  # noqa: E402
from upfl.files import git_commit, write_texts  # noqa: E402
from upfl.pipeline.doc_numbers import machine_description  # noqa: E402
from upfl.pipeline.plan import build_plan  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "pipeline.json"
REAL_SOURCES = ["femnist", "sent140", "leaf"]
OWN_TARGETS = ["sensitivity"]
"""Synthetic experiments outside the synthetic half's budget, run as their own targets (the sensitivity grid: about
5.5 minutes on 2 free cores, docs/experiments.md "Sensitivity")."""
GOALS_S = {"quick": 75.0, "synthetic": 150.0}
"""Wall-time goals on 2 cores (bundled layout): the synthetic half of the paper in 150 s, the quick preset in 75 s."""


def part_config(part: str) -> dict:
    """The workflow config of a part: the quick preset, or the full config without real data."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    if part == "quick":
        config.update(yaml.safe_load((ROOT / "config" / "quick.yaml").read_text()))
    else:
        config["preset"] = "full"
        config["exclude_sources"] = sorted(set(config.get("exclude_sources", [])) | set(REAL_SOURCES))
        config["exclude_experiments"] = sorted(set(config.get("exclude_experiments", [])) | set(OWN_TARGETS))
    return config


def one_run_per_job(config: dict) -> dict:
    """The previous layout: `runs_per_job: 1` wherever a job mapping sets it (defaults, presets, experiments,
    groups)."""
    config = copy.deepcopy(config)

    def patch(job: dict | None) -> dict:
        return {**(job or {}), "runs_per_job": 1, "runs_per_gpu": 1}

    config["job_defaults"] = patch(config.get("job_defaults"))
    for preset in config.get("presets", {}).values():
        if "job_defaults" in preset:
            preset["job_defaults"] = patch(preset["job_defaults"])
    for exp in config.get("experiments", {}).values():
        if "job" in exp:
            exp["job"] = patch(exp["job"])
        for group in exp.get("groups", []):
            if "job" in group:
                group["job"] = patch(group["job"])
    return config


def workflow_copy(dest: Path, config: dict, tree: Path = ROOT) -> Path:
    dest.mkdir(parents=True)
    if (tree / "Snakefile").exists():  # a baseline tree from before workflow/Snakefile
        shutil.copy(tree / "Snakefile", dest)
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(tree / folder, dest / folder)
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (not its children) from /proc; 0 where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def benchmark_seconds(files: list[Path], column: str = "s") -> float:
    """The sum of a column of Snakemake benchmark files (``s``: wall seconds; ``cpu_time``: CPU-seconds)."""
    total = 0.0
    for f in files:
        with open(f, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        total += sum(float(r[column]) for r in rows if r.get(column) not in (None, "", "-"))
    return total


LOG_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
TRAINING_RULES = re.compile(r"^(train|train_bundle_.*)$")


def job_timeline(log: str) -> list[dict]:
    """Each job of a Snakemake log: rule, start and end in seconds since the log's first time stamp (1 s
    resolution; end None for a job that did not finish), in start order."""
    jobs: dict[str, dict] = {}
    first = stamp = None
    rule = None
    for line in log.splitlines():
        match = LOG_STAMP.match(line)
        if match:
            stamp = time.mktime(time.strptime(match.group(1), "%a %b %d %H:%M:%S %Y"))
            first = stamp if first is None else first
            continue
        head = re.match(r"^(?:local)?rule (\S+):$", line)
        if head:
            rule = head.group(1)
        elif rule and (jobid := re.match(r"^\s+jobid: (\d+)$", line)):
            jobs[jobid.group(1)] = {"rule": rule, "start": stamp - first, "end": None}
            rule = None
        elif (done := re.match(r"^Finished jobid: (\d+)", line)) and done.group(1) in jobs:
            jobs[done.group(1)]["end"] = stamp - first
    return list(jobs.values())


def timeline_figures(jobs: list[dict], cores: int) -> dict:
    """Where the wall time goes: when the last training job started and ended, the tail after it (report jobs
    only), the jobs in that tail, the core-seconds the jobs kept busy and those left idle (cores x span - busy)."""
    finished = [j for j in jobs if j["end"] is not None]
    training = [j for j in finished if TRAINING_RULES.match(j["rule"])]
    if not finished or not training:
        return {}
    span = max(j["end"] for j in finished)
    last_training_end = max(j["end"] for j in training)
    busy = sum(j["end"] - j["start"] for j in finished)
    return {
        "span_s": span,
        "last_training_start_s": max(j["start"] for j in training),
        "last_training_end_s": last_training_end,
        "tail_s": span - last_training_end,
        "jobs_in_tail": sum(j["start"] >= last_training_end for j in finished),
        "busy_core_s": busy,
        "idle_core_s": cores * span - busy,
    }


def upfl_command(tree: Path, folder: Path) -> Path:
    """A folder holding an ``upfl`` command for ``tree``'s package, with this interpreter: its own entry point
    (``upfl.launch``, or ``upfl.cli`` in a tree from before it), whatever the installed console script imports."""
    folder.mkdir(parents=True, exist_ok=True)
    module = "upfl.launch" if (tree / "src" / "upfl" / "launch.py").exists() else "upfl.cli"
    script = folder / "upfl"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return folder


def fork_server_figures(log: Path) -> dict:
    """Whether the workflow's fork server ran (upfl.pipeline.forkserver), the CPU-seconds of its imports, and of the
    commands it forked, by sub-command (``run-many``, ``report runs``...), with how many it declined."""
    if not log.exists():
        return {"fork_server": False}
    text = log.read_text()
    imports = re.search(r"modules imported in ([0-9.]+) CPU-s", text)
    by_command: dict[str, float] = {}
    for words, cpu_s in re.findall(r"^\d+ `upfl ([^`]*)`: .*, ([0-9.]+) CPU-s$", text, re.M):
        first = words.split()[:2]
        name = " ".join(first if len(first) == 2 and re.fullmatch(r"[a-z][a-z0-9-]*", first[1]) else first[:1])
        by_command[name] = round(by_command.get(name, 0.0) + float(cpu_s), 2)
    return {
        "fork_server": True,
        "fork_server_imports_cpu_s": float(imports.group(1)) if imports else None,
        "fork_server_cpu_s_by_command": dict(sorted(by_command.items())),
        "fork_server_declined": len(re.findall(r"^declined ", text, re.M)),
    }


@contextlib.contextmanager
def serve(folder: Path | None):
    """A mirror of ``folder`` on 127.0.0.1 for the block (its base URL), or None without one."""
    if folder is None:
        yield None
        return
    with serve_folder(folder) as base:
        yield base


def numba_cache_state() -> str:
    """``warm`` when numba's cache (``NUMBA_CACHE_DIR``, else beside ``upfl/solvers/numba_backend/``) holds the
    compiled solver's training kernels, ``cold`` when the first jobs compile them (a fresh clone, an edit of the
    solver, or an empty ``NUMBA_CACHE_DIR``: ``NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/pipeline.py``
    measures a cold start without touching the tree's cache)."""
    folder = Path(
        os.environ.get("NUMBA_CACHE_DIR") or ROOT / "src" / "upfl" / "solvers" / "numba_backend" / "__pycache__"
    )
    return "warm" if folder.is_dir() and any(folder.rglob("training.*.nbi")) else "cold"


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished (waited-for) descendants, all generations."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    part: str,
    layout: str,
    cores: int,
    keep: bool,
    max_seconds: float | None = None,
    mirror: str | None = None,
    snakemake_args: str = "",
    tree: Path = ROOT,
) -> dict:
    config = part_config(part)
    if mirror:
        config["sources"] = {**(config.get("sources") or {}), "paper": {"url": mirror}}
    if layout == "single":
        config = one_run_per_job(config)
    plan = build_plan(config)
    tmp = Path(tempfile.mkdtemp(prefix=f"upfl-pipeline-{part}-{layout}-"))
    wd = workflow_copy(tmp / "wf", config, tree)
    env = {
        **os.environ,
        "PYTHONPATH": str(tree / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PATH": str(upfl_command(tree, tmp / "bin")) + os.pathsep + os.environ.get("PATH", ""),
    }
    cpu_before = children_cpu_seconds()
    load_before = os.getloadavg()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    numba_cache = numba_cache_state()
    print(
        f"{part}/{layout}: {len(plan.runs)} runs of {len(plan.experiments)} experiments; snakemake --cores {cores} "
        f"in {wd} (load average {load_before[0]:.2f})",
        flush=True,
    )
    start = time.perf_counter()
    log_path = tmp / "snakemake.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snakemake", "--cores", str(cores), *shlex.split(snakemake_args)],
            cwd=wd,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # a background shell starts us with SIGINT ignored, which Snakemake would inherit
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        own_cpu = 0.0
        try:
            while proc.poll() is None:  # Snakemake's own CPU time (scheduling, output checks), read while it runs
                own_cpu = max(own_cpu, process_cpu_seconds(proc.pid))
                if max_seconds is not None and time.perf_counter() - start > max_seconds:
                    raise subprocess.TimeoutExpired(proc.args, max_seconds)
                time.sleep(0.5)
            completed = True
        except subprocess.TimeoutExpired:  # a loaded machine: stop like Ctrl-C, record what was done
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            completed = False
    wall = time.perf_counter() - start
    cpu = children_cpu_seconds() - cpu_before
    load_after = os.getloadavg()
    log = log_path.read_text()
    if completed and proc.returncode != 0:
        raise SystemExit(f"{part}/{layout}: snakemake failed (log: {log_path}):\n{log[-4000:]}")
    steps = re.findall(r"(\d+) of (\d+) steps \((\d+)%\) done", log)
    jobs = int(steps[-1][1]) if steps else None
    summaries = list((wd / "results" / "runs").rglob("summary.json"))
    inside = sum(json.loads(s.read_text())["time"]["total_s"] for s in summaries)
    bench = wd / "results" / "benchmarks"
    train_files = list((bench / "train").rglob("*.tsv")) + list((bench / "bundles").rglob("*.tsv"))
    train_jobs_s = benchmark_seconds(train_files)
    train_jobs_cpu_s = benchmark_seconds(train_files, "cpu_time")
    result = {
        "completed": completed,
        "jobs_done": int(steps[-1][0]) if steps else 0,
        "experiments": sorted(plan.experiments),
        "jobs": jobs,
        "training_jobs": len(train_files),
        "runs": len(summaries),
        "runs_planned": len(plan.runs),
        "wall_s": round(wall, 2),
        "time_inside_runs_s": round(inside, 2),
        "training_jobs_s": round(train_jobs_s, 2),
        "startup_share": round(1 - inside / train_jobs_s, 3) if train_jobs_s else None,
        "mean_training_job_s": round(train_jobs_s / len(train_files), 3) if train_files else None,
        # a stopped layout: the wall time at the rate it trained runs (an estimate, not a measurement)
        "projected_wall_s": None if completed or not summaries else round(wall * len(plan.runs) / len(summaries), 1),
        "snakemake_cpu_s": round(own_cpu, 1),
        "snakemake_args": snakemake_args,
        # core-seconds of the whole process tree (Snakemake and every job), and the part outside the runs
        # (time inside runs is wall time: on a loaded machine it exceeds the runs' CPU time, so compare cpu_s and
        # the part outside the training jobs, which holds Snakemake, data and report jobs)
        "cpu_s": round(cpu, 1),
        "outside_runs_cpu_s": round(cpu - inside, 1),
        "outside_runs_share": round(1 - inside / cpu, 3) if cpu else None,
        "training_jobs_cpu_s": round(train_jobs_cpu_s, 1),
        "outside_training_jobs_cpu_s": round(cpu - train_jobs_cpu_s, 1),
        "commit": git_commit(tree),
        "tree": str(tree),
        "measured_at": started_at,
        "numba_cache_before": numba_cache,
        "cores": cores,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "timeline": timeline_figures(job_timeline(log), cores),
        **fork_server_figures(wd / "results" / "logs" / "fork_server.log"),
    }
    print(
        f"{part}/{layout}: {'' if completed else 'STOPPED after '}{result['wall_s']:.1f} s wall, "
        f"{jobs} jobs ({len(train_files)} training), "
        f"{len(summaries)} runs, {inside:.1f} s inside runs, {cpu:.1f} core-seconds ({result['outside_runs_share']} "
        f"outside runs), start-up share {result['startup_share']}, "
        f"load average after {load_after[0]:.2f}",
        flush=True,
    )
    if not keep:
        shutil.rmtree(tmp)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="quick,synthetic", help="comma list of quick, synthetic")
    p.add_argument("--layouts", default="bundled,single", help="comma list of bundled, single")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--snakemake-args", default="", help="extra Snakemake arguments, e.g. '--scheduler ilp'")
    p.add_argument("--keep", action="store_true", help="keep the temporary workflow folders")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="stop a layout after this long (a loaded machine) and record what it finished",
    )
    p.add_argument("--out", default=str(OUT))
    p.add_argument(
        "--baseline",
        help="source tree (e.g. `git worktree add /tmp/base <commit>`) whose workflow and "
        "upfl run too, alternating with this tree's; its figures go to <layout>_baseline",
    )
    p.add_argument("--repeats", type=int, default=1, help="with --baseline: alternating pairs of runs per layout")
    default_mirror = ROOT.parent / "shared" / "upstream"
    p.add_argument(
        "--paper-mirror",
        default=str(default_mirror) if default_mirror.is_dir() else None,
        help="folder served on 127.0.0.1 as the mirror of the paper's files (default: ../shared/upstream "
        "when it exists); 'none' downloads from GitHub",
    )
    args = p.parse_args(argv)
    mirror_dir = None if args.paper_mirror in (None, "none") else Path(args.paper_mirror).resolve()
    if mirror_dir is not None and not mirror_dir.is_dir():
        raise SystemExit(f"--paper-mirror {mirror_dir}: no such folder")
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    report = {"parts": previous.get("parts", {})}  # other parts' figures stay; each layout names its commit
    for part in args.parts.split(","):
        figures = report["parts"].setdefault(part, {})
        for layout in args.layouts.split(","):
            trees = [(f"{layout}_baseline", Path(args.baseline).resolve())] if args.baseline else []
            trees.append((layout, ROOT))
            measured: dict[str, list[dict]] = {key: [] for key, _ in trees}
            for _ in range(max(1, args.repeats) if args.baseline else 1):
                for key, tree in trees:
                    with serve(mirror_dir if part == "synthetic" else None) as mirror:
                        measured[key].append(
                            measure(
                                part, layout, args.cores, args.keep, args.max_seconds, mirror, args.snakemake_args, tree
                            )
                        )
            for key, runs in measured.items():
                figures[key] = min(runs, key=lambda r: r["cpu_s"])  # the least disturbed of the alternating runs
                figures[key]["repeats"] = [
                    {
                        k: r.get(k)
                        for k in (
                            "wall_s",
                            "cpu_s",
                            "outside_runs_cpu_s",
                            "training_jobs_cpu_s",
                            "outside_training_jobs_cpu_s",
                            "time_inside_runs_s",
                            "snakemake_cpu_s",
                            "load_average_before",
                            "measured_at",
                        )
                    }
                    for r in runs
                ]
            both = [figures.get(k) for k in ("bundled", "single")]
            if all(f and f["completed"] for f in both):
                figures["speed_up"] = round(figures["single"]["wall_s"] / figures["bundled"]["wall_s"], 2)
            else:
                figures.pop("speed_up", None)
            if figures.get("bundled"):
                figures["goal_s"] = GOALS_S[part]
                figures["goal_met"] = figures["bundled"]["completed"] and figures["bundled"]["wall_s"] <= GOALS_S[part]
            report["machine"] = {**machine_description(), "cpus": os.cpu_count(), "python": sys.version.split()[0]}
            report["command"] = "python benchmarks/pipeline.py " + " ".join(argv if argv is not None else sys.argv[1:])
            write_texts({out: json.dumps(report, indent=2) + "\n"})  # after every layout: a stopped run keeps the rest
            print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
