"""The command line teaches: help with what each flag sets, its default, choices and unit; a misspelt flag named
by the sub-command it was given to, with the closest flag; a missing data folder reported before any other key."""

import pytest

from upfl.cli import build_parser, main


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
    from upfl.pipeline.plan import misspelt_targets

    known = ["fig5", "fig2", "table1", "time", "all"]
    argv = ["snakemake", "--cores", "all", "-n", "fig55", "table1", "--configfile", "config/quick.yaml", "tabel1"]
    assert misspelt_targets(argv, known) == ["fig55: not a target of this config; did you mean fig5?",
                                             "tabel1: not a target of this config; did you mean table1?"]


def test_misspelt_run_config_key_gets_the_closest_one(tmp_path, capsys):
    from upfl.data import generate_synthetic

    data = generate_synthetic("synthetic_1_1", tmp_path / "d", data_seed=0, num_devices=3)
    rc = main(["run", "--data", str(data), "--set", "devices.stragler=0.5", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown config key 'devices.stragler'" in err and "did you mean 'devices.straggler'?" in err


def test_kernels_warm_up_records_what_it_did(tmp_path, monkeypatch, capsys):
    import json

    import upfl.solvers.torch_backend as torch_backend

    out = tmp_path / "kernels" / "numba.json"
    assert main(["kernels", "warm-up", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["numba"] and record["threads"] == 1 and record["seconds"] >= 0 and "git_commit" in record
    # Without numba the record says so and the runs use the torch solver.
    monkeypatch.setattr(torch_backend, "numba_solver", lambda threads=0: None)
    assert main(["kernels", "warm-up", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["numba"] is None
    assert "torch solver" in capsys.readouterr().out
