"""W1's final metrics over 10 seeds with the compiled solver, and against another source tree's (before and after).

W1 as in ``benchmarks/engine.py`` (Synthetic(1,1), FedProx 80 and Upcycled-FL 160, numba solver), seeds 0-9 on one
data set. A change of summation order in the kernels moves each SGD trajectory by float32 rounding; what must hold
is that the 10-seed means stay within one standard error of the baseline's. With ``--baseline TREE`` (a checkout
of the older commit, e.g. ``git worktree add /tmp/base <commit>``) the same runs are made with that tree's ``upfl``
in a separate process, and the script prints both means, their difference in standard errors and the largest
per-seed difference of each final metric.

Run: python benchmarks/w1_seeds.py [--baseline TREE] [--seeds 10]   (writes benchmarks/results/w1_seeds.json)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from engine import RUNS, w1_config  # noqa: E402

METRICS = ("train_loss", "train_acc", "test_loss", "test_acc")


def finals(data: str, seeds: int) -> dict:
    """Final metrics of every W1 run and seed with the ``upfl`` this process imports: {run: {metric: [per seed]}}."""
    import upfl

    try:
        from upfl.engine.simulation import run
    except ImportError:  # a baseline tree from before the engine/ folder
        from upfl.simulation import run
    out: dict = {"upfl": str(Path(upfl.__file__).parent)}
    tmp = Path(tempfile.mkdtemp())
    for name, alg, rounds, extra in RUNS:
        if name == "fedprox160":
            continue
        per_seed = {m: [] for m in METRICS}
        for seed in range(seeds):
            summary = run(
                w1_config(data, alg, rounds, extra, "numba", seed=seed), tmp / f"{name}_{seed}", log=lambda m: None
            )
            for m in METRICS:
                per_seed[m].append(summary["final"][m])
        out[name] = per_seed
    return out


def measure(tree: str, data: str, seeds: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(tree) / "src")}
    cmd = [sys.executable, __file__, "--worker", "--data", data, "--seeds", str(seeds)]
    return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)


def mean_and_error(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error (sample standard deviation / sqrt(n))."""
    return statistics.fmean(values), statistics.stdev(values) / len(values) ** 0.5


def compare(current: dict, baseline: dict | None) -> dict:
    table = {}
    for name in (k for k in current if k != "upfl"):
        rows = {}
        for m in METRICS:
            mean, error = mean_and_error(current[name][m])
            row = {"mean": mean, "standard_error": error}
            if baseline:
                base_mean, base_error = mean_and_error(baseline[name][m])
                row.update(
                    {
                        "baseline_mean": base_mean,
                        "baseline_standard_error": base_error,
                        "mean_difference_in_standard_errors": abs(mean - base_mean) / base_error
                        if base_error
                        else None,
                        "largest_per_seed_difference": max(
                            abs(a - b) for a, b in zip(current[name][m], baseline[name][m], strict=True)
                        ),
                    }
                )
            rows[m] = row
        table[name] = rows
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="source tree to compare with")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        json.dump(finals(args.data, args.seeds), sys.stdout)
        return
    from upfl.data import generate_synthetic

    data = str(generate_synthetic("synthetic_1_1", Path(tempfile.mkdtemp()) / "s11"))
    load_before = os.getloadavg()
    current = measure(str(Path(__file__).resolve().parent.parent), data, args.seeds)
    baseline = measure(str(Path(args.baseline).resolve()), data, args.seeds) if args.baseline else None
    results = {
        "seeds": args.seeds,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "current": current,
        "baseline": baseline,
        "summary": compare(current, baseline),
    }
    out = Path(__file__).parent / "results" / "w1_seeds.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    for name, rows in results["summary"].items():
        for m, r in rows.items():
            line = f"{name:12s} {m:10s} mean {r['mean']:.5f} +- {r['standard_error']:.5f}"
            if baseline:
                line += (
                    f"   baseline {r['baseline_mean']:.5f} +- {r['baseline_standard_error']:.5f}"
                    f"   |difference| {r['mean_difference_in_standard_errors']:.2f} SE"
                    f"   largest per-seed difference {r['largest_per_seed_difference']:.2e}"
                )
            print(line)
    print(f"load average before {load_before}, after {results['load_average_after']}")


if __name__ == "__main__":
    main()
