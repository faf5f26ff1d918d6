"""Bundle specs are written by a job, not the parse, named by their digest: the job computes from the config handed
over in the environment exactly the specs the parse planned (the full config and every preset)."""

import json

import pytest
import yaml

from fixtures_workflow import ROOT
from upfl.pipeline.bundle_trainer import load_spec
from upfl.pipeline.bundles import SpecError
from upfl.pipeline.plan import build_plan
from upfl.pipeline.specs import (
    CONFIG_ENV,
    clear_results,
    encode_config,
    run_folder,
    run_list_path,
    run_list_texts,
    spec_digest,
    spec_path,
    workflow_specs,
    write_run_lists,
    write_specs,
)


@pytest.mark.parametrize("preset", ["full", "quick"])
def test_the_job_writes_the_specs_the_parse_planned(tmp_path, monkeypatch, preset):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["preset"] = preset
    planned = workflow_specs(config)
    files = [spec_path(name, spec_digest(text)) for name, text in planned.items()]
    assert len(planned) > 5
    monkeypatch.chdir(tmp_path)
    write_specs(files, {CONFIG_ENV: encode_config(config)})
    for name, f in zip(planned, files, strict=True):
        text = (tmp_path / f).read_text()
        assert text == planned[name]
        assert load_spec(tmp_path / f)["bundle"] == name


def test_a_spec_the_config_does_not_give_is_named(tmp_path, monkeypatch):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["preset"] = "quick"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match=r"results/bundles/table1_x-0123456789abcdef\.json: no bundle of this workflow"):
        write_specs(["results/bundles/table1_x-0123456789abcdef.json"], {CONFIG_ENV: encode_config(config)})
    with pytest.raises(SpecError, match=f"{CONFIG_ENV} is not set"):
        write_specs(["results/bundles/a-0123456789abcdef.json"], {})


def test_an_edited_spec_is_refused_by_its_name(tmp_path):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["preset"] = "quick"
    name, text = next(iter(workflow_specs(config).items()))
    path = tmp_path / f"{name}-{spec_digest(text)}.json"
    spec = json.loads(text)
    spec["runs"] = spec["runs"][:1]
    path.write_text(json.dumps(spec))
    with pytest.raises(SpecError, match="does not match the digest in its name"):
        load_spec(path)


def test_clearing_a_bundles_results_removes_each_runs_result_files_and_keeps_the_rest(tmp_path):
    """What Snakemake did when a bundle declared every run's files: they are removed before the bundle trains (a run
    whose settings changed is then trained anew); the checksum record and an interrupted run's checkpoint stay."""
    runs = [tmp_path / "runs" / "a" / "seed0", tmp_path / "runs" / "a" / "seed1", tmp_path / "runs" / "b" / "seed0"]
    for run in runs[:2]:
        (run / ".checkpoints").mkdir(parents=True)
        for name in ("summary.json", "metrics.csv", "checksums.json", ".checkpoints/state.pt"):
            (run / name).write_text("x")
    spec = {"bundle": "b", "runs": [{"id": str(r), "out": str(r)} for r in runs]}
    removed = clear_results(spec)
    assert removed == [str(run / name) for run in runs[:2] for name in ("summary.json", "metrics.csv")]
    for run in runs[:2]:
        assert sorted(p.name for p in run.rglob("*")) == [".checkpoints", "checksums.json", "state.pt"]
    assert not runs[2].exists()
    assert clear_results(spec) == []


@pytest.mark.parametrize("preset", ["full", "quick"])
def test_the_job_writes_the_run_lists_the_parse_planned(tmp_path, monkeypatch, preset):
    """`upfl run-lists` with no file named writes every run list of the config, each named by its content: one per
    experiment (its report job's) and all of them in one (results/runs.csv's), the runs each experiment plans."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["preset"] = preset
    plan = build_plan(config)
    texts = run_list_texts(plan)
    monkeypatch.chdir(tmp_path)
    written = write_run_lists([], {CONFIG_ENV: encode_config(config)})
    assert sorted(written) == sorted(run_list_path(e, spec_digest(t)) for e, t in texts.items())
    for experiment, ids in plan.experiments.items():
        lines = (tmp_path / run_list_path(experiment, spec_digest(texts[experiment]))).read_text().splitlines()
        assert lines == [f"{experiment}:{run_folder(r)}" for r in ids]
    every = (tmp_path / run_list_path("", spec_digest(texts[""]))).read_text().splitlines()
    assert len(every) == sum(len(ids) for ids in plan.experiments.values())
    with pytest.raises(SpecError, match=r"results/runs-0123456789abcdef\.list: no experiment of this workflow"):
        write_run_lists(["results/runs-0123456789abcdef.list"], {CONFIG_ENV: encode_config(config)})
