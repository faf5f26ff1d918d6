"""Fault injection: each fault of issue 13 gets its named error, its exit status, and changes nothing
outside the run's own folder (the data, the working directory, every other file under the test's root).

Faults: a diverged run (lr 1e4), a checkpoint holding NaN weights, a planted or damaged checkpoint, data
regenerated under a checkpoint, concurrent runs of one config, bad inputs and flags, a corrupted or
foreign ``.part`` download, a corrupted zip member, concurrent fetches, and the modes of published files.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
import threading
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from fixtures_leaf import ArchiveServer, etag_of, make_glove_zip, run_data_cli
from upfl import config as cfgmod
from upfl.engine.checkpoints import Checkpoint, open_checkpoint
from upfl.cli import EXIT_BUSY, EXIT_INPUT, main
from upfl.data import generate_synthetic, load_leaf
from upfl.data.download import CACHE_DIR, DownloadError, download, fetch_source, state_file
from upfl.data.leaf import DatasetError, write_leaf
from upfl.data.sources import SOURCES, resolve_sources
from upfl.engine.divergence import EXIT_DIVERGED
from upfl.engine.simulation import InjectedStop, run

RUN = ["--rounds", "6", "--algorithm", "fedprox", "--mu", "0.1", "--frac", "0.5", "--epochs", "2",
       "--checkpoint-every", "1", "--seed", "0"]


# ---------------------------------------------------------------------------------------------
# helpers


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


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A root folder that is also the working directory, with a small synthetic data set in it."""
    monkeypatch.chdir(tmp_path)
    data = generate_synthetic("synthetic_1_1", tmp_path / "data" / "s11", data_seed=3, num_devices=8)
    (tmp_path / "runs").mkdir()
    return tmp_path, data


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def cfg_for(data: Path, **over) -> cfgmod.RunConfig:
    doc = {"data": {"path": str(data)}, "rounds": 6, "algorithm": {"name": "fedprox", "mu": 0.1},
           "devices": {"frac": 0.5}, "solver": {"epochs": 2}, "checkpoint": {"every": 1}, "seed": 0}
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


def metrics_without_time(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "metrics.csv").drop(columns=["wall_s", "cum_wall_s"])


# ---------------------------------------------------------------------------------------------
# 1. a diverged run is never a result


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
    assert sorted(p.name for p in out.iterdir()) == ["metrics.csv", "summary.json"], "no checkpoint left behind"
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
    assert sorted(p.name for p in out.iterdir()) == ["metrics.csv", "summary.json"]
    assert snapshot(root, skip=out) == before


def test_resumed_checkpoint_with_nan_weights_is_diverged(world, capsys):
    root, data = world
    out = root / "runs" / "nanck"
    ckpt = interrupted(data, out)
    state = torch.load(ckpt.file, weights_only=True)
    state["w"] = torch.full_like(state["w"], float("nan"))
    torch.save(state, ckpt.file)
    before = snapshot(root, skip=out)
    rc, _, err = cli(["run", "--data", str(data), "--out", str(out), *RUN], capsys)
    assert rc == EXIT_DIVERGED
    d = strict_json(out / "summary.json")["diverged"]
    assert d["iteration"] == state["t"] and "checkpoint" in d["what"] and "NaN" in d["what"]
    assert "diverged" in err
    assert snapshot(root, skip=out) == before


def _train(data: Path, out: Path, alg: str, seed: int) -> None:
    extra = ["--lam", "0.43"] if alg == "upcycled" else []
    assert main(["run", "--data", str(data), "--out", str(out), "--rounds", "4", "--algorithm", alg, "--mu", "1",
                 "--frac", "0.5", "--epochs", "2", "--checkpoint-every", "0", "--seed", str(seed), *extra]) == 0


def _mark_diverged(out: Path, iteration: int = 3) -> None:
    """Rewrite a summary as a diverged run's (what the simulation writes when losses turn NaN)."""
    from upfl.files import write_json

    summary = strict_json(out / "summary.json")
    summary["diverged"] = {"iteration": iteration, "kind": "train", "what": "train_loss = nan"}
    summary["final"] = {"iteration": iteration, "train_loss": None, "train_acc": None, "test_loss": None,
                        "test_acc": None}
    summary["best"] = None
    write_json(out / "summary.json", summary)


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
    assert main(["report", "table1", "--runs", str(runs_csv), "--experiment", "table1",
                 "--out-prefix", str(prefix)]) == 0
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
    assert main(["report", "table1", "--runs", str(runs_csv), "--experiment", "table1",
                 "--out-prefix", str(prefix)]) == 0
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


# ---------------------------------------------------------------------------------------------
# 2. checkpoints cannot run code; damaged ones are named errors


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


# ---------------------------------------------------------------------------------------------
# 6. bad inputs named, before work starts


def _leaf_with_labels(path: Path, train_label: int, test_label: int, meta: dict | None) -> Path:
    users = ["u0", "u1"]
    x = {u: [[0.1, 0.2], [0.3, 0.4]] for u in users}
    train_y = {"u0": [0, 1], "u1": [1, train_label]}
    test_y = {"u0": [0, test_label], "u1": [1, 0]}
    import numpy as np

    write_leaf(path, users, ({u: np.array(x[u]) for u in users}, {u: np.array(train_y[u]) for u in users}),
               ({u: np.array(x[u]) for u in users}, {u: np.array(test_y[u]) for u in users}), meta or {})
    if meta is None:
        (path / "meta.json").unlink()
    return path


@pytest.mark.parametrize("split", ["train", "test"])
def test_label_outside_num_classes_names_file_and_user(world, capsys, split):
    root, _ = world
    bad = _leaf_with_labels(root / "data" / "bad", 5 if split == "train" else 1, 5 if split == "test" else 1,
                            {"num_classes": 2})
    out = root / "runs" / "labels"
    before = snapshot(root, skip=out)
    rc, _, err = cli(["run", "--data", str(bad), "--out", str(out), *RUN], capsys)
    assert rc == EXIT_INPUT
    assert f"{bad / split / 'data.json'}" in err
    assert ("user 'u1'" if split == "train" else "user 'u0'") in err
    assert "outside 0..1" in err and "Traceback" not in err
    assert not out.exists()
    assert snapshot(root, skip=out) == before
    with pytest.raises(DatasetError, match="num_classes 2 from meta.json"):
        load_leaf(bad)


def test_classes_without_meta_are_stated_in_log_and_summary(world, capsys):
    root, _ = world
    data = _leaf_with_labels(root / "data" / "nometa", 2, 1, None)
    out = root / "runs" / "nometa"
    logs: list[str] = []
    summary = run(cfg_for(data, **{"devices.frac": 1.0}), out, log=logs.append)
    assert summary["num_classes"] == 3 and "largest label" in summary["num_classes_source"]
    assert any("3 classes (largest label" in m for m in logs)


def test_out_that_is_a_file_is_refused_before_training(world, capsys):
    root, data = world
    out = root / "runs" / "file"
    out.write_text("not a folder")
    before = snapshot(root)
    rc, stdout, err = cli(["run", "--data", str(data), "--out", str(out), *RUN], capsys)
    assert rc == EXIT_INPUT and "exists and is not a folder" in err and "iter" not in stdout
    assert snapshot(root) == before


def test_out_with_another_configs_summary_needs_force(world, capsys):
    root, data = world
    out = root / "runs" / "shared"
    assert cli(["run", "--data", str(data), "--out", str(out), *RUN], capsys)[0] == 0
    first = (out / "summary.json").read_bytes()
    before = snapshot(root)
    rc, _, err = cli(["run", "--data", str(data), "--out", str(out), *RUN, "--mu", "1"], capsys)
    assert rc == EXIT_INPUT and "another config" in err and "--force" in err
    assert snapshot(root) == before and (out / "summary.json").read_bytes() == first
    assert cli(["run", "--data", str(data), "--out", str(out), *RUN], capsys)[0] == 0, "same config reruns"
    assert cli(["run", "--data", str(data), "--out", str(out), *RUN, "--mu", "1", "--force"], capsys)[0] == 0
    assert strict_json(out / "summary.json")["config"]["algorithm"]["mu"] == 1.0


def test_empty_test_split_is_reported_without_best(world, capsys):
    import numpy as np

    root, _ = world
    users = ["u0", "u1"]
    x = {u: np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.1]]) for u in users}
    y = {u: np.array([0, 1, 1]) for u in users}
    data = write_leaf(root / "data" / "notest", users, (x, y), ({}, {}), {"num_classes": 2})
    out = root / "runs" / "notest"
    logs: list[str] = []
    summary = run(cfg_for(data, **{"devices.frac": 1.0}), out, log=logs.append)
    assert summary["test_samples"] == 0 and summary["best"] is None and summary["diverged"] is False
    assert summary["final"]["test_acc"] is None or np.isnan(summary["final"]["test_acc"])
    assert strict_json(out / "summary.json")["final"]["test_acc"] is None
    assert any("empty test split" in m for m in logs)


def test_negative_retries_is_a_named_error(tmp_path, capsys):
    res = tmp_path / "res"
    rc = run_data_cli(["data", "fetch", "glove", "--resources", str(res), "--retries", "-1", "--no-progress"])
    assert rc == 1 and "--retries: must be >= 0" in capsys.readouterr().err
    assert not res.exists()
    with pytest.raises(DownloadError, match="retries must be an integer >= 0"):
        download("http://127.0.0.1:9/x", tmp_path / "x", retries=-1)


# ---------------------------------------------------------------------------------------------
# 4. downloads are verified, not trusted on first use


def _payload(n: int = 300_000, salt: int = 0) -> bytes:
    return bytes((i * 7919 + salt) % 251 for i in range(n))


def _half_downloaded(srv: ArchiveServer, dest: Path, cache: Path, cut: int = 100_000) -> Path:
    srv.truncate["/a.bin"] = cut
    with pytest.raises(DownloadError, match="run again to resume"):
        download(srv.url("/a.bin"), dest, cache_dir=cache, retries=0, backoff=0, progress=False)
    del srv.truncate["/a.bin"]
    part = cache / "a.bin.part"
    assert part.stat().st_size == cut and state_file(part).exists()
    return part


def test_corrupted_part_is_not_spliced(tmp_path, capsys):
    data = _payload()
    dest, cache = tmp_path / "res" / "a.bin", tmp_path / "cache"
    with ArchiveServer({"/a.bin": data}) as srv:
        part = _half_downloaded(srv, dest, cache)
        raw = bytearray(part.read_bytes())
        raw[500] ^= 0xFF
        part.write_bytes(bytes(raw))
        download(srv.url("/a.bin"), dest, cache_dir=cache, progress=False, backoff=0)
        assert srv.log.requests[-1][1] is None, "the corrupted .part is discarded, the download restarts"
    assert dest.read_bytes() == data
    assert "corrupted" in capsys.readouterr().err


def test_resume_confirms_the_object_with_if_range(tmp_path):
    data = _payload()
    dest, cache = tmp_path / "a.bin", tmp_path / "cache"
    with ArchiveServer({"/a.bin": data}) as srv:
        _half_downloaded(srv, dest, cache)
        download(srv.url("/a.bin"), dest, cache_dir=cache, progress=False, backoff=0)
        assert srv.log.requests[-1][1] == "bytes=100000-" and srv.log.if_range[-1] == etag_of(data)
    assert dest.read_bytes() == data


@pytest.mark.parametrize("if_range", ["honour", "ignore"])
def test_changed_object_restarts_whether_server_honours_if_range_or_not(tmp_path, if_range):
    old, new = _payload(), _payload(salt=7)
    dest, cache = tmp_path / "a.bin", tmp_path / "cache"
    with ArchiveServer({"/a.bin": old}) as srv:
        srv.if_range = if_range
        _half_downloaded(srv, dest, cache)
        srv.files["/a.bin"] = new  # the upstream file was replaced between the two attempts
        download(srv.url("/a.bin"), dest, cache_dir=cache, progress=False, backoff=0)
    assert dest.read_bytes() == new, "never old bytes spliced onto new ones"


def test_server_without_validators_is_not_resumed(tmp_path, capsys):
    data = _payload()
    dest, cache = tmp_path / "a.bin", tmp_path / "cache"
    with ArchiveServer({"/a.bin": data}) as srv:
        srv.validators = False
        _half_downloaded(srv, dest, cache)
        download(srv.url("/a.bin"), dest, cache_dir=cache, progress=False, backoff=0)
        assert srv.log.requests[-1][1] is None
    assert dest.read_bytes() == data
    assert "no ETag or Last-Modified" in capsys.readouterr().err


def _corrupt_member(zpath: Path, member: str) -> bytes:
    """The zip's bytes with one byte of ``member``'s data flipped (central directory intact)."""
    raw = bytearray(zpath.read_bytes())
    with zipfile.ZipFile(zpath) as zf:
        info = zf.getinfo(member)
    offset = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + 10
    raw[offset] ^= 0xFF
    return bytes(raw)


def test_corrupted_member_fails_crc_check_before_first_use(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    zpath = folder / "glove.6B.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("glove.6B.300d.txt", "good " + " ".join(["0.5"] * 300) + "\n" * 50)
    bad = _corrupt_member(zpath, "glove.6B.300d.txt")
    res = tmp_path / "res"
    with ArchiveServer({"/glove.6B.zip": bad}) as srv:
        src = resolve_sources(["glove"], urls={"glove": srv.url("/glove.6B.zip")})[0]
        assert src.sha256 is None
        with pytest.raises(DownloadError, match="member 'glove.6B.300d.txt' is corrupt"):
            fetch_source(src, res, progress=False, backoff=0)
    assert sorted(p.name for p in res.iterdir() if p.name != CACHE_DIR) == []
    assert (res / CACHE_DIR / "glove.6B.zip.bad").exists()
    placed = res / "glove.6B.zip"
    placed.write_bytes(bad)  # an archive put in the resources folder by hand is checked the same way
    with pytest.raises(DownloadError, match="is corrupt"):
        fetch_source(SOURCES["glove"], res)
    assert not (res / "glove.6B.zip.sha256").exists(), "nothing recorded as the reference"


def test_concurrent_fetches_take_turns(tmp_path):
    zpath = make_glove_zip(tmp_path / "src", dim=5)
    res = tmp_path / "res"
    results, errors = [], []
    with ArchiveServer({"/glove.6B.zip": zpath.read_bytes()}) as srv:
        srv.delay = 0.3
        src = resolve_sources(["glove"], urls={"glove": srv.url("/glove.6B.zip")})[0]

        def fetch():
            try:
                results.append(fetch_source(src, res, progress=False, backoff=0))
            except Exception as e:  # noqa: BLE001 - the test reports any failure of either fetch
                errors.append(e)

        threads = [threading.Thread(target=fetch) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors and len(results) == 2
        assert len(srv.log.requests) == 1, "the second fetch waited and found the archive published"
    assert (res / "glove.6B.zip").read_bytes() == zpath.read_bytes()


def test_sources_use_https_and_ship_the_published_sent140_checksum():
    assert all(s.url.startswith("https://") for s in SOURCES.values())
    assert SOURCES["sent140"].sha256 == "004a3772c8a7ff9bbfeb875880f47f0679d93fc63e5cf9cff72d54a8a6162e57"
    mirrored = resolve_sources(["sent140"], urls={"sent140": "http://127.0.0.1:9/t.zip"})[0]
    assert mirrored.sha256 is None, "a mirror is checked by the checksum given with it"
    assert resolve_sources(["sent140"])[0].sha256 == SOURCES["sent140"].sha256


# ---------------------------------------------------------------------------------------------
# 5. results are readable by the group


@pytest.mark.parametrize("umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_published_files_follow_the_umask(tmp_path, monkeypatch, umask, file_mode, dir_mode):
    monkeypatch.chdir(tmp_path)
    old = os.umask(umask)
    try:
        data = generate_synthetic("synthetic_1_1", tmp_path / "data" / "s", data_seed=1, num_devices=4)
        out = tmp_path / "runs" / "x"
        run(cfg_for(data, **{"devices.frac": 1.0}), out, log=lambda m: None)
        zpath = make_glove_zip(tmp_path / "src", dim=5)
        with ArchiveServer({"/glove.6B.zip": zpath.read_bytes()}) as srv:
            src = resolve_sources(["glove"], urls={"glove": srv.url("/glove.6B.zip")})[0]
            archive = fetch_source(src, tmp_path / "res", progress=False, backoff=0)
    finally:
        os.umask(old)
    files = [out / "metrics.csv", out / "summary.json", data / "meta.json", data / "train" / "data.json",
             archive, archive.with_name(archive.name + ".sha256")]
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == file_mode, f
    for d in (data, data / "train", out):
        assert stat.S_IMODE(d.stat().st_mode) == dir_mode, d
