"""A LEAF-format folder added by config alone (`datasets.<name>: {source: leaf, path: DIR, model: ...}`): the copy
`upfl data prepare leaf` makes, the registry the CLI reads, the plan's data-set keys, and the workflow end to end."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fixtures_workflow import assert_nothing_to_be_done
from upfl.data.leaf import DatasetError, load_leaf
from upfl.data.leaf_folder import folder_files, import_leaf_folder
from upfl.data.registry import DATASET_KEYS, DATASETS, WORKFLOW_SOURCES
from upfl.files import sha256_file
from upfl.pipeline.plan import ExperimentError, build_plan

ROOT = Path(__file__).resolve().parents[2]


def write_leaf_folder(
    root: Path, users: int = 6, dim: int = 8, classes: int = 3, seed: int = 0, files_per_split: int = 2
) -> Path:
    """A small data set as LEAF's scripts leave it: `train/` and `test/` with several JSON files each (LEAF's
    names and keys, `hierarchies` included), beside `all_data/` and `sampled_data/`, which are not the data set.
    Labels depend on the features, so a model can learn them; no meta.json (as LEAF writes none)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(classes, dim)) * 3
    names = [f"f{k:04d}_{k * 7 % 13:02d}" for k in range(users)]
    for split, low, high in (("train", 12, 30), ("test", 3, 8)):
        (root / split).mkdir(parents=True)
        for part in range(files_per_split):
            mine = names[part::files_per_split]
            data = {}
            for user in mine:
                n = int(rng.integers(low, high))
                y = rng.integers(0, classes, size=n)
                x = centers[y] + rng.normal(size=(n, dim))
                data[user] = {"x": np.round(x, 4).tolist(), "y": y.tolist()}
            doc = {
                "users": mine,
                "num_samples": [len(data[u]["y"]) for u in mine],
                "hierarchies": [],
                "user_data": data,
            }
            name = f"all_data_{part}_niid_0_keep_0_{split}_9.json"
            (root / split / name).write_text(json.dumps(doc), encoding="utf-8")
    for other in ("all_data", "sampled_data"):
        (root / other).mkdir()
        (root / other / "all_data_0.json").write_text('{"not": "the data set"}', encoding="utf-8")
    return root


def test_copy_holds_the_splits_and_meta_only_and_records_their_sha256(tmp_path):
    src = write_leaf_folder(tmp_path / "leaf" / "data")
    out = import_leaf_folder(src, tmp_path / "copy", name="mine")
    copied = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    data_files = sorted(p.relative_to(src).as_posix() for p in src.glob("t*/*.json"))
    assert copied == sorted(data_files + ["meta.json"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["source"] == "leaf" and meta["name"] == "mine" and meta["imported_from"] == str(src.resolve())
    assert meta["sha256"] == {rel: sha256_file(src / rel) for rel in data_files}
    a, b = load_leaf(src), load_leaf(out)
    assert a.users == b.users and all(np.array_equal(a.train_x[u], b.train_x[u]) for u in a.users)
    assert b.num_classes == 3 and b.feature_shape == (8,)


def test_side_files_named_by_meta_are_copied(tmp_path):
    src = write_leaf_folder(tmp_path / "src")
    np.save(src / "embeddings.npy", np.zeros((3, 2), dtype=np.float32))
    (src / "vocab.txt").write_text("a\nb\n", encoding="utf-8")
    (src / "meta.json").write_text(
        json.dumps({"num_classes": 4, "embeddings": {"file": "embeddings.npy", "vocab_file": "vocab.txt"}})
    )
    out = import_leaf_folder(src, tmp_path / "copy")
    assert (out / "embeddings.npy").read_bytes() == (src / "embeddings.npy").read_bytes()
    assert (out / "vocab.txt").exists() and load_leaf(out).num_classes == 4
    (src / "meta.json").write_text(json.dumps({"extra_files": {"../outside.npy": "0" * 64}}))
    with pytest.raises(DatasetError, match=r"meta.json: side file '../outside.npy' is not a path inside"):
        import_leaf_folder(src, tmp_path / "copy2")


def test_a_bad_folder_is_refused_naming_its_own_file_and_nothing_is_written(tmp_path):
    src = write_leaf_folder(tmp_path / "src")
    bad = sorted((src / "train").glob("*.json"))[1]
    doc = json.loads(bad.read_text())
    doc["user_data"][doc["users"][0]]["y"][2] = 1.5
    bad.write_text(json.dumps(doc))
    with pytest.raises(DatasetError) as e:
        import_leaf_folder(src, tmp_path / "data" / "copy")
    assert str(e.value).startswith(f"{bad}: user {doc['users'][0]!r}: label 2 is 1.5, not an integer")
    assert not (tmp_path / "data" / "copy").exists() and list((tmp_path / "data").iterdir()) == []
    shutil.rmtree(src / "test")
    with pytest.raises(DatasetError, match=r"test: missing folder"):
        folder_files(src)
    with pytest.raises(DatasetError, match="does not exist"):
        folder_files(tmp_path / "nowhere")


def test_a_file_that_differs_from_the_sha256_its_meta_records_is_refused(tmp_path):
    src = write_leaf_folder(tmp_path / "src")
    first = sorted((src / "train").glob("*.json"))[0]
    rel = first.relative_to(src).as_posix()
    (src / "meta.json").write_text(json.dumps({"sha256": {rel: "0" * 64}}))
    with pytest.raises(DatasetError, match=rf"{first}: sha256 [0-9a-f]{{64}} is not the 0{{64}} that"):
        import_leaf_folder(src, tmp_path / "copy")
    for out in (src / "copy", src, tmp_path):  # replacing any of these would replace or delete the folder
        with pytest.raises(ValueError, match="give another output folder"):
            import_leaf_folder(src, out)
    assert sorted(p.name for p in src.iterdir()) == ["all_data", "meta.json", "sampled_data", "test", "train"]


def test_cli_prepare_reads_the_registry_and_refuses_flags_a_data_set_does_not_read(tmp_path, capsys):
    from fixtures_leaf import run_data_cli

    src = write_leaf_folder(tmp_path / "src")
    assert run_data_cli(["data", "prepare", "leaf", "--path", str(src), "--out", str(tmp_path / "a")]) == 0
    assert load_leaf(tmp_path / "a").meta["name"] == "src"
    assert (
        run_data_cli(["data", "prepare", "leaf", "--path", str(src), "--out", str(tmp_path / "b"), "--seed", "3"]) == 2
    )
    assert "--seed: not read by 'upfl data prepare leaf' (it reads: --name, --path)" in capsys.readouterr().err
    assert (
        run_data_cli(["data", "prepare", "paper_synthetic_iid", "--out", str(tmp_path / "c"), "--set", "num_devices=3"])
        == 2
    )
    assert "--set: not read by 'upfl data prepare paper_synthetic_iid'" in capsys.readouterr().err
    assert run_data_cli(["data", "prepare", "leaf", "--out", str(tmp_path / "d")]) == 2
    assert "--path: required" in capsys.readouterr().err
    assert not any((tmp_path / n).exists() for n in "bcd")


def test_schema_lists_the_registry_sources_and_keys():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    entry = schema["properties"]["datasets"]["additionalProperties"]
    assert tuple(entry["properties"]["source"]["enum"]) == WORKFLOW_SOURCES
    assert set(entry["properties"]) == set(DATASET_KEYS)
    assert tuple(schema["properties"]["exclude_sources"]["items"]["enum"]) == WORKFLOW_SOURCES
    assert "leaf" in DATASETS and all(f"paper_{s}" in DATASETS for s in ("synthetic_iid", "synthetic_1_1"))


def full_config_with(entry: dict) -> dict:
    """config/config.yaml with data set `mine` added to the first group of every experiment (a config edit only)."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["datasets"]["mine"] = entry
    for exp in config["experiments"].values():
        exp["groups"][0]["datasets"].append("mine")
    return config


def without_model(doc: dict) -> str:
    """A run's config but its model name and evaluation schedule (a run two experiments share takes the wider)."""
    rest = {k: v for k, v in doc.items() if k != "evaluation"}
    return json.dumps({**rest, "model": {k: v for k, v in doc["model"].items() if k != "name"}}, sort_keys=True)


def test_every_experiment_of_the_paper_plans_runs_on_a_config_only_data_set():
    """Each experiment's runs on `mine` are its first group's runs; the model is the data set's `mlp` where the
    group's own runs have the default (logreg), else what the entry or the experiment's `set` names."""
    config = full_config_with({"source": "leaf", "path": "/data/mine", "model": "mlp"})
    plan = build_plan(config)
    assert {e for e, ids in plan.experiments.items() for r in ids if plan.runs[r].dataset == "mine"} == set(
        plan.experiments
    )
    models = set()
    for name, ids in plan.experiments.items():
        first = set(config["experiments"][name]["groups"][0]["datasets"]) - {"mine"}
        twins = {
            without_model(plan.runs[r].doc): plan.runs[r].doc["model"]["name"]
            for r in ids
            if plan.runs[r].dataset in first
        }
        for r in ids:
            if plan.runs[r].dataset == "mine":
                twin = twins[without_model(plan.runs[r].doc)]
                assert plan.runs[r].doc["model"]["name"] == ("mlp" if twin == "logreg" else twin), (name, r)
                models.add(plan.runs[r].doc["model"]["name"])
    assert {"mlp", "binary_logreg", "cnn", "lstm"} == models


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"source": "leaf"}, "datasets.mine.path: required for source leaf"),
        ({"source": "paper", "path": "/x"}, "datasets.mine.path: not read for source paper (only leaf)"),
        ({"source": "leaf", "path": "/x", "data_seed": 1}, "datasets.mine.data_seed: not read for source leaf"),
    ],
)
def test_a_data_set_key_its_source_does_not_read_is_named(entry, message):
    with pytest.raises(ExperimentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_plan(full_config_with(entry))


TINY = """\
preset: full
seeds: [0]
run_defaults:
  device: cpu
  solver: {epochs: 2, batch_size: 8, lr: 0.05, momentum: 0.5}
  devices: {frac: 0.5}
  checkpoint: {every: 1}
datasets:
  mine: {source: leaf, path: PATH, model: mlp}
experiments:
  table1:
    set: {devices.straggler: 0.5}
    groups:
      - datasets: [mine]
        runs:
          - {algorithm: fedavg, rounds: 3}
          - {algorithm: fedprox, rounds: 3, mu: 1}
          - {algorithm: upcycled, rounds: 6, mu: 1, lam: 0.43}
    outputs:
      - {kind: table1, name: table1}
      - {kind: convergence, name: fig_mine}
"""


def workflow_with(tmp_path: Path, path: Path) -> Path:
    """A copy of the workflow whose config.yaml is :data:`TINY` with data set `mine` at ``path``."""
    wd = tmp_path / "wf"
    wd.mkdir()
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(ROOT / folder, wd / folder)
    (wd / "config" / "config.yaml").write_text(TINY.replace("PATH", json.dumps(str(path))))
    return wd


@pytest.mark.workflow
def test_workflow_trains_and_reports_on_a_leaf_folder_added_by_config(tmp_path):
    """The only edit is config.yaml: the folder is copied to resources/data/leaf/mine, every run trains its MLP
    on it (input size and classes from the data), the tables and figure are built; an edit of a file of the
    folder makes the copy and the runs out of date; `upfl run --data` reads the folder itself too."""
    src = write_leaf_folder(tmp_path / "my leaf" / "data")
    wd = workflow_with(tmp_path, src)
    cmd = [sys.executable, "-m", "snakemake", "--workflow-profile", "none", "--cores", "2"]
    proc = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    copy = wd / "resources" / "data" / "leaf" / "mine"
    assert json.loads((copy / "meta.json").read_text())["imported_from"] == str(src.resolve())
    assert not (copy / "all_data").exists()
    runs = sorted((wd / "results" / "runs" / "mine" / "mlp").glob("*/*/*/T*/seed0/summary.json"))
    assert len(runs) == 3
    summary = json.loads(runs[0].read_text())
    assert summary["num_classes"] == 3
    table = (wd / "results" / "tables" / "table1.md").read_text()
    assert "mine" in table
    assert (wd / "results" / "figures" / "fig_mine.png").read_bytes()[:4] == b"\x89PNG"
    table2 = (wd / "results" / "tables" / "table2.md").read_text()
    assert re.search(r"^\| mine \| a LEAF-format folder named by config \| 149 \|", table2, re.M), table2
    again = subprocess.run(cmd + ["-n"], cwd=wd, capture_output=True, text=True, timeout=300)
    assert_nothing_to_be_done(again)
    first = sorted((src / "train").glob("*.json"))[0]
    doc = json.loads(first.read_text())
    doc["user_data"][doc["users"][0]]["x"][0][0] += 1.0  # an edit of the researcher's folder
    first.write_text(json.dumps(doc))
    again = subprocess.run(cmd + ["-n"], cwd=wd, capture_output=True, text=True, timeout=300)
    assert re.search(r"^leaf_folder_dataset\s+1$", again.stdout, re.M), again.stdout[-3000:]
    assert re.search(r"^train\s+3$", again.stdout, re.M), again.stdout[-3000:]
    out = tmp_path / "direct"
    direct = subprocess.run(
        [
            sys.executable,
            "-m",
            "upfl.cli",
            "run",
            "--data",
            str(src),
            "--out",
            str(out),
            "--set",
            "model.name=mlp",
            "--set",
            "algorithm.name=fedavg",
            "--set",
            "rounds=2",
            "--set",
            "solver.epochs=1",
            "--set",
            "device=cpu",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert direct.returncode == 0, direct.stderr[-3000:]
    assert (out / "metrics.csv").exists()


@pytest.mark.workflow
def test_a_missing_folder_is_named_by_its_config_key_before_anything_runs(tmp_path):
    missing = tmp_path / "nowhere" / "data"
    wd = workflow_with(tmp_path, missing)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--workflow-profile", "none", "-n"],
        cwd=wd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert f"config: datasets.mine.path: {missing}: data set folder does not exist" in proc.stdout + proc.stderr


def test_check_labels_names_the_first_user_with_a_label_outside_num_classes():
    from upfl.data.leaf import FederatedDataset

    def dataset(train_y, test_y):
        users = list(train_y)
        xs = {u: np.zeros((len(y), 2), np.float32) for u, y in train_y.items()}
        tx = {u: np.zeros((len(y), 2), np.float32) for u, y in test_y.items()}
        ys = {u: np.asarray(y, np.int64) for u, y in train_y.items()}
        tys = {u: np.asarray(y, np.int64) for u, y in test_y.items()}
        return FederatedDataset(users, xs, ys, tx, tys, meta={"num_classes": 3}, path="d")

    dataset({"a": [0, 2], "b": [1]}, {"a": [2], "b": []}).check_labels()
    with pytest.raises(DatasetError, match=r"d/train: user 'b': label 1 is 3, outside 0\.\.2"):
        dataset({"a": [0, 2], "b": [1, 3, -1]}, {"a": [-2], "b": []}).check_labels()
    with pytest.raises(DatasetError, match=r"d/test: user 'a': label 0 is -2, outside 0\.\.2"):
        dataset({"a": [0, 2], "b": [1]}, {"a": [-2], "b": [5]}).check_labels()
