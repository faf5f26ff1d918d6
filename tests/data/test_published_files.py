"""What upfl publishes (run results, data sets, downloaded archives) follows the user's umask: readable by the group."""

from __future__ import annotations

import os
import stat

import pytest

from fixtures_leaf import ArchiveServer, make_glove_zip
from fixtures_runs import cfg_for
from upfl.data import generate_synthetic
from upfl.data.download import fetch_source
from upfl.data.sources import resolve_sources
from upfl.engine.simulation import run
from upfl.files import write_texts


@pytest.mark.parametrize(
    "umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750), (0o000, 0o644, 0o755)]
)
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
    files = [
        out / "metrics.csv",
        out / "summary.json",
        data / "meta.json",
        data / "train" / "data.json",
        archive,
        archive.with_name(archive.name + ".sha256"),
    ]
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == file_mode, f
    for d in (data, data / "train", out):
        assert stat.S_IMODE(d.stat().st_mode) == dir_mode, d


@pytest.mark.parametrize("umask,file_mode", [(0o022, 0o644), (0o077, 0o600), (0o000, 0o644)])
def test_write_texts_writes_every_file_whole_with_the_umasks_mode(tmp_path, umask, file_mode):
    texts = {
        tmp_path / "a" / "b" / "metrics.csv": "iteration,kind\n0,init\n",
        tmp_path / "a" / "b" / "summary.json": '{"é": "ü"}\n',
        tmp_path / "c" / "other.txt": "",
    }
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "summary.json").write_text("old\n")
    old = os.umask(umask)
    try:
        write_texts(texts)
    finally:
        os.umask(old)
    for path, text in texts.items():
        assert path.read_bytes() == text.encode("utf-8")
        assert stat.S_IMODE(path.stat().st_mode) == file_mode, path
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["metrics.csv", "summary.json"]


def test_write_texts_leaves_every_file_as_it_was_when_one_cannot_be_written(tmp_path):
    (tmp_path / "blocked").write_text("a file where a folder should be\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.json").write_text("old\n")
    with pytest.raises(OSError):
        write_texts({tmp_path / "out" / "summary.json": "new\n", tmp_path / "blocked" / "x.csv": "x\n"})
    assert (tmp_path / "out" / "summary.json").read_text() == "old\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.json"]
