"""The paper's released synthetic data: checksums before parsing, a safe loader, conversion to LEAF, Table 2 rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from fixtures_leaf import ArchiveServer, run_data_cli
from fixtures_paper import (
    checksum_flags,
    make_paper_mirror,
    make_paper_set,
    mirror_root,
    save_tensor_dataset,
    set_arrays,
    write_groups,
)
from upfl.data.leaf import load_leaf
from upfl.data.paper import PaperDataError, build_paper_synthetic, load_tensor_dataset, load_user_groups
from upfl.data.sources import PAPER_COMMIT, PAPER_REPO, SOURCES, paper_file_path, resolve_sources
from upfl.data.stats import dataset_stats, format_stats
from upfl.files import sha256_file


def overrides(files: dict[str, Path]):
    """The sources of the fixture files with their checksums (the pinned ones are the real files')."""
    checks = {name: sha256_file(path) for name, path in files.items()}
    return resolve_sources(list(files), checksums=checks, sources_only=True)


def resources_with(files: dict[str, Path], mirror: Path, resources: Path) -> None:
    """Place mirror files where `upfl data fetch` puts them (<resources>/upstream/<repo>/<commit>/<path>)."""
    for name, path in files.items():
        dest = resources / SOURCES[name].filename
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(path.read_bytes())


@pytest.fixture
def one_set(tmp_path):
    mirror = tmp_path / "mirror"
    files = make_paper_set(mirror, "synthetic_1_1")
    res = tmp_path / "res"
    resources_with(files, mirror, res)
    return files, res


def test_conversion_keeps_every_device_row_and_records_provenance(one_set, tmp_path):
    files, res = one_set
    out = build_paper_synthetic("synthetic_1_1", res, tmp_path / "out", sources=overrides(files))
    ds = load_leaf(out)
    arrays = set_arrays("synthetic_1_1")
    assert ds.users == ["0", "1", "2", "3"]
    for split, (xs, ys) in (("train", (ds.train_x, ds.train_y)), ("test", (ds.test_x, ds.test_y))):
        x, y, groups = arrays[split]
        for device, rows in groups.items():
            np.testing.assert_allclose(xs[device], x[rows].astype(np.float32))
            np.testing.assert_array_equal(ys[device], y[rows].astype(np.int64))
    meta = json.loads((out / "meta.json").read_text())
    assert meta["source"] == "paper" and meta["commit"] == PAPER_COMMIT and meta["num_classes"] == 2
    path = paper_file_path("synthetic_1_1", "train", False)
    assert meta["files"][path]["sha256"] == sha256_file(files["paper_synthetic_1_1_train"])
    assert meta["files"][path]["url"] == f"https://raw.githubusercontent.com/{PAPER_REPO}/{PAPER_COMMIT}/{path}"


def test_stats_print_the_table2_row_in_the_papers_reading(one_set, tmp_path):
    files, res = one_set
    ds = load_leaf(build_paper_synthetic("synthetic_1_1", res, tmp_path / "out", sources=overrides(files)))
    row = dataset_stats(ds)
    totals = [len(ds.train_y[u]) + len(ds.test_y[u]) for u in ds.users]
    text = format_stats(row)
    expected = (
        f"{sum(totals)} ({row['samples_test']} test), 4 devices, "
        f"{np.mean(totals):.0f} +- {np.std(totals):.0f} per device (train + test)"
    )
    assert f"Table 2 row        {expected}" in text


def test_pinned_checksum_mismatch_is_refused_before_parsing(one_set, tmp_path):
    """The fixture files are not the released ones: with the pinned sha256 nothing is parsed or written."""
    _, res = one_set
    with pytest.raises(PaperDataError, match=r"mytrain\.pt: sha256 mismatch: expected 948d6dc5"):
        build_paper_synthetic("synthetic_1_1", res, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_pickle_needing_another_global_is_refused_and_never_runs(one_set, tmp_path):
    files, res = one_set
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    import torch

    evil = res / SOURCES["paper_synthetic_1_1_train"].filename
    torch.save(Exploit(), evil)
    files = {**files, "paper_synthetic_1_1_train": evil}
    with pytest.raises(PaperDataError) as err:
        build_paper_synthetic("synthetic_1_1", res, tmp_path / "out", sources=overrides(files))
    msg = str(err.value)
    assert str(evil) in msg and "system" in msg and "TensorDataset" in msg
    assert not marker.exists() and not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.*")), "no staging folder left behind"


def _bad_tensors(kind: str, x, y):
    if kind == "shape":
        return x[:, :3], y
    if kind == "dtype":
        return x.astype(np.int64), y
    if kind == "rows":
        return x, y[:-1]
    if kind == "label":
        y = y.copy()
        y[2] = 0.5
        return x, y
    if kind == "negative":
        y = y.copy()
        y[1] = -1.0
        return x, y
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind, message",
    [
        ("shape", r"x is torch\.float64 of shape \(\d+, 3\), expected float64 \(n, 20\)"),
        ("dtype", r"x is torch\.int64"),
        ("rows", r"y has shape"),
        ("label", r"label of row 2 is 0\.5, not a whole number"),
        ("negative", r"label of row 1 is -1\.0, not a whole number >= 0"),
    ],
)
def test_bad_tensors_are_named_errors_and_nothing_is_written(one_set, tmp_path, kind, message):
    files, res = one_set
    x, y, _ = set_arrays("synthetic_1_1")["train"]
    path = res / SOURCES["paper_synthetic_1_1_train"].filename
    save_tensor_dataset(path, *_bad_tensors(kind, x, y))
    files = {**files, "paper_synthetic_1_1_train": path}
    with pytest.raises(PaperDataError, match=message) as err:
        build_paper_synthetic("synthetic_1_1", res, tmp_path / "out", sources=overrides(files))
    assert str(path) in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "kind, message",
    [
        ("out_of_range", r"device '1': row index \d+ out of range \[0, \d+\)"),
        ("duplicate_across", r"device '1': row \d+ is duplicated \(also in device '0'\)"),
        ("duplicate_within", r"device '0': row \d+ is duplicated \(twice in this device\)"),
        ("missing", r"1 of \d+ rows belong to no device"),
        ("not_int", r"row index 1\.5 is not an integer"),
    ],
)
def test_bad_index_is_named_error_and_nothing_is_written(one_set, tmp_path, kind, message):
    files, res = one_set
    x, _, groups = set_arrays("synthetic_1_1")["test"]
    groups = {k: list(v) for k, v in groups.items()}
    if kind == "out_of_range":
        groups["1"].append(len(x))
    elif kind == "duplicate_across":
        groups["1"].append(groups["0"][0])
    elif kind == "duplicate_within":
        groups["0"].append(groups["0"][0])
    elif kind == "missing":
        groups["3"].pop()
    else:
        groups["2"][0] = 1.5
    path = res / SOURCES["paper_synthetic_1_1_test_groups"].filename
    write_groups(path, groups)
    files = {**files, "paper_synthetic_1_1_test_groups": path}
    with pytest.raises(PaperDataError, match=message) as err:
        build_paper_synthetic("synthetic_1_1", res, tmp_path / "out", sources=overrides(files))
    assert str(path) in str(err.value)
    assert not (tmp_path / "out").exists()


def test_loader_refuses_a_plain_tensor_and_garbage():
    import io

    import torch

    buf = io.BytesIO()
    torch.save(torch.zeros(3, 20), buf)
    with pytest.raises(PaperDataError, match=r"f\.pt: holds a Tensor, expected a TensorDataset"):
        load_tensor_dataset(buf.getvalue(), "f.pt")
    with pytest.raises(PaperDataError, match=r"g\.pt: not a readable torch file"):
        load_tensor_dataset(b"not a torch file", "g.pt")
    with pytest.raises(PaperDataError, match=r"u\.json: not valid JSON"):
        load_user_groups(b"{", "u.json")


def test_fetch_from_a_local_mirror_converts_every_set(tmp_path):
    """`upfl data fetch paper_synthetic --url paper=BASE` downloads 16 files through the real download code,
    checks them and writes resources/data/<set>."""
    mirror = tmp_path / "mirror"
    files = make_paper_mirror(mirror, devices=3)
    served = {"/" + str(p.relative_to(mirror)): p.read_bytes() for p in files.values()}
    res = tmp_path / "res"
    with ArchiveServer(served) as srv:
        srv.drop_once["/" + str(files["paper_synthetic_0_0_train"].relative_to(mirror))] = 200
        rc = run_data_cli(
            [
                "data",
                "fetch",
                "paper_synthetic",
                "--resources",
                str(res),
                "--no-progress",
                "--backoff",
                "0",
                "--url",
                f"paper={srv.base}/",
                *checksum_flags(files),
            ]
        )
        requested = [p for p, _ in srv.log.requests]
    assert rc == 0
    assert len(set(requested)) == 16 and len(requested) == 17, "one resumed download, nothing else twice"
    for setting in ("synthetic_iid", "synthetic_0_0", "synthetic_0.5_0.5", "synthetic_1_1"):
        ds = load_leaf(res / "data" / "paper" / setting)
        assert len(ds.users) == 3 and ds.meta["setting"] == setting and ds.meta["source"] == "paper"
    for name, path in files.items():
        assert (res / SOURCES[name].filename).read_bytes() == path.read_bytes()
    # A wrong checksum for one file: refused at download, nothing new written.
    other = tmp_path / "res2"
    with ArchiveServer(served) as srv:
        flags = checksum_flags(files)
        flags[flags.index(f"paper_synthetic_iid_test={sha256_file(files['paper_synthetic_iid_test'])}")] = (
            "paper_synthetic_iid_test=" + "0" * 64
        )
        rc = run_data_cli(
            [
                "data",
                "fetch",
                "paper_synthetic",
                "--resources",
                str(other),
                "--no-progress",
                "--backoff",
                "0",
                "--url",
                f"paper={srv.base}/",
                *flags,
            ]
        )
    assert rc == 1
    assert not (other / "data").exists()
    assert not (other / SOURCES["paper_synthetic_iid_test"].filename).exists()


def test_prepare_from_a_copied_mirror_folder(tmp_path, capsys):
    """Offline: `--from-mirror DIR` copies the files from a local mirror (checked), `prepare` converts one set."""
    mirror = tmp_path / "mirror"
    files = make_paper_set(mirror, "synthetic_iid")
    res = tmp_path / "res"
    assert (
        run_data_cli(
            [
                "data",
                "fetch",
                "--source",
                *files,
                "--resources",
                str(res),
                "--no-progress",
                "--from-mirror",
                str(mirror),
                *checksum_flags(files),
            ]
        )
        == 0
    )
    out = tmp_path / "data" / "mine"
    assert (
        run_data_cli(
            [
                "data",
                "prepare",
                "paper_synthetic_iid",
                "--resources",
                str(res),
                "--out",
                str(out),
                "--name",
                "mine",
                *checksum_flags(files),
            ]
        )
        == 0
    )
    assert load_leaf(out).meta["name"] == "mine"
    assert (
        run_data_cli(["data", "prepare", "paper_synthetic_iid", "--resources", str(res), "--out", str(tmp_path / "x")])
        == 2
    )  # the files are not the pinned ones: bad input
    assert "sha256 mismatch" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_mirror_base_url_keeps_the_upstream_layout():
    src = resolve_sources(["paper_synthetic_1_1"], urls={"paper": "http://127.0.0.1:9/m/"})
    assert [s.url for s in src][0] == (
        f"http://127.0.0.1:9/m/{PAPER_REPO}/{PAPER_COMMIT}/data/synthetic_1_1/data/train/mytrain.pt"
    )
    assert len(resolve_sources(["paper_synthetic"])) == 16
    assert all(s.sha256 and len(s.sha256) == 64 for s in resolve_sources(["paper_synthetic", "paper_femnist"]))
    assert mirror_root(Path("m")) == Path("m") / PAPER_REPO / PAPER_COMMIT
    with pytest.raises(KeyError, match="'paper' is a mirror"):
        resolve_sources(["paper_synthetic"], checksums={"paper": "0" * 64})


def _config():
    import yaml

    return yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "config.yaml").read_text())


def test_every_synthetic_experiment_defaults_to_the_papers_data_and_table1_has_five_seeds():
    from upfl.pipeline.plan import build_plan

    config = _config()
    synthetic = ["synthetic_iid", "synthetic_0_0", "synthetic_0.5_0.5", "synthetic_1_1"]
    assert all(config["datasets"][n]["source"] == "paper" for n in synthetic)
    plan = build_plan(config)
    for name in (
        "table1",
        "fig2_convergence",
        "fig2_lambda",
        "fig5",
        "fig8",
        "privacy_output",
        "privacy_objective",
        "privacy_tradeoff",
    ):
        used = {plan.runs[r].dataset for r in plan.experiments[name]}
        assert used & set(synthetic) and not used - set(synthetic) - {"femnist", "sent140"}, name
    seeds = {(plan.runs[r].dataset, plan.runs[r].seed) for r in plan.experiments["table1"]}
    assert {s for d, s in seeds if d in synthetic} == {0, 1, 2, 3, 4}
    assert {s for d, s in seeds if d == "femnist"} == {0, 1, 2}, "the real-data groups keep 3 seeds"


def test_quick_preset_stays_offline_on_the_generator():
    from upfl.pipeline.plan import build_plan, resolve_preset

    config = {**_config(), "preset": "quick"}
    resolved = resolve_preset(config)
    plan = build_plan(config)
    assert {resolved["datasets"][d]["source"] for d in plan.datasets} == {"synthetic"}
    assert {spec.seed for spec in plan.runs.values()} == {0, 1}


def test_generator_draw_depends_on_setting_and_seed_not_on_the_name(tmp_path):
    from upfl.data.synthetic import generate_synthetic

    a = load_leaf(generate_synthetic("synthetic_1_1", tmp_path / "a", data_seed=3, num_devices=4))
    b = load_leaf(
        generate_synthetic("synthetic_1_1_draw3", tmp_path / "b", data_seed=3, num_devices=4, setting="synthetic_1_1")
    )
    c = load_leaf(
        generate_synthetic("synthetic_1_1_draw4", tmp_path / "c", data_seed=4, num_devices=4, setting="synthetic_1_1")
    )
    assert all(np.array_equal(a.train_x[u], b.train_x[u]) for u in a.users)
    assert b.meta["name"] == "synthetic_1_1_draw3" and b.meta["setting"] == "synthetic_1_1"
    assert not any(np.array_equal(a.train_x[u], c.train_x[u]) for u in a.users), "another seed, another draw"
    with pytest.raises(ValueError, match="unknown synthetic setting 'synthetic_1_1_draw0'"):
        generate_synthetic("synthetic_1_1_draw0", tmp_path / "d")


def test_a_paper_or_generator_data_set_needs_a_known_setting():
    from upfl.pipeline.plan import ExperimentError, build_plan

    config = _config()
    config["datasets"]["synthetic_1_1_draw0"] = {"source": "synthetic", "data_seed": 0}
    with pytest.raises(ExperimentError, match=r"datasets\.synthetic_1_1_draw0 \(no setting.*'synthetic_1_1_draw0'"):
        build_plan(config)
    config["datasets"]["synthetic_1_1_draw0"]["setting"] = "synthetic_1_1"
    build_plan(config)
    config["datasets"]["synthetic_1_1"] = {"source": "paper", "setting": "synthetic_2_2"}
    with pytest.raises(ExperimentError, match=r"datasets\.synthetic_1_1\.setting: 'synthetic_2_2'"):
        build_plan(config)


def test_paper_draws_and_generated_draws_never_share_a_path(tmp_path):
    """`upfl synth`'s default folder and the paper's converted sets differ for the same name, and the workflow's
    folder of a data set follows its source."""
    from upfl.cli import main
    from upfl.data.sources import DATA_FOLDERS, dataset_folder

    assert main(["synth", "--name", "synthetic_1_1", "--devices", "3", "--resources", str(tmp_path)]) == 0
    generated = load_leaf(tmp_path / "data" / "generated" / "synthetic_1_1")
    assert generated.meta["source"] == "synthetic" and not (tmp_path / "data" / "paper").exists()
    folders = {src: dataset_folder("r", src, "synthetic_1_1") for src in DATA_FOLDERS}
    assert folders["paper"] == "r/data/paper/synthetic_1_1" and folders["synthetic"] == "r/data/generated/synthetic_1_1"
    assert folders["paper"] != folders["synthetic"]
    with pytest.raises(ValueError, match="unknown data source 'mirror'"):
        dataset_folder("r", "mirror", "x")
