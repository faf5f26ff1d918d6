"""Epsilons that give no meaningful guarantee are marked (rule: epsilon > 10) in `upfl privacy`, the privacy
tables and summary.json, and the worst device is shown beside the mean."""

import json

import pandas as pd
import pytest
import yaml

from upfl import config as cfgmod
from upfl.cli import main
from upfl.data import generate_synthetic, load_leaf
from upfl.engine.simulation import run
from upfl.models import build_model
from upfl.privacy.accounting import (
    MEANINGFUL_EPSILON,
    NO_MEANINGFUL,
    guarantee_mark,
    meaningful,
    privacy_report,
    theorem_c1_epsilon,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return str(generate_synthetic("synthetic_iid", tmp_path_factory.mktemp("d") / "iid", data_seed=2, num_devices=5))


def doc_for(data, sigma, algorithm="fedprox", seed=0):
    alg = {"name": algorithm, "mu": 0.1, **({"lam": 0.04} if algorithm == "upcycled" else {})}
    return {
        "data": {"path": data, "feature_scaling": "unit_norm"},
        "rounds": 4,
        "seed": seed,
        "algorithm": alg,
        "model": {"name": "binary_logreg"},
        "devices": {"frac": 1.0, "straggler": 0.0},
        "solver": {"epochs": 2},
        "checkpoint": {"every": 0},
        "privacy": {"mechanism": "output", "tau": 1.0, "sigma": sigma, "delta": 0.001},
    }


def test_shared_noise_note_only_where_noise_is_seed_keyed(data):
    from upfl.privacy.accounting import OS_ENTROPY_NOISE, SEED_KEYED_NOISE, SHARED_NOISE_NOTE

    cfg = cfgmod.from_dict(doc_for(data, 0.05))
    ds = load_leaf(data)
    model = build_model("binary_logreg", ds, {})
    engine = privacy_report(cfg, ds, model)
    assert engine["noise_source"] == SEED_KEYED_NOISE and SHARED_NOISE_NOTE in engine["notes"]
    flower = privacy_report(cfg, ds, model, noise_source=OS_ENTROPY_NOISE)
    assert flower["noise_source"] == OS_ENTROPY_NOISE and SHARED_NOISE_NOTE not in flower["notes"]
    assert {k: v for k, v in flower.items() if k not in ("noise_source", "notes")} == {
        k: v for k, v in engine.items() if k not in ("noise_source", "notes")
    }


def test_rule_is_epsilon_above_ten():
    assert MEANINGFUL_EPSILON == 10
    assert meaningful(10.0) is True and meaningful(10.0001) is False and meaningful(None) is None
    assert guarantee_mark(0.5) == "" and guarantee_mark(1e4) == NO_MEANINGFUL == "no meaningful guarantee (ε > 10)"


def test_report_has_the_worst_device_beside_the_mean(data):
    cfg = cfgmod.from_dict(doc_for(data, 0.05))
    ds = load_leaf(data)
    rep = privacy_report(cfg, ds, build_model("binary_logreg", ds, {}))
    for key in ("paper_formula", "sound", "paper_sensitivity"):
        worst = max(rep["devices"], key=lambda d: d[key])
        assert rep["epsilon_max"][key] == worst[key] == rep["worst_device"][key]["epsilon"]
        assert rep["worst_device"][key]["device"] == worst["device"]
        assert rep["epsilon_max"][key] >= rep["epsilon_bar"][key]
    smallest = min(rep["devices"], key=lambda d: d["n_train"])
    assert rep["worst_device"]["paper_formula"]["device"] == smallest["device"]
    assert rep["epsilon_max"]["paper_formula"] == pytest.approx(
        theorem_c1_epsilon(4, 0.05, 1.0, smallest["n_train"], 0.001)
    )


def test_cli_marks_vacuous_epsilons_and_not_meaningful_ones(data, tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc_for(data, 0.05)))
    assert main(["privacy", "--config", str(path)]) == 0
    text = capsys.readouterr().out
    sound_bar = [line for line in text.splitlines() if line.startswith("epsilon-bar")][0]
    assert sound_bar.count("*") >= 1  # the sound epsilon at sigma 0.05, tau 1 is huge
    assert (
        "worst eps sound (2tau) [guarantee]: f_" in text
        and "NO MEANINGFUL GUARANTEE" in text
        and "epsilon > 10" in text
    )
    path.write_text(yaml.safe_dump(doc_for(data, 400.0)))
    assert main(["privacy", "--config", str(path)]) == 0
    text = capsys.readouterr().out
    table = text.split("\ndevice")[1].split("* no meaningful guarantee")[0]
    assert "*" not in table and "NO MEANINGFUL GUARANTEE" not in text


def test_privacy_table_marks_values_and_shows_the_worst_device(data, tmp_path):
    specs = []
    for seed in (0, 1):
        for name, sigma, alg in (("prox", 0.05, "fedprox"), ("up", 0.05, "upcycled"), ("up_eq", 0.0354, "upcycled")):
            out = tmp_path / "runs" / f"{name}_{seed}"
            run(cfgmod.from_dict(doc_for(data, sigma, alg, seed)), out, log=lambda m: None)
            specs.append(f"p:{out}")
    csv = tmp_path / "runs.csv"
    assert main(["report", "runs", "--out", str(csv), *specs]) == 0
    runs = pd.read_csv(csv)
    assert "privacy_epsilon_max_sound" in runs.columns
    from upfl.privacy.accounting import OS_ENTROPY_NOISE
    from upfl.report.figures import PRIVATE_RUNS_NOTE, SHARED_NOISE_RUNS_NOTE, private_runs_note

    assert set(runs["privacy_train_metrics"]) == {"outside_privacy_guarantee"}
    assert set(runs["privacy_noise_source"].str.split(":").str[0]) == {"seed-keyed"}
    assert private_runs_note(runs, ["train_loss", "test_acc"]) == PRIVATE_RUNS_NOTE + SHARED_NOISE_RUNS_NOTE
    # runs whose noise came from OS entropy (Flower clients) share none: the note says nothing of shared noise
    assert private_runs_note(runs.assign(privacy_noise_source=OS_ENTROPY_NOISE), ["train_loss"]) == PRIVATE_RUNS_NOTE
    assert private_runs_note(runs, ["test_acc"]) == ""
    assert private_runs_note(runs.drop(columns=["privacy_train_metrics"]), ["train_loss"]) == ""
    prefix = tmp_path / "privacy"
    assert main(["report", "privacy-table", "--runs", str(csv), "--experiment", "p", "--out-prefix", str(prefix)]) == 0
    table = pd.read_csv(f"{prefix}.csv", comment="#")
    variants = table[table["section"] == "variants"]
    prox = variants[variants["variant"] == "fedprox_private"].iloc[0]
    summaries = [json.loads((tmp_path / "runs" / f"prox_{s}" / "summary.json").read_text()) for s in (0, 1)]
    assert prox["epsmax_sound"] == pytest.approx(max(s["privacy"]["epsilon_max"]["sound"] for s in summaries))
    assert not prox["meaningful_sound"]
    md = (tmp_path / "privacy.md").read_text()
    assert "†" in md and "ε̄ [worst device]" in md and NO_MEANINGFUL in md
    worst = max((s["privacy"]["worst_device"]["sound"] for s in summaries), key=lambda w: w["epsilon"])
    assert prox["worstdev_sound"] == worst["device"]
    assert f"{prox['eps_sound']:.3f} [{prox['epsmax_sound']:.3f}, device {worst['device']}] †" in md
    assert md.index("sound, the guarantee") < md.index("paper formula (Theorem C.1")
    assert "outside the privacy guarantee" in md and "the sweep together has no guarantee" not in md
    assert "runs of a sweep on one seed together have no guarantee" in md


def test_worst_rows_name_each_columns_own_worst_device():
    """Hand-made per-device epsilons whose columns' worst devices differ: each worst row names its own device and
    value, in its own column; every value above the rule is marked; the sound epsilon comes first."""
    from upfl.commands.privacy import format_report
    from upfl.privacy.accounting import _epsilon_summary

    eps = {"a": (4160.0, 5.0, 2.0), "b": (45926.0, 3.0, 1.0), "c": (7.0, 12.0, 0.5)}
    rows = [
        {
            "device": d,
            "n_train": 10 * (j + 1),
            "releases": 20,
            "sigma": 1.0,
            "paper_formula": pf,
            "sound": snd,
            "paper_sensitivity": ps,
        }
        for j, (d, (snd, pf, ps)) in enumerate(eps.items())
    ]
    kinds = ["paper_formula", "sound", "paper_sensitivity"]
    rep = {
        "mechanism": "output",
        "algorithm": "fedprox",
        "iterations": 20,
        "training_rounds": 20,
        "releases_rule": "every iteration",
        "num_devices": 3,
        "num_params": 21,
        "delta": 0.001,
        "parameters": {"tau": 1.0},
        "neighbouring_relation": "replace-one",
        "releases_source": "replayed",
        "devices": rows,
        "epsilon_bar": {k: sum(r[k] for r in rows) / 3 for k in kinds},
        **_epsilon_summary(rows, kinds),
    }
    text = format_report(rep)
    print(text)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("device"))
    assert header.index("eps sound") < header.index("eps paper C.1") < header.index("eps exact")
    worst = {line.split(":")[0]: line.split() for line in lines if line.startswith("worst ")}
    assert [name.split("worst ")[1] for name in worst] == [
        "eps sound (2tau) [guarantee]",
        "eps paper C.1",
        "eps exact tau/|D|",
    ]
    sound, paper, exact = worst.values()
    # Each row: its device, |D_i|, M_i, then only its own column's epsilon (marked above the rule).
    assert sound[-4:] == ["b", "20", "20", "4.593e+04*"]
    assert paper[-4:] == ["c", "30", "20", "12*"]
    assert exact[-4:] == ["a", "10", "20", "2"]
    summary = next(line for line in lines if line.startswith("NO MEANINGFUL GUARANTEE for the worst device"))
    assert "eps sound (2tau) [guarantee] (b)" in summary and "eps paper C.1 (c)" in summary
    bar = next(line for line in lines if line.startswith("NO MEANINGFUL GUARANTEE: epsilon-bar"))
    assert "eps sound" in bar and "eps paper C.1" not in bar  # paper C.1's mean 6.667 is within the rule


def test_a_worst_device_named_by_a_number_stays_its_name(tmp_path):
    """The synthetic sets' devices are '0', '14'...: the runs table reads them back as names, and the privacy
    table's bracket says 'device 14' beside the worst epsilon, not a bare '14.0' that reads as a range's end."""
    from upfl.report.collect import read_runs
    from upfl.report.privacy_table import _eps_text

    path = tmp_path / "runs.csv"
    pd.DataFrame(
        {
            "experiments": ["p", "p"],
            "run_dir": ["a", "b"],
            "dataset": ["synthetic_iid", "synthetic_iid"],
            "algorithm": ["fedprox", "fedprox"],
            "mu": [0.1, 0.1],
            "seed": [0, 1],
            "privacy_worst_device_sound_device": ["14", "0"],
            "privacy_worst_device_sound_epsilon": [9.363, 9.0],
        }
    ).to_csv(path, index=False)
    runs = read_runs(path)
    assert list(runs["privacy_worst_device_sound_device"]) == ["14", "0"]
    row = {"mechanism": "output", "eps_sound": 3.383, "epsmax_sound": 9.363, "worstdev_sound": "14"}
    assert _eps_text(row, "sound") == "3.383 [9.363, device 14]"


def test_cli_refuses_a_sigma_whose_noise_float32_rounds_away(data, tmp_path, capsys):
    """`upfl privacy` with sigma 1e-20 (tau 1): no epsilon (the issue's 4e40) but an error naming the smallest
    meaningful sigma, tau 2^-23."""
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc_for(data, 1e-20)))
    rc = main(["privacy", "--config", str(path)])
    captured = capsys.readouterr()
    assert rc != 0
    assert "privacy.sigma: 1e-20 is below the smallest sigma" in captured.err and "1.19209e-07" in captured.err
    assert "epsilon" not in captured.out


def test_cli_records_the_noise_source_of_the_config(data, tmp_path, capsys):
    """`upfl privacy --json` names the run config's noise source; the shared-noise note only for seeded noise."""
    import json

    from upfl.privacy.accounting import SHARED_NOISE_NOTE

    for source, prefix in (("seeded", "seed-keyed"), ("os", "os-entropy")):
        doc = doc_for(data, 2.0)
        doc["privacy"]["noise_source"] = source
        path, out = tmp_path / f"{source}.yaml", tmp_path / f"{source}.json"
        path.write_text(yaml.safe_dump(doc))
        assert main(["privacy", "--config", str(path), "--json", str(out)]) == 0
        rep = json.loads(out.read_text())
        assert rep["noise_source"].startswith(prefix)
        assert (SHARED_NOISE_NOTE in rep["notes"]) == (source == "seeded")
    capsys.readouterr()
