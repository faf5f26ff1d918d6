"""Published = trained: runs.csv and the figures read a run's numbers only where its files match the checksums
recorded when it was trained (checksums.json); an edited or damaged run is named, restored from the store or moved
aside to be retrained, never published."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from upfl.cli import main
from upfl.data import generate_synthetic
from upfl.integrity import RECORD
from upfl.pipeline.bundle_trainer import run_config, train_bundle
from upfl.report.collect import ReportError, load_metrics


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return str(generate_synthetic("synthetic_1_1", tmp_path_factory.mktemp("d") / "s11", data_seed=1, num_devices=5))


def trained(data, tmp_path):
    """One run trained by a bundle (saved to the store), its folder and store."""
    doc = {
        "rounds": 3,
        "algorithm": {"name": "fedprox", "mu": 0.5},
        "devices": {"frac": 0.5},
        "solver": {"epochs": 1},
        "device": "cpu",
        "seed": 0,
    }
    out, st = tmp_path / "runs" / "r", tmp_path / "finished"
    spec = {
        "bundle": "t",
        "threads": 1,
        "concurrent": 1,
        "runs": [{"id": "r", "data": data, "out": str(out), "log": str(tmp_path / "r.log"), "config": doc}],
    }
    assert train_bundle(spec, store=str(st), echo=lambda s: None)[0]["status"] == "trained"
    return out, st, run_config(spec["runs"][0], 1)


def edit_summary(out: Path) -> None:
    """Valid JSON, other numbers: what an editor, a bad merge or a sync of another host's file leaves."""
    summary = json.loads((out / "summary.json").read_text())
    summary["final"]["test_acc"] = 0.999
    (out / "summary.json").write_text(json.dumps(summary, indent=2))


def runs_csv(out: Path, st: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    code = main(["report", "runs", "--verify", "--store", str(st), "--out", str(tmp_path / "runs.csv"), f"e:{out}"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_run_is_trained_with_its_checksums(data, tmp_path):
    out, _, _ = trained(data, tmp_path)
    record = json.loads((out / RECORD).read_text())
    assert sorted(record["files"]) == ["metrics.csv", "summary.json"]
    assert record["config_hash"] == json.loads((out / "summary.json").read_text())["config_hash"]


def test_an_edited_summary_is_restored_from_the_store_before_it_is_published(data, tmp_path, capsys):
    out, st, _ = trained(data, tmp_path)
    original = (out / "summary.json").read_bytes()
    edit_summary(out)
    code, text = runs_csv(out, st, tmp_path, capsys)
    assert code == 0 and f"{out}: restored from the store" in text
    assert (out / "summary.json").read_bytes() == original
    row = pd.read_csv(tmp_path / "runs.csv").iloc[0]
    assert row["final_test_acc"] == json.loads(original)["final"]["test_acc"] != 0.999


@pytest.mark.parametrize("damage", ["edit_summary", "edit_metrics", "cut_metrics"])
def test_a_damaged_run_without_a_store_entry_is_named_and_set_aside_never_published(data, tmp_path, capsys, damage):
    out, st, _ = trained(data, tmp_path)
    for entry in st.iterdir():
        shutil.rmtree(entry)
    if damage == "edit_summary":
        edit_summary(out)
        named = out / "summary.json"
    else:
        text = (out / "metrics.csv").read_text()
        (out / "metrics.csv").write_text(text.replace("0.", "0.9", 1) if damage == "edit_metrics" else text[:40])
        named = out / "metrics.csv"
    code, text = runs_csv(out, st, tmp_path, capsys)
    assert code == 2 and f"{named}: checksum" in text and "recorded in checksums.json" in text
    assert "moved to" in text and "retrains the run" in text
    assert not (tmp_path / "runs.csv").exists()
    assert not (out / "summary.json").exists() and not (out / "metrics.csv").exists()
    aside = list(out.glob(".damaged-*"))
    assert len(aside) == 1 and (aside[0] / named.name).exists()  # kept, for whoever wants to look


def test_a_figure_reads_no_metrics_that_differ_from_the_training(data, tmp_path):
    out, _, _ = trained(data, tmp_path)
    assert len(load_metrics(out)) > 0
    text = (out / "metrics.csv").read_text()
    (out / "metrics.csv").write_text(text.replace("0.", "0.9", 1))
    with pytest.raises(ReportError, match=r"metrics\.csv: checksum .* recorded in checksums\.json"):
        load_metrics(out)


def test_a_run_trained_before_records_were_kept_is_adopted_from_the_store(data, tmp_path, capsys):
    out, st, _ = trained(data, tmp_path)
    (out / RECORD).unlink()
    code, text = runs_csv(out, st, tmp_path, capsys)
    assert code == 0 and f"{out}: adopted from the store" in text and (out / RECORD).exists()
    # without a store entry holding exactly its files, such a run cannot be checked: named, not published
    (out / RECORD).unlink()
    edit_summary(out)
    code, text = runs_csv(out, st, tmp_path, capsys)
    assert code == 2 and "no checksums.json and no store entry holding these files" in text


def test_upfl_run_records_checksums_too(data, tmp_path):
    out = tmp_path / "single"
    assert (
        main(
            [
                "run",
                "--data",
                data,
                "--out",
                str(out),
                "--rounds",
                "2",
                "--set",
                "device=cpu",
                "--set",
                "algorithm.name=fedavg",
            ]
        )
        == 0
    )
    assert json.loads((out / RECORD).read_text())["files"]["summary.json"]
