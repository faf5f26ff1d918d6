"""The real-data rules end to end (preset `fixtures`): the tests' fixture archives served on 127.0.0.1,
downloaded by `fetch_archive`, prepared by `leaf_dataset`, trained (MLP, CNN, LSTM) and reported."""

import json
import time

import pytest
import yaml

from fixtures_leaf import make_leaf_archives, mirror_config, run_data_cli, serve_folder
from fixtures_workflow import (
    ROOT,
    assert_nothing_to_be_done,
    expected_training_runs,
    job_counts,
    snakemake,
    trained_runs,
    workflow_copy,
)
from upfl.data.download import read_recorded_sha256
from upfl.data.leaf import load_leaf, verify_checksums
from upfl.files import sha256_file
from upfl.pipeline.plan import build_plan

pytestmark = pytest.mark.workflow

CONFIGS = ["--configfile", "config/fixtures.yaml", "config/mirrors.yaml"]
DEVICES = {"femnist": 6, "sent140": 5}


def fixtures_config() -> dict:
    """config/config.yaml with config/fixtures.yaml on top (as Snakemake merges them)."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config.update(yaml.safe_load((ROOT / "config" / "fixtures.yaml").read_text()))
    return config


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """The fixtures preset run once, the archives served by a local server; (workdir, server log, archives, seconds)."""
    tmp = tmp_path_factory.mktemp("real")
    archives = make_leaf_archives(tmp / "src")
    wd = workflow_copy(tmp)
    with serve_folder(tmp / "src") as srv:
        (wd / "config" / "mirrors.yaml").write_text(yaml.safe_dump({"sources": mirror_config(srv, archives)}))
        start = time.perf_counter()
        proc = snakemake(wd, "--cores", "2", *CONFIGS)
        elapsed = time.perf_counter() - start
        requests = list(srv.log.requests)
    print(f"fixtures preset: {elapsed:.1f} s")
    return wd, requests, archives, elapsed, proc


def test_fetch_source_is_one_archive_not_the_data_set(tmp_path):
    """`fetch_archive` runs `upfl data fetch --source sent140`: the tweets archive only, not glove too."""
    archives = make_leaf_archives(tmp_path / "src")
    with serve_folder(tmp_path / "src") as srv:
        urls = mirror_config(srv, archives)
        rc = run_data_cli(
            [
                "data",
                "fetch",
                "--source",
                "sent140",
                "--resources",
                str(tmp_path / "res"),
                "--no-progress",
                "--url",
                f"sent140={urls['sent140']['url']}",
                "--backoff",
                "0",
            ]
        )
        paths = [p for p, _ in srv.log.requests]
    assert rc == 0 and paths == ["/trainingandtestdata.zip"]
    assert sorted(p.name for p in (tmp_path / "res").glob("*.zip")) == ["trainingandtestdata.zip"]
    assert (
        run_data_cli(["data", "fetch", "--source", "femnist", "--resources", str(tmp_path / "res")]) == 2
    )  # not a source name


def test_dry_run_counts_of_the_fixtures_preset(tmp_path):
    proc = snakemake(workflow_copy(tmp_path), "-n", "--configfile", "config/fixtures.yaml")
    counts = job_counts(proc.stdout)
    config = fixtures_config()
    assert trained_runs(counts, config) == expected_training_runs(config) == 38
    assert "synthetic_dataset" not in counts
    assert counts["fetch_archive"] == 3 and counts["leaf_dataset"] == 2, "by_class, sent140, glove (no by_write)"
    # One report job per experiment: table1 (Table 1 and the time table, real-data rows only), fig2_convergence
    # (Figure 2 left), fig4, fig6, fig7, fig10, fig12 (Figure 12's two panels and the real-data privacy table)
    assert counts["table2"] == 1 and counts["all_runs"] == 1
    reports = ["table1", "fig2_convergence", "fig4", "fig6", "fig7", "fig10", "fig12"]
    assert {r: n for r, n in counts.items() if r.startswith("report_")} == {f"report_{e}": 1 for e in reports}


def test_archives_downloaded_from_the_mirrors_with_recorded_checksums(pipeline):
    wd, requests, archives, _, _ = pipeline
    paths = [p for p, _ in requests]
    res = wd / "resources" / "fixtures"
    for name, src in archives.items():
        assert f"/{src.name}" in paths, (name, paths)
        got = res / src.name
        assert got.read_bytes() == src.read_bytes(), name
        assert read_recorded_sha256(got) == sha256_file(src), name
    assert not (wd / "resources" / "by_class.zip").exists(), "fixture archives stay in resources/fixtures"


def test_prepared_sets_have_the_leaf_layout_and_device_counts(pipeline):
    wd = pipeline[0]
    for name, devices in DEVICES.items():
        folder = wd / "resources" / "fixtures" / "data" / "leaf" / name
        for split in ("train", "test"):
            files = list((folder / split).glob("*.json"))
            assert files, (name, split)
            doc = json.loads(files[0].read_text())
            assert {"users", "num_samples", "user_data"} <= set(doc), (name, split)
        ds = load_leaf(folder)
        assert len(ds.train_users) == devices, name
        verify_checksums(folder)
    table2 = (wd / "results" / "tables" / "table2.md").read_text()
    assert "emnist" in table2.lower() and "sent140" in table2.lower()


def test_every_run_finished_with_its_iterations(pipeline):
    wd = pipeline[0]
    plan = build_plan(fixtures_config())
    assert len(plan.runs) == 38
    models = set()
    for rid, spec in plan.runs.items():
        d = wd / "results" / "runs" / rid
        assert (d / "summary.json").stat().st_size > 0, rid
        rows = (d / "metrics.csv").read_text().splitlines()
        assert len(rows) == 1 + 1 + spec.doc["rounds"], rid  # header, iteration 0, T iterations
        models.add((spec.dataset, spec.doc["model"]["name"]))
    assert models == {("femnist", "mlp"), ("femnist", "cnn"), ("sent140", "lstm")}
    assert {spec.doc["rounds"] for spec in plan.runs.values()} == {3, 6}


def test_real_data_tables_and_figures_then_nothing_to_do(pipeline):
    wd, _, _, elapsed, _ = pipeline
    for name in ("tables/table1.md", "tables/table1.csv", "tables/time.md", "tables/table2.csv", "runs.csv"):
        assert (wd / "results" / name).stat().st_size > 0, name
    for fig in ("fig2_convergence", "fig4", "fig6", "fig7", "fig10", "fig12_objective", "fig12_output"):
        png = wd / "results" / "figures" / f"{fig}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", fig
    assert not (wd / "results" / "figures" / "fig5.png").exists(), "no synthetic experiment in this preset"
    table = (wd / "results" / "tables" / "table1.md").read_text().lower()
    assert "femnist" in table and "sent140" in table
    privacy = (wd / "results" / "tables" / "privacy_real.md").read_text()
    assert "no guarantee (not a GLM)" in privacy and "FEMNIST" in privacy and "Sent140" in privacy
    again = snakemake(wd, "--cores", "2", "-n", *CONFIGS)
    assert_nothing_to_be_done(again)
    assert elapsed < 300
