"""Bad run inputs are named before any work starts (labels outside the classes, `--out` a file or another
config's folder, an empty test split), and change nothing outside the run's own folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures_runs import RUN, cfg_for, cli, snapshot, strict_json
from upfl.cli import EXIT_INPUT
from upfl.data import load_leaf
from upfl.data.leaf import DatasetError, write_leaf
from upfl.engine.simulation import run


def _leaf_with_labels(path: Path, train_label: int, test_label: int, meta: dict | None) -> Path:
    users = ["u0", "u1"]
    x = {u: [[0.1, 0.2], [0.3, 0.4]] for u in users}
    train_y = {"u0": [0, 1], "u1": [1, train_label]}
    test_y = {"u0": [0, test_label], "u1": [1, 0]}
    import numpy as np

    write_leaf(
        path,
        users,
        ({u: np.array(x[u]) for u in users}, {u: np.array(train_y[u]) for u in users}),
        ({u: np.array(x[u]) for u in users}, {u: np.array(test_y[u]) for u in users}),
        meta or {},
    )
    if meta is None:
        (path / "meta.json").unlink()
    return path


@pytest.mark.parametrize("split", ["train", "test"])
def test_label_outside_num_classes_names_file_and_user(world, capsys, split):
    root, _ = world
    bad = _leaf_with_labels(
        root / "data" / "bad", 5 if split == "train" else 1, 5 if split == "test" else 1, {"num_classes": 2}
    )
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
