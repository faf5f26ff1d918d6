"""Hostile names and values in configs: refused with a named error before any shell command runs."""

import os
from pathlib import Path

import pytest

from upfl.pipeline.plan import ExperimentError, build_plan

HOSTILE_NAMES = ["synthetic_iid --out q;touch PWNED;#", "../../../esc", ".hidden", "-rf", "a/b", "a b", "x" * 200]


def plan_with_dataset(name, setting="synthetic_iid"):
    return {
        "datasets": {name: {"source": "synthetic", "setting": setting}},
        "experiments": {"e": {"groups": [{"datasets": [name], "runs": [{"algorithm": "fedavg", "rounds": 2}]}]}},
    }


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
    from fixtures_workflow import snakemake, workflow_copy

    outer = tmp_path / "outer"
    outer.mkdir()
    wd = workflow_copy(outer)
    (wd / "config" / "config.yaml").write_text(HOSTILE_CONFIG.format(name=name))
    before = set(tmp_path.rglob("*"))
    proc = snakemake(wd, "--cores", "1", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "is not a safe name" in out or "does not match" in out or "config: " in out
    created = set(tmp_path.rglob("*")) - before
    assert not [p for p in created if wd not in p.parents]  # nothing outside the workflow folder
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()
    assert not (wd / "resources" / "data").exists()  # no data rule ran


@pytest.mark.workflow
def test_shell_commands_quote_what_they_interpolate():
    """Every `{...}` in a rule's shell string carries `:q`, except flag lists built with shlex.quote."""
    import re

    root = Path(__file__).resolve().parents[1]
    prebuilt = {
        "params.overrides",
        "params.options",
        "params.checksums",
        "params.flags",
        "params.args",
        "params.configs",
        "params.then",  # a report job's table and figure commands: each through shlex.quote, each word inside too
        "params.claims",
        "threads",
    }
    for smk in (root / "workflow" / "rules").glob("*.smk"):
        for field in re.findall(r'^\s+"[^"\n]*"', smk.read_text(), flags=re.M):
            for placeholder in re.findall(r"\{([^{}]+)\}", field):
                assert (
                    placeholder.endswith(":q")
                    or placeholder in prebuilt
                    or not re.match(r"(input|output|params|wildcards|log)\b", placeholder)
                ), f"{smk.name}: {{{placeholder}}}"


def leaf_folder(root: Path, x, y, meta=None, raw: bytes | None = None) -> Path:
    """A one-user LEAF folder: train/data.json from ``x``, ``y`` (or ``raw`` bytes), test a copy of it."""
    import json

    for split in ("train", "test"):
        (root / split).mkdir(parents=True, exist_ok=True)
        doc = {"users": ["u0"], "num_samples": [len(y)], "user_data": {"u0": {"x": x, "y": y}}}
        (root / split / "data.json").write_bytes(
            raw if raw is not None and split == "train" else json.dumps(doc).encode()
        )
    if meta is not None:
        (root / "meta.json").write_text(json.dumps(meta))
    return root


GOOD_X = [[0.5, 1.0], [1.5, -2.0], [0.0, 3.0]]


@pytest.mark.parametrize(
    "case,expected",
    [
        ("float32_overflow", r"train/data.json: user 'u0': x row 1 holds 1e\+39, beyond float32"),
        ("zero_features", r"train/data.json: user 'u0': x rows have shape \(0,\): no features"),
        ("label_1e9", r"train/data.json: user 'u0': label 2 is 1e\+09, outside 0..99999"),
        ("label_1e20", r"train/data.json: user 'u0': label 0 is 1e\+20, outside"),
        ("num_classes_1e9", r"meta.json: num_classes must be an integer in 1..100000, got 1000000000"),
        ("num_classes_float", r"meta.json: num_classes must be an integer .* got 1000000000.0"),
        ("meta_list", r"meta.json: must be a JSON object, got a list"),
        ("meta_dtype_list", r"meta.json: x_dtype must be"),
        ("deep_nesting", r"train/data.json: JSON nested too deeply"),
        ("moderate_nesting", r"train/data.json: user 'u0': x row 0 is nested more than 4 levels deep"),
        ("not_utf8", r"train/data.json: not UTF-8 \(byte 1 is 0xff\)"),
    ],
)
def test_data_errors_are_named_before_training(tmp_path, case, expected):
    from upfl.data import DatasetError, load_leaf

    x, y, meta, raw = [list(r) for r in GOOD_X], [0, 1, 1], None, None
    if case == "float32_overflow":
        x[1][0] = 1e39
    elif case == "zero_features":
        x = [[], [], []]
    elif case == "label_1e9":
        y[2] = 1e9
    elif case == "label_1e20":
        y[0] = 10**20
    elif case == "num_classes_1e9":
        meta = {"num_classes": 10**9}
    elif case == "num_classes_float":
        meta = {"num_classes": 1e9}
    elif case == "meta_list":
        meta = [1, 2]
    elif case == "meta_dtype_list":
        meta = {"x_dtype": ["float32"]}
    elif case == "deep_nesting":
        raw = (
            b'{"users": ["u0"], "num_samples": [1], "user_data": {"u0": {"x": '
            + b"[" * 200_000
            + b"]" * 200_000
            + b', "y": [0]}}}'
        )
    elif case == "moderate_nesting":
        x = [[[[[[[1.0]]]]]]] * 3
    else:
        raw = b'{\xff"users": []}'
    root = leaf_folder(tmp_path / "d", x, y, meta, raw)
    with pytest.raises(DatasetError, match=expected):
        load_leaf(root)


def test_cli_run_exits_2_naming_the_float32_overflow(tmp_path, capsys):
    from upfl.cli import main

    x = [list(r) for r in GOOD_X]
    x[2][1] = -1e39
    root = leaf_folder(tmp_path / "d", x, [0, 1, 1])
    assert (
        main(
            [
                "run",
                "--data",
                str(root),
                "--out",
                str(tmp_path / "out"),
                "--rounds",
                "2",
                "--device",
                "cpu",
                "--algorithm",
                "fedavg",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "x row 2 holds -1e+39, beyond float32" in err and "diverged" not in err
    assert not (tmp_path / "out" / "metrics.csv").exists()


def test_a_batch_larger_than_every_device_is_a_full_batch_and_stays_small(tmp_path):
    """A batch of 10**18 on 6-sample devices: plans as wide as the largest device, same numbers as batch = that size."""
    import json

    from upfl.data import generate_synthetic
    from upfl.engine.simulation import plan_batch_size, run

    assert plan_batch_size(10**18, [6, 4, 6]) == 6 and plan_batch_size(4, [6, 4, 6]) == 4
    data = generate_synthetic("synthetic_iid", tmp_path / "d", data_seed=1, num_devices=5)
    sizes = [len(v["y"]) for v in json.loads((data / "train" / "data.json").read_text())["user_data"].values()]
    summaries = {}
    for batch in (max(sizes), 10**18):
        doc = {
            "data": {"path": str(data)},
            "rounds": 3,
            "algorithm": {"name": "fedavg"},
            "device": "cpu",
            "solver": {"batch_size": batch, "epochs": 2},
        }
        from upfl import config as cfgmod

        summaries[batch] = run(cfgmod.from_dict(doc), tmp_path / f"b{batch}", log=lambda s: None)["final"]
    assert summaries[max(sizes)]["train_loss"] == summaries[10**18]["train_loss"]


ALIAS_BOMB = "privacy:\n  mechanism: none\n  sigma: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
)


@pytest.mark.parametrize(
    "text,expected",
    [
        (ALIAS_BOMB, "anchor or alias 'a0': refused"),
        ("solver:\n  lr: 0.05\n  lr: 5.0\n", "duplicate key 'lr' \\(first given on line 2\\)"),
        ("privacy: {sigma: 1.0e-300}\n", "privacy.sigma: 1e-300 is too small or too large"),
        ("privacy: {mechanism: none, sigma: -1}\n", "privacy.sigma: must be a positive number"),
        ("privacy: {mechanism: none, tau: 0}\n", "privacy.tau: must be a positive number"),
    ],
)
def test_run_configs_are_data_and_every_value_is_checked(tmp_path, capsys, text, expected):
    import re

    from upfl.cli import main

    config = tmp_path / "run.yaml"
    config.write_text(text)
    data = leaf_folder(tmp_path / "d", GOOD_X, [0, 1, 1])
    assert (
        main(
            [
                "run",
                "--config",
                str(config),
                "--data",
                str(data),
                "--algorithm",
                "fedavg",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert re.search(expected, err), err
    assert not (tmp_path / "out").exists()


def test_workflow_config_refuses_duplicates_and_alias_bombs_but_takes_plain_anchors(tmp_path):
    from upfl.errors import ConfigError
    from upfl.yaml_safety import check_workflow_yaml

    plain = tmp_path / "plain.yaml"
    plain.write_text("grid: &g [{algorithm: fedavg, rounds: 2}]\nexperiments: {e: {groups: [{runs: *g}]}}\n")
    check_workflow_yaml(plain)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    with pytest.raises(ConfigError, match=r"bomb.yaml: expands to .* YAML nodes"):
        check_workflow_yaml(bomb)
    duplicate = tmp_path / "dup.yaml"
    duplicate.write_text("seeds: [0]\nseeds: [1]\n")
    with pytest.raises(ConfigError, match=r"dup.yaml: .*duplicate key 'seeds'"):
        check_workflow_yaml(duplicate)


def test_exit_2_naming_the_path_for_a_config_folder_and_a_read_only_out(tmp_path, capsys, monkeypatch):
    from upfl.cli import main

    data = leaf_folder(tmp_path / "d", GOOD_X, [0, 1, 1])
    assert main(["run", "--config", str(tmp_path), "--data", str(data), "--out", str(tmp_path / "o")]) == 2
    assert f"{tmp_path}: a folder, not a config file" in capsys.readouterr().err
    import errno

    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if "ro" in self.parts:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert (
        main(
            [
                "run",
                "--data",
                str(data),
                "--algorithm",
                "fedavg",
                "--rounds",
                "2",
                "--device",
                "cpu",
                "--out",
                str(tmp_path / "ro" / "out"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "ro" in err and "Read-only file system" in err and "Traceback" not in err


def test_disk_full_while_writing_results_leaves_no_metrics_without_summary(tmp_path, capsys, monkeypatch):
    """ENOSPC on the summary's write: the run's folder is as it was (no metrics.csv without summary.json), exit 2."""
    import errno
    import tempfile

    from upfl.cli import main

    data = leaf_folder(tmp_path / "d", GOOD_X, [0, 1, 1])
    real_mkstemp, real_fdopen = tempfile.mkstemp, os.fdopen
    made: dict[int, str] = {}

    def mkstemp(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        made[fd] = name
        return fd, name

    def full_disk(fd, *args, **kwargs):  # the temporary summary.json cannot be written
        name = made.pop(fd, "") if isinstance(fd, int) else ""
        if Path(name).name.startswith(".summary.json."):
            os.close(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(os, "fdopen", full_disk)
    out = tmp_path / "out"
    assert (
        main(
            ["run", "--data", str(data), "--algorithm", "fedavg", "--rounds", "2", "--device", "cpu", "--out", str(out)]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "summary.json." in err and "No space left on device" in err
    assert not (out / "metrics.csv").exists() and not (out / "summary.json").exists()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")] if out.exists() else True
