"""Benchmark W1: Synthetic(1,1), 30 devices, frac 0.3, stragglers 0.9, E=20, batch 32, lr 0.05, momentum 0.5, mu=1.

FedProx 80 and 160 iterations and Upcycled-FL 160 (lambda 0.43), for each local-solver backend
(``torch`` and ``numba``), each backend in its own process (peak RSS per backend). The numba solver
is first compiled in a process with an empty cache (cold compile) and then loaded from that cache in
the measuring process. Either happens when a Simulation selects its solver, before the first
iteration, so the per-round figures are steady state and the warm-up is reported separately. A
second pass replays the FedProx rounds piece by piece (draws, batch plan, local solve, aggregation)
and times the evaluation, to show where a round's time goes.

Run: python benchmarks/engine.py     (writes benchmarks/results/engine.json and prints it)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

AUTHORS_PER_TRAINING_ROUND_S = 0.46
"""The authors' code on W1 (issue 2); the target is 10x faster, per training round including evaluation."""

RUNS = (("fedprox80", "fedprox", 80, {}), ("fedprox160", "fedprox", 160, {}),
        ("upcycled160", "upcycled", 160, {"lam": 0.43}))

PRIVATE_RUNS = (("output", {"mechanism": "output", "tau": 10.0, "sigma": 1.0}),
                ("objective", {"mechanism": "objective", "alpha": 10.0, "allow_no_guarantee": True}))
"""Private W1 rows (FedProx 80): the same workload with output or objective perturbation; issue 5 asks each to be
within 20% of the non-private time per training round. W1's softmax regression is not the GLM of Theorem C.2,
so the objective row runs with ``allow_no_guarantee`` (the noise and its cost are the same)."""


def w1_config(data: str, alg: str, rounds: int, extra: dict, backend: str, privacy: dict | None = None):
    from upfl import config as cfgmod
    return cfgmod.from_dict({"data": {"path": data}, "rounds": rounds, "seed": 0, "device": "cpu",
                             "privacy": privacy or {"mechanism": "none"},
                             "algorithm": {"name": alg, "mu": 1.0, **extra},
                             "devices": {"frac": 0.3, "straggler": 0.9},
                             "solver": {"epochs": 20, "batch_size": 32, "lr": 0.05, "momentum": 0.5,
                                        "backend": backend},
                             "checkpoint": {"every": 0}})


def warm_up(backend: str) -> float:
    """Seconds to select the backend's solver: for numba the import, then the compile or cache load.

    :func:`upfl.solvers.torch_backend.select_local_solver` does this once per :class:`upfl.engine.simulation.Simulation`,
    before the first iteration, so none of it is in the per-round figures.
    """
    from upfl.models import LogisticRegression
    from upfl.solvers.torch_backend import select_local_solver
    t0 = time.perf_counter()
    select_local_solver(backend, LogisticRegression(3, 2), torch.device("cpu"))
    return time.perf_counter() - t0


def run_figures(out: Path, summary: dict, total: float) -> dict:
    """Per-round figures of one run from its metrics.csv and summary.json."""
    rows = [line.split(",") for line in (out / "metrics.csv").read_text().splitlines()[1:]]
    train = [float(r[9]) for r in rows if r[1] == "train"]
    up = [float(r[9]) for r in rows if r[1] == "upcycle"]
    steps = [int(r[7]) for r in rows if r[1] == "train"]
    t = summary["time"]
    return {
        "iterations": len(rows) - 1, "training_rounds": len(train), "wall_total_s": total,
        "per_training_round_s": sum(train) / len(train),
        "per_training_round_incl_eval_s": (t["train_s"] + t["eval_s"]) / len(train),
        "per_even_round_s": (sum(up) / len(up)) if up else None,
        "per_evaluation_s": t["eval_s"] / len(rows),
        "sgd_steps_per_round_mean": sum(steps) / len(steps),
        "final": summary["final"],
    }


def round_profile(data: str, backend: str, rounds: int) -> dict:
    """Mean seconds per FedProx training round in each piece of :meth:`Simulation.training_round`."""
    from upfl.algorithms import weighted_average
    from upfl.data import load_leaf
    from upfl.rng import generator
    from upfl.engine.draws import draw_stragglers, sample_clients
    from upfl.engine.simulation import Simulation
    from upfl.solvers.torch_backend import batch_plan
    cfg = w1_config(data, "fedprox", rounds, {}, backend)
    sim = Simulation(cfg, load_leaf(data), torch.device("cpu"))
    w = sim.model.init_params(generator(0, "init"))
    parts = {"draws_s": 0.0, "batch_plan_s": 0.0, "local_solve_s": 0.0, "aggregate_s": 0.0}
    n = len(sim.devices)
    for k in range(1, rounds + 1):
        t0 = time.perf_counter()
        chosen = sample_clients(0, k, n, 0.3)
        _, epochs = draw_stragglers(0, k, n, 0.9, 20)
        gens = [generator(0, "batches", k, i) for i in chosen]
        t1 = time.perf_counter()
        plans = batch_plan([sim.xs[i].shape[0] for i in chosen], [epochs[i] for i in chosen], 32, gens)
        t2 = time.perf_counter()
        local, _ = sim.local_solve(sim.model, w, [sim.xs[i] for i in chosen], [sim.ys[i] for i in chosen],
                                   plans, 1.0, 0.05, 0.5, generator=generator(0, "dropout", k))
        t3 = time.perf_counter()
        w = weighted_average(local, sim.sizes[chosen])
        t4 = time.perf_counter()
        for key, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            parts[key] += dt
    e0 = time.perf_counter()
    for _ in range(20):
        sim.evaluate(w)
    parts = {key: v / rounds for key, v in parts.items()}
    parts["evaluation_s"] = (time.perf_counter() - e0) / 20
    return parts


def worker(backend: str, data: str) -> dict:
    """All W1 figures of one backend (run in its own process)."""
    from upfl.engine.simulation import run
    result = {"backend": backend, "warmup_s": warm_up(backend), "torch_threads": torch.get_num_threads()}
    if backend == "numba":
        import numba
        result["numba_threads"] = numba.get_num_threads()
    tmp = Path(tempfile.mkdtemp())
    for name, alg, rounds, extra in RUNS:
        t0 = time.perf_counter()
        summary = run(w1_config(data, alg, rounds, extra, backend), tmp / name, log=lambda m: None)
        result[name] = run_figures(tmp / name, summary, time.perf_counter() - t0)
    result["private_rows"] = private_rows(data, backend, tmp)
    result["ratio_upcycled160_over_fedprox80"] = result["upcycled160"]["wall_total_s"] / result["fedprox80"]["wall_total_s"]
    result["ratio_upcycled160_over_fedprox160"] = (result["upcycled160"]["wall_total_s"]
                                                   / result["fedprox160"]["wall_total_s"])
    result["profile_fedprox80_per_round"] = round_profile(data, backend, 80)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def private_rows(data: str, backend: str, tmp: Path, reps: int = 5) -> dict:
    """FedProx 80 without privacy, with output and with objective perturbation, interleaved ``reps`` times.

    Interleaving lets every variant see the same machine load; the figures are medians over the repetitions
    of the mean time per training round (metrics.csv), and the ratios are private over non-private medians.
    """
    variants = (("non_private", None),) + PRIVATE_RUNS
    per_round: dict[str, list[float]] = {name: [] for name, _ in variants}
    for rep in range(reps):
        for name, privacy in variants:
            out = tmp / f"private_{name}_{rep}"
            summary = run_w1(data, backend, privacy, out)
            per_round[name].append(run_figures(out, summary, 0.0)["per_training_round_s"])
    med = {name: statistics.median(times) for name, times in per_round.items()}
    rows = {name: {"per_training_round_s_median": med[name], "per_training_round_s_all": per_round[name]}
            for name in per_round}
    for name, _ in PRIVATE_RUNS:
        rows[name]["over_non_private"] = med[name] / med["non_private"]
    rows["within_20_percent"] = all(rows[name]["over_non_private"] <= 1.2 for name, _ in PRIVATE_RUNS)
    return rows


def run_w1(data: str, backend: str, privacy: dict | None, out: Path) -> dict:
    from upfl.engine.simulation import run
    return run(w1_config(data, "fedprox", 80, {}, backend, privacy), out, log=lambda m: None)


def spawn(backend: str, data: str, cache_dir: str, only_warm_up: bool = False) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir}
    cmd = [sys.executable, __file__, "--worker", backend, "--data", data] + (["--warm-up-only"] if only_warm_up else [])
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("torch", "numba"))
    parser.add_argument("--data")
    parser.add_argument("--warm-up-only", action="store_true")
    args = parser.parse_args()
    if args.worker:
        out = {"warmup_s": warm_up(args.worker)} if args.warm_up_only else worker(args.worker, args.data)
        json.dump(out, sys.stdout)
        return
    from upfl.data import generate_synthetic
    tmp = Path(tempfile.mkdtemp())
    data = str(generate_synthetic("synthetic_1_1", tmp / "s11"))
    cache = str(tmp / "numba_cache")
    cold = spawn("numba", data, cache, only_warm_up=True)["warmup_s"]
    results = {"workload": "W1 " + __doc__.splitlines()[0].split(": ", 1)[1],
               "authors_per_training_round_s": AUTHORS_PER_TRAINING_ROUND_S,
               "target_per_training_round_incl_eval_s": AUTHORS_PER_TRAINING_ROUND_S / 10,
               "torch": torch.__version__, "cpu_count": os.cpu_count(), "load_average_before": os.getloadavg()}
    for backend in ("torch", "numba"):
        results[backend] = spawn(backend, data, cache)
    results["numba"]["cold_compile_s"] = cold
    results["numba"]["cached_load_s"] = results["numba"].pop("warmup_s")
    for backend in ("torch", "numba"):
        r = results[backend]
        worst = max(r[name]["per_training_round_incl_eval_s"] for name in ("fedprox80", "upcycled160"))
        r["worst_per_training_round_incl_eval_s"] = worst
        r["speedup_vs_authors"] = AUTHORS_PER_TRAINING_ROUND_S / worst
        r["target_met"] = worst < AUTHORS_PER_TRAINING_ROUND_S / 10
    results["numba_speedup_vs_torch_per_training_round"] = (results["torch"]["fedprox80"]["per_training_round_s"]
                                                            / results["numba"]["fedprox80"]["per_training_round_s"])
    results["final_abs_diff_numba_vs_torch"] = {
        name: {k: abs(results["numba"][name]["final"][k] - results["torch"][name]["final"][k])
               for k in ("train_loss", "train_acc", "test_loss", "test_acc")} for name, *_ in RUNS}
    results["load_average_after"] = os.getloadavg()
    out = Path(__file__).parent / "results" / "engine.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
