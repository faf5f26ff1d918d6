"""A diverged run is never a result: it stops, is flagged in summary.json, exits 3 and is kept out of the
report's means; JSON never holds a bare NaN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fixtures_runs import RUN, cli, interrupted, snapshot, strict_json
from upfl.cli import main
from upfl.engine.checkpoints import read_archive, write_archive
from upfl.engine.divergence import EXIT_DIVERGED


def test_diverged_run_stops_flags_and_exits_3(world, capsys):
    root, data = world
    out = root / "runs" / "lr1e4"
    before = snapshot(root, skip=out)
    rc, _, err = cli(["run", "--data", str(data), "--out", str(out), *RUN, "--lr", "1e4"], capsys)
    assert rc == EXIT_DIVERGED == 3
    summary = strict_json(out / "summary.json")
    d = summary["diverged"]
    assert d and d["iteration"] >= 1 and ("weights" in d["what"] or "loss" in d["what"])
    assert f"diverged at iteration {d['iteration']}" in err
    assert summary["best"] is None and summary["final"]["iteration"] == d["iteration"]
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["iteration"].iloc[-1] == d["iteration"] < 6, "the run stops at the first bad iteration"
    assert sorted(p.name for p in out.iterdir()) == ["checksums.json", "metrics.csv", "summary.json"], (
        "no checkpoint left behind"
    )
    assert snapshot(root, skip=out) == before


def test_finite_run_says_not_diverged(world, capsys):
    root, data = world
    out = root / "runs" / "ok"
    before = snapshot(root, skip=out)
    rc, stdout, _ = cli(["run", "--data", str(data), "--out", str(out), *RUN], capsys)
    assert rc == 0 and "final iteration 6" in stdout
    summary = strict_json(out / "summary.json")
    assert summary["diverged"] is False and summary["best"]["iteration"] >= 0
    assert summary["num_classes"] == 2 and summary["num_classes_source"] == "meta.json"
    assert not (root / "results").exists(), "upfl run leaves no results/checkpoints in the working directory"
    assert sorted(p.name for p in out.iterdir()) == ["checksums.json", "metrics.csv", "summary.json"]
    assert snapshot(root, skip=out) == before


def test_resumed_checkpoint_with_nan_weights_is_diverged(world, capsys):
    root, data = world
    out = root / "runs" / "nanck"
    ckpt = interrupted(data, out)
    state = read_archive(ckpt.file)
    state["w"] = np.full_like(state["w"], np.nan)
    with open(ckpt.file, "wb") as f:
        write_archive(f, state)
    before = snapshot(root, skip=out)
    rc, _, err = cli(["run", "--data", str(data), "--out", str(out), *RUN], capsys)
    assert rc == EXIT_DIVERGED
    d = strict_json(out / "summary.json")["diverged"]
    assert d["iteration"] == state["t"] and "checkpoint" in d["what"] and "NaN" in d["what"]
    assert "diverged" in err
    assert snapshot(root, skip=out) == before


def _train(data: Path, out: Path, alg: str, seed: int) -> None:
    extra = ["--lam", "0.43"] if alg == "upcycled" else []
    assert (
        main(
            [
                "run",
                "--data",
                str(data),
                "--out",
                str(out),
                "--rounds",
                "4",
                "--algorithm",
                alg,
                "--mu",
                "1",
                "--frac",
                "0.5",
                "--epochs",
                "2",
                "--checkpoint-every",
                "0",
                "--seed",
                str(seed),
                *extra,
            ]
        )
        == 0
    )


def _mark_diverged(out: Path, iteration: int = 3) -> None:
    """Rewrite a summary as a diverged run's (what the simulation writes when losses turn NaN)."""
    from upfl.files import write_json
    from upfl.integrity import RECORD, RESULT_FILES, record_text

    summary = strict_json(out / "summary.json")
    summary["diverged"] = {"iteration": iteration, "kind": "train", "what": "train_loss = nan"}
    summary["final"] = {
        "iteration": iteration,
        "train_loss": None,
        "train_acc": None,
        "test_loss": None,
        "test_acc": None,
    }
    summary["best"] = None
    write_json(out / "summary.json", summary)
    # as the simulation writes it: with the checksums of the files it wrote
    files = {name: (out / name).read_bytes() for name in RESULT_FILES}
    (out / RECORD).write_text(record_text(summary["config_hash"], files))


def test_report_keeps_diverged_runs_out_of_means_and_marks_cells(world, capsys):
    root, data = world
    outs = {(alg, s): root / "runs" / f"{alg}{s}" for alg in ("fedprox", "upcycled") for s in range(3)}
    for (alg, s), out in outs.items():
        _train(data, out, alg, s)
    kept = [strict_json(outs[("fedprox", s)] / "summary.json")["final"]["train_acc"] for s in (0, 1)]
    _mark_diverged(outs[("fedprox", 2)])
    runs_csv, prefix = root / "report" / "runs.csv", root / "report" / "table1"
    specs = [f"table1:{out}" for out in outs.values()]
    assert main(["report", "runs", "--out", str(runs_csv), *specs]) == 0
    assert (
        main(["report", "table1", "--runs", str(runs_csv), "--experiment", "table1", "--out-prefix", str(prefix)]) == 0
    )
    frame = pd.read_csv(f"{prefix}.csv", comment="#")
    prox = frame[frame["algorithm"] == "fedprox"].iloc[0]
    up = frame[frame["algorithm"] == "upcycled"].iloc[0]
    assert prox["n_seeds"] == 2 and prox["n_diverged"] == 1 and prox["diverged"] == "diverged 1/3 seeds"
    assert prox["train_acc_mean"] == pytest.approx(100 * sum(kept) / 2)
    assert up["n_pairs"] == 2, "the diverged seed is left out of the paired interval"
    assert "diverged 1/3 seeds" in Path(f"{prefix}.md").read_text(encoding="utf-8")
    for s in range(3):
        _mark_diverged(outs[("upcycled", s)], iteration=2)
    assert main(["report", "runs", "--out", str(runs_csv), *specs]) == 0
    assert (
        main(["report", "table1", "--runs", str(runs_csv), "--experiment", "table1", "--out-prefix", str(prefix)]) == 0
    )
    frame = pd.read_csv(f"{prefix}.csv", comment="#")
    up = frame[frame["algorithm"] == "upcycled"].iloc[0]
    assert up["n_seeds"] == 0 and pd.isna(up["train_acc_mean"]) and up["diverged"] == "diverged 3/3 seeds"
    md = Path(f"{prefix}.md").read_text(encoding="utf-8")
    assert "diverged 3/3 seeds" in md and "+0.00 [+0.00, +0.00]" not in md
    runs = pd.read_csv(runs_csv, comment="#")
    assert runs["diverged"].sum() == 4 and set(runs.loc[runs["diverged"], "diverged_what"]) == {"train_loss = nan"}


def test_json_writer_never_writes_bare_nan(tmp_path):
    from upfl.files import write_json

    write_json(tmp_path / "x.json", {"a": float("nan"), "b": [float("inf"), 1.5], "c": torch.tensor(float("nan"))})
    assert strict_json(tmp_path / "x.json") == {"a": None, "b": [None, 1.5], "c": None}
