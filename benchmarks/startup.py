"""Start-up and parse as whole processes: CPU-seconds of `upfl run` of W1, of `snakemake -n` of the full config and
of `snakemake -n` of one job (what a cluster job's own parse of the workflow costs before its first run), each in
fresh processes, this tree against another alternating.

    python benchmarks/startup.py [--baseline TREE] [--repeats 5]
    python benchmarks/startup.py --parts dry_run,job_parse --baseline TREE --out benchmarks/results/parse.json

W1 is FedProx 80 (Synthetic(1,1) from our generator, 30 devices, frac 0.3, 90% stragglers, E = 20, batch 32,
lr 0.05, momentum 0.5, mu 1, seed 2, one numba thread, checkpoints as `upfl run` defaults them), run with the
compiled solver from a warm numba cache (one untimed run per tree first). Each `snakemake -n` runs in a copy of its
tree's workflow (Snakefile, workflow/, config/, profiles/) made once per tree, after one untimed dry run (the parse
writes the bundles' specs on its first run). A process's CPU-seconds are its user + system time and its children's
(`resource.getrusage(RUSAGE_CHILDREN)` around it). The machine is shared: each figure is the median of `--repeats`
processes per tree, the trees alternating, with the load average before and after. Writes
benchmarks/results/startup.json (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import publish

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "startup.json"

W1_FLAGS = ["--algorithm", "fedprox", "--mu", "1", "--rounds", "80", "--frac", "0.3", "--straggler", "0.9",
            "--epochs", "20", "--batch-size", "32", "--lr", "0.05", "--momentum", "0.5", "--seed", "2"]


def cpu_seconds(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float]:
    """(CPU-seconds, wall seconds) of ``cmd`` run to completion with its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def workflow_copy(tree: Path, dest: Path) -> Path:
    """A copy of ``tree``'s workflow in ``dest`` (no results)."""
    dest.mkdir(parents=True)
    if (tree / "Snakefile").exists():  # a tree from before workflow/Snakefile
        shutil.copy(tree / "Snakefile", dest)
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(tree / folder, dest / folder)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="source tree to compare with (e.g. `git worktree add /tmp/base <commit>`)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--parts", default="w1,dry_run,job_parse", help="comma list of w1, dry_run, job_parse")
    parser.add_argument("--out", default=str(OUT), help="the JSON file written (default: benchmarks/results/startup.json)")
    args = parser.parse_args()
    trees = {"current": ROOT}
    if args.baseline:
        trees = {"baseline": Path(args.baseline).resolve(), **trees}
    tmp = Path(tempfile.mkdtemp(prefix="upfl-startup-"))
    env0 = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    envs = {label: {**env0, "PYTHONPATH": str(tree / "src")} for label, tree in trees.items()}
    data = tmp / "synthetic_1_1"
    subprocess.run([sys.executable, "-m", "upfl.cli", "synth", "--name", "synthetic_1_1", "--out", str(data)],
                   env=envs["current"], check=True, capture_output=True)
    parts = args.parts.split(",")
    commands = {}
    for label, tree in trees.items():
        wd = workflow_copy(tree, tmp / f"wf_{label}")
        commands[label] = {
            "w1": ([sys.executable, "-m", "upfl.cli", "run", "--data", str(data), *W1_FLAGS, "--force",
                    "--out", str(tmp / f"w1_{label}")], tmp),
            "dry_run": ([sys.executable, "-m", "snakemake", "-n", "--quiet"], wd),
            "job_parse": ([sys.executable, "-m", "snakemake", "resources/kernels/numba.json", "-n", "--quiet"], wd),
        }
        for part in parts:  # untimed: numba's cache loaded once, the bundles' specs written once
            cpu_seconds(*commands[label][part], envs[label])
    measured = {label: {part: [] for part in parts} for label in trees}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for part in parts:
            for label in trees:
                cpu, wall = cpu_seconds(*commands[label][part], envs[label])
                measured[label][part].append({"cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                                              "load_average": [round(x, 2) for x in os.getloadavg()]})
    results = {"command": "python benchmarks/startup.py " + " ".join(sys.argv[1:]), "repeats": args.repeats,
               "load_average_before": load_before, "load_average_after": os.getloadavg(),
               "cpu_count": os.cpu_count(), "trees": {k: str(v) for k, v in trees.items()},
               "commits": {k: subprocess.run(["git", "-C", str(v), "rev-parse", "HEAD"], capture_output=True,
                                             text=True).stdout.strip() for k, v in trees.items()},
               "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for label in trees:
        results[label] = {part: {"cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
                                 "wall_s_median": statistics.median(r["wall_s"] for r in runs), "runs": runs}
                          for part, runs in measured[label].items()}
    if "w1" in parts:
        for label in trees:
            summary = json.loads((tmp / f"w1_{label}" / "summary.json").read_text())
            results[label]["w1"]["final_train_acc"] = summary["final"]["train_acc"]
            results[label]["w1"]["commit"] = summary.get("git_commit")
    if args.baseline:
        results["current_over_baseline_cpu"] = {
            part: results["current"][part]["cpu_s_median"] / results["baseline"][part]["cpu_s_median"] for part in parts}
    shutil.rmtree(tmp, ignore_errors=True)
    publish(results, Path(args.out))


if __name__ == "__main__":
    main()
