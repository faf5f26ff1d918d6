"""Shared by the run-level fault tests: a synthetic data set in a working folder, a short run's config,
an interrupted run, folder snapshots and a strict JSON reader."""

from __future__ import annotations

import csv
import hashlib
import json
import stat
from pathlib import Path

import pytest

from upfl import config as cfgmod
from upfl.cli import main
from upfl.engine.checkpoints import Checkpoint, open_checkpoint
from upfl.engine.simulation import InjectedStop, run

RUN = [
    "--rounds",
    "6",
    "--algorithm",
    "fedprox",
    "--mu",
    "0.1",
    "--frac",
    "0.5",
    "--epochs",
    "2",
    "--checkpoint-every",
    "1",
    "--seed",
    "0",
]


def snapshot(root: Path, skip: Path | None = None) -> dict[str, tuple]:
    """(kind, mode, size, sha256) of every file and folder under ``root``, except ``skip`` and below it."""
    out = {}
    for p in sorted(root.rglob("*")):
        if skip is not None and (p == skip or skip in p.parents):
            continue
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size, digest)
    return out


def strict_json(path: Path):
    """``json.loads`` that refuses bare NaN / Infinity (which Python's reader accepts by default)."""

    def bad(token):
        raise ValueError(f"{path}: bare {token} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=bad)


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def cfg_for(data: Path, **over) -> cfgmod.RunConfig:
    doc = {
        "data": {"path": str(data)},
        "rounds": 6,
        "algorithm": {"name": "fedprox", "mu": 0.1},
        "devices": {"frac": 0.5},
        "solver": {"epochs": 2},
        "checkpoint": {"every": 1},
        "seed": 0,
    }
    for key, value in over.items():
        cfgmod.set_key(doc, key, value)
    return cfgmod.from_dict(doc)


def interrupted(data: Path, out: Path, after: int = 3, **over) -> Checkpoint:
    """Run until iteration ``after`` and stop (as a kill would), leaving the checkpoint; return its slot."""
    cfg = cfg_for(data, **over)
    with pytest.raises(InjectedStop):
        run(cfg, out, log=lambda m: None, stop_after=after)
    ckpt = open_checkpoint(cfg, out, data)
    assert ckpt.file.exists()
    return ckpt


WALL_TIME = ("wall_s", "cum_wall_s")
"""metrics.csv's columns that differ between two runs of the same numbers."""


def metrics_rows(out: Path) -> list[dict[str, str]]:
    """A run folder's metrics.csv, one dict a row, read by column name (the values as written)."""
    with open(Path(out) / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def metrics_without_time(out: Path) -> list[dict[str, str]]:
    """A run folder's metrics.csv by column name without its wall-time columns: equal for two runs of the same
    numbers, to the last written digit."""
    return [{k: v for k, v in r.items() if k not in WALL_TIME} for r in metrics_rows(out)]
