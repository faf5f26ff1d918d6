"""The time of a bundle of the pipeline's short synthetic runs, per run: the Python around the kernels is most of
what a short run costs besides them.

Two bundles, each run in one process as ``upfl run-many`` runs them (its per-run entry point: data set loaded once,
numba's kernels warmed up first, one thread, checkpoints every 30 s, a log file per run, the finished-run store in
a temporary folder):

- ``table1``: Table 1's grid on Synthetic(1,1) (FedAvg; FedProx mu in {0.1, 0.3, 0.5, 1}; Upcycled-FL for each
  (mu, lambda) pair: 21 runs, 80 or 160 iterations, evaluated at every iteration), 2 classes x 20 features, frac 0.3,
  90% stragglers, seeds 0 and 1 (42 runs);
- ``privacy``: the privacy trade-off's runs on Synthetic(iid) (binary_logreg, unit-norm features, every device in
  every round, the last 10 iterations evaluated; FedProx and Upcycled-FL without noise, with output noise at 5
  sigmas and objective noise at 4 alphas: 20 runs), seeds 0 and 1 (40 runs).

Figures per bundle and tree: CPU seconds of the process per run (the minimum over processes), the sum of the
runs' ``time.total_s`` (their timed training, upcycling and evaluation) and the CPU per run outside it (the set-up,
the per-iteration bookkeeping, the result files and the finished-run store; the minimum over processes); a sha256
of all runs' metrics.csv without the wall-time columns (the trees must agree).
With ``--baseline TREE`` (a source tree, e.g. ``git worktree add /tmp/base a7b95c0``) both trees run in
alternating fresh processes.

Run: NUMBA_NUM_THREADS=1 python benchmarks/bundle_overhead.py [--baseline TREE]
(writes benchmarks/results/bundle_overhead.json)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import publish

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASE = {
    "device": "auto",
    "solver": {"epochs": 20, "batch_size": 32, "lr": 0.05, "momentum": 0.5, "backend": "auto"},
    "checkpoint": {"seconds": 30},
    "threads": 1,
}


def table1_docs(data: str) -> list[dict]:
    algorithms = [({"name": "fedavg"}, 80)] + [({"name": "fedprox", "mu": m}, 80) for m in (0.1, 0.3, 0.5, 1)]
    algorithms += [
        ({"name": "upcycled", "mu": m, "lam": lam}, 160) for m in (0.1, 0.3, 0.5, 1) for lam in (0.04, 0.12, 0.21, 0.43)
    ]
    return [
        {
            **BASE,
            "data": {"path": data},
            "devices": {"frac": 0.3, "straggler": 0.9},
            "evaluation": {"every": 1},
            "algorithm": alg,
            "rounds": rounds,
            "seed": seed,
        }
        for seed in (0, 1)
        for alg, rounds in algorithms
    ]


def privacy_docs(data: str) -> list[dict]:
    noise = [{}] + [{"mechanism": "output", "tau": 10, "sigma": s} for s in (0.5, 0.7071, 1.0, 1.4142, 2.0)]
    noise += [{"mechanism": "objective", "alpha": a} for a in (5, 10, 20, 40)]
    algorithms = ({"name": "fedprox", "mu": 0.1}, {"name": "upcycled", "mu": 0.1, "lam": 0.04})
    return [
        {
            **BASE,
            "data": {"path": data, "feature_scaling": "unit_norm"},
            "model": {"name": "binary_logreg"},
            "devices": {"frac": 1.0, "straggler": 0.0},
            "evaluation": {"every": 1, "last": 10},
            "rounds": 80,
            "algorithm": alg,
            "seed": seed,
            **({"privacy": p} if p else {}),
        }
        for seed in (0, 1)
        for p in noise
        for alg in algorithms
    ]


BUNDLES = {"table1": ("synthetic_1_1", table1_docs), "privacy": ("synthetic_iid", privacy_docs)}


def worker(bundle: str, data: str) -> dict:
    """Train the bundle in this process through ``upfl run-many``'s per-run entry point (each run's log file and
    ``time.total_s``; the finished-run store); CPU seconds per run, time inside runs, metrics digest."""
    import pandas as pd

    from upfl.pipeline.bundle_trainer import train_entry

    out = Path(tempfile.mkdtemp())
    entries = [
        {"id": f"r{i}", "out": str(out / f"r{i}"), "log": str(out / "logs" / f"r{i}.log"), "data": data, "config": doc}
        for i, doc in enumerate(BUNDLES[bundle][1](data))
    ]
    store = str(out / "store")
    train_entry({**entries[0], "id": "warm", "out": str(out / "warm")}, 1, None)  # numba's kernels loaded first
    c0 = time.process_time()
    failed = [r for r in (train_entry(e, 1, store) for e in entries) if r["status"] != "trained"]
    cpu = time.process_time() - c0
    if failed:
        raise RuntimeError(f"runs failed: {failed}")
    inside, digest = 0.0, hashlib.sha256()
    for e in entries:
        inside += json.loads((Path(e["out"]) / "summary.json").read_text())["time"]["total_s"]
        metrics = pd.read_csv(Path(e["out"]) / "metrics.csv").drop(columns=["wall_s", "cum_wall_s"])
        digest.update(metrics.to_csv(index=False).encode())
    return {
        "runs": len(entries),
        "cpu_s_per_run": cpu / len(entries),
        "outside_s_per_run": (cpu - inside) / len(entries),
        "inside_runs_s": inside,
        "metrics_sha256": digest.hexdigest(),
    }


def spawn(src: Path, bundle: str, data: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--worker", bundle, "--data", data]
    return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a source tree to compare with (A/B, alternating processes)")
    parser.add_argument("--processes", type=int, default=3, help="processes per bundle and tree")
    parser.add_argument("--worker", choices=sorted(BUNDLES))
    parser.add_argument("--data")
    args = parser.parse_args()
    if args.worker:
        json.dump(worker(args.worker, args.data), sys.stdout)
        return
    from upfl.data import generate_synthetic

    tmp = Path(tempfile.mkdtemp())
    sides = {"current": ROOT / "src"}
    if args.baseline:
        sides["baseline"] = Path(args.baseline).resolve() / "src"
    load_before = os.getloadavg()
    results: dict = {
        "processes": args.processes,
        "cpu_count": os.cpu_count(),
        "baseline": args.baseline,
        "load_average_before": load_before,
        "bundles": {},
    }
    for bundle, (name, _) in BUNDLES.items():
        data = str(generate_synthetic(name, tmp / name))
        runs = {side: [spawn(src, bundle, data) for _ in range(1)] for side, src in sides.items()}
        for _ in range(args.processes - 1):
            for side, src in sides.items():
                runs[side].append(spawn(src, bundle, data))
        entry = {
            side: {
                "runs": r[0]["runs"],
                "cpu_ms_per_run": min(x["cpu_s_per_run"] for x in r) * 1e3,
                "outside_ms_per_run": min(x["outside_s_per_run"] for x in r) * 1e3,
                "inside_runs_s": min(x["inside_runs_s"] for x in r),
                "metrics_sha256": r[0]["metrics_sha256"],
            }
            for side, r in runs.items()
        }
        if args.baseline:
            entry["metrics_identical"] = entry["current"]["metrics_sha256"] == entry["baseline"]["metrics_sha256"]
        results["bundles"][bundle] = entry
    results["load_average_after"] = os.getloadavg()
    publish(results, HERE / "results" / "bundle_overhead.json")


if __name__ == "__main__":
    main()
