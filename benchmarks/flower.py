"""Benchmark: workload W1 through Flower's simulation engine (upfl.flower) against ``upfl run``, same machine.

W1: Synthetic(1,1) from the generator (30 devices, one per Flower node), 30% of the devices per training round,
90% stragglers, E = 20, batch 32, lr 0.05, momentum 0.5, Upcycled-FL on FedProx (mu 1, lambda 0.43), 160
iterations (80 training rounds), seed 0. Each engine runs once in its own process; a sampler in this process reads
the resident memory of that process and all its descendants (Ray's GCS, raylet and ClientApp actors for Flower)
every 0.1 s, so "peak memory" is the peak of the summed RSS of everything the engine started.

Seconds per training round exclude evaluation for both engines (each evaluates the global model centrally on the
pooled train and test sets after every round; ``upfl run`` writes it to metrics.csv, the Flower ServerApp to its
own). Flower's first training round includes starting the ClientApp actors and loading the data in them; it is
reported apart, and the steady-state figure is the mean over the other training rounds.

Run: python benchmarks/flower.py   (needs ``pip install -e ".[flower]"``; writes benchmarks/results/flower.json)
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "flower.json"

W1 = {
    "num-server-rounds": 160,
    "seed": 0,
    "algorithm": "upcycled",
    "mu": 1.0,
    "lam": 0.43,
    "fraction-train": 0.3,
    "straggler": 0.9,
    "local-epochs": 20,
    "batch-size": 32,
    "lr": 0.05,
    "momentum": 0.5,
    "device": "cpu",
}
NUM_DEVICES = 30
RAY_RESOURCES = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2, "num_gpus": 0}}


def tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total


def measure(cmd: list[str]) -> tuple[float, int, subprocess.CompletedProcess]:
    """Run ``cmd``; (wall seconds, peak summed RSS of its process tree in bytes, the finished process)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    wall = time.perf_counter() - start
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, "")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out[-4000:]}")
    return wall, peak[0], result


def per_round(metrics_csv: Path, wall_column: str) -> dict:
    with open(metrics_csv) as f:
        rows = list(csv.DictReader(f))
    train = [float(r[wall_column]) for r in rows if r["kind"] == "train"]
    even = [float(r[wall_column]) for r in rows if r["kind"] == "upcycle"]
    out = {
        "training_rounds": len(train),
        "even_rounds": len(even),
        "first_training_round_s": train[0],
        "per_training_round_s": statistics.fmean(train[1:]),
        "per_training_round_median_s": statistics.median(train[1:]),
        "per_even_round_s": statistics.fmean(even) if even else None,
        "final_test_acc": float(rows[-1]["test_acc"]),
        "final_train_loss": float(rows[-1]["train_loss"]),
    }
    if "messages" in rows[0]:
        out["messages_total"] = sum(int(r["messages"]) for r in rows)
        out["messages_even_rounds"] = sum(int(r["messages"]) for r in rows if r["kind"] == "upcycle")
    return out


def worker_upfl(data: str, out: str) -> None:
    from upfl import config as cfgmod
    from upfl.engine.simulation import run
    from upfl.flower import run_config_to_upfl

    cfg = run_config_to_upfl({**W1, "data-path": data})
    run(cfgmod.validate(cfg), out, log=lambda *_: None)


def worker_flower(data: str, out: str) -> None:
    from flwr.simulation import run_simulation

    from upfl.flower import make_client_app, make_server_app

    run_config = {**W1, "data-path": data, "out-dir": out}
    run_simulation(
        server_app=make_server_app(run_config),
        client_app=make_client_app(run_config),
        num_supernodes=NUM_DEVICES,
        backend_config=RAY_RESOURCES,
    )


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("upfl", "flower"), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--results", default=str(RESULTS), help="output JSON (default: %(default)s)")
    args = parser.parse_args()
    if args.worker == "upfl":
        return worker_upfl(args.data, args.out)
    if args.worker == "flower":
        return worker_flower(args.data, args.out)

    import flwr
    import torch

    from upfl.data import generate_synthetic
    from upfl.files import provenance, write_json

    with tempfile.TemporaryDirectory() as tmp:
        data = str(
            generate_synthetic("synthetic_1_1", Path(tmp) / "synthetic_1_1", data_seed=0, num_devices=NUM_DEVICES)
        )
        me = [sys.executable, os.path.abspath(__file__), "--data", data]
        figures = {}
        for engine in ("upfl", "flower"):
            out = Path(tmp) / engine
            load_before = load_average()
            print(f"{engine}: running W1 (load average {load_before})", flush=True)
            wall, peak, _ = measure(me + ["--worker", engine, "--out", str(out)])
            wall_column = "wall_s"
            figures[engine] = {
                "wall_total_s": wall,
                "peak_rss_mib": peak / 2**20,
                "load_average_before": load_before,
                "load_average_after": load_average(),
                **per_round(out / "metrics.csv", wall_column),
            }
            print(json.dumps({engine: figures[engine]}, indent=1), flush=True)
    result = {
        "workload": {"name": "W1", **W1, "devices": NUM_DEVICES, "data": "Synthetic(1,1) generator, data_seed 0"},
        "flower": {
            "version": flwr.__version__,
            "engine": "flwr.simulation.run_simulation, Ray backend",
            "backend_config": RAY_RESOURCES,
        },
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "engines": figures,
        "flower_over_upfl_per_training_round": figures["flower"]["per_training_round_s"]
        / figures["upfl"]["per_training_round_s"],
        **provenance(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(args.results), result)
    print(json.dumps({k: result[k] for k in ("flower_over_upfl_per_training_round",)}, indent=1))
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
