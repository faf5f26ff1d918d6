"""Checkpoints run no code (damaged ones are named errors), never resume onto other data, code or folder,
and are never shared by concurrent runs of one config."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from fixtures_runs import RUN, cfg_for, cli, interrupted, metrics_without_time, snapshot
from upfl.cli import EXIT_BUSY, EXIT_INPUT
from upfl.data import generate_synthetic
from upfl.engine.checkpoints import open_checkpoint, read_archive, write_archive
from upfl.engine.simulation import run


class _Planted:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['UPFL_TEST_MARKER']}",))


@pytest.mark.parametrize("damage", ["pickle", "truncated", "empty", "random", "shapes", "not_a_dict"])
def test_bad_checkpoint_is_a_named_error_and_runs_no_code(world, capsys, monkeypatch, damage):
    root, data = world
    out = root / "runs" / damage
    ckpt = interrupted(data, out)
    marker = root / "planted-ran"
    monkeypatch.setenv("UPFL_TEST_MARKER", str(marker))
    good = ckpt.file.read_bytes()
    if damage == "pickle":  # the archive's w.npy replaced by a pickled object array holding the planted object
        with zipfile.ZipFile(ckpt.file) as zf:
            entries = {i.filename: zf.read(i) for i in zf.infolist()}
        planted = io.BytesIO()
        np.save(planted, np.array([_Planted()], dtype=object), allow_pickle=True)
        with zipfile.ZipFile(ckpt.file, "w") as zf:
            for name, blob in entries.items():
                zf.writestr(name, planted.getvalue() if name == "w.npy" else blob)
    elif damage == "truncated":
        ckpt.file.write_bytes(good[: len(good) // 2])
    elif damage == "empty":
        ckpt.file.write_bytes(b"")
    elif damage == "random":
        ckpt.file.write_bytes(os.urandom(4096))
    elif damage == "shapes":
        state = read_archive(ckpt.file)
        state["w"] = np.zeros(3, np.float32)
        with open(ckpt.file, "wb") as f:
            write_archive(f, state)
    else:
        with open(ckpt.file, "wb") as f:
            np.savez(f, meta=np.frombuffer(b"[1, 2, 3]", dtype=np.uint8))
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
    assert metrics_without_time(out) == metrics_without_time(fresh)


def test_same_data_resumes_identically(world):
    root, data = world
    out = root / "runs" / "resume"
    interrupted(data, out)
    logs: list[str] = []
    run(cfg_for(data), out, log=logs.append)
    assert any("resuming" in m for m in logs)
    fresh = root / "runs" / "fresh"
    run(cfg_for(data, **{"checkpoint.every": 0}), fresh, log=lambda m: None)
    assert metrics_without_time(out) == metrics_without_time(fresh)


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


# ---------------------------------------------------------------------------------------------
# 4. a private run's folder holds nothing beyond its releases, even when interrupted


PRIVATE = {"privacy.mechanism": "output", "privacy.tau": 1.0, "privacy.sigma": 0.05, "devices.frac": 1.0, "rounds": 4}
PRIVATE_BASES = {
    "fedavg": {"algorithm.mu": 0.0},
    "fedprox": {},
    "fednova": {"algorithm.mu": 0.0},
    "feddyn": {"algorithm.mu": 0.0, "algorithm.alpha": 0.1},
    "upcycled_feddyn": {"algorithm.mu": 0.0, "algorithm.alpha": 0.1, "algorithm.lam": 0.05},
    "fedavgm": {},
    "fedadam": {},
    "fedyogi": {},
}
"""Every base that admits a private run (output perturbation), with its keys."""


def _vectors_in(folder: Path, width: int) -> dict[str, torch.Tensor]:
    """Every length-``width`` vector stored in any file under ``folder`` (rows of matrices included)."""
    found = {}
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        try:
            doc = read_archive(f)
        except Exception:
            continue
        stack = [(str(f.relative_to(folder)), doc)]
        while stack:
            name, value = stack.pop()
            if isinstance(value, dict):
                stack += [(f"{name}:{k}", v) for k, v in value.items()]
            elif isinstance(value, np.ndarray) and value.shape[-1:] == (width,):
                for i, row in enumerate(torch.from_numpy(value).reshape(-1, width)):
                    found[f"{name}[{i}]"] = row.double()
    return found


def _span_residual(target: torch.Tensor, vectors: list[torch.Tensor]) -> float:
    """||target - its projection on span(vectors, 1)|| / ||target||: 0 when target is a linear combination of them."""
    basis = torch.stack([*vectors, torch.ones_like(target)], 1)
    coef = torch.linalg.lstsq(basis, target.unsqueeze(1)).solution
    return float((basis @ coef).squeeze(1).sub(target).norm() / target.norm())


@pytest.mark.parametrize("name", sorted(PRIVATE_BASES))
def test_interrupted_private_run_folder_reveals_no_unnoised_local_model(world, monkeypatch, name):
    """A private run stopped after its first training round: no raw (un-noised) local model of any device lies in
    the linear span of the vectors stored anywhere in its run folder (w_prev - h_i / alpha for FedDyn included);
    the device state lives apart (owner-only, outside OUT) and is exactly what would reveal them; the resumed run
    equals an uninterrupted one and leaves neither behind."""
    from upfl.engine import simulation

    root, data = world
    secret = root / "device-state"
    monkeypatch.setenv("UPFL_DEVICE_STATE_DIR", str(secret))
    raw: list[torch.Tensor] = []
    noisy = simulation.Simulation.output_noise

    def recording(self, local, round_k, chosen):
        raw.extend(local.detach().cpu().double())
        return noisy(self, local, round_k, chosen)

    over = {**PRIVATE, "algorithm.name": name, **PRIVATE_BASES[name]}
    out = root / "runs" / name
    with monkeypatch.context() as m:
        m.setattr(simulation.Simulation, "output_noise", recording)
        ckpt = interrupted(data, out, after=1, **over)
    width = raw[0].numel()
    stored = _vectors_in(out, width)
    assert {"w", "w_prev"} <= {k.split(":")[-1].split("[")[0] for k in stored}
    residuals = [_span_residual(r, list(stored.values())) for r in raw]
    kept = sorted({k.split("[")[0] for k in stored})
    print(f"{name}: run folder keeps {kept}; min relative residual of a raw local model {min(residuals):.3g}")
    assert min(residuals) > 1e-2, (name, kept)
    device_state = sorted(_vectors_in(secret, width))
    if name.endswith("feddyn"):
        assert ckpt.device_file.exists() and not _inside_out(ckpt.device_file, out)
        assert oct(ckpt.device_file.stat().st_mode & 0o777) == oct(0o600)
        assert oct(ckpt.device_dir.stat().st_mode & 0o777) == oct(0o700) == oct(secret.stat().st_mode & 0o777)
        # the positive control: what the run folder no longer holds recovers every raw local model
        both = list(stored.values()) + list(_vectors_in(secret, width).values())
        assert max(_span_residual(r, both) for r in raw) < 1e-6
    else:
        assert device_state == [] and not secret.exists()
    logs: list[str] = []
    run(cfg_for(data, **over), out, log=logs.append)
    assert any("resuming" in m for m in logs)
    fresh = root / "runs" / f"{name}-fresh"
    run(cfg_for(data, **over, **{"checkpoint.every": 0}), fresh, log=lambda m: None)
    assert metrics_without_time(out) == metrics_without_time(fresh)
    assert not (out / ".checkpoints").exists() and not ckpt.device_dir.exists()


def _inside_out(path: Path, out: Path) -> bool:
    return out.resolve() in path.resolve().parents


def test_store_gc_removes_the_device_state_of_a_private_run_once_its_run_folder_is_gone(world, monkeypatch, capsys):
    import shutil

    from upfl.cli import main

    root, data = world
    secret = root / "device-state-gc"
    monkeypatch.setenv("UPFL_DEVICE_STATE_DIR", str(secret))
    over = {**PRIVATE, "algorithm.name": "feddyn", **PRIVATE_BASES["feddyn"]}
    out = root / "runs" / "gc-private"
    ckpt = interrupted(data, out, after=1, **over)
    assert ckpt.device_file.exists()
    gc = ["store", "gc", "--store", str(root / "no-store")]
    assert main(gc) == 0
    assert ckpt.device_file.exists()  # its run can still resume: kept
    size = sum(p.stat().st_size for p in ckpt.device_dir.iterdir())
    shutil.rmtree(out)
    capsys.readouterr()
    assert main(gc) == 0
    printed = capsys.readouterr().out
    assert f"removed {ckpt.device_dir} ({size} bytes; device state of a private run that is gone)" in printed
    assert f"freed {size} bytes" in printed and not ckpt.device_dir.exists()


def test_private_run_without_its_device_state_starts_over(world, monkeypatch):
    root, data = world
    monkeypatch.setenv("UPFL_DEVICE_STATE_DIR", str(root / "device-state"))
    over = {**PRIVATE, "algorithm.name": "feddyn", **PRIVATE_BASES["feddyn"]}
    out = root / "runs" / "lost"
    ckpt = interrupted(data, out, after=1, **over)
    import shutil

    shutil.rmtree(ckpt.device_dir)  # another machine, or removed by hand
    logs: list[str] = []
    run(cfg_for(data, **over), out, log=logs.append)
    assert not any("resuming" in m for m in logs)
    assert any("device state (device_gradients) is not at" in m and "starting over" in m for m in logs)
    fresh = root / "runs" / "lost-fresh"
    run(cfg_for(data, **over, **{"checkpoint.every": 0}), fresh, log=lambda m: None)
    assert metrics_without_time(out) == metrics_without_time(fresh)


def test_device_state_root_inside_the_run_folder_is_refused(world, monkeypatch):
    from upfl.engine.checkpoints import CheckpointError

    root, data = world
    out = root / "runs" / "inside"
    monkeypatch.setenv("UPFL_DEVICE_STATE_DIR", str(out / "secret"))
    with pytest.raises(CheckpointError, match="inside the run folder"):
        open_checkpoint(cfg_for(data, **PRIVATE), out, data)


@pytest.mark.parametrize("name", ["scaffold", "pfedme"])
def test_bases_whose_device_state_no_mechanism_covers_refuse_private_runs(world, name):
    """SCAFFOLD's control variates and pFedMe's personal models are device state too; no private run of them
    exists to leave it behind, since both mechanisms are refused for them."""
    from upfl.algorithms.registry import algorithm_class
    from upfl.errors import AlgorithmPrivacyError

    _, data = world
    assert algorithm_class(name).device_state
    for mechanism, key, value in (("output", "privacy.sigma", 0.05), ("objective", "privacy.alpha", 10.0)):
        with pytest.raises(AlgorithmPrivacyError, match=f"not supported for {name}"):
            cfg_for(
                data,
                **{
                    "algorithm.name": name,
                    "algorithm.mu": 0.0,
                    "privacy.mechanism": mechanism,
                    "privacy.tau": 1.0,
                    key: value,
                },
            )
