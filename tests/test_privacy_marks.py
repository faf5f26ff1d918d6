"""Epsilons that give no meaningful guarantee are marked (rule: epsilon > 10) in `upfl privacy`, the privacy
tables and summary.json, and the worst device is shown beside the mean."""

import json

import pandas as pd
import pytest
import yaml

from upfl import config as cfgmod
from upfl.cli import main
from upfl.data import generate_synthetic, load_leaf
from upfl.models import build_model
from upfl.privacy.accounting import (MEANINGFUL_EPSILON, NO_MEANINGFUL, guarantee_mark, meaningful, privacy_report,
                                     theorem_c1_epsilon)
from upfl.simulation import run


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return str(generate_synthetic("synthetic_iid", tmp_path_factory.mktemp("d") / "iid", data_seed=2, num_devices=5))


def doc_for(data, sigma, algorithm="fedprox", seed=0):
    alg = {"name": algorithm, "mu": 0.1, **({"lam": 0.04} if algorithm == "upcycled" else {})}
    return {"data": {"path": data, "feature_scaling": "unit_norm"}, "rounds": 4, "seed": seed, "algorithm": alg,
            "model": {"name": "binary_logreg"}, "devices": {"frac": 1.0, "straggler": 0.0},
            "solver": {"epochs": 2}, "checkpoint": {"every": 0},
            "privacy": {"mechanism": "output", "tau": 1.0, "sigma": sigma, "delta": 0.001}}


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
        theorem_c1_epsilon(4, 0.05, 1.0, smallest["n_train"], 0.001))


def test_cli_marks_vacuous_epsilons_and_not_meaningful_ones(data, tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc_for(data, 0.05)))
    assert main(["privacy", "--config", str(path)]) == 0
    text = capsys.readouterr().out
    sound_bar = [line for line in text.splitlines() if line.startswith("epsilon-bar")][0]
    assert sound_bar.count("*") >= 1                      # the sound epsilon at sigma 0.05, tau 1 is huge
    assert "worst: f_" in text and "NO MEANINGFUL GUARANTEE" in text and "epsilon > 10" in text
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
    assert f"{prox['eps_sound']:.3f} [{prox['epsmax_sound']:.3f}] †" in md
