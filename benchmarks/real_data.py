"""Benchmark of the Appendix H.2 models on the CPU: per-device gradients by vmap vs a per-device loop.

Per step: k = 15 devices (frac 0.3 of FEMNIST's 50), batch 32; mlp and cnn on 784 features and 10
classes, lstm on 25 token ids with 300d embeddings. ``grad_s`` times ``model.loss_and_grad`` alone,
``solver_step_s`` one step of ``upfl.solvers.torch_backend.local_solve`` (gradient, proximal term, momentum update).
vmap and loop repetitions are interleaved so both see the same machine load; the summary statistic
is the median, the minimum is reported too.

One full training round (FedProx, mu 0.1, frac 0.3, stragglers 0.9, E = 20, batch 32, lr 0.05,
momentum 0.5) on small synthetic data sets generated here: FEMNIST-shaped (50 devices of 40-120
28x28 images, 5 of 10 classes each) and Sent140-shaped (52 devices of 40-120 tweets of 25 token ids,
a 5000-word vocabulary with random 300d vectors).

With ``--paper-sized``, also one round of the MLP and the LSTM on stand-ins with the paper's device
sizes (Table 2: 50 devices and 16421 images; 52 devices and 32299 tweets).

Run: python benchmarks/real_data.py [--threads 2,1] [--reps 7] [--paper-sized]
(writes benchmarks/results/real_data.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from results_file import publish
from upfl import config as cfgmod
from upfl.data import load_leaf, write_leaf
from upfl.data.glove import embedding_matrix, save_npy, save_vocab
from upfl.data.publish import write_dataset
from upfl.draws.batch_plans import batch_plan
from upfl.engine.simulation import run
from upfl.models import build_model
from upfl.solvers.torch_backend import local_solve

K, BATCH, SEQ, EMB_DIM, VOCAB = 15, 32, 25, 300, 5000


def device_sizes(rng: np.random.Generator, n: int) -> list[int]:
    return [int(s) for s in rng.integers(40, 121, n)]


def femnist_shaped(root: Path, seed: int = 0, devices: int = 50, sizes: list[int] | None = None) -> Path:
    """28x28 images in [0, 1]: a class template plus noise; each device holds 5 of the 10 classes."""
    rng = np.random.default_rng(seed)
    templates = rng.random((10, 784)) < 0.2
    users = [f"f_{i:05d}" for i in range(devices)]
    train, test = ({}, {}), ({}, {})
    for u, n in zip(users, sizes or device_sizes(rng, devices), strict=True):
        classes = rng.choice(10, 5, replace=False)
        for (xs, ys), m in ((train, n), (test, max(1, n // 9))):
            y = rng.choice(classes, m)
            x = np.clip(0.8 * templates[y] + 0.3 * rng.standard_normal((m, 784)), 0, 1)
            xs[u], ys[u] = np.round(x, 3).astype(np.float32), y
    return write_leaf(root, users, train, test, {"name": "femnist_shaped", "num_classes": 10})


def sent140_shaped(root: Path, seed: int = 0, devices: int = 52, sizes: list[int] | None = None) -> Path:
    """25 token ids per tweet (pad id = vocabulary size at the end), label 1 when positive words dominate."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(VOCAB)]
    vectors = rng.standard_normal((VOCAB, EMB_DIM)).astype(np.float32) * 0.4
    users = [f"s_{i:05d}" for i in range(devices)]
    train, test = ({}, {}), ({}, {})
    for u, n in zip(users, sizes or device_sizes(rng, devices), strict=True):
        for (xs, ys), m in ((train, n), (test, max(1, n // 4))):
            lengths = rng.integers(5, SEQ + 1, m)
            x = np.full((m, SEQ), VOCAB, dtype=np.int64)
            for i, length in enumerate(lengths):
                x[i, :length] = rng.integers(0, VOCAB, length)
            xs[u] = x
            ys[u] = (np.where(x < VOCAB, x % 2, 0).sum(1) * 2 > lengths).astype(np.int64)
    meta = {
        "name": "sent140_shaped",
        "num_classes": 2,
        "x_dtype": "int64",
        "embeddings": {
            "file": "embeddings.npy",
            "vocab_file": "vocab.txt",
            "dim": EMB_DIM,
            "vocab_size": VOCAB,
            "pad_id": VOCAB,
            "unk_id": VOCAB,
            "rows": VOCAB + 1,
        },
    }
    return write_dataset(
        root,
        users,
        train,
        test,
        meta,
        extras={
            "embeddings.npy": lambda p: save_npy(p, embedding_matrix(vectors)),
            "vocab.txt": lambda p: save_vocab(p, vocab),
        },
    )


def step_inputs(model, ds, seed: int = 0):
    """k device models near the init, one batch each (the last batch of a device is partly padding)."""
    g = torch.Generator().manual_seed(seed)
    params = model.init_params(torch.Generator().manual_seed(seed)).expand(K, -1).clone()
    params += 0.01 * torch.randn(params.shape, generator=g)
    pool = torch.cat([torch.as_tensor(ds.train_x[u]) for u in ds.train_users])
    x = pool[torch.randint(0, len(pool), (K, BATCH), generator=g)]
    y = torch.eye(ds.num_classes)[torch.randint(0, ds.num_classes, (K, BATCH), generator=g)]
    w = torch.full((K, BATCH), 1.0 / BATCH)
    return params, x, y, w


def summary(times: list[float]) -> dict[str, float]:
    return {"median": statistics.median(times), "min": min(times), "reps": len(times)}


def time_grad_steps(model, ds, reps: int) -> dict[str, dict[str, float]]:
    params, x, y, w = step_inputs(model, ds)
    times = {"vmap": [], "loop": []}
    for rep in range(reps + 1):
        for strategy in times:
            model.batching = strategy
            gen = torch.Generator().manual_seed(rep)
            t0 = time.perf_counter()
            model.loss_and_grad(params, x, y, w, generator=gen)
            if rep:
                times[strategy].append(time.perf_counter() - t0)
    return {s: summary(t) for s, t in times.items()}


def time_solver_steps(model, ds, reps: int, steps: int = 4) -> dict[str, dict[str, float]]:
    """local_solve over K devices of steps * BATCH samples, one epoch: seconds per (batched) step."""
    pool_x = torch.cat([torch.as_tensor(ds.train_x[u]) for u in ds.train_users])
    pool_y = torch.cat([torch.as_tensor(ds.train_y[u]) for u in ds.train_users])
    eye = torch.eye(ds.num_classes)
    n = steps * BATCH
    xs = [pool_x[i * n : (i + 1) * n] for i in range(K)]
    ys = [eye[pool_y[i * n : (i + 1) * n]] for i in range(K)]
    w0 = model.init_params(torch.Generator().manual_seed(0))
    plans = batch_plan([n] * K, [1] * K, BATCH, [torch.Generator().manual_seed(i) for i in range(K)])
    times = {"vmap": [], "loop": []}
    for rep in range(reps + 1):
        for strategy in times:
            model.batching = strategy
            t0 = time.perf_counter()
            local_solve(model, w0, xs, ys, plans, 0.1, 0.05, 0.5, generator=torch.Generator().manual_seed(rep))
            if rep:
                times[strategy].append((time.perf_counter() - t0) / steps)
    return {s: summary(t) for s, t in times.items()}


def round_config(data: Path, name: str, batching: str, threads: int) -> cfgmod.RunConfig:
    return cfgmod.from_dict(
        {
            "data": {"path": str(data)},
            "rounds": 1,
            "seed": 0,
            "device": "cpu",
            "threads": threads,
            "model": {"name": name, "options": {"batching": batching}},
            "algorithm": {"name": "fedprox", "mu": 0.1},
            "devices": {"frac": 0.3, "straggler": 0.9},
            "solver": {"epochs": 20, "batch_size": BATCH, "lr": 0.05, "momentum": 0.5},
            "checkpoint": {"every": 0},
        }
    )


def time_round(data: Path, name: str, batching: str, out: Path, threads: int) -> dict[str, float]:
    s = run(round_config(data, name, batching, threads), out, log=lambda m: None)
    row = (out / "metrics.csv").read_text().splitlines()[-1].split(",")
    return {
        "train_s": s["time"]["train_s"],
        "eval_s_two_evaluations": s["time"]["eval_s"],
        "devices": int(row[6]),
        "local_steps_summed_over_devices": int(row[7]),
        "train_acc_after": s["final"]["train_acc"],
    }


def per_step(name: str, model, ds, reps: int, threads: list[int]) -> dict:
    """grad and solver-step timings of ``model`` for each thread count, vmap vs loop."""
    out = {"num_params": model.num_params, "dropout": model.dropout, "auto_choice_cpu": model.module.batching["cpu"]}
    for t in threads:
        torch.set_num_threads(t)
        load = os.getloadavg()[0]
        grad_s = time_grad_steps(model, ds, reps)
        solver_s = time_solver_steps(model, ds, max(2, reps // 2))
        out[f"threads_{t}"] = {
            "loadavg_1min_before": load,
            "grad_s": grad_s,
            "solver_step_s": solver_s,
            "faster_by_grad_median": min(grad_s, key=lambda s: grad_s[s]["median"]),
            "faster_by_solver_step_median": min(solver_s, key=lambda s: solver_s[s]["median"]),
        }
        print(
            f"{name} threads {t}: P={model.num_params} grad vmap {grad_s['vmap']['median']:.4f}s loop "
            f"{grad_s['loop']['median']:.4f}s; solver step vmap {solver_s['vmap']['median']:.4f}s loop "
            f"{solver_s['loop']['median']:.4f}s (load {load:.2f})",
            file=sys.stderr,
        )
    return out


def paper_sized_rounds(tmp: Path, threads: int) -> dict:
    """One FedProx round of the MLP and the LSTM on stand-ins with the paper's device sizes (Table 2).

    Device training sizes are the preprocessing procedures' own (:func:`upfl.data.femnist.device_sizes`,
    :func:`upfl.data.sent140.device_sizes`: 50 devices, 16421 images; 52 devices, 32299 tweets); the
    batching strategy is the model's CPU default (``auto``).
    """
    from upfl.data.femnist import FemnistSpec
    from upfl.data.femnist import device_sizes as femnist_sizes
    from upfl.data.sent140 import Sent140Spec
    from upfl.data.sent140 import device_sizes as sent140_sizes

    torch.set_num_threads(threads)
    out = {}
    for name, make, sizes in (
        ("mlp", femnist_shaped, femnist_sizes(FemnistSpec())[0]),
        ("lstm", sent140_shaped, sent140_sizes(Sent140Spec())[0]),
    ):
        data = make(tmp / f"{name}_paper", devices=len(sizes), sizes=[int(n) for n in sizes])
        load = os.getloadavg()[0]
        out[name] = {
            "num_devices": len(sizes),
            "train_samples": int(sum(sizes)),
            "threads": threads,
            "loadavg_1min_before": load,
            **time_round(data, name, "auto", tmp / f"{name}_paper_run", threads),
        }
        print(f"{name} paper-sized round: {json.dumps(out[name])}", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2,1", help="thread counts of the per-step timings; rounds use the first")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument(
        "--paper-sized",
        action="store_true",
        help="also one round of the MLP and the LSTM on stand-ins of the paper's size (minutes)",
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "real_data.json"))
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    tmp = Path(tempfile.mkdtemp())
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    sets = {"femnist_shaped": femnist_shaped(tmp / "femnist"), "sent140_shaped": sent140_shaped(tmp / "sent140")}
    loaded = {k: load_leaf(v) for k, v in sets.items()}
    results = {
        "torch": torch.__version__,
        "threads": threads,
        "k": K,
        "batch": BATCH,
        "data_generation_s": time.perf_counter() - t0,
        "per_step": {},
        "round": {},
    }
    for name, key in (("mlp", "femnist_shaped"), ("cnn", "femnist_shaped"), ("lstm", "sent140_shaped")):
        model = build_model(name, loaded[key])
        results["per_step"][name] = per_step(name, model, loaded[key], args.reps, threads)
        torch.set_num_threads(threads[0])
        load = os.getloadavg()[0]
        results["round"][name] = {
            "data": key,
            "threads": threads[0],
            "loadavg_1min_before": load,
            **{b: time_round(sets[key], name, b, tmp / f"{name}_{b}", threads[0]) for b in ("vmap", "loop")},
        }
        print(f"{name} round: {json.dumps(results['round'][name])}", file=sys.stderr)
    if args.paper_sized:
        results["round_paper_sized"] = paper_sized_rounds(tmp, threads[0])
    results["loadavg_start"], results["loadavg_end"] = list(load_start), list(os.getloadavg())
    results["cpu_count"] = os.cpu_count()
    results["wall_total_s"] = time.perf_counter() - t0
    publish(results, Path(args.out))


if __name__ == "__main__":
    main()
