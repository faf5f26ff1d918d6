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
import contextlib
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


def round_config(data: Path, name: str, batching: str, threads: int, epochs: int = 20) -> cfgmod.RunConfig:
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
            "solver": {"epochs": epochs, "batch_size": BATCH, "lr": 0.05, "momentum": 0.5},
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


BATCHINGS = ("vmap", "loop", "bmm")
"""The ways to batch the per-device gradients (``model.options.batching`` besides ``auto``)."""

PAPER_MODELS = (("mlp", "femnist"), ("cnn", "femnist"), ("lstm", "sent140"))
"""The real-data models of the paper (Appendix H.2) and the data set each trains on."""


def paper_device_sizes(resources: Path) -> dict[str, dict]:
    """Per-device training sizes of the paper's FEMNIST and Sent140 as the preprocessing gives them.

    FEMNIST: the authors' per-device counts (``sizes: paper_index``) where their device index is under ``resources``
    (``upfl data fetch paper_femnist``), else the Table 2 shape without it (``sizes: table2_shape``: 50 devices,
    16421 images); Sent140: :func:`upfl.data.sent140.device_sizes` (52 devices, 32299 tweets).
    """
    from upfl.data.femnist import FemnistSpec
    from upfl.data.femnist import device_sizes as femnist_sizes
    from upfl.data.paper import PaperDataError, femnist_device_counts
    from upfl.data.sent140 import Sent140Spec
    from upfl.data.sent140 import device_sizes as sent140_sizes

    try:
        train, _, _ = femnist_device_counts(resources)
        femnist = {"sizes": [int(n) for n in train], "source": f"paper_index ({resources})"}
    except PaperDataError:
        sizes = femnist_sizes(FemnistSpec(sizes="table2_shape"))[0]
        femnist = {"sizes": [int(n) for n in sizes], "source": "table2_shape (no device index under resources/)"}
    sent140 = {"sizes": [int(n) for n in sent140_sizes(Sent140Spec())[0]], "source": "sent140 spec"}
    return {"femnist": femnist, "sent140": sent140}


def layer_flops(model) -> list[tuple[int, bool]]:
    """(forward FLOPs per sample, whether the layer's input needs a gradient) of each matrix product of ``model``.

    Linear layers 2 * in * out; the 3x3 convolution 2 * 9 * channels * side^2; an LSTM layer per time step 2 * 4H
    * (in + H), split into its input part (no input gradient into the frozen embeddings) and its recurrent part.
    Biases, activations and the LSTM's gates' element-wise work are left out (under 1% at the paper's sizes).
    """
    from torch import nn

    module = model.module
    out: list[tuple[int, bool]] = []
    first = True
    for sub in module.modules():
        if isinstance(sub, nn.Conv2d):
            side = module.side
            out.append((2 * sub.weight[0].numel() * sub.out_channels * side * side, not first))
        elif isinstance(sub, nn.Linear):
            out.append((2 * sub.in_features * sub.out_features, not first))
        elif isinstance(sub, nn.LSTM):
            steps = SEQ
            for layer in range(sub.num_layers):
                inputs = sub.input_size if layer == 0 else sub.hidden_size
                out.append((steps * 2 * 4 * sub.hidden_size * inputs, layer > 0))
                out.append((steps * 2 * 4 * sub.hidden_size * sub.hidden_size, True))
        else:
            continue
        first = False
    return out


def training_flops_per_sample(model) -> int:
    """FLOPs of one sample's gradient (:func:`layer_flops`): forward, the weights' gradient (as much again) and the
    inputs' gradient (as much again, where the input needs one)."""
    return sum(f * (3 if needs_input_grad else 2) for f, needs_input_grad in layer_flops(model))


def evaluation_flops_per_sample(model) -> int:
    """FLOPs of one sample's forward pass."""
    return sum(f for f, _ in layer_flops(model))


def floor_flops_per_s(engine_json: Path = Path(__file__).parent / "results" / "engine.json") -> dict:
    """One core's float32 FMA floor: the one ``benchmarks/engine.py --kernels`` measured (``engine_json``'s
    ``kernels``) where it was measured on this CPU model, since a probe on a busy machine reads low; else measured
    here as it does (:func:`fma_floor.measure_floor`, best of 3). The probe here is reported beside it either way."""
    from fma_floor import measure_floor

    probes = [measure_floor() for _ in range(3)]
    here = max(probes, key=lambda f: f["floor_gflops_measured"])
    kernels = {}
    with contextlib.suppress(OSError, ValueError):
        kernels = json.loads(engine_json.read_text()).get("kernels", {})
    if kernels.get("cpu_model") == here.get("cpu_model") and kernels.get("floor_flops_per_s"):
        return {
            **{k: v for k, v in kernels.items() if k not in ("current", "baseline")},
            "floor_source": f"{engine_json.name} kernels (engine.py --kernels)",
            "probe_here_gflops": here["floor_gflops_measured"],
        }
    return {
        **here,
        "floor_flops_per_s": here["floor_gflops_measured"] * 1e9,
        "floor_source": "measured here (fma_floor.measure_floor)",
        "probe_here_gflops": here["floor_gflops_measured"],
    }


def paper_round(data: Path, name: str, batching: str, threads: int, epochs: int, floor: float) -> dict:
    """CPU-seconds, wall seconds and FLOPs of one FedProx training round of ``name`` on ``data`` (and of one
    evaluation of the train and test sets), with each one's ratio to the floor: CPU-seconds x floor / FLOPs (1 is
    every core's FMA units busy with the model's arithmetic for the whole time)."""
    from upfl.engine.simulation import Simulation

    cfg = round_config(data, name, batching, threads, epochs)
    dataset = load_leaf(data)
    sim = Simulation(cfg, dataset, torch.device("cpu"))
    w = sim.initial_model()
    sim.model.loss_and_grad(*step_inputs(sim.model, dataset), generator=torch.Generator())  # first-call set-up
    sim.client_round(1)  # the round's draws and inputs (the environment's, not the model's)
    load = os.getloadavg()[0]
    c0, t0 = time.process_time(), time.perf_counter()
    w, devices, steps = sim.training_round(w, 1)
    train_cpu, train_wall = time.process_time() - c0, time.perf_counter() - t0
    c0, t0 = time.process_time(), time.perf_counter()
    metrics = sim.evaluate(w)
    eval_cpu, eval_wall = time.process_time() - c0, time.perf_counter() - t0
    per_sample = training_flops_per_sample(sim.model)
    train_flops = per_sample * steps * sim.batch_size
    eval_rows = sum(rows for *_, rows in sim.evaluated)
    eval_flops = evaluation_flops_per_sample(sim.model) * eval_rows
    return {
        "batching": sim.model.strategy(torch.device("cpu")),
        "threads": threads,
        "epochs": epochs,
        "loadavg_1min_before": load,
        "devices": devices,
        "local_steps_summed_over_devices": steps,
        "batch_size": sim.batch_size,
        "train_cpu_s": train_cpu,
        "train_wall_s": train_wall,
        "train_flops": train_flops,
        "train_flops_per_sample": per_sample,
        "train_over_floor": train_cpu * floor / train_flops,
        "eval_rows": eval_rows,
        "eval_cpu_s": eval_cpu,
        "eval_wall_s": eval_wall,
        "eval_flops": eval_flops,
        "eval_over_floor": eval_cpu * floor / eval_flops,
        "train_acc_after": metrics["train_acc"],
    }


def paper_sized_rounds(
    tmp: Path,
    threads: int,
    resources: Path,
    scale: float = 1.0,
    epochs: int = 20,
    models: tuple[str, ...] = ("mlp", "cnn", "lstm"),
    batchings: tuple[str, ...] = ("auto",),
) -> dict:
    """One FedProx round (mu 0.1, frac 0.3, stragglers 0.9, batch 32, ``epochs``) of each of ``models`` on stand-ins
    with the paper's device sizes (:func:`paper_device_sizes`; ``scale`` < 1 shrinks every device for a quick check),
    for each of ``batchings``, with its FLOPs and its ratio to the floor (:func:`paper_round`)."""
    sizes = paper_device_sizes(resources)
    floor = floor_flops_per_s()
    out: dict = {"floor": floor, "scale": scale, "sizes": {k: v["source"] for k, v in sizes.items()}}
    made: dict[str, Path] = {}
    for name, dataset in PAPER_MODELS:
        if name not in models:
            continue
        device_sizes = [max(1, round(n * scale)) for n in sizes[dataset]["sizes"]]
        if dataset not in made:
            make = femnist_shaped if dataset == "femnist" else sent140_shaped
            made[dataset] = make(tmp / f"{dataset}_paper", devices=len(device_sizes), sizes=device_sizes)
        row: dict = {"data": dataset, "num_devices": len(device_sizes), "train_samples": sum(device_sizes)}
        for batching in batchings:
            torch.set_num_threads(threads)
            try:
                row[batching] = paper_round(made[dataset], name, batching, threads, epochs, floor["floor_flops_per_s"])
            except cfgmod.ConfigError as e:  # bmm where the model has no backward pass of its own
                row[f"{batching}_not_applicable"] = str(e)
                continue
            r = row[batching]
            print(
                f"{name:4s} paper-sized round ({batching} -> {r['batching']}): {r['train_cpu_s']:.2f} CPU-s "
                f"({r['train_wall_s']:.2f} s wall, {threads} threads), {r['train_flops'] / 1e9:.1f} GFLOP, "
                f"{r['train_over_floor']:.2f}x floor; evaluation {r['eval_cpu_s']:.2f} CPU-s, "
                f"{r['eval_over_floor']:.2f}x floor (load {r['loadavg_1min_before']:.2f})",
                file=sys.stderr,
            )
        out[name] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2,1", help="thread counts of the per-step timings; rounds use the first")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument(
        "--paper-sized",
        action="store_true",
        help="also one round of the MLP, the CNN and the LSTM on stand-ins of the paper's size (minutes)",
    )
    parser.add_argument("--only-paper-sized", action="store_true", help="the paper-sized rounds alone")
    parser.add_argument("--models", default="mlp,cnn,lstm", help="the paper-sized rounds' models")
    parser.add_argument(
        "--batchings",
        default="auto",
        help="the paper-sized rounds' batchings (auto, vmap, loop, bmm); two or more of vmap, loop, bmm: the faster "
        "is kept for this machine, where batching auto takes it",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="every device's size times this (a quick check)")
    parser.add_argument("--epochs", type=int, default=20, help="the paper-sized rounds' local epochs")
    parser.add_argument("--resources", default="resources", help="where the FEMNIST device index may be")
    parser.add_argument(
        "--cache",
        default=None,
        help="where the per-round costs of this machine are kept for the workflow's plan line "
        "(default: upfl.pipeline.costs.machine_cache_path(); only a full-size auto round at 20 epochs is kept)",
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "real_data.json"))
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    tmp = Path(tempfile.mkdtemp())
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    out = Path(args.out)
    results = json.loads(out.read_text()) if args.only_paper_sized and out.exists() else {}
    results.update({"torch": torch.__version__, "threads": threads, "k": K, "batch": BATCH})
    if not args.only_paper_sized:
        per_step_and_rounds(results, tmp, threads, args.reps)
    if args.paper_sized or args.only_paper_sized:
        paper = paper_sized_rounds(
            tmp,
            threads[0],
            Path(args.resources),
            scale=args.scale,
            epochs=args.epochs,
            models=tuple(args.models.split(",")),
            batchings=tuple(args.batchings.split(",")),
        )
        results["round_paper_sized"] = paper
        if args.scale == 1.0 and args.epochs == 20:
            from upfl.measured import machine_cache_path, save_machine_costs

            cache = Path(args.cache) if args.cache else machine_cache_path()
            save_machine_costs(cache, paper_costs(paper), faster_batching(paper))
            print(f"per-round costs of this machine kept in {cache}", file=sys.stderr)
    results["loadavg_start"], results["loadavg_end"] = list(load_start), list(os.getloadavg())
    results["cpu_count"] = os.cpu_count()
    results["wall_total_s"] = time.perf_counter() - t0
    publish(results, out)


def paper_costs(paper: dict) -> dict[str, dict[str, float]]:
    """The CPU-seconds of one training round and of one evaluation of each model measured: with ``auto`` batching,
    else the faster one measured (which ``auto`` takes from then on, :func:`faster_batching`)."""
    out = {}
    faster = faster_batching(paper)
    for name, row in paper.items():
        batching = "auto" if isinstance(row, dict) and "auto" in row else faster.get(name)
        if batching is None and isinstance(row, dict):
            batching = next((b for b in BATCHINGS if b in row), None)
        if batching is not None:
            out[name] = {"train_cpu_s": row[batching]["train_cpu_s"], "eval_cpu_s": row[batching]["eval_cpu_s"]}
    return out


def faster_batching(paper: dict) -> dict[str, str]:
    """Each model's batching whose round took the fewest CPU-seconds, where two or more of vmap, loop and bmm were
    measured (what ``batching: auto`` then takes on this machine)."""
    out = {}
    for name, row in paper.items():
        measured = {b: row[b]["train_cpu_s"] for b in BATCHINGS if isinstance(row, dict) and b in row}
        if len(measured) >= 2:
            out[name] = min(measured, key=measured.__getitem__)
    return out


def per_step_and_rounds(results: dict, tmp: Path, threads: list[int], reps: int) -> None:
    """The per-step timings and the small rounds (vmap and loop) of each model, into ``results``."""
    t0 = time.perf_counter()
    sets = {"femnist_shaped": femnist_shaped(tmp / "femnist"), "sent140_shaped": sent140_shaped(tmp / "sent140")}
    loaded = {k: load_leaf(v) for k, v in sets.items()}
    results.update({"data_generation_s": time.perf_counter() - t0, "per_step": {}, "round": {}})
    for name, key in (("mlp", "femnist_shaped"), ("cnn", "femnist_shaped"), ("lstm", "sent140_shaped")):
        model = build_model(name, loaded[key])
        results["per_step"][name] = per_step(name, model, loaded[key], reps, threads)
        torch.set_num_threads(threads[0])
        load = os.getloadavg()[0]
        results["round"][name] = {
            "data": key,
            "threads": threads[0],
            "loadavg_1min_before": load,
            **{b: time_round(sets[key], name, b, tmp / f"{name}_{b}", threads[0]) for b in ("vmap", "loop")},
        }
        print(f"{name} round: {json.dumps(results['round'][name])}", file=sys.stderr)


if __name__ == "__main__":
    main()
