"""GPU benchmark: the W1 torch solver on CUDA, one FedProx round of the MLP, CNN and LSTM at the paper's data
sizes, and several runs packed on one GPU (1, 2, 4, 8 runs trained at once by `upfl run-many`'s workers).

    python benchmarks/gpu.py          # on a machine with a CUDA GPU (a few minutes): benchmarks/results/gpu.json
    python benchmarks/gpu.py --smoke  # the same code on the CPU, tiny data (tests/benchmarks/test_gpu_benchmark.py)

Parts:
- ``w1``: W1 (Synthetic(1,1), 30 devices, frac 0.3, 90% stragglers, E = 20, batch 32, FedProx mu = 1) with the
  torch local solver (`solver.backend: torch`) on the device: seconds per training round incl. evaluation.
- ``paper_rounds``: one FedProx round (mu 0.1, frac 0.3, stragglers 0.9, E = 20, batch 32) of the MLP and the CNN
  on a FEMNIST-shaped stand-in with the paper's 50 device sizes (16421 images) and of the stacked LSTM on a
  Sent140-shaped stand-in with its 52 device sizes (32299 tweets); data from benchmarks/real_data.py.
- ``packing``: k runs of the same model (different seeds) trained at once in k processes sharing the GPU
  (``upfl.pipeline.bundle_trainer.train_bundle(concurrent=k)``, what a job with ``runs_per_gpu: k`` does) for
  k = 1, 2, 4, 8:
  wall time, runs per hour, and efficiency (k x the one-run time / the k-run time; above 1 packing pays).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from real_data import femnist_shaped, paper_device_sizes, sent140_shaped  # noqa: E402
from upfl import config as cfgmod  # noqa: E402
from upfl.data import generate_synthetic  # noqa: E402
from upfl.engine.simulation import run  # noqa: E402
from upfl.pipeline.bundle_trainer import train_bundle  # noqa: E402

OUT = HERE / "results" / "gpu.json"


def round_doc(data: Path, model: str, device: str, rounds: int, epochs: int, seed: int = 0) -> dict:
    return {
        "data": {"path": str(data)},
        "rounds": rounds,
        "seed": seed,
        "device": device,
        "model": {"name": model},
        "algorithm": {"name": "fedprox", "mu": 0.1},
        "devices": {"frac": 0.3, "straggler": 0.9},
        "solver": {"epochs": epochs, "batch_size": 32, "lr": 0.05, "momentum": 0.5, "backend": "torch"},
        "evaluation": {"every": rounds},
        "checkpoint": {"every": 0},
    }


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed_run(doc: dict, out: Path, device: str) -> dict:
    sync(device)
    t0 = time.perf_counter()
    summary = run(cfgmod.from_dict(doc), out, log=lambda m: None)
    sync(device)
    return {
        "wall_s": round(time.perf_counter() - t0, 4),
        "train_s": round(summary["time"]["train_s"], 4),
        "eval_s": round(summary["time"]["eval_s"], 4),
        "device": summary["device"],
        "final_train_acc": summary["final"]["train_acc"],
    }


def w1(tmp: Path, device: str, rounds: int, devices: int, epochs: int) -> dict:
    data = generate_synthetic("synthetic_1_1", tmp / "w1", data_seed=0, num_devices=devices)
    doc = round_doc(data, "logreg", device, rounds, epochs)
    doc["algorithm"]["mu"] = 1.0
    doc["evaluation"]["every"] = 1
    timed_run({**doc, "rounds": 2}, tmp / "w1_warm", device)  # CUDA context and kernels
    res = timed_run(doc, tmp / "w1_run", device)
    res.update(rounds=rounds, per_training_round_incl_eval_s=round((res["train_s"] + res["eval_s"]) / rounds, 5))
    print(
        f"w1 ({device}, torch solver): {res['per_training_round_incl_eval_s'] * 1000:.1f} ms per training round",
        flush=True,
    )
    return res


def stand_ins(tmp: Path, smoke: bool) -> dict[str, Path]:
    if smoke:
        femnist = femnist_shaped(tmp / "femnist", devices=6, sizes=[24] * 6)
        sent140 = sent140_shaped(tmp / "sent140", devices=5, sizes=[24] * 5)
    else:
        sizes = paper_device_sizes(Path("resources"))
        fs, ss = sizes["femnist"]["sizes"], sizes["sent140"]["sizes"]
        femnist = femnist_shaped(tmp / "femnist", devices=len(fs), sizes=fs)
        sent140 = sent140_shaped(tmp / "sent140", devices=len(ss), sizes=ss)
    return {"mlp": femnist, "cnn": femnist, "lstm": sent140}


def paper_rounds(tmp: Path, data: dict[str, Path], device: str, epochs: int) -> dict:
    out = {}
    for model, path in data.items():
        timed_run(round_doc(path, model, device, 1, 2), tmp / f"{model}_warm", device)
        out[model] = timed_run(round_doc(path, model, device, 1, epochs), tmp / f"{model}_round", device)
        print(
            f"{model} one FedProx round ({device}): {out[model]['train_s']:.3f} s training, "
            f"{out[model]['eval_s']:.3f} s evaluation",
            flush=True,
        )
    return out


def packing(
    tmp: Path, data: dict[str, Path], device: str, models: list[str], ks: list[int], rounds: int, epochs: int
) -> dict:
    out = {}
    for model in models:
        rows = {}
        for k in ks:
            runs = [
                {
                    "id": f"{model}_k{k}_seed{s}",
                    "data": str(data[model]),
                    "out": str(tmp / f"pack_{model}_{k}_{s}"),
                    "log": str(tmp / "logs" / f"pack_{model}_{k}_{s}.log"),
                    "config": round_doc(data[model], model, device, rounds, epochs, seed=s),
                }
                for s in range(k)
            ]
            t0 = time.perf_counter()
            train_bundle(
                {"bundle": f"pack_{model}_{k}", "threads": 1, "concurrent": k, "runs": runs},
                store=None,
                echo=lambda m: None,
            )
            wall = time.perf_counter() - t0
            rows[str(k)] = {"runs": k, "wall_s": round(wall, 3), "runs_per_hour": round(3600 * k / wall, 1)}
            print(f"packing {model}: {k} runs at once in {wall:.1f} s", flush=True)
        one = rows[str(ks[0])]["wall_s"] / ks[0]
        for row in rows.values():
            row["efficiency"] = round(one * row["runs"] / row["wall_s"], 3)
        out[model] = {"rounds": rounds, "epochs": epochs, "by_runs": rows}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="CPU, tiny data, few rounds: checks the script runs")
    p.add_argument("--packing-models", default=None, help="comma list (default mlp,lstm; smoke mlp)")
    p.add_argument("--packing-runs", default=None, help="comma list (default 1,2,4,8; smoke 1,2)")
    p.add_argument("--packing-rounds", type=int, default=None, help="iterations per packed run (default 6; smoke 1)")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    if args.smoke:
        device, w1_rounds, w1_devices, epochs = "cpu", 2, 8, 2
        torch.set_num_threads(1)
        ks = [int(k) for k in (args.packing_runs or "1,2").split(",")]
        pack_rounds = args.packing_rounds or 1
        models = (args.packing_models or "mlp").split(",")
    else:
        if not torch.cuda.is_available():
            print(
                "gpu.py: torch finds no CUDA device; run on a GPU machine, or use --smoke for the CPU check",
                file=sys.stderr,
            )
            return 2
        device, w1_rounds, w1_devices, epochs = "cuda", 80, 30, 20
        ks = [int(k) for k in (args.packing_runs or "1,2,4,8").split(",")]
        pack_rounds = args.packing_rounds or 6
        models = (args.packing_models or "mlp,lstm").split(",")
    result = {
        "smoke": args.smoke,
        "device": device,
        "torch_version": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
        "loadavg_1min_before": os.getloadavg()[0],
    }
    with tempfile.TemporaryDirectory(prefix="upfl-gpu-") as tmpdir:
        tmp = Path(tmpdir)
        old = os.getcwd()
        os.chdir(tmp)  # runs' default checkpoint folder lands here
        try:
            result["w1"] = w1(tmp, device, w1_rounds, w1_devices, epochs)
            data = stand_ins(tmp, args.smoke)
            result["paper_rounds"] = paper_rounds(tmp, data, device, epochs)
            result["packing"] = packing(tmp, data, device, models, ks, pack_rounds, epochs)
        finally:
            os.chdir(old)
    result["loadavg_1min_after"] = os.getloadavg()[0]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
