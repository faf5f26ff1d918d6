"""The privacy table and the privacy-accuracy trade-off figure on real tiny private runs; per-experiment seeds."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats

from upfl import config as cfgmod
from upfl.cli import main
from upfl.data import generate_synthetic, load_leaf
from upfl.engine.simulation import run
from upfl.pipeline.plan import build_plan
from upfl.privacy.accounting import NO_GLM, SGD_CAVEAT, output_epsilons, theorem_c2_epsilon
from upfl.report.collect import read_runs
from upfl.report.paper_numbers import paper_values
from upfl.report.privacy_table import privacy_claims_frame

SEEDS = (0, 1, 2)
T = 6
DATASET = "synthetic_iid"
OUTPUT = {"mechanism": "output", "tau": 10.0}
# (experiment, algorithm, privacy section, model): the privacy protocols of config/config.yaml, plus a
# distractor (Upcycled-FL sigma 2) that the equal-epsilon choice must not pick.
SETTINGS = [
    ("fedprox", {}, "binary_logreg"),
    ("upcycled", {}, "binary_logreg"),
    ("fedprox", {**OUTPUT, "sigma": 1.0}, "binary_logreg"),
    ("upcycled", {**OUTPUT, "sigma": 1.0}, "binary_logreg"),
    ("upcycled", {**OUTPUT, "sigma": 0.7071}, "binary_logreg"),
    ("upcycled", {**OUTPUT, "sigma": 2.0}, "binary_logreg"),
    ("fedprox", {"mechanism": "objective", "alpha": 10.0}, "binary_logreg"),
    ("upcycled", {"mechanism": "objective", "alpha": 10.0}, "binary_logreg"),
    ("upcycled", {"mechanism": "objective", "alpha": 23.5}, "binary_logreg"),
]


def _doc(data, alg, privacy, model, seed):
    algorithm = {"name": alg, "mu": 0.1, **({"lam": 0.04} if alg == "upcycled" else {})}
    return {
        "data": {"path": data, "feature_scaling": "unit_norm"},
        "rounds": T,
        "seed": seed,
        "threads": 1,
        "model": {"name": model},
        "algorithm": algorithm,
        "devices": {"frac": 1.0, "straggler": 0.0},
        "solver": {"epochs": 2},
        "evaluation": {"every": 2},
        "checkpoint": {"every": 0},
        **({"privacy": privacy} if privacy else {}),
    }


def _key(alg, privacy, model="binary_logreg"):
    mech = privacy.get("mechanism", "none")
    level = privacy.get("sigma", privacy.get("alpha"))
    return alg, mech, level, model


@pytest.fixture(scope="module")
def privset(tmp_path_factory):
    root = tmp_path_factory.mktemp("privacy")
    data = str(generate_synthetic(DATASET, root / DATASET, data_seed=0, num_devices=5))
    dirs, specs = {}, []
    for seed in SEEDS:
        for alg, privacy, model in SETTINGS:
            key = _key(alg, privacy, model)
            out = root / "runs" / "_".join(str(k) for k in key) / f"s{seed}"
            run(cfgmod.from_dict(_doc(data, alg, privacy, model, seed)), out, log=lambda *a: None)
            dirs[key + (seed,)] = str(out)
            specs.append(f"priv:{out}")
    for alg in ("fedprox", "upcycled"):  # multinomial logreg: not a GLM for Theorem C.2
        privacy = {"mechanism": "objective", "alpha": 10.0}
        key = _key(alg, privacy, "logreg")
        out = root / "runs" / "_".join(str(k) for k in key) / "s0"
        run(cfgmod.from_dict(_doc(data, alg, privacy, "logreg", 0)), out, log=lambda *a: None)
        dirs[key + (0,)] = str(out)
        specs.append(f"nonglm:{out}")
    csv = root / "runs.csv"
    assert main(["report", "runs", "--out", str(csv), *specs]) == 0
    return {"root": root, "data": data, "dirs": dirs, "csv": csv}


def summary(run_dir):
    return json.loads((Path(run_dir) / "summary.json").read_text())


def read(path):
    return pd.read_csv(path, comment="#")


@pytest.fixture(scope="module")
def table(privset):
    prefix = privset["root"] / "tables" / "privacy"
    cfg = privset["root"] / "config.yaml"
    cfg.write_text("seeds: [0, 1, 2]\n")
    assert (
        main(
            [
                "report",
                "privacy-table",
                "--runs",
                str(privset["csv"]),
                "--experiment",
                "priv",
                "--config-file",
                str(cfg),
                "--out-prefix",
                str(prefix),
            ]
        )
        == 0
    )
    df = read(f"{prefix}.csv")
    return {
        "prefix": prefix,
        "cfg": cfg,
        "variants": df[df["section"] == "variants"],
        "claims": df[df["section"] == "claims"],
    }


def _final(dirs, key, metric):
    return np.array([summary(dirs[key + (s,)])["final"][metric] * 100 for s in SEEDS])


def test_table_rows_variants_and_accuracies(privset, table):
    v, dirs = table["variants"], privset["dirs"]
    expected = {
        "output": [
            ("fedprox_private", ("fedprox", "output", 1.0)),
            ("upcycled_equal_noise", ("upcycled", "output", 1.0)),
            ("upcycled_equal_epsilon", ("upcycled", "output", 0.7071)),
            ("fedprox_nonprivate", ("fedprox", "none", None)),
            ("upcycled_nonprivate", ("upcycled", "none", None)),
        ],
        "objective": [
            ("fedprox_private", ("fedprox", "objective", 10.0)),
            ("upcycled_equal_noise", ("upcycled", "objective", 10.0)),
            ("upcycled_equal_epsilon", ("upcycled", "objective", 23.5)),
            ("fedprox_nonprivate", ("fedprox", "none", None)),
            ("upcycled_nonprivate", ("upcycled", "none", None)),
        ],
    }
    assert list(v["block_mechanism"]) == ["objective"] * 5 + ["output"] * 5  # the paper's order (Figure 3)
    for mech, rows in expected.items():
        block = v[v["block_mechanism"] == mech]
        assert list(block["variant"]) == [r[0] for r in rows]
        for (_, key), row in zip(rows, block.to_dict("records"), strict=True):
            key = key + ("binary_logreg",)
            assert row["dataset"] == DATASET and row["n_seeds"] == len(SEEDS) and row["seeds"] == "0 1 2"
            assert row["rounds"] == T and row["training_rounds"] == (T if key[0] == "fedprox" else T // 2)
            for metric in ("train_acc", "test_acc"):
                vals = _final(dirs, key, metric)
                assert row[f"{metric}_mean"] == pytest.approx(vals.mean(), rel=1e-12)
                assert (row[f"{metric}_min"], row[f"{metric}_max"]) == (
                    pytest.approx(vals.min()),
                    pytest.approx(vals.max()),
                )
    eq = v[v["variant"] == "upcycled_equal_epsilon"].set_index("block_mechanism")
    assert eq.loc["output", "noise"] == "σ = 0.7071, τ = 10" and eq.loc["objective", "noise"] == "α = 23.5"
    assert eq.loc["output", "eps_ratio_to_fedprox"] == pytest.approx(
        eq.loc["output", "eps_sound"]
        / v[(v["block_mechanism"] == "output") & (v["variant"] == "fedprox_private")]["eps_sound"].iloc[0]
    )


def _sizes(data):
    ds = load_leaf(data)
    return [len(ds.train_y[u]) for u in ds.train_users]


def test_epsilons_equal_the_accounting_module(privset, table):
    v = table["variants"]
    sizes = _sizes(privset["data"])
    private = v[v["mechanism"] != "none"]
    assert len(private) == 6
    for row in private.to_dict("records"):
        m = T if row["algorithm"] == "fedprox" else math.ceil(T / 2)  # every device in every training round
        if row["mechanism"] == "output":
            per = [output_epsilons(m, row["sigma"], row["tau"], n, 0.001) for n in sizes]
            for acc in ("paper_formula", "sound", "paper_sensitivity"):
                assert row[f"eps_{acc}"] == pytest.approx(np.mean([p[acc] for p in per]), rel=1e-12)
            assert row["eps_sound"] >= row["eps_paper_sensitivity"]
            assert math.isnan(row["eps_theorem_c2"])
        else:
            expect = np.mean([theorem_c2_epsilon(m, row["alpha"], n, 0.1, 1.0, 0.25) for n in sizes])
            assert row["eps_theorem_c2"] == pytest.approx(expect, rel=1e-12)
            assert math.isnan(row["eps_sound"])
    md = Path(f"{table['prefix']}.md").read_text()
    assert "paper formula (Theorem C.1, sensitivity τ/\\|D\\|)" in md and "sound, the guarantee (sensitivity 2τ" in md
    assert "Theorem C.2 (pure, δ = 0)" in md and SGD_CAVEAT in md and "exact minimiser" in md
    assert "## Output perturbation (δ = 0.001)" in md and "∞ (no noise)" in md
    for path in (f"{table['prefix']}.md", f"{table['prefix']}.tex", f"{table['prefix']}.csv"):
        last = [ln for ln in Path(path).read_text().splitlines() if ln.strip() and not ln.startswith("\\end")][-1]
        assert "upfl 0.1.0" in last and "git " in last and "config.yaml" in last
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", last)
    assert Path(f"{table['prefix']}.tex").read_text().count("\\begin{tabular}") == 3


def test_claims_are_computed_from_the_runs(privset, table):
    c, v, dirs = table["claims"], table["variants"], privset["dirs"]
    pv = paper_values("privacy")
    assert len(c) == (3 + 3) + (1 + 3)  # privacy loss per accountant (3 output, 1 objective); train, test, time
    for r in c.to_dict("records"):
        paper = pv[(pv["mechanism"] == r["mechanism"]) & (pv["claim"] == r["claim"])].iloc[0]
        assert r["paper_value"] == paper["paper_value"] and r["protocol"] == paper["protocol"]
        assert r["dataset"] == DATASET and r["paper_dataset"] in (True, "True")
        block = v[v["block_mechanism"] == r["mechanism"]].set_index("variant")
        if r["claim"] == "privacy_loss":
            prox, up = block.loc["fedprox_private"], block.loc["upcycled_equal_noise"]
            acc = r["accountant"]
            expect = (prox[f"eps_{acc}"] - up[f"eps_{acc}"]) / prox[f"eps_{acc}"] * 100
            assert r["ours"] == pytest.approx(expect, rel=1e-12) and r["holds"] in (True, "True")
            if acc == "theorem_c2":  # pure epsilon is linear in the releases: 3 against 6
                assert r["ours"] == pytest.approx(50.0)
        elif r["claim"] in ("train_acc", "test_acc"):
            level = 0.7071 if r["mechanism"] == "output" else 23.5
            d = _final(dirs, ("upcycled", r["mechanism"], level, "binary_logreg"), r["claim"]) - _final(
                dirs,
                ("fedprox", r["mechanism"], 1.0 if r["mechanism"] == "output" else 10.0, "binary_logreg"),
                r["claim"],
            )
            half = sstats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
            assert r["ours"] == pytest.approx(d.mean(), abs=1e-9) and r["n_pairs"] == len(SEEDS)
            assert (r["ci_low"], r["ci_high"]) == (
                pytest.approx(d.mean() - half, abs=1e-9),
                pytest.approx(d.mean() + half, abs=1e-9),
            )
            assert (r["holds"] in (True, "True")) == (d.mean() - half > 0)
        else:
            level = 1.0 if r["mechanism"] == "output" else 10.0
            t = [
                [
                    sum(
                        summary(dirs[(alg, r["mechanism"], level, "binary_logreg", s)])["time"][k]
                        for k in ("train_s", "upcycle_s")
                    )
                    for s in SEEDS
                ]
                for alg in ("upcycled", "fedprox")
            ]
            assert r["ours"] == pytest.approx(np.mean((1 - np.array(t[0]) / np.array(t[1])) * 100), rel=1e-9)
    md = Path(f"{table['prefix']}.md").read_text()
    assert "## The paper's claims beside ours" in md and "12% less" in md and "6.1% higher (read as pp here)" in md


def test_claims_known_answer(privset, table, tmp_path):
    """Accuracies and times set so that the answer is known: train gain +5, +6, +7 pp holds; test gain
    -2, +1, +3 pp does not (its interval covers 0); Upcycled-FL at half FedProx's time: 50% less, holds."""
    runs = read_runs(privset["csv"])
    runs = runs[runs["experiments"] == "priv"].copy()
    mech = runs["mechanism"].astype(str)
    prox = (runs["algorithm"] == "fedprox") & (mech == "output") & np.isclose(runs["sigma"], 1.0)
    up_eps = (runs["algorithm"] == "upcycled") & (mech == "output") & np.isclose(runs["sigma"], 0.7071)
    up_noise = (runs["algorithm"] == "upcycled") & (mech == "output") & np.isclose(runs["sigma"], 1.0)
    for s, gain_train, gain_test in zip(SEEDS, (0.05, 0.06, 0.07), (-0.02, 0.01, 0.03), strict=True):
        p = prox & (runs["seed"] == s)
        runs.loc[p, ["final_train_acc", "final_test_acc"]] = [0.6, 0.6]
        runs.loc[up_eps & (runs["seed"] == s), ["final_train_acc", "final_test_acc"]] = [
            0.6 + gain_train,
            0.6 + gain_test,
        ]
        runs.loc[p, ["time_train_s", "time_upcycle_s"]] = [2.0 + s, 0.0]
        runs.loc[up_noise & (runs["seed"] == s), ["time_train_s", "time_upcycle_s"]] = [(2.0 + s) / 2 - 0.01, 0.01]
    claims = privacy_claims_frame(runs)
    out = claims[claims["mechanism"] == "output"].set_index("claim")
    assert out.loc["train_acc", "ours"] == pytest.approx(6.0) and bool(out.loc["train_acc", "holds"]) is True
    assert out.loc["train_acc", "holds_text"] == "holds"
    assert out.loc["test_acc", "ours"] == pytest.approx(2 / 3) and bool(out.loc["test_acc", "holds"]) is False
    assert out.loc["test_acc", "holds_text"] == "does not hold"
    assert out.loc["time", "ours"] == pytest.approx(50.0) and out.loc["time", "holds"]
    assert out.loc["time", "ci_low"] == pytest.approx(50.0) and out.loc["time", "paper_value"] == 48
    # Three data sets: pooled rows join the two the paper names; Synthetic(1,1) is marked as not the paper's
    three = pd.concat([runs, runs.assign(dataset="synthetic_0_0"), runs.assign(dataset="synthetic_1_1")])
    claims = privacy_claims_frame(three)
    out = claims[claims["mechanism"] == "output"]
    assert list(out["dataset"].drop_duplicates()) == [DATASET, "synthetic_0_0", "synthetic_1_1", "all"]
    assert set(out.loc[out["dataset"] == "synthetic_1_1", "paper_dataset"]) == {False}
    pooled = out[out["dataset"] == "all"].set_index(["claim", "accountant"])
    assert set(pooled["pooled_datasets"]) == {f"{DATASET};synthetic_0_0"}
    assert pooled.loc[("train_acc", ""), "ours"] == pytest.approx(6.0) and pooled.loc[("train_acc", ""), "n_pairs"] == 6
    one = out[(out["dataset"] == DATASET) & (out["claim"] == "privacy_loss")].set_index("accountant")["ours"]
    assert pooled.loc[("privacy_loss", "sound"), "ours"] == pytest.approx(one["sound"])
    assert len(pooled) == 3 + 3


def test_not_a_glm_shows_no_guarantee(privset, tmp_path):
    prefix = tmp_path / "nonglm"
    assert (
        main(
            [
                "report",
                "privacy-table",
                "--runs",
                str(privset["csv"]),
                "--experiment",
                "nonglm",
                "--out-prefix",
                str(prefix),
            ]
        )
        == 0
    )
    df = read(f"{prefix}.csv")
    rows = df[df["section"] == "variants"]
    assert list(rows["variant"]) == ["fedprox_private", "upcycled_equal_noise"]
    assert rows["eps_theorem_c2"].isna().all() and set(rows["guarantee"]) == {NO_GLM}
    md = Path(f"{prefix}.md").read_text()
    assert md.count(f"| {NO_GLM} |") == 2
    claims = df[df["section"] == "claims"]
    assert (
        not (claims["claim"] == "privacy_loss").any()
        or claims.loc[claims["claim"] == "privacy_loss", "ours"].isna().all()
    )


def test_tradeoff_figure_files_and_data(privset, table, tmp_path):
    prefix = tmp_path / "figs" / "tradeoff"
    assert (
        main(
            [
                "report",
                "figure",
                "privacy_tradeoff",
                "--runs",
                str(privset["csv"]),
                "--experiment",
                "priv",
                "--out-prefix",
                str(prefix),
            ]
        )
        == 0
    )
    png = Path(f"{prefix}.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert Path(f"{prefix}.pdf").read_bytes()[:4] == b"%PDF"
    data = read(f"{prefix}.csv")
    points = data[data["panel"] == "point"]
    # output: 4 settings x 2 epsilons (sound, paper formula); objective: 3 settings x Theorem C.2; 2 metrics
    assert len(points) == (4 * 2 + 3) * 2 and set(points["metric"]) == {"test_acc", "train_acc"}
    assert set(points.loc[points["mechanism"] == "output", "accountant"]) == {"sound", "paper_formula"}
    refs = data[data["panel"] == "nonprivate_reference"]
    assert len(refs) == 2 * 2 and set(refs["algorithm"]) == {"fedprox", "upcycled"}
    v = table["variants"]
    for r in points.to_dict("records"):
        level = r["sigma"] if r["mechanism"] == "output" else r["alpha"]
        key = (r["algorithm"], r["mechanism"], level, "binary_logreg")
        vals = [summary(privset["dirs"][key + (s,)])["final"][r["metric"]] for s in SEEDS]
        assert (r["mean"], r["min"], r["max"]) == (pytest.approx(np.mean(vals)), min(vals), max(vals))
        assert r["n_seeds"] == len(SEEDS) and r["x"] > 0
        hit = v[(v["mechanism"] == r["mechanism"]) & (v["algorithm"] == r["algorithm"]) & (v["noise"] == r["noise"])]
        if len(hit):
            assert r["x"] == pytest.approx(hit[f"eps_{r['accountant']}"].iloc[0], rel=1e-12)
    assert Path(f"{prefix}.csv").read_text().rstrip().splitlines()[-1].startswith("# provenance: upfl")


def test_tradeoff_figure_shows_the_worst_device_beside_the_mean(privset, tmp_path):
    """Every point's worst-device epsilon (max over devices and seeds) and which device, in the CSV and drawn as a
    triangle joined to the mean; the caption says that the worst device's epsilon is the guarantee."""

    from upfl.report.collect import read_runs as read_runs_csv
    from upfl.report.privacy_tradeoff import plot_tradeoff, tradeoff_data

    prefix = tmp_path / "tradeoff"
    assert (
        main(
            [
                "report",
                "figure",
                "privacy_tradeoff",
                "--runs",
                str(privset["csv"]),
                "--experiment",
                "priv",
                "--out-prefix",
                str(prefix),
            ]
        )
        == 0
    )
    points = read(f"{prefix}.csv").query("panel == 'point'")
    ratios = []
    for r in points.to_dict("records"):
        level = r["sigma"] if r["mechanism"] == "output" else r["alpha"]
        key = (r["algorithm"], r["mechanism"], level, "binary_logreg")
        worst = [summary(privset["dirs"][key + (s,)])["privacy"]["worst_device"][r["accountant"]] for s in SEEDS]
        top = max(worst, key=lambda w: w["epsilon"])
        assert r["x_worst"] == pytest.approx(top["epsilon"], rel=1e-12)
        assert r["worst_device"] == top["device"]
        assert r["x_worst"] >= r["x"] * (1 - 1e-12)
        ratios.append(r["x_worst"] / r["x"])
    print("worst device / mean epsilon per point:", [f"{x:.3g}" for x in ratios])
    assert max(ratios) > 1.05  # devices of unequal size: the worst is visibly apart from the mean
    runs = read_runs_csv(str(privset["csv"]))
    runs = runs[
        runs["mechanism"].fillna("none").isin(["output", "objective", "none"]) & (runs["model"] == "binary_logreg")
    ]
    data = tradeoff_data(runs, ("test_acc",))
    fig = plot_tradeoff(data, ("test_acc",), None)
    drawn = sorted(
        float(x) for ax in fig.axes for line in ax.get_lines() if line.get_marker() == ">" for x in line.get_xdata()
    )
    expected = sorted(float(x) for x in data.loc[data["panel"] == "point", "x_worst"])
    assert drawn == pytest.approx(expected, rel=1e-12)
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "worst device's ε (triangle) is the one that holds for every device" in caption
    assert "share their noise" in caption  # the engine's noise is seed-keyed
    fig_plain = plot_tradeoff(data, ("test_acc",), None, shared_noise=False)
    assert "share their noise" not in " ".join(t.get_text() for t in fig_plain.texts)


def test_convergence_figure_labels_private_variants(privset, tmp_path):
    prefix = tmp_path / "conv"
    assert (
        main(
            [
                "report",
                "figure",
                "convergence",
                "--runs",
                str(privset["csv"]),
                "--experiment",
                "priv",
                "--where",
                "mechanism=output,none",
                "--out-prefix",
                str(prefix),
            ]
        )
        == 0
    )
    data = read(f"{prefix}.csv")
    assert set(data["line"]) == {
        "FedProx (non-private)",
        "Upcycled-FL (non-private)",
        "FedProx (σ = 1)",
        "Upcycled-FL (σ = 1)",
        "Upcycled-FL (σ = 0.7071)",
        "Upcycled-FL (σ = 2)",
    }
    assert set(data.loc[data["line"] == "Upcycled-FL (σ = 0.7071)", "sigma"]) == {0.7071}
    assert (data.loc[data["line"] == "FedProx (non-private)", "mechanism"] == "none").all()


def test_experiment_seeds_and_the_preset_cap():
    config = {
        "seeds": [0, 1, 2],
        "datasets": {"synthetic_iid": {"source": "synthetic"}},
        "experiments": {
            "plain": {"groups": [{"datasets": ["synthetic_iid"], "runs": [{"algorithm": "fedavg", "rounds": 4}]}]},
            "ten": {
                "seeds": list(range(10)),
                "groups": [{"datasets": ["synthetic_iid"], "runs": [{"algorithm": "fedprox", "rounds": 4, "mu": 1}]}],
            },
        },
        "presets": {"quick": {"seeds": [0, 1]}, "more_rounds": {"round_scale": 1}},
    }
    seeds = lambda plan, exp: sorted(plan.runs[r].seed for r in plan.experiments[exp])  # noqa: E731
    full = build_plan(config)
    assert seeds(full, "plain") == [0, 1, 2] and seeds(full, "ten") == list(range(10))
    quick = build_plan({**config, "preset": "quick"})  # a preset's seeds replace the experiments' own
    assert seeds(quick, "plain") == [0, 1] and seeds(quick, "ten") == [0, 1]
    other = build_plan({**config, "preset": "more_rounds"})  # a preset without seeds leaves them alone
    assert seeds(other, "ten") == list(range(10))


def test_the_table_and_the_claims_page_read_the_settings_once(privset, table, tmp_path, monkeypatch):
    from upfl.report import privacy_claims, privacy_table
    from upfl.report.claim_rules import Context
    from upfl.report.collect import read_runs, select_experiment

    runs = select_experiment(read_runs(privset["csv"]), "priv")
    alone = privacy_table.privacy_frame(runs), privacy_table.privacy_claims_frame(runs)
    calls = []
    blocks = privacy_table.blocks
    monkeypatch.setattr(privacy_table, "blocks", lambda r: calls.append(len(r)) or blocks(r))
    frame, claims = privacy_table.write_privacy_table(runs, str(tmp_path / "privacy"), "test")
    assert calls == [len(runs)], "one blocks() for both frames"
    pd.testing.assert_frame_equal(frame, alone[0])
    pd.testing.assert_frame_equal(claims, alone[1])
    assert read(tmp_path / "privacy.csv").drop(columns="section").shape[0] == len(frame) + len(claims)
    calls.clear()
    rows = privacy_claims.privacy_claims(Context(runs, {"privacy": "priv"}, []))
    assert calls == [len(runs)], "one blocks() for the claims and the privacy levels"
    assert rows and all(r["verdict"] != "not measured here" for r in rows)


def test_settings_are_the_runs_grouped_by_data_set_mechanism_algorithm_and_noise(privset):
    from upfl.report.paper_numbers import dataset_order
    from upfl.report.privacy_table import _mechanisms, iter_settings, noise_text

    runs = read_runs(privset["csv"])
    expected = []  # grouping by columns added to a copy of the table, as the settings are defined
    table = runs.copy()
    table["_mech"] = _mechanisms(table)
    table["_noise"] = [noise_text(m, r) for m, r in zip(table["_mech"], table.to_dict("records"), strict=True)]
    for dataset in dataset_order(table["dataset"]):
        sub = table[table["dataset"] == dataset]
        for key, grp in sub.groupby(["_mech", "algorithm", "_noise"], sort=True):
            expected.append((dataset, *key, grp.drop(columns=["_mech", "_noise"])))
    got = list(iter_settings(runs))
    assert [g[:4] for g in got] == [e[:4] for e in expected] and len(got) > 4
    assert {g[1] for g in got} == {"none", "output", "objective"}
    for g, e in zip(got, expected, strict=True):
        pd.testing.assert_frame_equal(g[4], e[4])
