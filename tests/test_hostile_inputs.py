"""Hostile names and values in configs: refused with a named error before any shell command runs."""

import os
import sys
from pathlib import Path

import pytest

from upfl.experiments import ExperimentError, build_plan

HOSTILE_NAMES = ["synthetic_iid --out q;touch PWNED;#", "../../../esc", ".hidden", "-rf", "a/b", "a b", "x" * 200]


def plan_with_dataset(name, setting="synthetic_iid"):
    return {"datasets": {name: {"source": "synthetic", "setting": setting}},
            "experiments": {"e": {"groups": [{"datasets": [name], "runs": [{"algorithm": "fedavg", "rounds": 2}]}]}}}


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_plan_refuses_unsafe_dataset_names(name):
    with pytest.raises(ExperimentError, match=r"datasets: .* is not a safe name"):
        build_plan(plan_with_dataset(name))


def test_plan_refuses_unsafe_experiment_output_and_setting_names():
    config = plan_with_dataset("synthetic_iid")
    config["experiments"]["../x"] = config["experiments"].pop("e")
    with pytest.raises(ExperimentError, match=r"experiments: '../x' is not a safe name"):
        build_plan(config)
    config = plan_with_dataset("synthetic_iid", setting="synthetic_iid;id")
    with pytest.raises(ExperimentError, match=r"datasets.synthetic_iid.setting: .* is not a safe name"):
        build_plan(config)
    config = plan_with_dataset("synthetic_iid")
    config["experiments"]["e"]["outputs"] = [{"kind": "table1", "name": "t", "target": "$(id)"}]
    with pytest.raises(ExperimentError, match=r"outputs\[0\].target: .* is not a safe name"):
        build_plan(config)


HOSTILE_CONFIG = """\
preset: full
seeds: [0]
run_defaults: {{device: cpu}}
datasets:
  {name!r}: {{source: synthetic, setting: synthetic_iid}}
experiments:
  e:
    groups:
      - datasets: [{name!r}]
        runs:
          - {{algorithm: fedavg, rounds: 2}}
"""


@pytest.mark.workflow
@pytest.mark.parametrize("name", HOSTILE_NAMES[:2])
def test_workflow_runs_no_command_and_writes_nothing_outside_for_a_hostile_name(tmp_path, name):
    from test_workflow import snakemake, workflow_copy

    outer = tmp_path / "outer"
    outer.mkdir()
    wd = workflow_copy(outer)
    (wd / "config" / "config.yaml").write_text(HOSTILE_CONFIG.format(name=name))
    before = {p for p in tmp_path.rglob("*")}
    proc = snakemake(wd, "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "is not a safe name" in proc.stdout + proc.stderr or "does not match" in proc.stdout + proc.stderr
    created = {p for p in tmp_path.rglob("*")} - before
    assert not [p for p in created if wd not in p.parents]  # nothing outside the workflow folder
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()
    assert not (wd / "resources" / "data").exists()  # no data rule ran


@pytest.mark.workflow
def test_shell_commands_quote_what_they_interpolate():
    """Every `{...}` in a rule's shell string carries `:q`, except flag lists built with shlex.quote."""
    import re

    root = Path(__file__).resolve().parents[1]
    prebuilt = {"params.overrides", "params.options", "params.checksums", "params.flags", "params.args",
                "params.pairs", "params.configs", "params.reference", "threads"}
    for smk in (root / "workflow" / "rules").glob("*.smk"):
        for field in re.findall(r'^\s+"[^"\n]*"', smk.read_text(), flags=re.M):
            for placeholder in re.findall(r"\{([^{}]+)\}", field):
                assert placeholder.endswith(":q") or placeholder in prebuilt or not re.match(
                    r"(input|output|params|wildcards|log)\b", placeholder), f"{smk.name}: {{{placeholder}}}"
