"""FEMNIST from fixture NIST archives served on 127.0.0.1: LEAF steps, the paper's subset, shape."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from fixtures_leaf import fetch_served, make_nist_zips, png_bytes
from upfl.data.femnist import (
    FemnistSpec,
    build_femnist,
    device_sizes,
    image_vector,
    keep_by_class_subfolder,
    leaf_label,
    parse_by_class,
    select_devices,
)
from upfl.data.leaf import DatasetError, load_leaf, verify_checksums
from upfl.data.shapes import leaf_train_count
from upfl.data.stats import dataset_stats

SMALL = FemnistSpec(
    num_devices=6, classes_per_device=5, train_total=62, train_min=5, train_median=9, train_max=20, sizes="table2_shape"
)


@pytest.fixture(scope="module")
def nist(tmp_path_factory):
    return make_nist_zips(tmp_path_factory.mktemp("nist"))


@pytest.fixture(scope="module")
def built(nist, tmp_path_factory):
    """The fixture archives downloaded through the real code path, then preprocessed."""
    res = tmp_path_factory.mktemp("resources")
    paths = fetch_served(nist.by_class.parent, "femnist", {"by_class": "by_class.zip"}, res)
    out = build_femnist(paths[0], tmp_path_factory.mktemp("data") / "femnist", seed=0, spec=SMALL, progress=False)
    return out, load_leaf(out)


def test_leaf_labels():
    assert [leaf_label(h) for h in ("30", "39", "41", "5a", "61", "6a", "7a")] == [0, 9, 10, 35, 36, 45, 61]
    with pytest.raises(DatasetError, match="'2f'"):
        leaf_label("2f")


def test_member_name_parsing_and_leaf_filter():
    assert parse_by_class("by_class/61/hsf_0/hsf_0_00001.png") == ("61", "hsf_0")
    assert parse_by_class("61/train_61/x.png") == ("61", "train_61")
    assert parse_by_class("by_class/61/hsf_0/") is None
    assert keep_by_class_subfolder("hsf_4") and not keep_by_class_subfolder("train_61")
    assert not keep_by_class_subfolder("hsf_mit")


def test_image_vector_is_leaf_thumbnail_without_inversion():
    data = png_bytes(np.random.default_rng(1))
    vec = image_vector(data)
    assert vec.shape == (784,) and vec.dtype == np.float32
    assert 0.0 <= vec.min() < 0.9 and vec.max() == 1.0, "white background stays 1.0 (no inversion)"
    img = Image.open(io.BytesIO(data)).convert("L")
    one_step = img.resize((28, 28), Image.LANCZOS)  # what LEAF's Pillow thumbnail did for a square image
    np.testing.assert_array_equal(vec, np.asarray(one_step, dtype=np.float32).reshape(-1) / 255.0)
    reduced = img.copy()
    reduced.thumbnail((28, 28), Image.LANCZOS)  # modern default: a 2x reduce first
    assert np.abs(np.asarray(reduced, dtype=np.float32).reshape(-1) / 255.0 - vec).max() > 0


def test_paper_shape_of_device_sizes():
    train, test = device_sizes(FemnistSpec(sizes="table2_shape"))
    assert train.sum() == 16421 and len(train) == 50
    assert (train.min(), np.median(train), train.max()) == (79, 277.5, 1950)
    assert 250 < train.std() < 280
    assert all(leaf_train_count(int(a + b), 0.9) == a for a, b in zip(train, test, strict=True))
    _, test2 = device_sizes(FemnistSpec(sizes="table2_shape", test_total=1924))
    assert test2.sum() == 1924


def test_fixture_devices_have_five_classes_and_table2_shape(built):
    out, ds = built
    assert len(ds.train_users) == 6
    for u in ds.users:
        labels = set(ds.train_y[u].tolist()) | set(ds.test_y[u].tolist())
        assert len(labels) == 5 and labels <= set(range(10)), (u, labels)
    row = dataset_stats(ds)
    assert row["samples_train"] == 62
    n = sorted(len(ds.train_y[u]) for u in ds.users)
    assert (n[0], (n[2] + n[3]) / 2, n[-1]) == (5, 9, 20)
    assert ds.feature_shape == (784,) and ds.num_classes == 10
    x = np.concatenate([ds.train_x[u] for u in ds.users])
    assert x.min() >= 0 and x.max() <= 1
    verify_checksums(out)


def test_no_image_in_two_devices(built):
    out, ds = built
    index = json.loads((out / "images.json").read_text())
    members = [m for dev in index.values() for split in dev.values() for m in split]
    assert len(members) == len(set(members))
    rows = np.concatenate([np.concatenate([ds.train_x[u], ds.test_x[u]]) for u in ds.users])
    assert len(np.unique(rows, axis=0)) == len(rows)


def test_leaf_filter_and_hash_match_counts(built, nist):
    out, ds = built
    meta = json.loads((out / "meta.json").read_text())
    counts = meta["counts"]
    # kept: the hsf folders of a-j (plus the copy of an 'a' image under 'b', a conflict the first class keeps)
    assert counts["by_class_images"] == sum(nist.images_per_letter[c] for c in "abcdefghij") + nist.conflicts
    assert counts["by_class_conflicts"] == nist.conflicts
    assert sum(counts["pool_sizes"].values()) == sum(nist.images_per_letter[c] for c in "abcdefghij")
    assert set(meta["label_map"]) == set("abcdefghij") and meta["label_map"]["j"] == 9
    assert all(len(d["classes"]) == 5 for d in meta["devices"].values())
    assert meta["sources"]["by_class.zip"] is not None


def test_seeded_and_reproducible(nist, built, tmp_path):
    out, _ = built
    again = build_femnist(nist.by_class, tmp_path / "again", seed=0, spec=SMALL, progress=False)
    other = build_femnist(nist.by_class, tmp_path / "other", seed=1, spec=SMALL, progress=False)

    def sha(p):
        return json.loads((p / "meta.json").read_text())["sha256"]

    assert sha(again) == sha(out)
    assert sha(other) != sha(out)


def test_pools_running_dry_is_a_named_error():
    with pytest.raises(DatasetError, match="device 1 needs 4 images from each of 3 classes"):
        select_devices({0: 5, 1: 5, 2: 5}, np.array([12, 12]), 3, np.random.default_rng(0))


def test_too_few_images_for_spec(nist, tmp_path):
    big = replace(SMALL, train_total=400, train_median=60, train_max=150)
    with pytest.raises(DatasetError, match="needs"):
        build_femnist(nist.by_class, tmp_path / "x", spec=big, progress=False)
    assert not (tmp_path / "x").exists()


def test_cli_prepare_femnist(nist, tmp_path):
    import shutil

    from fixtures_leaf import run_data_cli

    res = tmp_path / "res"
    res.mkdir()
    shutil.copy(nist.by_class, res)
    rc = run_data_cli(
        [
            "data",
            "prepare",
            "femnist",
            "--resources",
            str(res),
            "--out",
            str(tmp_path / "f"),
            "--no-progress",
            "--num-devices",
            "6",
            "--set",
            "sizes=table2_shape",
            "--set",
            "train_total=62",
            "--set",
            "train_min=5",
            "--set",
            "train_median=9",
            "--set",
            "train_max=20",
        ]
    )
    assert rc == 0 and len(load_leaf(tmp_path / "f").users) == 6
    assert (res / "by_class.zip.sha256").exists()


INDEX_TRAIN = [5, 9, 20, 8, 11, 10]
INDEX_TEST = [1, 2, 3, 0, 1, 2]


def _resources_with_index(nist, tmp_path):
    """The fixture archives and a 6-device index in the authors' format, where `upfl data fetch femnist` puts them."""
    import shutil

    from fixtures_paper import checksum_flags, make_femnist_index
    from upfl.data.sources import SOURCES

    res = tmp_path / "res"
    res.mkdir()
    shutil.copy(nist.by_class, res)
    files = make_femnist_index(tmp_path / "mirror", INDEX_TRAIN, INDEX_TEST)
    for name, path in files.items():
        dest = res / SOURCES[name].filename
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)
    return res, checksum_flags(files)


def test_device_counts_are_exactly_the_authors_index(nist, tmp_path):
    """`prepare femnist` (sizes paper_index, the default) reads the per-device counts of the authors' index
    (not its rows) and gives device k exactly its train and test counts, in the index's order."""
    from fixtures_leaf import run_data_cli

    res, flags = _resources_with_index(nist, tmp_path)
    out = tmp_path / "femnist"
    assert (
        run_data_cli(
            ["data", "prepare", "femnist", "--resources", str(res), "--out", str(out), "--no-progress", *flags]
        )
        == 0
    )
    ds = load_leaf(out)
    assert [len(ds.train_y[u]) for u in ds.users] == INDEX_TRAIN
    assert [len(ds.test_y[u]) for u in ds.users] == INDEX_TEST
    for u in ds.users:
        assert len(set(ds.train_y[u].tolist()) | set(ds.test_y[u].tolist())) == 5
    meta = json.loads((out / "meta.json").read_text())
    assert meta["parameters"]["sizes"] == "paper_index"
    assert meta["parameters"]["train_counts"] == INDEX_TRAIN
    assert set(meta["device_index"]) == {
        "data/femnist/data/train/user_groups.json",
        "data/femnist/data/test/user_groups.json",
    }
    row = dataset_stats(ds)
    assert (row["samples_train"], row["samples_test"], row["devices"]) == (63, 9, 6)
    assert row["per_device_train_std"] == pytest.approx(np.std(INDEX_TRAIN))


def test_index_with_pinned_checksum_or_missing_is_refused(nist, tmp_path, capsys):
    from fixtures_leaf import run_data_cli

    res, _ = _resources_with_index(nist, tmp_path)
    rc = run_data_cli(
        ["data", "prepare", "femnist", "--resources", str(res), "--out", str(tmp_path / "a"), "--no-progress"]
    )
    assert rc == 2 and "user_groups.json: sha256 mismatch" in capsys.readouterr().err
    rc = run_data_cli(
        [
            "data",
            "prepare",
            "femnist",
            "--resources",
            str(nist.by_class.parent),
            "--out",
            str(tmp_path / "b"),
            "--no-progress",
        ]
    )
    assert rc == 2 and "upfl data fetch paper_femnist" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    with pytest.raises(ValueError, match="paper_index"):
        build_femnist(nist.by_class, tmp_path / "c", spec=FemnistSpec(), progress=False)
