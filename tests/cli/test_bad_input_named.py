"""Bad input, named: exit 2 with the flag, key, spec or file named, never a traceback; metadata text never becomes a
spreadsheet formula."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from upfl.cli import main
from upfl.data import DatasetError, generate_synthetic, load_leaf


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return generate_synthetic("synthetic_iid", tmp_path_factory.mktemp("d") / "iid", num_devices=4)


@pytest.mark.parametrize("value", ["5", "[1]"])
def test_set_data_to_a_non_mapping_is_named(data, tmp_path, capsys, value):
    assert main(["run", "--data", str(data), "--out", str(tmp_path / "o"), "--set", f"data={value}"]) == 2
    err = capsys.readouterr().err
    assert "data: expected a mapping" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--beta", "inf"], "--beta inf"),
        (["--alpha", "nan"], "--alpha nan"),
        (["--alpha", "-1"], "--alpha -1"),
        (["--devices", "1000000000"], "--devices 1000000000"),
        (["--devices", "10000", "--dim", "10000"], "--devices 10000 x --dim 10000"),
        (["--classes", "1"], "--classes 1"),
    ],
)
def test_synth_flags_out_of_range_exit_2_naming_the_flag(tmp_path, flags, named):
    # a fresh process with its memory capped: the check comes before anything is drawn
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
        "from upfl.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "synth", "--name", "synthetic_iid", "--out", str(tmp_path / "x"), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"upfl synth: error: {named}" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "flags, named",
    [
        ([], "give --name (one data set) or --draw NAME=SEED"),
        (["--name", "a", "--draw", "b=1"], "give --name (one data set) or --draw NAME=SEED"),
        (["--draw", "a"], "--draw 'a': expected NAME=SEED"),
        (["--draw", "a=-1"], "--draw 'a=-1': expected NAME=SEED with SEED a whole number >= 0"),
        (["--draw", "a=1", "--draw", "b=2", "--draw", "a=3"], "--draw 'a=3': data set 'a' given twice"),
        (["--draw", "a=1", "--data-seed", "2"], "--out and --data-seed name one data set"),
    ],
)
def test_synth_draws_that_cannot_be_written_exit_2_before_any_is_drawn(tmp_path, capsys, flags, named):
    assert main(["synth", "--setting", "synthetic_iid", "--resources", str(tmp_path), *flags]) == 2
    assert f"upfl synth: error: {named}" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "spec, named",
    [
        ("null", "not null"),
        ("[1]", "not an array"),
        ('{"runs": [1]}', "runs[0] is a number"),
        ('{"runs": []}', "'runs' must be a non-empty array"),
        ('{"runs": [{"id": "a", "data": "d", "out": "o", "config": 3}]}', "'config' must be an object"),
    ],
)
def test_run_many_spec_of_the_wrong_shape_exits_2_naming_the_spec(tmp_path, capsys, spec, named):
    path = tmp_path / "spec.json"
    path.write_text(spec)
    assert main(["run-many", "--spec", str(path), "--no-store"]) == 2
    err = capsys.readouterr().err
    assert f"upfl run-many: error: {path}: " in err and named in err and "Traceback" not in err


def test_a_leaf_file_naming_a_user_twice_is_refused_by_name(tmp_path):
    root = generate_synthetic("synthetic_iid", tmp_path / "iid", num_devices=3)
    train = root / "train" / "data.json"
    doc = json.loads(train.read_text())
    user = doc["users"][0]
    text = json.dumps(doc)
    first = json.dumps(doc["user_data"][user])
    # the same user again inside user_data, with other numbers: json.load would keep the last one silently
    twice = text.replace(f'"user_data": {{"{user}": {first}', f'"user_data": {{"{user}": {first}, "{user}": {first}', 1)
    assert twice != text
    train.write_text(twice)
    with pytest.raises(DatasetError, match=rf"data\.json: key '{user}' appears twice in one JSON object"):
        load_leaf(root)


def test_metadata_text_is_written_to_csv_as_text_not_a_formula(tmp_path):
    root = generate_synthetic("synthetic_iid", tmp_path / "iid", num_devices=3)
    meta = json.loads((root / "meta.json").read_text())
    meta["name"] = '=HYPERLINK("http://example.invalid","click")'
    meta["setting"] = "@SUM(A1:A2)"
    (root / "meta.json").write_text(json.dumps(meta))
    assert main(["report", "table2", "--out-prefix", str(tmp_path / "t2"), str(root)]) == 0
    text = (tmp_path / "t2.csv").read_text()
    cells = [cell for line in text.splitlines() if not line.startswith("#") for cell in line.split(",")]
    assert not any(c.lstrip('"').startswith(("=", "+", "@")) for c in cells), text
    table = pd.read_csv(tmp_path / "t2.csv", comment="#")
    shown = {str(v) for v in table.to_numpy().ravel()}
    assert any(v.startswith("'=HYPERLINK(") for v in shown) or any(v.startswith("'@SUM") for v in shown), shown


def test_numbers_stay_numbers_in_a_csv(tmp_path):
    from upfl.report.render import write_csv

    write_csv(tmp_path / "t.csv", pd.DataFrame({"name": ["-x", "+y", "ok"], "value": [-1.5, 2.0, -3.0]}))
    table = pd.read_csv(tmp_path / "t.csv")
    assert list(table["value"]) == [-1.5, 2.0, -3.0] and list(table["name"]) == ["'-x", "'+y", "ok"]
