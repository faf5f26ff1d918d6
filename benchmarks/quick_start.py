"""The README's quick start as a newcomer meets it: `make quick` (or `make test`) in a fresh copy, timed.

Copies the tracked files (a fresh clone without .git) to a temporary folder and runs `make quick` there with this
Python environment (`VENV=`), twice: first with numba's cache empty (a fresh clone: the kernels compile), then
in a new copy at the same path (numba keys its cache by the source file's path) with the cache the first run
filled. Records per run the wall time, the CPU-seconds of every process it started (getrusage of the children),
the kernels' warm-up job from its record, the machine (CPU model, vector units, cores), the load average before and
after and, for `make quick`, the claims page's summary line and whether the README's "Expected result" gives it (a
line that differs is printed), and appends them to `benchmarks/results/quick_start.json`, whose ranges the README's
time table is generated from (`python tools/doc_numbers.py`). Before each run it waits (up to
`--settle` seconds) for the load average to fall under half the cores, so that the warm run does not start in the
cold run's load.

    python benchmarks/quick_start.py [--target quick|test] [--runs cold,warm] [--out FILE] [--settle SECONDS]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from results_file import publish  # noqa: E402
from upfl.pipeline.doc_numbers import machine_description  # noqa: E402
from upfl.report import front  # noqa: E402


def fresh_copy(dest: Path) -> Path:
    """The repository's tracked files as they are in the working tree."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, listed.stdout.split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def settled_load(most_s: float) -> float:
    """Wait (at most ``most_s`` seconds) until the one-minute load average is under half the cores, as the README's
    quiet-machine rule reads it, so that a run does not start in the load of the run before it; the seconds waited."""
    start = time.perf_counter()
    while os.getloadavg()[0] >= (os.cpu_count() or 1) / 2 and time.perf_counter() - start < most_s:
        time.sleep(5)
    return round(time.perf_counter() - start, 1)


def claims_summary(wd: Path) -> str | None:
    """The summary line of the claims page a run wrote in ``wd`` (:func:`upfl.report.front.claims_summary`), None
    without one."""
    return front.claims_summary(wd / "results" / "tables" / "claims.md")


def readme_summary(readme: Path = ROOT / "README.md") -> str:
    """The summary line the README's "Expected result" gives for `make quick` (its first code block, as one line)."""
    section = readme.read_text(encoding="utf-8").split("## Expected result", 1)[1]
    return " ".join(section.split("```", 2)[1].split())


def timed_make(target: str, wd: Path, numba_cache: Path, cache_state: str, settle_s: float) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(numba_cache), "PYTHONPATH": str(wd / "src")}
    command = ["make", target, f"VENV={sys.prefix}"]
    waited = settled_load(settle_s)
    load_before = [round(x, 2) for x in os.getloadavg()]
    cpu_before, start = children_cpu_s(), time.perf_counter()
    proc = subprocess.run(command, cwd=wd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        with tempfile.NamedTemporaryFile("w", prefix=f"upfl-make-{target}-", suffix=".log", delete=False) as log:
            log.write(proc.stdout + proc.stderr)
        sys.exit(f"make {target} failed ({proc.returncode}), its whole output in {log.name}:\n{proc.stdout[-2000:]}")
    record = wd / "resources" / "kernels" / "numba.json"  # the kernels warm-up job's record (KERNELS_RECORD)
    kernels = json.loads(record.read_text()) if record.exists() else {}
    summary = claims_summary(wd) if target == "quick" else None
    if summary is not None and summary != readme_summary():
        print(f"the README's expected summary line differs from this run's:\n  {summary}", file=sys.stderr)
    return {
        "command": f"make {target}",
        "numba_cache": cache_state,
        **({"claims_summary": summary, "readme_summary_matches": summary == readme_summary()} if summary else {}),
        "wall_s": round(wall, 1),
        "cpu_s": round(children_cpu_s() - cpu_before, 1),
        "kernels_warm_up": kernels,
        "load_average_before": load_before,
        "waited_for_load_s": waited,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "machine": machine_description(),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--target",
        default="quick",
        choices=("quick", "test"),
        help="the README's command to time: make quick or make test (default: %(default)s)",
    )
    p.add_argument("--runs", default="cold,warm", help="cache states to run, in order (default: %(default)s)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "quick_start.json")
    p.add_argument(
        "--settle",
        type=float,
        default=180.0,
        help="seconds at most to wait before each run for the load average to fall under half the cores",
    )
    args = p.parse_args()
    previous = json.loads(args.out.read_text())["measurements"] if args.out.exists() else []
    measured = []
    with tempfile.TemporaryDirectory(prefix="upfl-quick-start-") as tmp:
        cache = Path(tmp) / "numba-cache"
        for state in args.runs.split(","):
            wd = Path(tmp) / "clone"  # one path: numba's cache index is keyed by the source file's path
            shutil.rmtree(wd, ignore_errors=True)
            measured.append(timed_make(args.target, fresh_copy(wd), cache, state, args.settle))
            print(json.dumps(measured[-1]), file=sys.stderr)
    publish({"benchmark": "quick_start", "measurements": previous + measured}, args.out)


if __name__ == "__main__":
    main()
