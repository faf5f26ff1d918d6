"""Checkpoints run no code (damaged ones are named errors), never resume onto other data, code or folder,
and are never shared by concurrent runs of one config."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch
from fixtures_runs import RUN, cfg_for, cli, interrupted, metrics_without_time, snapshot

from upfl.cli import EXIT_BUSY, EXIT_INPUT
from upfl.data import generate_synthetic
from upfl.engine.checkpoints import open_checkpoint
from upfl.engine.simulation import run


class _Planted:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['UPFL_TEST_MARKER']}",))


def _planted_bytes() -> bytes:
    return pickle.dumps({"t": 1, "payload": _Planted()})


@pytest.mark.parametrize("damage", ["pickle", "truncated", "empty", "random", "shapes", "not_a_dict"])
def test_bad_checkpoint_is_a_named_error_and_runs_no_code(world, capsys, monkeypatch, damage):
    root, data = world
    out = root / "runs" / damage
    ckpt = interrupted(data, out)
    marker = root / "planted-ran"
    monkeypatch.setenv("UPFL_TEST_MARKER", str(marker))
    good = ckpt.file.read_bytes()
    if damage == "pickle":
        buf = Path(root / "planted.pt")
        torch.save({"x": 1}, buf)  # a torch zip whose data.pkl we replace by the planted pickle
        with zipfile.ZipFile(buf) as zf:
            entries = {i.filename: zf.read(i) for i in zf.infolist()}
        with zipfile.ZipFile(ckpt.file, "w") as zf:
            for name, blob in entries.items():
                zf.writestr(name, _planted_bytes() if name.endswith("data.pkl") else blob)
        buf.unlink()
    elif damage == "truncated":
        ckpt.file.write_bytes(good[: len(good) // 2])
    elif damage == "empty":
        ckpt.file.write_bytes(b"")
    elif damage == "random":
        ckpt.file.write_bytes(os.urandom(4096))
    elif damage == "shapes":
        state = torch.load(ckpt.file, weights_only=True)
        state["w"] = torch.zeros(3)
        torch.save(state, ckpt.file)
    else:
        torch.save([1, 2, 3], ckpt.file)
    before = snapshot(root, skip=out)
    rc, _, err = cli(["run", "--data", str(data), "--out", str(out), *RUN], capsys)
    assert rc == EXIT_INPUT
    assert str(ckpt.file) in err and "remove it" in err and "Traceback" not in err
    assert not marker.exists(), "the planted pickle must not run"
    assert not (out / "summary.json").exists()
    assert snapshot(root, skip=out) == before


# ---------------------------------------------------------------------------------------------
# 3. a checkpoint never resumes onto other data; concurrent runs never share one


def test_regenerated_data_does_not_resume_old_checkpoint(world):
    root, data = world
    out = root / "runs" / "regen"
    old = interrupted(data, out)
    generate_synthetic("synthetic_1_1", data, data_seed=4, num_devices=8)  # new data, same path
    logs: list[str] = []
    run(cfg_for(data), out, log=logs.append)
    assert not any("resuming" in m for m in logs)
    assert any("stale checkpoint" in m for m in logs) and not old.dir.exists()
    fresh = root / "runs" / "fresh"
    run(cfg_for(data, **{"checkpoint.every": 0}), fresh, log=lambda m: None)
    pd.testing.assert_frame_equal(metrics_without_time(out), metrics_without_time(fresh))


def test_same_data_resumes_identically(world):
    root, data = world
    out = root / "runs" / "resume"
    interrupted(data, out)
    logs: list[str] = []
    run(cfg_for(data), out, log=logs.append)
    assert any("resuming" in m for m in logs)
    fresh = root / "runs" / "fresh"
    run(cfg_for(data, **{"checkpoint.every": 0}), fresh, log=lambda m: None)
    pd.testing.assert_frame_equal(metrics_without_time(out), metrics_without_time(fresh))


def test_checkpoint_key_covers_data_code_and_out(world):
    root, data = world
    cfg = cfg_for(data)
    a, b = open_checkpoint(cfg, root / "runs" / "a", data), open_checkpoint(cfg, root / "runs" / "b", data)
    assert a.key != b.key, "two OUT folders never share a checkpoint"
    assert a.dir == root / "runs" / "a" / ".checkpoints" / a.key
    shared = cfg_for(data, **{"checkpoint.dir": str(root / "ck")})
    assert open_checkpoint(shared, root / "a", data).key != open_checkpoint(shared, root / "b", data).key


def test_concurrent_run_with_same_out_is_refused(world, capsys):
    root, data = world
    out = root / "runs" / "busy"
    holder = open_checkpoint(cfg_for(data), out, data)
    holder.acquire()  # another run of the same config, data and OUT, still running
    try:
        before = snapshot(root, skip=out)
        rc, _, err = cli(["run", "--data", str(data), "--out", str(out), *RUN], capsys)
    finally:
        holder.release()
    assert rc == EXIT_BUSY and f"PID {os.getpid()}" in err
    assert not (out / "summary.json").exists()
    assert snapshot(root, skip=out) == before
