"""What the report jobs cost once their modules are imported: each report job of a finished pipeline folder run in a
child forked from a process that has already imported upfl.cli, numpy, pandas, matplotlib (Agg), pyplot, seaborn
and upfl.commands.report (the cyclic garbage collector's view of them frozen, as a one-command process does), its
CPU-seconds taken from the child's own clock. With ``--whole`` each job's shell command is also timed as a process
of its own (imports included, ``/usr/bin/time``).

    python benchmarks/pipeline.py --parts quick --layouts bundled --keep --out /tmp/q.json   # a finished folder
    python benchmarks/report_work.py FOLDER/wf                     # this tree, once
    python benchmarks/report_work.py FOLDER/wf --baseline OTHER/src --repeats 3 --whole --out r.json   # A/B
    python benchmarks/report_work.py FOLDER/wf --profile DIR       # cProfile of each job (DIR/<job>.prof)

The jobs are the workflow's ``upfl report runs ...`` commands (``snakemake -n -p --forceall``, read in FOLDER); each
tree runs in its own copy of FOLDER (``FOLDER-<tree>``, made once and kept), and trees alternate within each repeat
(A, B, then B, A). The report outputs of the trees are left in their copies for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import contextlib, cProfile, gc, io, json, os, resource, sys
folder, jobs_file, profile_dir = sys.argv[1:4]
os.chdir(folder)
import numpy, pandas, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot, seaborn
import upfl.cli, upfl.commands.report
gc.collect()
gc.freeze()
out = {}
for name, argv in json.load(open(jobs_file)).items():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        before = resource.getrusage(resource.RUSAGE_SELF)
        profiler = cProfile.Profile() if profile_dir else None
        with contextlib.redirect_stdout(io.StringIO()):
            if profiler:
                profiler.enable()
            status = upfl.cli.main(argv)
            if profiler:
                profiler.disable()
        after = resource.getrusage(resource.RUSAGE_SELF)
        if profiler:
            profiler.dump_stats(os.path.join(profile_dir, name + ".prof"))
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        os.write(w, json.dumps([status, cpu]).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.waitpid(pid, 0)
    os.close(r)
    status, cpu = json.loads(data)
    if status:
        sys.exit(f"{name}: exit status {status}")
    out[name] = cpu
print(json.dumps(out))
"""
ENTRY = "#!{python}\nimport sys\nfrom upfl.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n"


def report_jobs(folder: Path) -> dict[str, str]:
    """Job name (the experiment, or ``runs_claims``) -> the shell command of each ``upfl report runs`` job."""
    dry = subprocess.run(
        ["snakemake", "-n", "-p", "--forceall", "--cores", "2"], cwd=folder, capture_output=True, text=True, check=True
    ).stdout
    jobs = {}
    for line in dry.splitlines():
        if not line.startswith("Shell command: upfl report runs "):
            continue
        command = line.removeprefix("Shell command: ").strip()
        words = shlex.split(command.split(" > ")[0])
        out = words[words.index("--out") + 1]
        jobs["runs_claims" if out == "results/runs.csv" else Path(out).parent.name] = command
    if not jobs:
        sys.exit(f"{folder}: no 'upfl report runs' jobs in snakemake -n -p")
    return jobs


def environment(src: Path, bin_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a finished pipeline folder (its wf/ sub-folder)")
    parser.add_argument("--baseline", type=Path, help="another tree's src/ to alternate with this tree's")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--whole", action="store_true", help="also time each job as a process of its own")
    parser.add_argument("--profile", type=Path, help="write cProfile files of this tree's jobs here")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    args = parser.parse_args()
    folder = args.folder.resolve()
    jobs = report_jobs(folder)
    argv = {name: shlex.split(command.split(" > ")[0])[1:] for name, command in jobs.items()}
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"report-work-{os.getpid()}"
    work.mkdir()
    (work / "jobs.json").write_text(json.dumps(argv))
    bin_dir = work / "bin"  # `upfl` of the tree on PYTHONPATH (upfl.cli:main), whatever the environment installed
    bin_dir.mkdir()
    (bin_dir / "upfl").write_text(ENTRY.format(python=sys.executable))
    (bin_dir / "upfl").chmod(0o755)
    trees = {"this": ROOT / "src", **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    copies = {}
    for tree in trees:
        copies[tree] = folder.with_name(f"{folder.name}-{tree}")
        if not copies[tree].exists():
            shutil.copytree(folder, copies[tree], symlinks=True)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    figures: dict = {"after_imports": {t: [] for t in trees}, "whole_process": {t: [] for t in trees}, "load": []}
    for repeat in range(args.repeats):
        order = list(trees) if repeat % 2 == 0 else list(reversed(trees))
        for tree in order:
            figures["load"].append([time.strftime("%H:%M:%S"), tree, Path("/proc/loadavg").read_text().split()[:3]])
            profile = str(args.profile.resolve()) if args.profile and tree == "this" else ""
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(copies[tree]), str(work / "jobs.json"), profile],
                env=environment(trees[tree], bin_dir),
                capture_output=True,
                text=True,
            )
            if done.returncode:
                sys.exit(f"{tree}: {done.stderr[-2000:]}")
            figures["after_imports"][tree].append(json.loads(done.stdout.splitlines()[-1]))
        for tree in order if args.whole else []:
            cpu = {}
            for name, command in jobs.items():
                script = work / f"{name}.sh"  # a file: results/runs.csv's command line outgrows one argument
                script.write_text(command + "\n")
                done = subprocess.run(
                    ["/usr/bin/time", "-f", "%U %S", "sh", str(script)],
                    cwd=copies[tree],
                    env=environment(trees[tree], bin_dir),
                    capture_output=True,
                    text=True,
                )
                if done.returncode:
                    sys.exit(f"{tree} {name}: {done.stderr[-2000:]}")
                user, system = done.stderr.split()[-2:]
                cpu[name] = float(user) + float(system)
            figures["whole_process"][tree].append(cpu)
        for kind in ("after_imports", "whole_process"):
            for tree in trees:
                if figures[kind][tree]:
                    print(f"repeat {repeat} {kind} {tree}: {sum(figures[kind][tree][-1].values()):.2f} CPU-s")
    shutil.rmtree(work)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
