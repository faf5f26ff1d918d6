"""The finished-run store (upfl.engine.store): keyed by config, data and code fingerprints; each file checksummed and
checked on restore; `upfl store forget` and a deleted run folder make the workflow retrain or restore."""

import json
from pathlib import Path

import pytest
import yaml

from upfl.cli import main
from upfl.data import generate_synthetic
from upfl.engine import checkpoints, store
from upfl.pipeline.bundle_trainer import run_config, train_bundle


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=2, num_devices=6))


def one_run_spec(data, tmp_path, rid="run"):
    doc = {
        "rounds": 3,
        "algorithm": {"name": "fedprox", "mu": 0.5},
        "devices": {"frac": 0.5},
        "solver": {"epochs": 1},
        "device": "cpu",
        "seed": 0,
    }
    return {
        "bundle": "t",
        "threads": 1,
        "concurrent": 1,
        "runs": [
            {
                "id": rid,
                "data": data,
                "out": str(tmp_path / "runs" / rid),
                "log": str(tmp_path / f"{rid}.log"),
                "config": doc,
            }
        ],
    }


def train(spec, st):
    return train_bundle(spec, store=str(st), echo=lambda s: None)[0]["status"]


def out_files(spec):
    out = Path(spec["runs"][0]["out"])
    for name in store.RESULT_FILES:
        (out / name).unlink(missing_ok=True)
    return out


def test_entry_is_keyed_by_config_data_and_code_fingerprints(data, tmp_path):
    spec = one_run_spec(data, tmp_path)
    cfg = run_config(spec["runs"][0], 1)
    ident = store.identity(cfg)
    assert ident["code_fingerprint"] == checkpoints.code_fingerprint()
    assert ident["data_fingerprint"] == checkpoints.data_fingerprint(data)
    assert train(spec, tmp_path / "store") == "trained"
    entry = store.entry_path(tmp_path / "store", ident)
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [entry.name]
    assert entry.name.endswith(ident["code_fingerprint"])
    # Other code (an edited simulation) is another entry: not restored.
    other = {**ident, "code_fingerprint": "0" * 16}
    with pytest.raises(store.StoreMismatch, match="manifest.json: made for"):
        store.verified_files(entry, other)
    assert not store.restore(store.entry_path(tmp_path / "store", other), other, tmp_path / "x")


@pytest.mark.parametrize("damage", ["edit_summary", "cut_metrics", "drop_manifest", "drop_file"])
def test_a_damaged_entry_is_named_and_the_run_retrained(data, tmp_path, damage):
    spec = one_run_spec(data, tmp_path)
    st = tmp_path / "store"
    assert train(spec, st) == "trained"
    out = Path(spec["runs"][0]["out"])
    good = {n: (out / n).read_bytes() for n in store.RESULT_FILES}
    entry = next(st.iterdir())
    if damage == "edit_summary":
        summary = json.loads((entry / "summary.json").read_text())
        summary["final"]["test_acc"] = 0.9399
        (entry / "summary.json").write_text(json.dumps(summary))
        named = "summary.json: checksum"
    elif damage == "cut_metrics":
        text = (entry / "metrics.csv").read_text()
        (entry / "metrics.csv").write_text(text.splitlines()[0] + "\n")
        named = "metrics.csv: checksum"
    elif damage == "drop_manifest":
        (entry / store.MANIFEST).unlink()
        named = "manifest.json: missing"
    else:
        (entry / "metrics.csv").unlink()
        named = "metrics.csv: unreadable"
    out_files(spec)
    assert train(spec, st) == "trained"
    assert named in Path(spec["runs"][0]["log"]).read_text()
    retrained = json.loads((out / "summary.json").read_text())
    assert retrained["final"] == json.loads(good["summary.json"])["final"]  # deterministic: the true numbers
    assert len((out / "metrics.csv").read_bytes().splitlines()) == len(good["metrics.csv"].splitlines())
    # The retrained result replaced the damaged entry: the next restore verifies.
    out_files(spec)
    assert train(spec, st) == "restored"
    assert "checksums verified" in Path(spec["runs"][0]["log"]).read_text()


def test_restore_writes_the_bytes_it_checked(data, tmp_path):
    spec = one_run_spec(data, tmp_path)
    st = tmp_path / "store"
    train(spec, st)
    out = Path(spec["runs"][0]["out"])
    first = (out / "metrics.csv").read_bytes()
    out_files(spec)
    assert train(spec, st) == "restored"
    assert (out / "metrics.csv").read_bytes() == first


def test_store_forget_removes_the_entry_and_the_result_files(data, tmp_path, capsys):
    spec = one_run_spec(data, tmp_path)
    st = tmp_path / "store"
    train(spec, st)
    out = Path(spec["runs"][0]["out"])
    assert main(["store", "forget", str(out), "--store", str(st)]) == 0
    printed = capsys.readouterr().out
    assert "summary.json" in printed and not any(st.iterdir()) and not (out / "summary.json").exists()
    assert train(spec, st) == "trained"
    assert main(["store", "forget", str(tmp_path / "nowhere"), "--store", str(st)]) == 2
    assert "nowhere/summary.json" in capsys.readouterr().err


STORE_WORKFLOW = """\
preset: full
seeds: [0]
run_defaults:
  device: cpu
  solver: {epochs: 1, batch_size: 32, lr: 0.05}
  devices: {frac: 0.5}
job_defaults: {runs_per_job: 2}
datasets:
  synthetic_iid: {source: synthetic}
experiments:
  table1:
    groups:
      - datasets: [synthetic_iid]
        runs:
          - {algorithm: fedavg, rounds: 3}
          - {algorithm: fedprox, rounds: 3, mu: 1}
    outputs:
      - {kind: table1, name: table1}
"""


@pytest.mark.workflow
@pytest.mark.parametrize("with_entry", [True, False])
def test_a_deleted_run_folder_is_restored_or_retrained_and_the_tables_rebuilt(tmp_path, with_entry):
    from fixtures_workflow import assert_nothing_to_be_done, snakemake, workflow_copy

    wd = workflow_copy(tmp_path)
    (wd / "config" / "config.yaml").write_text(STORE_WORKFLOW)
    snakemake(wd, "--cores", "1")
    runs = sorted(p.parent for p in (wd / "results" / "runs").rglob("summary.json"))
    assert len(runs) == 2
    victim = runs[0]
    summary = json.loads((victim / "summary.json").read_text())
    runs_csv = wd / "results" / "experiments" / "table1" / "runs.csv"
    before = runs_csv.stat().st_mtime_ns
    if with_entry:
        import shutil

        shutil.rmtree(victim)
    else:
        main(["store", "forget", str(victim), "--store", str(wd / "results" / "finished")])
    dry = snakemake(wd, "--cores", "1", "-n")
    assert "Nothing to be done" not in dry.stdout + dry.stderr
    snakemake(wd, "--cores", "1")
    assert json.loads((victim / "summary.json").read_text())["config_hash"] == summary["config_hash"]
    assert runs_csv.stat().st_mtime_ns > before
    logs = "".join(p.read_text() for p in (wd / "results" / "logs" / "bundles").glob("*.log"))
    rid = victim.relative_to(wd / "results" / "runs").as_posix()
    assert f"{'restored' if with_entry else 'trained'} {rid}" in logs
    again = snakemake(wd, "--cores", "1", "-n")
    assert_nothing_to_be_done(again)
    assert yaml.safe_load((wd / "config" / "config.yaml").read_text())["experiments"]


def test_code_edited_and_undone_is_told_apart_by_the_code_fingerprint(data, tmp_path, monkeypatch):
    """Two states of uncommitted code (the same commit name) keep separate entries; each restores its own."""
    spec = one_run_spec(data, tmp_path)
    st = tmp_path / "store"
    statuses = []
    for code in ("original", "edited", "original", "edited"):
        monkeypatch.setattr(checkpoints, "code_fingerprint", lambda code=code: code.ljust(16, "0"))
        out_files(spec)
        statuses.append(train(spec, st))
    assert statuses == ["trained", "trained", "restored", "restored"]
    assert len(list(st.iterdir())) == 2


def test_the_code_fingerprint_covers_every_source_that_computes_numbers(tmp_path):
    """An edit of a solver, an algorithm, the privacy mechanisms, the draws, a model or the data code is other code
    (another store entry, no checkpoint resumed); an edit of the report, the commands or the command line is not.
    The installed package's fingerprint is its folder's."""
    import shutil

    import upfl

    package = Path(upfl.__file__).resolve().parent
    assert checkpoints.code_fingerprint() == checkpoints.package_fingerprint(package)
    copy = tmp_path / "upfl"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    original = checkpoints.package_fingerprint(copy)
    numeric = [
        "solvers/numba_backend/training.py",
        "algorithms/upcycled.py",
        "privacy/mechanisms.py",
        "draws/rounds.py",
        "models/linear.py",
        "data/leaf.py",
        "engine/simulation.py",
        "config.py",
    ]
    for rel in numeric:
        text = (copy / rel).read_text()
        (copy / rel).write_text(text + "\n# edited\n")
        assert checkpoints.package_fingerprint(copy) != original, rel
        (copy / rel).write_text(text)
    assert checkpoints.package_fingerprint(copy) == original
    for rel in ("report/figures.py", "commands/report.py", "cli.py"):
        (copy / rel).write_text((copy / rel).read_text() + "\n# edited\n")
    assert checkpoints.package_fingerprint(copy) == original


def test_an_unwritable_store_is_found_before_any_training_and_the_runs_publish_without_it(data, tmp_path):
    st = tmp_path / "finished"
    st.mkdir()
    st.chmod(0o555)  # read-only (root writes anyway: then a file stands where the store should be)
    if store.unwritable_reason(st) is None:
        st.chmod(0o755)
        st.rmdir()
        st.write_text("not a folder")
    spec = one_run_spec(data, tmp_path)
    said: list[str] = []
    try:
        results = train_bundle(spec, store=str(st), echo=said.append)
    finally:
        if st.is_dir():
            st.chmod(0o755)
    assert said[1].startswith(f"warning: {st}: the finished-run store cannot be written"), said
    assert "published without the store" in said[1]
    assert [r["status"] for r in results] == ["trained"]
    assert (Path(spec["runs"][0]["out"]) / "summary.json").is_file()
    assert not st.is_dir() or not list(st.iterdir())


def test_what_a_killed_save_left_is_removed_by_the_next_save_and_by_store_gc(data, tmp_path, capsys):
    import os
    import socket
    import subprocess
    import sys

    st = tmp_path / "finished"
    st.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    host = socket.gethostname()
    left = [
        st / f".{'a' * 16}-{'b' * 16}-{'c' * 16}.{host}.{dead}.x1y2z3w4.new",
        st / f".{'d' * 16}.{host}.{dead}.q.damaged",
    ]
    for folder in left:
        folder.mkdir()
        (folder / "metrics.csv").write_bytes(b"0" * 1000)
    live = st / f".{'e' * 16}.{host}.{os.getpid()}.abc.new"  # a save in progress (this process): kept
    live.mkdir()
    old_style = st / f".{'f' * 16}.k3j4h5g6.new"  # an older upfl's name: removed once a day old
    old_style.mkdir()
    os.utime(old_style, (0, 0))
    assert sorted(store.stale_temporaries(st)) == sorted([*left, old_style])
    assert train(one_run_spec(data, tmp_path), st) == "trained"  # its save sweeps the store first
    assert not any(p.exists() for p in [*left, old_style]) and live.exists()
    # upfl store gc: the same, with the bytes freed printed
    again = st / f".{'a' * 16}.{host}.{dead}.r.new"
    again.mkdir()
    (again / "summary.json").write_bytes(b"1" * 2048)
    capsys.readouterr()
    assert main(["store", "gc", "--store", str(st), "--device-state", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert f"removed {again} (2048 bytes; an interrupted save)" in out and "freed 2048 bytes" in out
    assert not again.exists() and live.exists()


def test_report_runs_without_the_store_only_names_a_damaged_run(data, tmp_path, capsys):
    spec = one_run_spec(data, tmp_path)
    st = tmp_path / "finished"
    assert train(spec, st) == "trained"
    out = Path(spec["runs"][0]["out"])
    summary = out / "summary.json"
    summary.write_text(summary.read_text().replace('"seed": 0', '"seed": 0 '))
    before = sorted(p.name for p in out.iterdir())
    args = ["report", "runs", f"e:{out}", "--out", str(tmp_path / "runs.csv"), "--verify"]
    assert main([*args, "--no-store"]) != 0
    err = capsys.readouterr().err
    assert "summary.json" in err and "named only (nothing moved, nothing restored)" in err
    assert sorted(p.name for p in out.iterdir()) == before  # nothing moved aside
    # with the store, the damaged run is restored from it
    assert main([*args, "--store", str(st)]) == 0
    assert '"seed": 0 ' not in summary.read_text()
