"""The quick preset, two checkouts compared on one machine: runs alternating A, B, A, B, ... in CPU-seconds.

    python benchmarks/quick_preset_ab.py --a /path/to/checkout-A --b . [--rounds 2] [--cores 2]

Each run is `snakemake --cores N --configfile config/quick.yaml` in a fresh copy of that checkout's workflow
(Snakefile, workflow/, config/, profiles/; new resources/ and results/) with that checkout's `src` first on
PYTHONPATH, so data generation, training, reports and Snakemake's own cost all count. `upfl kernels warm-up` of each
first fills its numba cache (a fresh clone's compile is measured by benchmarks/pipeline.py, not here). Figures per
run: wall seconds, CPU-seconds of Snakemake and every job (user + system of the waited-for process tree), load
average before; per checkout the median, and B's CPU-seconds over A's. Writes benchmarks/results/quick_preset_ab.json
(after every B run, so that an interrupted comparison keeps its pairs).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import publish  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(checkout: Path, cores: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="upfl-quick-ab-"))
    try:
        for name in ("Snakefile", "workflow", "config", "profiles"):
            source = checkout / name
            (shutil.copytree if source.is_dir() else shutil.copy)(source, work / name)
        env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
        load = os.getloadavg()[0]
        cpu, start = children_cpu(), time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", str(cores), "--configfile",
                               "config/quick.yaml"], cwd=work, env=env, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, children_cpu() - cpu
        if proc.returncode != 0:
            raise SystemExit(f"{checkout}: snakemake failed:\n{proc.stderr[-3000:]}")
        return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "load_before": round(load, 2)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    p.add_argument("--b", type=Path, required=True, help="checkout B")
    p.add_argument("--rounds", type=int, default=2, help="measured runs of each (default 2)")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "quick_preset_ab.json")
    args = p.parse_args()
    checkouts = {"A": args.a.resolve(), "B": args.b.resolve()}
    for checkout in checkouts.values():  # numba's cache filled, not measured
        subprocess.run([sys.executable, "-m", "upfl.cli", "kernels", "warm-up", "--threads", "1", "--out",
                        os.devnull], env={**os.environ, "PYTHONPATH": str(checkout / "src")}, check=True,
                       capture_output=True)
    runs = {"A": [], "B": []}
    for _ in range(args.rounds):
        for name, checkout in checkouts.items():
            runs[name].append(one_run(checkout, args.cores))
            print(name, runs[name][-1], flush=True)
            if runs["B"]:
                publish(figures(runs, checkouts, args.cores), args.out)


def figures(runs: dict, checkouts: dict, cores: int) -> dict:
    """The runs so far, their medians and B's over A's."""
    median = {n: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s")} for n, rs in runs.items()}
    return {"machine": os.uname().machine, "cpus": os.cpu_count(), "cores": cores,
            "checkouts": {n: str(c) for n, c in checkouts.items()}, "runs": runs, "median": median,
            "cpu_ratio_b_over_a": round(median["B"]["cpu_s"] / median["A"]["cpu_s"], 4),
            "wall_ratio_b_over_a": round(median["B"]["wall_s"] / median["A"]["wall_s"], 4)}


if __name__ == "__main__":
    main()
