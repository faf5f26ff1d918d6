"""The command line teaches: help with what each flag sets, its default, choices and unit; a misspelt flag named
by the sub-command it was given to, with the closest flag; a missing data folder reported before any other key."""

import json
import re
from pathlib import Path

import pytest

from upfl.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def test_run_help_gives_meaning_key_default_and_choices(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["run", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--rounds INT iterations T, even (upcycling) ones included" in text and "(rounds; default 160)" in text
    assert "(devices.straggler_policy; default partial; one of partial, drop)" in text
    assert "one of fedavg, fedprox" in text and "upcycled_<base>" in text
    assert "--rounds ROUNDS" not in text


def test_misspelt_flag_is_named_by_its_command_with_a_suggestion(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["run", "--out", "x", "--rouns", "3"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "usage: upfl run" in err and "unrecognized arguments: --rouns 3; did you mean --rounds?" in err


def test_missing_data_is_reported_before_algorithm_keys(tmp_path, capsys):
    """Upcycled-FL without lam is a config error too, but the missing folder is what a user fixes first."""
    rc = main(["run", "--data", str(tmp_path / "missing"), "--algorithm", "upcycled", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"data.path: data set folder {tmp_path / 'missing'} not found" in err
    assert "lam" not in err


def test_every_subcommand_flag_has_help():
    parser = build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]
    assert all(a.help for a in run._actions if a.option_strings)


def test_misspelt_workflow_target_gets_the_closest_one():
    from upfl.pipeline.config_errors import misspelt_targets

    known = ["fig5", "fig2", "table1", "time", "all"]
    argv = ["snakemake", "--cores", "all", "-n", "fig55", "table1", "tabel1", "--configfile", "config/quick.yaml"]
    assert misspelt_targets(argv, known) == [
        "fig55: not a target of this config; did you mean fig5?",
        "tabel1: not a target of this config; did you mean table1?",
    ]
    # Only targets, as Snakemake's parser reads them: an option's value (`--configfile A tabel1` takes it as a config
    # file, whose absence Snakemake names) is no target.
    assert misspelt_targets(["snakemake", "--configfile", "config/quick.yaml", "tabel1"], known) == []


def test_misspelt_run_config_key_gets_the_closest_one(tmp_path, capsys):
    from upfl.data import generate_synthetic

    data = generate_synthetic("synthetic_1_1", tmp_path / "d", data_seed=0, num_devices=3)
    rc = main(["run", "--data", str(data), "--set", "devices.stragler=0.5", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown config key 'devices.stragler'" in err and "did you mean 'devices.straggler'?" in err


def test_kernels_warm_up_records_what_it_did(tmp_path, monkeypatch, capsys):
    import json

    import upfl.solvers.selection as selection

    out = tmp_path / "kernels" / "numba.json"
    assert main(["kernels", "warm-up", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["numba"] and record["threads"] == 1 and record["seconds"] >= 0 and "git_commit" in record
    # Without numba the record says so and the runs use the torch solver.
    monkeypatch.setattr(selection, "numba_solver", lambda threads=0: None)
    assert main(["kernels", "warm-up", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["numba"] is None
    assert "torch solver" in capsys.readouterr().out


def test_misspelt_algorithm_and_model_get_the_closest_one(tmp_path, capsys):
    from upfl.data import generate_synthetic

    data = generate_synthetic("synthetic_1_1", tmp_path / "d", data_seed=0, num_devices=3)
    rc = main(["run", "--data", str(data), "--algorithm", "fedporx", "--out", str(tmp_path / "o")])
    assert rc == 2 and "unknown algorithm 'fedporx'; did you mean 'fedprox'?" in capsys.readouterr().err
    rc = main(["run", "--data", str(data), "--model", "lgreg", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "model.name: must be one of logreg, binary_logreg, mlp, cnn, lstm" in err
    assert "did you mean 'logreg'?" in err


def test_model_choices_are_the_builders():
    from upfl.models import BUILDERS
    from upfl.names import MODEL_NAMES

    assert tuple(BUILDERS) == MODEL_NAMES


def test_the_default_algorithm_runs_without_lam_at_table1s_step(tmp_path, capsys):
    """`upfl run --data D --out O` trains Upcycled-FL at step 0.7 (Table 1's mu/(mu+lambda)); summary says so."""
    import json

    from upfl.data import generate_synthetic
    from upfl.names import DEFAULT_STEP, even_step_coefficient

    assert all(
        abs(even_step_coefficient(mu, lam) - DEFAULT_STEP) < 0.02
        for mu, lam in ((0.1, 0.04), (0.3, 0.12), (0.5, 0.21), (1, 0.43))
    )
    data = generate_synthetic("synthetic_1_1", tmp_path / "d", data_seed=0, num_devices=3)
    rc = main(["run", "--data", str(data), "--rounds", "2", "--epochs", "2", "--out", str(tmp_path / "o")])
    assert rc == 0, capsys.readouterr().err
    algorithm = json.loads((tmp_path / "o" / "summary.json").read_text())["config"]["algorithm"]
    assert algorithm["name"] == "upcycled" and algorithm["step"] == DEFAULT_STEP and algorithm["lam"] is None


@pytest.mark.parametrize(
    "command",
    [
        ["run"],
        ["synth"],
        ["stats"],
        ["privacy"],
        ["data"],
        ["data", "fetch"],
        ["data", "prepare"],
        ["data", "extract"],
        ["report"],
        ["report", "claims"],
        ["report", "figure"],
        ["kernels"],
        ["store"],
        ["run-many"],
    ],
)
def test_no_help_prints_restructuredtext(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and not re.search(r":(func|mod|class|meth):`", out), out


def test_synth_draws_of_one_setting_in_one_process_are_the_single_draws_byte_for_byte(tmp_path):
    """`upfl synth --setting S --draw NAME=SEED ...` (the workflow's job per setting) writes each data set as `upfl
    synth --name NAME --setting S --data-seed SEED` would, into RESOURCES/data/generated/NAME."""
    draws = {"iid_draw0": 0, "iid_draw3": 3}
    flags = [f for name, seed in draws.items() for f in ("--draw", f"{name}={seed}")]
    common = ["--setting", "synthetic_iid", "--devices", "3"]
    assert main(["synth", *common, "--resources", str(tmp_path / "many"), *flags]) == 0
    for name, seed in draws.items():
        one = tmp_path / "one" / name
        assert main(["synth", *common, "--name", name, "--data-seed", str(seed), "--out", str(one)]) == 0
        many = tmp_path / "many" / "data" / "generated" / name
        for rel in ("train/data.json", "test/data.json", "meta.json"):
            assert (many / rel).read_bytes() == (one / rel).read_bytes(), (name, rel)
    assert json.loads((tmp_path / "many/data/generated/iid_draw3/meta.json").read_text())["data_seed"] == 3


def test_targets_lists_each_target_its_place_in_the_paper_and_its_runs(capsys, monkeypatch):
    """`upfl targets --configfile config/quick.yaml`: every target of the quick preset's plan, in a line with the
    runs it needs (its experiments' runs) and its place in the paper, then claims, table2, runs and all."""
    import yaml

    from upfl.pipeline.plan import build_plan

    monkeypatch.chdir(ROOT)
    assert main(["targets", "--configfile", "config/quick.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Targets of preset quick") and out[0].endswith("TARGET --configfile config/quick.yaml")
    rows = {line.split()[0]: line for line in out[2:]}
    config = {**yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), "preset": "quick"}
    plan = build_plan(config)
    assert list(rows) == [*plan.targets, "claims", "table2", "runs", "all"]
    for target, names in plan.targets.items():
        runs = {r for n in names for r in plan.experiments[plan.outputs[n]["experiment"]]}
        assert rows[target].split()[1] == str(len(runs)), rows[target]
    assert rows["table1"].endswith("Table 1") and rows["fig5"].endswith("Figure 5")
    assert "Figure 2 (convergence); Figure 2 (lambda)" in rows["fig2"]
    assert "no numbered table or figure: training time" in rows["time"]
    assert rows["all"].split()[1] == str(len(plan.runs))
    assert main(["targets", "--configfile", "config/no_such.yaml"]) == 2
    assert "config/no_such.yaml" in capsys.readouterr().err
