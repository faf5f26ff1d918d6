"""Sent140 from fixture archives served on 127.0.0.1: LEAF parsing, devices, token ids, GloVe."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace

import numpy as np
import pytest

from fixtures_leaf import fetch_served, glove_vectors, make_glove_zip, make_sent140_zip
from upfl.data.glove import glove_subset, load_embeddings
from upfl.data.leaf import DatasetError, load_leaf, verify_checksums
from upfl.data.sent140 import (
    Malformed,
    Sent140Spec,
    build_sent140,
    device_sizes,
    encode,
    group_users,
    parse_line,
    read_tweets,
    tokenize,
)
from upfl.data.stats import dataset_stats

SMALL = Sent140Spec(num_devices=5, train_total=120, test_total=32, train_std=6.0, min_user_samples=3)


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    folder = tmp_path_factory.mktemp("src")
    return make_sent140_zip(folder), make_glove_zip(folder)


@pytest.fixture(scope="module")
def built(archives, tmp_path_factory):
    sent, glove = archives
    res = tmp_path_factory.mktemp("resources")
    paths = fetch_served(
        sent.path.parent, "sent140", {"sent140": "trainingandtestdata.zip", "glove": "glove.6B.zip"}, res
    )
    out = build_sent140(
        paths[0], paths[1], tmp_path_factory.mktemp("data") / "sent140", seed=0, spec=SMALL, progress=False
    )
    return out, load_leaf(out)


def test_tokenize_and_encode_as_leaf():
    toks = tokenize("I can't believe it... so good!! #win @you")
    assert toks == ["I", "can't", "believe", "it", ".", ".", ".", "so", "good", "!", "!", "win", "you"]
    ids = encode(toks, {"good": 0, "so": 1}, unk_id=2, max_tokens=25)
    assert len(ids) == 25 and ids[7:9] == [1, 0] and ids.count(2) == 23
    assert len(encode(["good"] * 40, {"good": 0}, 1)) == 25


def test_parse_line_labels_and_malformed():
    good = b'"4","1","Mon Apr 06","NO_QUERY","bob","hello, world"\n'
    assert parse_line(good, 1) == ("bob", 1, "hello, world")
    assert parse_line(good.replace(b'"4"', b'"0"', 1), 2)[1] == 0
    assert parse_line(b'"0","1","x","y","z"\n', 3) == Malformed(3, "5 columns, expected 6")
    assert "unknown polarity '2'" in parse_line(good.replace(b'"4"', b'"2"', 1), 4).reason
    assert "undecodable" in parse_line(b'"0","1","x","y","z","\xff"\n', 5, encoding="ascii").reason
    assert parse_line('"0","1","x","y","z","caf\u00e9"\n'.encode("iso-8859-1"), 6)[2] == "caf\u00e9"


def test_malformed_rows_counted_with_line_numbers(archives):
    sent, _ = archives
    with zipfile.ZipFile(sent.path) as zf:
        by_user, bad, rows = read_tweets(zf.open("training.1600000.processed.noemoticon.csv"))
    assert rows == sent.rows
    assert {m.line for m in bad} == set(sent.malformed_lines)
    assert {u: len(t) for u, t in by_user.items()} == sent.users


def test_device_sizes_paper_shape():
    train, test = device_sizes(Sent140Spec())
    assert len(train) == 52 and train.sum() == 32299 and test.sum() == 8484
    assert abs(train.mean() - 621.1) < 0.1 and abs(train.std() - 105) < 1


def test_group_users_whole_users_exact_sizes():
    by_user = {f"u{i}": [(0, "t")] * (3 + i % 5) for i in range(30)}
    groups = group_users(by_user, np.array([10, 12, 9]), 3, np.random.default_rng(0))
    assert [sum(n for _, n in g) for g in groups] == [10, 12, 9]
    names = [u for g in groups for u, _ in g]
    assert len(names) == len(set(names))
    with pytest.raises(DatasetError, match="needs 1000 tweets"):
        group_users(by_user, np.array([1000]), 3, np.random.default_rng(0))


def test_fixture_devices_table2_logic_scaled_down(built):
    out, ds = built
    row = dataset_stats(ds)
    assert row["devices"] == 5 and row["samples_train"] == 120 and row["samples_test"] == 32
    assert ds.feature_shape == (25,) and ds.train_x["f_00000"].dtype == np.int64
    assert set(np.concatenate([ds.train_y[u] for u in ds.users]).tolist()) <= {0, 1}
    sources = json.loads((out / "users.json").read_text())
    members = [u for dev in sources.values() for u, _ in dev]
    assert len(members) == len(set(members)), "no Sentiment140 user in two devices"
    meta = json.loads((out / "meta.json").read_text())
    assert meta["malformed"]["count"] == 7 and meta["x_dtype"] == "int64"
    verify_checksums(out)


def test_embeddings_restricted_to_used_vocabulary(built, archives):
    out, ds = built
    meta = json.loads((out / "meta.json").read_text())
    vocab, matrix = load_embeddings(out, meta)
    vectors = glove_vectors(archives[1])
    assert "unused" not in vocab and set(vocab) <= set(vectors)
    assert matrix.shape == (len(vocab) + 1, 300) and not matrix[-1].any()
    for i, w in enumerate(vocab):
        np.testing.assert_allclose(matrix[i], vectors[w])
    ids = np.concatenate([ds.train_x[u] for u in ds.users]).ravel()
    assert ids.max() == len(vocab) == meta["embeddings"]["pad_id"]
    assert set(ids.tolist()) <= set(range(len(vocab) + 1))
    from upfl.files import sha256_file

    assert sha256_file(out / "embeddings.npy") == meta["extra_files"]["embeddings.npy"]


def test_glove_wrong_dimension_names_line(tmp_path):
    path = make_glove_zip(tmp_path, words=["good"], dim=7)
    with pytest.raises(DatasetError, match=r"glove.6B.300d.txt line 1: 7 values after the word, expected 300"):
        glove_subset(path, {"good"})


def test_seeded_and_reproducible(archives, built, tmp_path):
    sent, glove = archives
    out, _ = built
    again = build_sent140(sent.path, glove, tmp_path / "a", seed=0, spec=SMALL, progress=False)
    other = build_sent140(sent.path, glove, tmp_path / "b", seed=3, spec=SMALL, progress=False)

    def sha(p):
        return json.loads((p / "meta.json").read_text())["sha256"]

    assert sha(again) == sha(out) and sha(other) != sha(out)


def test_too_few_tweets_writes_nothing(archives, tmp_path):
    sent, glove = archives
    with pytest.raises(DatasetError, match="needs"):
        build_sent140(sent.path, glove, tmp_path / "x", spec=replace(SMALL, train_total=5000), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_cli_prepare_sent140_reports_malformed(archives, tmp_path, capsys):
    import shutil

    from fixtures_leaf import run_data_cli
    from upfl.files import sha256_file

    sent, glove = archives
    res = tmp_path / "res"
    res.mkdir()
    # the fixture is not the upstream archive (whose sha256 upfl knows): place it with its own checksum
    assert (
        run_data_cli(
            [
                "data",
                "fetch",
                "--source",
                "sent140",
                "--resources",
                str(res),
                "--no-progress",
                "--from-archive",
                str(sent.path),
                "--sha256",
                f"sent140={sha256_file(sent.path)}",
            ]
        )
        == 0
    )
    shutil.copy(glove, res)
    rc = run_data_cli(
        [
            "data",
            "prepare",
            "sent140",
            "--resources",
            str(res),
            "--out",
            str(tmp_path / "s"),
            "--no-progress",
            "--num-devices",
            "5",
            "--set",
            "train_total=120",
            "--set",
            "test_total=32",
            "--set",
            "train_std=6",
            "--set",
            "min_user_samples=3",
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    first = min(sent.malformed_lines)
    assert "skipped 7 malformed rows" in err and f"line {first} (" in err
    assert (
        run_data_cli(
            ["data", "prepare", "sent140", "--resources", str(tmp_path / "none"), "--out", str(tmp_path / "z")]
        )
        == 1
    )
    assert "run 'upfl data fetch sent140'" in capsys.readouterr().err
