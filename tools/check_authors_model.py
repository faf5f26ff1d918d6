"""Check upfl under the authors' protocol against the authors' code's measured results on the paper's Synthetic(1,1).

Usage: python tools/check_authors_model.py [MIRROR_DIR]   (default: ../shared/upstream beside the repository)

The mirror (the layout of raw.githubusercontent.com, as for tools/check_paper_data.py) is served on 127.0.0.1 and
the paper's Synthetic(1,1) fetched through ``upfl data fetch paper_synthetic_1_1``. Then W1 (mu 1, 90% stragglers,
frac 0.3, E 20, batch 32, lr 0.05, momentum 0.5) runs under the authors' protocol (``model.softmax_before_loss``,
Upcycled-FL with the scalar step 0.7): FedProx 80 and Upcycled-FL 160 iterations, seeds 0-9, paired on seed.
Asserted, against ``src/upfl/report/paper_values/authors_code.csv`` (the authors' code on the same data, final
train accuracy):

- the mean paired gain lies in the authors' 95% interval [+0.91, +2.30] widened by :data:`GAIN_TOLERANCE` on each
  side (upfl's runs are deterministic, but float32 sums may round differently on another CPU);
- the FedProx mean lies within :data:`FEDPROX_TOLERANCE` points of the authors' 79.94.

The mirror is not part of the repository, so `.ci/run` runs this only where it exists; it is a check of the real
files, not a test (pytest covers the switch on small data of its own).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from upfl import config as cfgmod
from upfl.data.mirror import MirrorFetchError, fetched_from_mirror
from upfl.data.sources import dataset_folder
from upfl.engine.simulation import run
from upfl.report.paper_numbers import paper_values
from upfl.report.stats import mean_interval

GAIN_TOLERANCE = 0.1
"""Percentage points added to each end of the authors' interval."""
FEDPROX_TOLERANCE = 2.0
"""Percentage points between our FedProx mean and the authors' code's."""
SEEDS = range(10)


def w1_authors(data: str, algorithm: str, rounds: int, seed: int) -> cfgmod.RunConfig:
    """W1 (benchmarks/engine.py) under the authors' protocol."""
    alg = {"name": algorithm, "mu": 1.0, **({"step": 0.7} if algorithm == "upcycled" else {})}
    return cfgmod.from_dict(
        {
            "data": {"path": data},
            "rounds": rounds,
            "seed": seed,
            "device": "cpu",
            "model": {"name": "logreg", "softmax_before_loss": True},
            "algorithm": alg,
            "devices": {"frac": 0.3, "straggler": 0.9},
            "solver": {"epochs": 20, "batch_size": 32, "lr": 0.05, "momentum": 0.5},
            "checkpoint": {"every": 0},
        }
    )


def final_train(data: str, algorithm: str, rounds: int, out: Path) -> list[float]:
    """Final training accuracy (%) of each seed."""
    return [
        100.0
        * run(w1_authors(data, algorithm, rounds, s), out / f"{algorithm}{s}", log=lambda m: None)["final"]["train_acc"]
        for s in SEEDS
    ]


def main(argv: list[str] | None = None) -> int:
    default = Path(__file__).resolve().parents[2] / "shared" / "upstream"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirror", nargs="?", default=str(default), help=f"mirror folder (default: {default})")
    args = parser.parse_args(argv)
    mirror = Path(args.mirror).resolve()
    if not mirror.is_dir():
        print(f"check_authors_model: {mirror}: no such folder", file=sys.stderr)
        return 2
    ref = paper_values("authors_code")
    ref = ref[
        (ref["dataset"] == "synthetic_1_1")
        & (ref["variant"] == "as released")
        & (ref["reporting"] == "final")
        & (ref["split"] == "train")
    ].iloc[0]
    try:
        with fetched_from_mirror(mirror, ["paper_synthetic_1_1"], "upfl-authors-") as (_, tmp):
            data = dataset_folder(tmp, "paper", "synthetic_1_1")
            prox = final_train(data, "fedprox", 80, tmp / "runs")
            up = final_train(data, "upcycled", 160, tmp / "runs")
    except MirrorFetchError as e:
        print(f"check_authors_model: {e}", file=sys.stderr)
        return 1
    ci = mean_interval([u - p for u, p in zip(up, prox, strict=True)], 0.95)
    prox_mean = sum(prox) / len(prox)
    low, high = ref["gain_ci_low"] - GAIN_TOLERANCE, ref["gain_ci_high"] + GAIN_TOLERANCE
    gain_ok = low <= ci.mean <= high
    prox_ok = abs(prox_mean - ref["fedprox"]) <= FEDPROX_TOLERANCE
    print(
        f"Synthetic(1,1), authors' protocol, 10 seeds, final train accuracy: FedProx {prox_mean:.2f}% (authors' "
        f"code {ref['fedprox']:.2f}, within {FEDPROX_TOLERANCE:g}: {'ok' if prox_ok else 'NO'}); gain "
        f"{ci.mean:+.2f} [{ci.low:+.2f}, {ci.high:+.2f}] pp (authors' interval [{ref['gain_ci_low']:+.2f}, "
        f"{ref['gain_ci_high']:+.2f}] +- {GAIN_TOLERANCE:g}: {'ok' if gain_ok else 'NO'})"
    )
    return 0 if gain_ok and prox_ok else 1


if __name__ == "__main__":
    sys.exit(main())
