"""W1's numbers, bit for bit, in this tree and another: a digest of 24 runs that a refactoring must leave unchanged.

W1 is Synthetic(1,1) from our generator (30 devices, frac 0.3, 90% stragglers, E = 20, batch 32, lr 0.05,
momentum 0.5, mu 1) trained with the compiled solver: FedProx for 80 iterations and Upcycled-FL (lambda 0.43) for 160,
seeds 0-11. The digest is the SHA-256 of every run's metrics.csv rows without the wall-time columns, in run order;
beside it, Upcycled-FL seed 2's final metrics.

Run: python benchmarks/w1_digest.py [--baseline TREE] (each tree in its own process; writes
benchmarks/results/w1_digest.json, with ``identical`` when a baseline is given). ``--torch-average`` runs this tree
with the size-weighted average taken as torch computes it (``weights @ models``, a BLAS product) instead of
:func:`upfl.algorithms.updates.weighted_sum`: against a tree from before the average had its own summation order, the
digests are then identical, so that the average is all that changed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from results_file import publish  # noqa: E402

SEEDS = range(12)
RUNS = (("fedprox80", "fedprox", 80, {}), ("upcycled160", "upcycled", 160, {"lam": 0.43}))
TIME_COLUMNS = ("wall_s", "cum_wall_s")


def torch_average(models, weights):
    """The weighted average as torch computes it: ``weights @ models`` (float32)."""
    import numpy as np
    import torch

    return (torch.from_numpy(np.asarray(weights, np.float32)) @ torch.from_numpy(np.ascontiguousarray(models))).numpy()


def digest_of_this_tree(average_as_torch: bool = False) -> dict:
    """The digest of the 24 runs with the upfl on ``sys.path`` (one process, one temporary folder); with
    ``average_as_torch`` the average is :func:`torch_average`."""
    if average_as_torch:
        from upfl.algorithms import updates

        updates.weighted_sum = torch_average
    from engine import w1_config
    from upfl.data import generate_synthetic
    from upfl.engine.simulation import run

    tmp = Path(tempfile.mkdtemp(prefix="upfl-w1-digest-"))
    data = str(generate_synthetic("synthetic_1_1", tmp / "s11"))
    digest, finals = hashlib.sha256(), {}
    for seed in SEEDS:
        for name, algorithm, rounds, extra in RUNS:
            folder = tmp / f"{name}-{seed}"
            summary = run(w1_config(data, algorithm, rounds, extra, "numba", seed=seed), folder, log=lambda m: None)
            with open(folder / "metrics.csv", newline="") as f:
                rows = [{k: v for k, v in row.items() if k not in TIME_COLUMNS} for row in csv.DictReader(f)]
            digest.update(json.dumps(rows).encode())
            finals[f"{name}-{seed}"] = summary["final"]
    return {
        "runs": len(finals),
        "metrics_sha256": digest.hexdigest(),
        "upcycled160_seed2_final": finals["upcycled160-2"],
    }


def tree_digest(tree: Path, average_as_torch: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    worker = [sys.executable, __file__, "--worker", *(["--torch-average"] if average_as_torch else [])]
    done = subprocess.run(worker, env=env, check=True, capture_output=True, text=True)
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    return {"tree": str(tree), "commit": commit.strip(), **json.loads(done.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another source tree (e.g. `git worktree add /tmp/base REV`)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "w1_digest.json")
    parser.add_argument("--torch-average", action="store_true", help="this tree with torch's weighted average")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(digest_of_this_tree(args.torch_average)))
        return
    result = {
        "command": "python benchmarks/w1_digest.py " + " ".join(sys.argv[1:]),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "current": tree_digest(ROOT, args.torch_average),
        "average": "torch (weights @ models)" if args.torch_average else "upfl.algorithms.updates.weighted_sum",
    }
    if args.baseline:
        result["baseline"] = tree_digest(args.baseline.resolve())
        result["identical"] = result["current"]["metrics_sha256"] == result["baseline"]["metrics_sha256"]
    publish(result, args.out)


if __name__ == "__main__":
    main()
