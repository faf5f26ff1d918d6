"""Where the core-seconds outside the runs go: each job of a finished workflow folder run again, CPU-seconds per rule.

    python benchmarks/pipeline.py --parts quick --layouts bundled --keep     # prints the folder it ran in
    python benchmarks/outside_runs.py /tmp/upfl-pipeline-quick-bundled-XXXX/wf [--repeats 1]

Lists the folder's jobs with their shell commands (`snakemake -n -p --forceall`, the folder's own config), runs every
job's command again in that folder (its outputs are rewritten with the same content), except the training bundles
(rerun, a bundle would restore its runs from the store instead of training them: its start-up is the training jobs'
CPU-seconds less the time inside its runs, which benchmarks/pipeline.py records), and sums the CPU-seconds (user +
system of the command's process tree) per rule, with the number of jobs (`failed`: jobs whose command cannot run
outside Snakemake's run, e.g. the bundle specs, which read the config Snakemake hands them in the environment).
Snakemake's own CPU-seconds come from
benchmarks/pipeline.py (`snakemake_cpu_s`). Writes benchmarks/results/outside_runs.json.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from results_file import publish

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "outside_runs.json"
RULE_FAMILIES = ("train_bundle", "synthetic_dataset", "report")
"""Rules generated in a loop, one per bundle, generator setting or experiment (`<family>_<name>`): counted as their
family."""


def job_commands(folder: Path) -> list[tuple[str, str]]:
    """(rule, shell command) of every job of ``folder``'s workflow, from a forced dry run."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", "--cores", "1"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    jobs, rule = [], None
    for line in proc.stdout.splitlines():
        head = re.match(r"^(?:local)?rule (\S+):$", line)
        if head:
            rule = head.group(1)
        elif rule and line.startswith("Shell command: "):
            jobs.append((rule, line[len("Shell command: ") :]))
            rule = None
    return jobs


def cpu_seconds(command: str, folder: Path) -> float | None:
    """CPU-seconds of ``command`` run in ``folder``; None when it fails (a job that needs what only Snakemake's run
    gives it: the bundle specs' config in the environment, the paper's mirror served for the run)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # on bash's standard input: `bash -c` takes the command as one argument, and results/runs.csv's names every run
    # (1737 in the synthetic half, over the kernel's 128 KiB for one argument); Snakemake runs it from a script
    proc = subprocess.run(["bash"], input=command, text=True, cwd=folder)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime if proc.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a finished workflow folder (benchmarks/pipeline.py --keep)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each command; the least CPU counts")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    folder = Path(args.folder).resolve()
    load_before = os.getloadavg()
    per_rule: dict[str, dict] = {}
    for rule, command in job_commands(folder):
        kind = next((k for k in RULE_FAMILIES if rule.startswith(k + "_")), rule)
        if kind in ("train_bundle", "train", "all"):
            continue
        times = [cpu_seconds(command, folder) for _ in range(max(1, args.repeats))]
        entry = per_rule.setdefault(kind, {"jobs": 0, "cpu_s": 0.0, "failed": 0})
        if None in times:
            entry["failed"] += 1
            continue
        entry["jobs"] += 1
        entry["cpu_s"] = round(entry["cpu_s"] + min(times), 2)
    results = {
        "command": "python benchmarks/outside_runs.py " + " ".join(sys.argv[1:]),
        "folder": str(folder),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "rules": dict(sorted(per_rule.items(), key=lambda kv: -kv[1]["cpu_s"])),
        "total_cpu_s": round(sum(e["cpu_s"] for e in per_rule.values()), 2),
    }
    publish(results, Path(args.out))


if __name__ == "__main__":
    main()
