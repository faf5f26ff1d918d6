"""Start-up and parse as whole processes: CPU-seconds of `upfl run` of W1, of `snakemake -n` of the full config and
of `snakemake -n` of one job (what a cluster job's own parse of the workflow costs before its first run), each in
fresh processes, this tree against another alternating.

    python benchmarks/startup.py [--baseline TREE] [--repeats 5]
    python benchmarks/startup.py --parts dry_run,job_parse,job_remote --baseline TREE --out PARSE_JSON

``job_parse`` is `snakemake resources/kernels/numba.json -n` (the DAG of one small job); ``job_remote`` is what a
SLURM job runs before its first run, as the executor plugin starts it (`snakemake --target-jobs <rule>: --mode
remote --force --nolock ...`), with `-n`: the first bundle rule of Table 1 (`train_bundle_table1_*`, the first in
`snakemake --list-rules`), in a fresh copy (so its DAG also holds the jobs that make its inputs). ``floor`` is
`snakemake -n` of a workflow of one rule (the same for every tree): what Snakemake itself costs before any workflow,
its import and plugins included. The parse's figures are benchmarks/results/parse.json (``--out``).

W1 is FedProx 80 (Synthetic(1,1) from our generator, 30 devices, frac 0.3, 90% stragglers, E = 20, batch 32,
lr 0.05, momentum 0.5, mu 1, seed 2, one numba thread, checkpoints as `upfl run` defaults them), run with the
compiled solver from a warm numba cache (one untimed run per tree first). Each `snakemake -n` runs in a copy of its
tree's workflow (workflow/ with its Snakefile, config/, profiles/) made once per tree, after one untimed dry run
(the parse
writes the bundles' specs on its first run). A process's CPU-seconds are its user + system time and its children's
(`resource.getrusage(RUSAGE_CHILDREN)` around it). The machine is shared: each figure is the median of `--repeats`
processes per tree, the trees alternating, with the load average before and after. ``w1_phases`` is W1 again with
the CPU-seconds of each phase of its start-up (:data:`PHASES`: numpy, upfl's CLI, torch, numba, numba's CPU target,
the rest of the run, the teardown), medians per phase. Writes
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

W1_FLAGS = [
    "--algorithm",
    "fedprox",
    "--mu",
    "1",
    "--rounds",
    "80",
    "--frac",
    "0.3",
    "--straggler",
    "0.9",
    "--epochs",
    "20",
    "--batch-size",
    "32",
    "--lr",
    "0.05",
    "--momentum",
    "0.5",
    "--seed",
    "2",
]


PHASES = """
import importlib.abc, importlib.machinery, json, sys, time
marks = [("interpreter", time.process_time())]
spent = {"torch": 0.0, "numba": 0.0, "target": 0.0}


class Timed(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in ("torch", "numba"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return real.create_module(spec)

            def exec_module(self, module):
                before = time.process_time()
                try:
                    real.exec_module(module)
                finally:
                    spent[name] += time.process_time() - before
                if name == "numba":
                    from numba.core.base import BaseContext
                    refresh = BaseContext.refresh

                    def timed_refresh(context):
                        before = time.process_time()
                        try:
                            refresh(context)
                        finally:
                            spent["target"] += time.process_time() - before

                    BaseContext.refresh = timed_refresh

        spec.loader = Loader()
        return spec


sys.meta_path.insert(0, Timed())
import numpy
marks.append(("numpy", time.process_time()))
import upfl.cli
marks.append(("upfl.cli (config, yaml)", time.process_time()))
status = upfl.cli.main(sys.argv[1:])
ran = time.process_time() - marks[-1][1]
phases = {name: round(now - before, 4) for (name, now), (_, before) in zip(marks, [("", 0.0)] + marks)}
phases["torch (its import)"] = round(spent["torch"], 4)
phases["numba (its import, scipy)"] = round(spent["numba"], 4)
phases["numba's CPU target (its registries, scipy.linalg)"] = round(spent["target"], 4)
phases["the run (parse, kernels from numba's cache, data, training, results)"] = round(ran - sum(spent.values()), 4)
print(json.dumps(phases), flush=True)
try:
    from upfl.startup import exit_now
except ImportError:
    sys.exit(status)
if "run" in getattr(upfl.cli, "FAST_EXIT_COMMANDS", ()):
    exit_now(status)
sys.exit(status)
"""
"""W1 in one process with the CPU-seconds of each part of its start-up: the interpreter, numpy, upfl's CLI module,
then ``upfl.cli.main`` (the run as the command runs it), within which the imports of torch and numba (each package's
own import, what it imports included) and numba's CPU target (``BaseContext.refresh``) are timed apart from the rest
of the run; the process then ends as the command does. ``python -c PHASES run ...``; the teardown is the process's
CPU time (measured from outside) less the phases'."""


ONE_RULE = 'rule one:\n    output:\n        "one.txt",\n    shell:\n        "touch one.txt"\n'
"""The workflow of the ``floor`` part: one rule."""
REMOTE_JOB_ARGS = [
    "--mode",
    "remote",
    "--force",
    "--target-files-omit-workdir-adjustment",
    "--max-inventory-time",
    "0",
    "--nolock",
    "--ignore-incomplete",
    "-n",
    "--quiet",
]
"""The arguments of Snakemake's command in a cluster job (``snakemake_interface_executor_plugins``'s
``format_job_exec`` and Snakemake's ``spawn_jobs.general_args``) that change what its parse does, and ``-n``."""


def first_bundle_rule(wd: Path, env: dict) -> str:
    """The first rule of Table 1's bundles that `snakemake --list-rules` names in the workflow copy ``wd``."""
    listed = subprocess.run(
        [sys.executable, "-m", "snakemake", "--list-rules"], cwd=wd, env=env, capture_output=True, text=True
    )
    rules = [r for r in listed.stdout.split() if r.startswith("train_bundle_table1_")]
    if not rules:
        raise SystemExit(f"no train_bundle_table1_* rule in {wd}:\n{listed.stdout[-2000:]}\n{listed.stderr[-2000:]}")
    return rules[0]


def cpu_seconds(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float]:
    """(CPU-seconds, wall seconds) of ``cmd`` run to completion with its descendants."""
    cpu, wall, _ = measured_process(cmd, cwd, env)
    return cpu, wall


def measured_process(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float, str]:
    """(CPU-seconds, wall seconds, standard output) of ``cmd`` run to completion with its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall, proc.stdout


def with_teardown(cpu: float, line: str) -> dict[str, float]:
    """The phases :data:`PHASES` printed, and the process's CPU-seconds after them (teardown and exit)."""
    phases = json.loads(line)
    return {**phases, "teardown and exit": round(cpu - sum(phases.values()), 4)}


def workflow_copy(tree: Path, dest: Path) -> Path:
    """A copy of ``tree``'s workflow in ``dest`` (workflow/, which holds the Snakefile, config/, profiles/; no
    results)."""
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
    parser.add_argument(
        "--parts",
        default="w1,w1_phases,dry_run,job_parse",
        help="comma list of w1, w1_phases, dry_run, job_parse, job_remote, floor",
    )
    parser.add_argument(
        "--out", default=str(OUT), help="the JSON file written (default: benchmarks/results/startup.json)"
    )
    args = parser.parse_args()
    trees = {"current": ROOT}
    if args.baseline:
        trees = {"baseline": Path(args.baseline).resolve(), **trees}
    tmp = Path(tempfile.mkdtemp(prefix="upfl-startup-"))
    env0 = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    envs = {label: {**env0, "PYTHONPATH": str(tree / "src")} for label, tree in trees.items()}
    data = tmp / "synthetic_1_1"
    subprocess.run(
        [sys.executable, "-m", "upfl.cli", "synth", "--name", "synthetic_1_1", "--out", str(data)],
        env=envs["current"],
        check=True,
        capture_output=True,
    )
    parts = args.parts.split(",")
    commands = {}
    floor = tmp / "floor"
    floor.mkdir()
    (floor / "Snakefile").write_text(ONE_RULE)
    for label, tree in trees.items():
        wd = workflow_copy(tree, tmp / f"wf_{label}")
        bundle = first_bundle_rule(wd, envs[label]) if "job_remote" in parts else ""
        commands[label] = {
            "w1": (
                [
                    sys.executable,
                    "-m",
                    "upfl.cli",
                    "run",
                    "--data",
                    str(data),
                    *W1_FLAGS,
                    "--force",
                    "--out",
                    str(tmp / f"w1_{label}"),
                ],
                tmp,
            ),
            "w1_phases": (
                [
                    sys.executable,
                    "-c",
                    PHASES,
                    "run",
                    "--data",
                    str(data),
                    *W1_FLAGS,
                    "--force",
                    "--out",
                    str(tmp / f"w1_phases_{label}"),
                ],
                tmp,
            ),
            "dry_run": ([sys.executable, "-m", "snakemake", "-n", "--quiet"], wd),
            "job_parse": ([sys.executable, "-m", "snakemake", "resources/kernels/numba.json", "-n", "--quiet"], wd),
            "job_remote": ([sys.executable, "-m", "snakemake", *REMOTE_JOB_ARGS, "--target-jobs", f"{bundle}:"], wd),
            "floor": ([sys.executable, "-m", "snakemake", "-n", "--quiet"], floor),
        }
        for part in parts:  # untimed: numba's cache loaded once, the bundles' specs written once
            cpu_seconds(*commands[label][part], envs[label])
    measured = {label: {part: [] for part in parts} for label in trees}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for part in parts:
            for label in trees:
                cpu, wall, stdout = measured_process(*commands[label][part], envs[label])
                measured[label][part].append(
                    {
                        "cpu_s": round(cpu, 3),
                        "wall_s": round(wall, 3),
                        "load_average": [round(x, 2) for x in os.getloadavg()],
                        **(
                            {"phases_cpu_s": with_teardown(cpu, stdout.splitlines()[-1])} if part == "w1_phases" else {}
                        ),
                    }
                )
    results = {
        "command": "python benchmarks/startup.py " + " ".join(sys.argv[1:]),
        "repeats": args.repeats,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "trees": {k: str(v) for k, v in trees.items()},
        "commits": {
            k: subprocess.run(["git", "-C", str(v), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
            for k, v in trees.items()
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    for label in trees:
        results[label] = {
            part: {
                "cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
                "wall_s_median": statistics.median(r["wall_s"] for r in runs),
                "runs": runs,
            }
            for part, runs in measured[label].items()
        }
    for label in trees if "w1_phases" in parts else ():
        runs = measured[label]["w1_phases"]
        results[label]["w1_phases"]["phases_cpu_s_median"] = {
            name: statistics.median(r["phases_cpu_s"][name] for r in runs) for name in runs[0]["phases_cpu_s"]
        }
    if "w1" in parts:
        for label in trees:
            summary = json.loads((tmp / f"w1_{label}" / "summary.json").read_text())
            results[label]["w1"]["final_train_acc"] = summary["final"]["train_acc"]
            results[label]["w1"]["commit"] = summary.get("git_commit")
    if args.baseline:
        results["current_over_baseline_cpu"] = {
            part: results["current"][part]["cpu_s_median"] / results["baseline"][part]["cpu_s_median"] for part in parts
        }
        results["current_over_baseline_wall"] = {
            part: results["current"][part]["wall_s_median"] / results["baseline"][part]["wall_s_median"]
            for part in parts
        }
    shutil.rmtree(tmp, ignore_errors=True)
    publish(results, Path(args.out))


if __name__ == "__main__":
    main()
