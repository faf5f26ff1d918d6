"""Many runs per job (upfl.pipeline.bundles, `upfl run-many`): same numbers as single runs, failures named and
contained, resume of an interrupted bundle, restore of finished runs, stable deterministic bundles."""

import copy
import json
import os
import random
from pathlib import Path

import pytest
import yaml

from fixtures_runs import metrics_without_time
from upfl.cli import main
from upfl.commands.bundle import write_benchmark
from upfl.data import generate_synthetic
from upfl.engine.simulation import InjectedStop, run
from upfl.integrity import RESULT_FILES
from upfl.pipeline.bundle_trainer import load_data, run_config, train_bundle
from upfl.pipeline.bundles import (
    SOFTMAX_FIRST_COST,
    BundleError,
    bundle_priorities,
    bundle_spec,
    chunk_stably,
    form_bundles,
    run_work,
)
from upfl.pipeline.plan import build_plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=2, num_devices=8))


def entry(data, tmp_path, rid, **config):
    doc = {
        "rounds": 6,
        "algorithm": {"name": "upcycled", "mu": 1.0, "lam": 0.43},
        "devices": {"frac": 0.5, "straggler": 0.5},
        "solver": {"epochs": 2},
        "device": "cpu",
        "checkpoint": {"every": 1, "dir": str(tmp_path / "ck")},
        "seed": 0,
    }
    for key, value in config.items():
        section, _, name = key.partition("__")
        if name:
            doc.setdefault(section, {})[name] = value
        else:
            doc[section] = value
    return {
        "id": rid,
        "data": data,
        "out": str(tmp_path / "runs" / rid),
        "log": str(tmp_path / "logs" / f"{rid}.log"),
        "config": doc,
    }


def spec_of(data, tmp_path, concurrent=1):
    runs = [
        entry(data, tmp_path, "up_s0"),
        entry(data, tmp_path, "up_s1", seed=1),
        entry(data, tmp_path, "prox", algorithm={"name": "fedprox", "mu": 0.5}, rounds=3),
        entry(
            data,
            tmp_path,
            "private",
            algorithm={"name": "fedprox", "mu": 0.1},
            rounds=3,
            privacy={"mechanism": "output", "sigma": 0.5, "tau": 10.0},
        ),
    ]
    return {"bundle": "test", "threads": 1, "concurrent": concurrent, "runs": runs}


def test_a_data_set_is_read_once_while_its_files_are_unchanged(tmp_path, monkeypatch):
    """A bundle's runs share one reading of their data set; a file rewritten since (in place, or replaced by a
    rename) is read again, so a process that outlives a data job (the fork server) never hands on stale data."""
    folder = Path(generate_synthetic("synthetic_1_1", tmp_path / "d", data_seed=1, num_devices=4))
    monkeypatch.chdir(tmp_path)
    path = str(folder.relative_to(tmp_path))
    first = load_data(path)
    assert load_data(path) is first
    train = folder / "train" / "data.json"
    train.write_bytes(train.read_bytes())  # the same bytes written in place
    again = load_data(path)
    assert again is not first and again.train_x.keys() == first.train_x.keys()
    doc = json.loads(train.read_text())
    user = doc["users"][0]
    doc["user_data"][user]["y"][0] = 1 - doc["user_data"][user]["y"][0]
    (folder / "train" / "new.tmp").write_text(json.dumps(doc))
    os.replace(folder / "train" / "new.tmp", train)
    changed = load_data(path)
    assert changed is not again and changed.train_y[user][0] == 1 - again.train_y[user][0]


def test_the_fork_server_reads_ahead_only_data_sets_it_can_keep(data, tmp_path, monkeypatch):
    """The server's step before a bundle reads its data sets up to AHEAD_LIMIT_BYTES (it keeps what it reads for the
    rest of the run); a larger one is left to the bundle, and nothing is read twice."""
    import argparse

    from upfl.pipeline import bundle_trainer

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_of(data, tmp_path)))
    args = argparse.Namespace(spec=str(spec), concurrent=None, threads=None)
    size = bundle_trainer.data_bytes(bundle_trainer.data_state(data))
    assert size > 0
    bundle_trainer._loaded.cache_clear()
    monkeypatch.setattr(bundle_trainer, "AHEAD_LIMIT_BYTES", size - 1)
    assert bundle_trainer.load_spec_data(args) == "1 data set(s): 0 read, 0 read before, 1 over 0 MB left to the bundle"
    assert bundle_trainer._loaded.cache_info().currsize == 0
    monkeypatch.setattr(bundle_trainer, "AHEAD_LIMIT_BYTES", size)
    assert bundle_trainer.load_spec_data(args) == "1 data set(s): 1 read, 0 read before"
    assert bundle_trainer.load_spec_data(args) == "1 data set(s): 0 read, 1 read before"
    assert bundle_trainer.load_spec_data(argparse.Namespace(spec=str(spec), concurrent=2, threads=None)) == (
        "no data read ahead (several processes at once)"
    )


@pytest.mark.parametrize("concurrent", [1, 2])
def test_bundle_gives_the_metrics_of_single_runs(data, tmp_path, concurrent):
    spec = spec_of(data, tmp_path / "bundle", concurrent)
    results = train_bundle(spec, store=str(tmp_path / "store"), echo=lambda s: None)
    assert [r["status"] for r in results] == ["trained"] * 4
    for e in spec["runs"]:
        single = tmp_path / "single" / e["id"]
        run(run_config(e, 1), single, log=lambda s: None)
        assert metrics_without_time(Path(e["out"])) == metrics_without_time(single)
        bundled = json.loads((Path(e["out"]) / "summary.json").read_text())
        alone = json.loads((single / "summary.json").read_text())
        assert bundled["final"] == alone["final"] and bundled["config_hash"] == alone["config_hash"]
        assert "final iteration" in Path(e["log"]).read_text()


def test_run_many_writes_its_own_benchmark_file_and_none_when_a_run_fails(data, tmp_path):
    spec = spec_of(data, tmp_path)
    spec["runs"] = spec["runs"][2:]
    path, bench = tmp_path / "spec.json", tmp_path / "bench" / "b.tsv"
    path.write_text(json.dumps(spec))
    assert main(["run-many", "--spec", str(path), "--no-store", "--benchmark", str(bench)]) == 0
    header, row, *rest = bench.read_text().splitlines()
    values = dict(zip(header.split("\t"), row.split("\t"), strict=True))
    assert header.split("\t") == ["s", "h:m:s", "max_rss", "cpu_time"] and not rest
    assert float(values["s"]) > 0 and float(values["max_rss"]) > 50 and float(values["cpu_time"]) > 0
    assert values["h:m:s"] == "0:00:{:02d}".format(int(float(values["s"])))
    bench.unlink()
    spec["runs"][0]["config"]["rounds"] = 0
    path.write_text(json.dumps(spec))
    assert main(["run-many", "--spec", str(path), "--no-store", "--benchmark", str(bench)]) == 1
    assert not bench.exists()


def test_run_many_benchmark_file_is_never_older_than_the_runs_it_finishes(data, tmp_path, monkeypatch):
    """A wall clock set back between the runs' files and the benchmark file (a virtual machine's clock corrected by
    its host) would make the runs read as edited since the bundle (workflow/rules/common.smk, experiment_results) and
    rebuild the report at every call: the benchmark file's time is raised to the newest run file's."""
    import upfl.files

    spec = spec_of(data, tmp_path)
    spec["runs"] = spec["runs"][2:]
    path, bench = tmp_path / "spec.json", tmp_path / "bench" / "b.tsv"
    path.write_text(json.dumps(spec))
    write_text = upfl.files.write_text

    def written_an_hour_back(target, text, *args, **kwargs):
        write_text(target, text, *args, **kwargs)
        if Path(target) == bench:
            back = os.stat(target).st_mtime_ns - 3600 * 10**9
            os.utime(target, ns=(back, back))

    monkeypatch.setattr(upfl.files, "write_text", written_an_hour_back)
    assert main(["run-many", "--spec", str(path), "--no-store", "--benchmark", str(bench)]) == 0
    newest = max(os.stat(Path(e["out"]) / name).st_mtime_ns for e in spec["runs"] for name in RESULT_FILES)
    assert os.stat(bench).st_mtime_ns == newest
    assert "cpu_time" in bench.read_text()


def test_write_benchmark_keeps_its_own_time_when_the_runs_are_older_or_missing(tmp_path):
    old = tmp_path / "old.csv"
    old.write_text("x")
    os.utime(old, ns=(10**18, 10**18))
    bench = tmp_path / "b.tsv"
    write_benchmark(str(bench), 2.0, [old, tmp_path / "missing.csv"])
    assert os.stat(bench).st_mtime_ns > os.stat(old).st_mtime_ns
    assert bench.read_text().splitlines()[1].split("\t")[:2] == ["2.0000", "0:00:02"]


def test_run_many_clear_results_trains_anew_a_run_whose_folder_holds_another_configs_results(data, tmp_path, capsys):
    """The workflow's bundle jobs pass --clear-results (their rules do not declare the runs' files, so Snakemake
    does not remove them): a run whose settings changed under the same id is trained, not refused."""
    spec = {**spec_of(data, tmp_path), "runs": spec_of(data, tmp_path)["runs"][2:3]}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    assert main(["run-many", "--spec", str(path), "--no-store"]) == 0
    summary = Path(spec["runs"][0]["out"]) / "summary.json"
    before = json.loads(summary.read_text())["config_hash"]
    spec["runs"][0]["config"]["solver"]["epochs"] = 3
    path.write_text(json.dumps(spec))
    assert main(["run-many", "--spec", str(path), "--no-store"]) == 1
    assert "holds the results of another config" in capsys.readouterr().err
    assert main(["run-many", "--spec", str(path), "--no-store", "--clear-results"]) == 0
    assert json.loads(summary.read_text())["config_hash"] != before


def test_failed_run_is_named_and_the_others_keep_their_results(data, tmp_path):
    spec = spec_of(data, tmp_path)
    spec["runs"][1]["config"]["algorithm"]["mu"] = -1.0  # invalid: the run fails, the bundle goes on
    spec["runs"][2]["data"] = str(tmp_path / "no_such_data")
    with pytest.raises(BundleError) as err:
        train_bundle(spec, store=None, echo=lambda s: None)
    text = str(err.value)
    assert "2 of 4 runs failed" in text and "up_s1" in text and "prox" in text and "no_such_data" in text
    for e in (spec["runs"][0], spec["runs"][3]):
        assert (Path(e["out"]) / "summary.json").exists() and (Path(e["out"]) / "metrics.csv").exists()
    assert not Path(spec["runs"][1]["out"]).exists()
    assert "Traceback" in Path(spec["runs"][1]["log"]).read_text()


def test_cli_exit_status_and_message_name_the_failed_run(data, tmp_path, capsys):
    spec = spec_of(data, tmp_path)
    spec["runs"] = spec["runs"][:2]
    spec["runs"][0]["config"]["rounds"] = 0
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    assert main(["run-many", "--spec", str(path), "--no-store"]) == 1
    err = capsys.readouterr().err
    assert "up_s0" in err and "1 of 2 runs failed" in err
    assert (Path(spec["runs"][1]["out"]) / "summary.json").exists()
    path.write_text("{not json")
    assert main(["run-many", "--spec", str(path)]) == 2  # bad input, as every upfl command
    assert "not valid JSON" in capsys.readouterr().err


def test_run_many_names_a_run_whose_results_cannot_be_written_and_exits_1(data, tmp_path, capsys, monkeypatch):
    """The disk fills while one run writes its results: that run fails with the OS error named, nothing half
    written is left in its folder, the other run's results stand, and `upfl run-many` exits 1."""
    import errno

    from upfl import files

    spec = spec_of(data, tmp_path)
    spec["runs"] = spec["runs"][:2]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    real_write_texts = files.write_texts
    full = Path(spec["runs"][0]["out"])

    def write_texts(texts, *args, **kwargs):
        if any(Path(p).parent == full for p in texts):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write_texts(texts, *args, **kwargs)

    monkeypatch.setattr("upfl.engine.simulation.write_texts", write_texts)
    assert main(["run-many", "--spec", str(path), "--no-store"]) == 1
    err = capsys.readouterr().err
    assert "1 of 2 runs failed" in err and "up_s0 (OSError: [Errno 28] No space left on device)" in err
    assert not (full / "metrics.csv").exists() and not (full / "summary.json").exists()
    assert (Path(spec["runs"][1]["out"]) / "summary.json").exists()


def test_interrupted_bundle_resumes_and_finished_runs_are_restored(data, tmp_path):
    spec = spec_of(data, tmp_path)
    store = str(tmp_path / "store")
    reference = tmp_path / "reference"
    cut = spec["runs"][1]
    run(run_config(cut, 1), reference, log=lambda s: None)
    # The first run finished before the interrupt (and is in the store); the second stopped at iteration 3
    # leaving its checkpoint; the job's outputs were then removed (as Snakemake does before a rerun).
    train_bundle({**spec, "runs": spec["runs"][:1]}, store=store, echo=lambda s: None)
    first = (Path(spec["runs"][0]["out"]) / "metrics.csv").read_text()
    with pytest.raises(InjectedStop):
        run(run_config(cut, 1), cut["out"], log=lambda s: None, stop_after=3)
    for e in spec["runs"]:
        for name in ("metrics.csv", "summary.json"):
            (Path(e["out"]) / name).unlink(missing_ok=True)
    lines = []
    results = train_bundle(spec, store=store, echo=lines.append)
    assert [r["status"] for r in results] == ["restored", "trained", "trained", "trained"]
    assert (Path(spec["runs"][0]["out"]) / "metrics.csv").read_text() == first
    assert "resuming from" in Path(cut["log"]).read_text()
    assert metrics_without_time(Path(cut["out"])) == metrics_without_time(reference)
    assert any("1 restored" in line for line in lines)
    # A changed config is a different run: not restored.
    spec["runs"][0]["config"]["solver"]["epochs"] = 3
    for name in ("metrics.csv", "summary.json"):  # Snakemake removes a job's outputs before it runs
        (Path(spec["runs"][0]["out"]) / name).unlink()
    assert train_bundle({**spec, "runs": spec["runs"][:1]}, store=store, echo=lambda s: None)[0]["status"] == "trained"


def full_plan():
    return build_plan(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))


def memberships(bundles):
    return {frozenset(b.run_ids) for b in bundles.values()}


def test_bundles_are_deterministic_disjoint_and_cover_every_bundled_run():
    plan = full_plan()
    bundles = form_bundles(plan.runs)
    shuffled = list(plan.runs.items())
    random.Random(0).shuffle(shuffled)
    assert form_bundles(dict(shuffled)) == bundles
    ids = [r for b in bundles.values() for r in b.run_ids]
    assert len(ids) == len(set(ids))  # a run requested by several experiments is in one bundle: trained once
    assert set(ids) == {r for r, s in plan.runs.items() if s.job["runs_per_job"] > 1}
    for b in bundles.values():
        assert {plan.runs[r].experiments[0] for r in b.run_ids} == {b.experiment}
        datasets = [plan.runs[r].dataset for r in b.run_ids]
        assert datasets == sorted(datasets, key=datasets.index)  # data set by data set: each read once
        assert {tuple(sorted(plan.runs[r].job.items())) for r in b.run_ids} == {tuple(sorted(b.job.items()))}
        assert len(b.run_ids) <= 2 * b.job["runs_per_job"]
    shared = "synthetic_1_1/logreg/upcycled/mu1_lam0.43/s0.9_f0.3/T160/seed0"
    assert {"table1", "fig5"} <= set(plan.runs[shared].experiments)
    assert sum(shared in b.run_ids for b in bundles.values()) == 1


def test_adding_or_removing_runs_changes_only_the_bundles_they_fall_into():
    ids = [f"synthetic_iid/logreg/fedprox/mu{i}/s0.9_f0.3/T80/seed{s}" for i in range(40) for s in range(3)]
    before = {frozenset(c) for c in chunk_stably(ids, 8)}
    added = [f"synthetic_iid/logreg/upcycled/mu{i}_lam0.1/s0.9_f0.3/T160/seed0" for i in range(3)]
    after = {frozenset(c) for c in chunk_stably(ids + added, 8)}
    assert len(before - after) <= 3  # each added run changes at most its own bundle
    removed = {frozenset(c) for c in chunk_stably(ids[:50] + ids[51:], 8)}
    assert len(before - removed) <= 2
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    base = memberships(form_bundles(build_plan(config).runs))
    edited = copy.deepcopy(config)
    edited["experiments"]["fig2_lambda"]["groups"][0]["runs"][1]["step"].append(0.6)  # 3 new runs (seeds)
    changed = memberships(form_bundles(build_plan(edited).runs))
    assert len(base - changed) <= 3 and len(changed - base) <= 6


def test_a_short_last_chunk_joins_the_one_before():
    """No job of a handful of runs at the end of an experiment: a last chunk under size // 2 joins the one before
    when both fit in 2 x size; every id stays in exactly one chunk, in sorted order."""
    size = 8
    for n in range(1, 120):
        ids = [f"synthetic_iid/logreg/fedprox/mu{i}/s0.9_f0.3/T80/seed0" for i in range(n)]
        chunks = chunk_stably(ids, size)
        assert [r for c in chunks for r in c] == sorted(ids)
        assert all(len(c) <= 2 * size for c in chunks)
        if len(chunks) > 1:
            assert len(chunks[-1]) >= size // 2 or len(chunks[-2]) + len(chunks[-1]) > 2 * size


def test_run_work_counts_training_rounds_epochs_and_inner_steps():
    fedavg = {"algorithm": {"name": "fedavg"}, "rounds": 80, "devices": {"frac": 0.5}, "solver": {"epochs": 10}}
    assert run_work(fedavg) == 80 * 0.5 * 10 + 80 / 3
    upcycled = {"algorithm": {"name": "upcycled", "mu": 1, "lam": 0.43}, "rounds": 160}  # trains at odd t only
    assert run_work(upcycled) == 80 * 0.3 * 20 + 160 / 3  # frac and epochs: RunConfig's defaults
    pfedme = {
        "algorithm": {"name": "upcycled_pfedme", "step": 0.7, "personal_steps": 3},
        "rounds": 4,
        "evaluation": {"every": 2},
    }
    assert run_work(pfedme) == 2 * 0.3 * 20 * 3 + 4 / 2 / 3
    authors_loss = {**fedavg, "model": {"softmax_before_loss": True}}
    assert run_work(authors_loss) == SOFTMAX_FIRST_COST * run_work(fedavg)


def test_bundles_with_more_work_get_higher_snakemake_priority():
    plan = full_plan()
    bundles = form_bundles(plan.runs)
    priority = bundle_priorities(bundles, plan.runs)
    assert sorted(priority.values()) == list(range(1, len(bundles) + 1))  # distinct, all above the default 0
    work = {n: sum(run_work(plan.runs[r].doc) for r in b.run_ids) for n, b in bundles.items()}
    by_priority = sorted(bundles, key=priority.get)
    assert [work[n] for n in by_priority] == sorted(work.values())
    paper_bundles = [n for n in bundles if not n.startswith("sensitivity_")]
    assert max(paper_bundles, key=priority.get).startswith("privacy_")  # full participation, 80 rounds, 20 epochs


def test_bundle_spec_carries_each_runs_folder_log_and_config():
    plan = full_plan()
    bundles = form_bundles(plan.runs)
    gpu = next(b for b in bundles.values() if b.job["gpus"] == 1)
    spec = bundle_spec(
        gpu,
        plan.runs,
        lambda d: f"resources/data/{d}",
        lambda r: f"results/runs/{r}",
        lambda r: f"results/logs/train/{r}.log",
    )
    assert spec["concurrent"] == gpu.job["runs_per_gpu"] and spec["threads"] >= 1
    ids = [e["id"] for e in spec["runs"]]
    assert sorted(ids) == gpu.run_ids
    keys = [(plan.runs[r].dataset, plan.runs[r].seed) for r in ids]
    assert keys == sorted(keys)  # data set by data set, seed by seed: shared plans and draws are reused
    e = spec["runs"][0]
    assert e["out"] == f"results/runs/{e['id']}" and e["config"] == plan.runs[e["id"]].doc
    cfg = run_config(e, spec["threads"])
    assert cfg.data.path == f"resources/data/{plan.runs[e['id']].dataset}" and cfg.seed == plan.runs[e["id"]].seed


def test_more_single_runs_than_the_limit_are_refused_naming_the_key(monkeypatch):
    from upfl.pipeline import bundles as bundlemod
    from upfl.pipeline.config_errors import ExperimentError
    from upfl.pipeline.plan import RunSpec

    runs = {f"d/r{i}/seed0": RunSpec(f"d/r{i}/seed0", "d", 0, {}, ["e"], {"runs_per_job": 1}) for i in range(5)}
    runs.update({f"d/b{i}/seed0": RunSpec(f"d/b{i}/seed0", "d", 0, {}, ["e"], {"runs_per_job": 4}) for i in range(8)})
    formed = bundlemod.form_bundles(runs)
    monkeypatch.setattr(bundlemod, "SINGLE_RUN_LIMIT", 5)
    bundlemod.check_single_runs(runs, formed)  # 5 single runs: at the limit
    monkeypatch.setattr(bundlemod, "SINGLE_RUN_LIMIT", 4)
    with pytest.raises(ExperimentError, match=r"job_defaults.runs_per_job: 5 runs would be trained one per job"):
        bundlemod.check_single_runs(runs, formed)
