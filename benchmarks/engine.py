"""Benchmark W1: Synthetic(1,1), 30 devices, frac 0.3, stragglers 0.9, E=20, batch 32, lr 0.05, mu=1.

FedProx 80 iterations and Upcycled-FL 160; prints and writes benchmarks/results/engine.json.
Run: python benchmarks/engine.py
"""

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

from upfl import config as cfgmod
from upfl.data import generate_synthetic
from upfl.simulation import run


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    data = generate_synthetic("synthetic_1_1", tmp / "s11")
    results = {}
    for name, alg, rounds, extra in (("fedprox", "fedprox", 80, {}), ("upcycled", "upcycled", 160, {"lam": 0.43})):
        cfg = cfgmod.from_dict({"data": {"path": str(data)}, "rounds": rounds, "seed": 0, "device": "cpu",
                                "algorithm": {"name": alg, "mu": 1.0, **extra},
                                "devices": {"frac": 0.3, "straggler": 0.9},
                                "solver": {"epochs": 20, "batch_size": 32, "lr": 0.05, "momentum": 0.5},
                                "checkpoint": {"every": 0}})
        t0 = time.perf_counter()
        s = run(cfg, tmp / name, log=lambda m: None)
        total = time.perf_counter() - t0
        lines = (tmp / name / "metrics.csv").read_text().splitlines()[1:]
        rows = [line.split(",") for line in lines]
        train = [float(r[9]) for r in rows if r[1] == "train"]
        up = [float(r[9]) for r in rows if r[1] == "upcycle"]
        steps = [int(r[7]) for r in rows if r[1] == "train"]
        results[name] = {
            "iterations": rounds, "training_rounds": len(train), "wall_total_s": total,
            "per_training_round_s": sum(train) / len(train),
            "per_training_round_incl_eval_s": (s["time"]["train_s"] + s["time"]["eval_s"]) / len(train),
            "per_even_round_s": (sum(up) / len(up)) if up else None,
            "per_evaluation_s": s["time"]["eval_s"] / (rounds + 1),
            "sgd_steps_per_round_mean": sum(steps) / len(steps),
            "final_train_acc": s["final"]["train_acc"], "final_test_acc": s["final"]["test_acc"],
        }
    results["ratio_upcycled160_over_fedprox80"] = results["upcycled"]["wall_total_s"] / results["fedprox"]["wall_total_s"]
    results["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    results["torch"] = torch.__version__
    results["threads"] = torch.get_num_threads()
    out = Path(__file__).parent / "results" / "engine.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
