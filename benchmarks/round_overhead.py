"""Per-round overhead of W1's training loop: the time of a training round, of its local-solve kernel, of its batch-plan
draws, and the rest (the Python work around them).

W1: Synthetic(1,1), 30 devices, frac 0.3, stragglers 0.9, E=20, batch 32, lr 0.05, momentum 0.5, FedProx mu=1, numba
backend (benchmarks/engine.py's ``w1_config``). Each pass replays the 80 training rounds of a fresh run
(:meth:`upfl.engine.simulation.Simulation.training_round` of a new ``Simulation``, whose first round makes what a run
makes once; the process's draw caches emptied first, as a run of its own finds them) and times every round; the
kernel times come from wrapping the compiled entry points. Figures are the
minimum over passes of the mean per round (the pass least disturbed by other work), with the median beside it; the
rest is given in wall time and in the CPU time of the loop's thread (insensitive to other processes on the machine).
A second set of passes keeps the draws of the first (a bundle's runs with one seed share them).

With ``--baseline REV`` the same passes run on the sources of commit REV too (``git archive``), alternating the two
in fresh processes, so both see the same machine load; the final metrics of W1 (FedProx 80, Upcycled-FL 160) of both
are compared byte for byte.

Run: python benchmarks/round_overhead.py [--baseline REV]  (writes benchmarks/results/round_overhead.json)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import publish

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def timed(module, name: str, totals: dict, key: str) -> None:
    """Replace ``module.name`` by a wrapper adding its wall time to ``totals[key]`` and the calling thread's CPU time
    to ``totals[key + "_cpu"]`` (absent names are left alone)."""
    inner = getattr(module, name, None)
    if inner is None:
        return

    def wrapper(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - t0
            totals[key + "_cpu"] += time.thread_time() - c0

    setattr(module, name, wrapper)


def upfl_modules():
    """(draws, torch solver, numba solver, simulation) of the ``upfl`` this process imports: a baseline tree from
    before the engine/ and solvers/ folders has them at the top of the package."""
    try:
        from upfl.draws import rounds as draws
        from upfl.engine import simulation
        from upfl.solvers import numba_backend, torch_backend
    except ImportError:  # a tree from before the draws/ folder, or from before engine/ and solvers/
        try:
            from upfl.engine import draws, simulation
            from upfl.solvers import numba_backend, torch_backend
        except ImportError:
            from upfl import draws, simulation
            from upfl import solver as torch_backend
            from upfl import solver_numba as numba_backend
    return draws, torch_backend, numba_backend, simulation


def empty_draw_caches() -> None:
    """Forget the draws a previous pass made (a fresh run's rounds draw everything)."""
    draws, solver, _, _ = upfl_modules()
    try:
        from upfl.draws.batch_plans import DRAW_CACHE
    except ImportError:  # a tree from before the draws/ folder
        DRAW_CACHE = solver.DRAW_CACHE
    DRAW_CACHE.entries.clear()
    DRAW_CACHE.bytes = 0
    draws._round_draws.cache_clear()
    getattr(draws, "block_draws", draws._round_draws).cache_clear()


def passes(data: str, rounds: int, repeats: int, fresh: bool) -> dict:
    """Per-round seconds of every pass: total, local-solve kernel, batch-plan draws and the rest (wall time), and the
    rest in CPU time of the thread that runs the loop (what the Python work costs, whatever else the machine runs).
    ``fresh``: every pass draws everything, as a run of its own does; else the draws are kept from the first pass,
    as a bundle's runs with one seed find them."""
    import torch

    from upfl.data import load_leaf
    from upfl.draws.streams import generator

    _, solver, solver_numba, simulation = upfl_modules()
    Simulation = simulation.Simulation
    sys.path.insert(0, str(HERE))
    from engine import w1_config

    totals = {"kernel_s": 0.0, "draws_s": 0.0, "kernel_s_cpu": 0.0, "draws_s_cpu": 0.0}
    for name in ("solve_devices", "solve_devices_serial"):
        timed(getattr(solver_numba, "solver", solver_numba), name, totals, "kernel_s")
    timed(getattr(solver_numba, "plans", solver_numba), "shuffle_plans", totals, "draws_s")
    timed(solver, "batch_plan", totals, "draws_s")
    cfg, dataset = w1_config(data, "fedprox", rounds, {}, "numba"), load_leaf(data)
    out = {"total_s": [], "kernel_s": [], "draws_s": [], "rest_s": [], "rest_cpu_s": []}
    empty_draw_caches()
    for p in range(repeats + (0 if fresh else 1)):
        if fresh:
            empty_draw_caches()
        sim = Simulation(cfg, dataset, torch.device("cpu"))  # a new run: what a run keeps is gone, the caches stay
        w = sim.model.init_params(generator(0, "init"))
        totals.update(dict.fromkeys(totals, 0.0))
        spent = spent_cpu = 0.0
        for k in range(1, rounds + 1):
            t0, c0 = time.perf_counter(), time.thread_time()
            w, _, _ = sim.training_round(w, k)
            spent += time.perf_counter() - t0
            spent_cpu += time.thread_time() - c0
        if not fresh and p == 0:
            continue  # the pass that draws what the others find kept
        out["total_s"].append(spent / rounds)
        out["kernel_s"].append(totals["kernel_s"] / rounds)
        out["draws_s"].append(totals["draws_s"] / rounds)
        out["rest_s"].append((spent - totals["kernel_s"] - totals["draws_s"]) / rounds)
        out["rest_cpu_s"].append((spent_cpu - totals["kernel_s_cpu"] - totals["draws_s_cpu"]) / rounds)
    return out


def w1_digest(data: str) -> dict:
    """sha256 of W1's metrics.csv without the wall-time columns, and the final metrics (FedProx 80, Upcycled-FL 160)."""
    run = upfl_modules()[3].run
    sys.path.insert(0, str(HERE))
    from engine import w1_config

    out = {}
    for name, alg, rounds, extra in (("fedprox80", "fedprox", 80, {}), ("upcycled160", "upcycled", 160, {"lam": 0.43})):
        folder = Path(tempfile.mkdtemp()) / name
        summary = run(w1_config(data, alg, rounds, extra, "numba"), folder, log=lambda m: None)
        lines = [line.rsplit(",", 2)[0] for line in (folder / "metrics.csv").read_text().splitlines()]
        out[name] = {"metrics_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(), "final": summary["final"]}
    return out


def worker(data: str, rounds: int, repeats: int, digest: bool) -> dict:
    import upfl

    result = {
        "upfl": str(Path(upfl.__file__).parent),
        "fresh": passes(data, rounds, repeats, fresh=True),
        "kept": passes(data, rounds, repeats, fresh=False),
    }
    if digest:
        result["w1"] = w1_digest(data)
    return result


def spawn(src: Path, data: str, rounds: int, repeats: int, digest: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--worker", "--data", data, "--rounds", str(rounds), "--repeats", str(repeats)]
    done = subprocess.run(cmd + (["--digest"] if digest else []), env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def summary_of(results: list[dict]) -> dict:
    """Per figure: the minimum over passes (and processes) of the mean per round, in microseconds, and the median."""
    out = {}
    for key in ("total_s", "kernel_s", "draws_s", "rest_s", "rest_cpu_s"):
        values = [v for r in results for v in r[key]]
        out[key[:-2] + "_us"] = {"min": min(values) * 1e6, "median": statistics.median(values) * 1e6}
    return out


def baseline_sources(rev: str, into: Path) -> Path:
    """The ``src`` folder of commit ``rev``, extracted under ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a commit to compare with (A/B, interleaved)")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per side")
    parser.add_argument("--repeats", type=int, default=5, help="passes of the run per process")
    parser.add_argument("--rounds", type=int, default=80)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--digest", action="store_true")
    parser.add_argument("--data")
    args = parser.parse_args()
    if args.worker:
        json.dump(worker(args.data, args.rounds, args.repeats, args.digest), sys.stdout)
        return
    from upfl.data import generate_synthetic

    tmp = Path(tempfile.mkdtemp())
    data = str(generate_synthetic("synthetic_1_1", tmp / "s11"))
    sides = {"current": ROOT / "src"}
    if args.baseline:
        sides["baseline"] = baseline_sources(args.baseline, tmp / "baseline")
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for p in range(args.processes):
        for side, src in sides.items():
            runs[side].append(spawn(src, data, args.rounds, args.repeats, digest=p == 0))
    results = {
        "workload": "W1 FedProx, " + __doc__.split("W1: ", 1)[1].split(", numba")[0] + ", numba backend",
        "rounds": args.rounds,
        "processes": args.processes,
        "repeats_per_process": args.repeats,
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "baseline": args.baseline,
        "commit": git_head(),
    }
    for side in sides:
        results[side] = {
            "fresh_draws": summary_of([r["fresh"] for r in runs[side]]),
            "kept_draws": summary_of([r["kept"] for r in runs[side]]),
            "w1": runs[side][0]["w1"],
        }
    if args.baseline:
        results["w1_bit_identical"] = all(
            results["current"]["w1"][n]["metrics_sha256"] == results["baseline"]["w1"][n]["metrics_sha256"]
            for n in results["current"]["w1"]
        )
    results["load_average_after"] = os.getloadavg()
    publish(results, HERE / "results" / "round_overhead.json")


def git_head() -> str | None:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


if __name__ == "__main__":
    main()
