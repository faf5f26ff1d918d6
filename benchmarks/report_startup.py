"""Benchmark: start-up of the ``upfl report`` commands (the pipeline runs one report job per table or figure).

Times ``upfl --help``, ``upfl report <cmd> --help`` for every report sub-command, and real ``report runs``,
``report table1``, ``report time``, ``report figure convergence`` and ``report figure lambda_sweep`` on a tiny
results folder the script trains first (Synthetic(1,1), 6 devices, a few rounds: FedAvg, FedProx, Upcycled-FL at
two lambdas, two seeds). Each command runs in a fresh Python process, as a Snakemake job does, ``--repeat`` times;
the figures are the median and the minimum wall time, and the heavy packages (torch, scipy, seaborn, matplotlib,
pandas, numpy) the command imported.

Run: python benchmarks/report_startup.py [--repeat 3] [--out benchmarks/results/report_startup.json]
(prints the table and writes the JSON; timings depend on the machine's load, which is recorded).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("torch", "scipy", "seaborn", "matplotlib", "pandas", "numpy", "dp_accounting")

RUNNER = """
import sys
import upfl.startup
from upfl.cli import main

def heavy():
    print("HEAVY_MODULES=" + ",".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)

def exit_now(status, _exit_now=upfl.startup.exit_now):
    heavy()
    _exit_now(status)

upfl.startup.exit_now = exit_now  # a command that ends through it (as the upfl command line does) names its imports
try:
    code = main()
except SystemExit as e:
    code = e.code
heavy()
sys.exit(code or 0)
"""
"""``upfl ARGV`` as the command line runs it (``main()`` reads ``sys.argv``: the commands that end through
:func:`upfl.startup.exit_now` end so here too), printing the heavy packages it imported."""

HELP_COMMANDS = (
    "runs",
    "table1",
    "table2",
    "time",
    "privacy-table",
    "ablation-table",
    "claims",
    "draws",
    "sensitivity",
    "figure",
)


def make_runs(root: Path) -> list[str]:
    """Train the tiny run folders; return their ``EXPERIMENT:RUN_DIR`` specs."""
    from upfl import config as cfgmod
    from upfl.data import generate_synthetic
    from upfl.engine.simulation import run

    data = str(generate_synthetic("synthetic_1_1", root / "synthetic_1_1", data_seed=0, num_devices=6))
    specs = []
    for name, alg, rounds, mu, lam in (
        ("fedavg", "fedavg", 4, 0.0, None),
        ("fedprox", "fedprox", 4, 1.0, None),
        ("up043", "upcycled", 8, 1.0, 0.43),
        ("up2", "upcycled", 8, 1.0, 2.0),
    ):
        for seed in (0, 1):
            algorithm = {"name": alg, "mu": mu, **({"lam": lam} if lam is not None else {})}
            doc = {
                "data": {"path": data},
                "rounds": rounds,
                "seed": seed,
                "threads": 1,
                "algorithm": algorithm,
                "devices": {"frac": 0.5, "straggler": 0.5},
                "solver": {"epochs": 2},
                "checkpoint": {"every": 0},
            }
            out = root / "runs" / f"{name}_s{seed}"
            run(cfgmod.from_dict(doc), out, log=lambda *a: None)
            experiments = {"fedavg": ["table1"], "up2": ["sweep"]}.get(name, ["table1", "sweep"])
            specs += [f"{e}:{out}" for e in experiments]
    return specs


def time_command(argv: list[str], repeat: int, cwd: Path) -> dict:
    """Median and minimum wall seconds of ``upfl ARGV`` in a fresh process, and the heavy packages it imported."""
    walls, heavy = [], ""
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER.format(heavy=HEAVY), *argv], cwd=cwd, capture_output=True, text=True
        )
        walls.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"upfl {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
        heavy = next((ln.split("=", 1)[1] for ln in proc.stderr.splitlines() if ln.startswith("HEAVY_MODULES=")), "")
    return {
        "argv": ["upfl", *argv],
        "median_s": round(statistics.median(walls), 3),
        "min_s": round(min(walls), 3),
        "walls_s": [round(w, 3) for w in walls],
        "imports": [m for m in heavy.split(",") if m],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="processes per command (median and minimum reported)")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "report_startup.json"))
    p.add_argument("--label", default="", help="a note stored with the figures (e.g. 'before', 'after')")
    args = p.parse_args()

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="upfl-report-startup-") as tmp:
        root = Path(tmp)
        specs = make_runs(root)
        csv = root / "results" / "runs.csv"
        cases = [("upfl --help", ["--help"])]
        cases += [(f"report {c} --help", ["report", c, "--help"]) for c in HELP_COMMANDS]
        cases += [
            ("report runs", ["report", "runs", "--out", str(csv), *specs]),
            (
                "report table1",
                [
                    "report",
                    "table1",
                    "--runs",
                    str(csv),
                    "--experiment",
                    "table1",
                    "--out-prefix",
                    str(root / "tables" / "table1"),
                ],
            ),
            (
                "report time",
                [
                    "report",
                    "time",
                    "--runs",
                    str(csv),
                    "--experiment",
                    "table1",
                    "--out-prefix",
                    str(root / "tables" / "time"),
                ],
            ),
            (
                "report figure convergence",
                [
                    "report",
                    "figure",
                    "convergence",
                    "--runs",
                    str(csv),
                    "--experiment",
                    "table1",
                    "--out-prefix",
                    str(root / "figures" / "convergence"),
                ],
            ),
            (
                "report figure lambda_sweep",
                [
                    "report",
                    "figure",
                    "lambda_sweep",
                    "--runs",
                    str(csv),
                    "--experiment",
                    "sweep",
                    "--out-prefix",
                    str(root / "figures" / "sweep"),
                ],
            ),
        ]
        results = {}
        for name, argv in cases:
            results[name] = time_command(argv, args.repeat, root)
            r = results[name]
            print(
                f"{name:<34} median {r['median_s']:6.2f} s  min {r['min_s']:6.2f} s  imports: "
                f"{', '.join(r['imports']) or '-'}",
                flush=True,
            )
    doc = {
        "benchmark": "report_startup",
        "label": args.label,
        "repeat": args.repeat,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "commands": results,
    }
    from upfl.files import git_commit, write_json

    doc["git_commit"] = git_commit()
    write_json(args.out, doc)
    print(f"load average before {doc['load_average_before']}, after {doc['load_average_after']}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
