"""Report tests on real tiny runs: runs.csv, Table 1 (paper values, paired t intervals), Table 2, time, figures."""

import json
import math
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats

from upfl import config as cfgmod
from upfl.cli import main
from upfl.data import dataset_stats, generate_synthetic, load_leaf
from upfl.engine.simulation import run
from upfl.report.paper_numbers import paper_values
from upfl.report.render import tex_escape
from upfl.report.stats import mean_interval, t_quantile

SEEDS = (0, 1)


def _run(data, out, alg, rounds, mu=0.0, lam=None, seed=0, every=1):
    algorithm = {"name": alg, "mu": mu, **({"lam": lam} if lam is not None else {})}
    doc = {
        "data": {"path": data},
        "rounds": rounds,
        "seed": seed,
        "threads": 1,
        "algorithm": algorithm,
        "devices": {"frac": 0.5, "straggler": 0.5},
        "solver": {"epochs": 2},
        "evaluation": {"every": every},
        "checkpoint": {"every": 0},
    }
    run(cfgmod.from_dict(doc), out, log=lambda *a: None)
    return str(out)


@pytest.fixture(scope="module")
def runset(tmp_path_factory):
    """Real runs: FedAvg, FedProx and Upcycled-FL (two mu), a lambda sweep point, two seeds; runs.csv."""
    root = tmp_path_factory.mktemp("report")
    data = str(generate_synthetic("synthetic_1_1", root / "synthetic_1_1", data_seed=0, num_devices=6))
    runs = root / "runs"
    dirs, specs = {}, []
    for seed in SEEDS:
        dirs["fedavg", seed] = _run(data, runs / f"fedavg_s{seed}", "fedavg", 4, seed=seed)
        for mu, lam in ((0.1, 0.04), (1.0, 0.43)):
            dirs["fedprox", mu, seed] = _run(data, runs / f"fedprox_mu{mu}_s{seed}", "fedprox", 4, mu, seed=seed)
            dirs["upcycled", mu, seed] = _run(
                data, runs / f"up_mu{mu}_s{seed}", "upcycled", 8, mu, lam, seed=seed, every=2 if mu == 0.1 else 1
            )
        dirs["sweep", seed] = _run(data, runs / f"up_mu1_lam2_s{seed}", "upcycled", 8, 1.0, 2.0, seed=seed)
        specs += [f"table1:{dirs[k]}" for k in dirs if k[-1] == seed and k[0] != "sweep"]
        specs += [
            f"sweep:{dirs['sweep', seed]}",
            f"sweep:{dirs['upcycled', 1.0, seed]}/",
            f"sweep:{dirs['fedprox', 1.0, seed]}",
        ]
    specs.append(f"table1:{dirs['fedavg', 0]}")
    csv = root / "results" / "runs.csv"
    assert main(["report", "runs", "--out", str(csv), *specs]) == 0
    return {"root": root, "data": data, "dirs": dirs, "csv": csv, "runs": pd.read_csv(csv)}


def summary(run_dir):
    return json.loads((Path(run_dir) / "summary.json").read_text())


def metrics(run_dir):
    return pd.read_csv(Path(run_dir) / "metrics.csv")


def read_table(path):
    return pd.read_csv(path, comment="#")


def test_runs_csv_has_one_row_per_run_with_experiments_merged(runset):
    df, dirs = runset["runs"], runset["dirs"]
    assert len(df) == len(dirs) == len(set(df["run_dir"]))
    by_dir = df.set_index("run_dir")
    for key, run_dir in dirs.items():
        row, s = by_dir.loc[run_dir], summary(run_dir)
        shared = key[0] in ("fedprox", "upcycled") and key[1] == 1.0
        expected = {"sweep"} if key[0] == "sweep" else ({"sweep", "table1"} if shared else {"table1"})
        assert set(row["experiments"].split(";")) == expected
        assert row["dataset"] == "synthetic_1_1" and row["algorithm"] == s["config"]["algorithm"]["name"]
        assert row["seed"] == s["seed"] and row["rounds"] == s["config"]["rounds"]
        assert row["mu"] == s["config"]["algorithm"]["mu"] and row["straggler"] == 0.5 and row["frac"] == 0.5
        assert row["policy"] == "partial" and row["model"] == "logreg" and row["mechanism"] == "none"
        for part in ("final", "best"):
            for k, v in s[part].items():
                assert row[f"{part}_{k}"] == pytest.approx(v, rel=1e-15)
        for k, v in s["time"].items():
            assert row[f"time_{k}"] == pytest.approx(v, rel=1e-15)
        if key[0] in ("upcycled", "sweep"):
            a = s["config"]["algorithm"]
            assert row["lam"] == a["lam"] and row["coef"] == pytest.approx(a["mu"] / (a["mu"] + a["lam"]))
        else:
            assert math.isnan(row["lam"]) and math.isnan(row["coef"])
        commit = row["git_commit"]  # null outside a git checkout: an empty cell, read back as NaN
        assert pd.isna(commit) if s["git_commit"] is None else commit == s["git_commit"]
        assert row["config_hash"] == s["config_hash"]


def test_runs_csv_flattens_privacy_epsilons(runset, tmp_path):
    src = runset["dirs"]["fedprox", 0.1, 0]
    dst = tmp_path / "private"
    shutil.copytree(src, dst)
    s = summary(dst)
    s["privacy"] = {
        "mechanism": "output",
        "epsilon": [0.5, 1.5, 1.0],
        "epsilon_bar": 1.0,
        "accountant": {"name": "paper", "delta": 0.001},
    }
    (dst / "summary.json").write_text(json.dumps(s))
    (dst / "checksums.json").unlink()  # a hand-made summary: no training recorded its checksums
    out = tmp_path / "runs.csv"
    assert main(["report", "runs", "--out", str(out), f"priv:{dst}"]) == 0
    row = pd.read_csv(out).iloc[0]
    assert row["privacy_epsilon_mean"] == 1.0 and row["privacy_epsilon_min"] == 0.5
    assert row["privacy_epsilon_max"] == 1.5 and row["privacy_epsilon_bar"] == 1.0
    assert row["privacy_mechanism"] == "output" and row["privacy_accountant_delta"] == 0.001


def test_runs_csv_of_a_run_made_outside_a_git_checkout(runset, tmp_path):
    """A run trained from an installed package has ``git_commit: null``: its runs.csv cell is empty, not 'None'."""
    dst = tmp_path / "no_git"
    shutil.copytree(runset["dirs"]["fedavg", 0], dst)
    s = summary(dst)
    s["git_commit"] = None
    (dst / "summary.json").write_text(json.dumps(s))
    (dst / "checksums.json").unlink()  # a hand-made summary: no training recorded its checksums
    out = tmp_path / "runs.csv"
    assert main(["report", "runs", "--out", str(out), f"x:{dst}"]) == 0
    row = pd.read_csv(out).iloc[0]
    assert pd.isna(row["git_commit"]) and row["config_hash"] == s["config_hash"]


def test_runs_list_file_is_read(runset, tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text(f"# runs\n\nx:{runset['dirs']['fedavg', 0]}\ny:{runset['dirs']['fedavg', 0]}\n")
    out = tmp_path / "runs.csv"
    assert main(["report", "runs", "--out", str(out), "--list", str(listing)]) == 0
    df = pd.read_csv(out)
    assert len(df) == 1 and df["experiments"].iloc[0] == "x;y"


def test_runs_then_writes_the_outputs_as_their_own_commands_would(runset, tmp_path, capsys):
    """`upfl report runs --then COMMAND ...` (the workflow's report job of an experiment) writes the runs table, then
    each output from it in the same process: the same files as the separate commands; the first command that fails
    ends it with that status."""
    specs = [f"table1:{d}" for k, d in runset["dirs"].items() if k[0] != "sweep"]
    apart, together = tmp_path / "apart", tmp_path / "together"
    for folder in (apart, together):
        (folder / "tables").mkdir(parents=True)
    assert main(["report", "runs", "--out", str(apart / "runs.csv"), *specs]) == 0
    selection = ["--experiment", "table1", "--preset", "quick"]
    for command in (["table1"], ["time"]):
        prefix = str(apart / "tables" / command[0])
        assert main(["report", *command, "--runs", str(apart / "runs.csv"), "--out-prefix", prefix, *selection]) == 0
    runs = together / "runs.csv"
    then = [
        f"{c} --runs '{runs}' --out-prefix '{together / 'tables' / c}' {' '.join(selection)}"
        for c in ("table1", "time")
    ]
    assert main(["report", "runs", "--out", str(runs), *specs, *(w for t in then for w in ("--then", t))]) == 0
    assert (apart / "runs.csv").read_bytes() == runs.read_bytes()
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")  # the provenance line's minute
    for name in ("table1.csv", "table1.md", "table1.tex", "time.csv", "time.md"):
        a, b = (stamp.sub("", (f / "tables" / name).read_text()) for f in (apart, together))
        assert a == b, name
    bad = f"table1 --runs '{runs}' --out-prefix '{together / 'tables' / 'x'}' --experiment nosuch"
    never = f"time --runs '{runs}' --out-prefix '{together / 'tables' / 'y'}' --experiment table1"
    capsys.readouterr()
    assert main(["report", "runs", "--out", str(runs), *specs, "--then", bad, "--then", never]) == 2
    assert "nosuch" in capsys.readouterr().err and not (together / "tables" / "y.csv").exists()
    runs.unlink()
    assert main(["report", "runs", "--out", str(runs), *specs, "--then", f"runs --out {runs}"]) == 2
    with pytest.raises(SystemExit):  # a malformed command: argparse's usage error, before any work
        main(["report", "runs", "--out", str(runs), *specs, "--then", "table1 --no-such-flag"])
    assert not runs.exists()


def _cell_values(dirs, key, metric):
    return np.array([summary(dirs[key + (s,)])["final"][metric] * 100 for s in SEEDS])


def test_table1_numbers_equal_recomputation_from_summaries(runset, tmp_path):
    prefix = tmp_path / "tables" / "table1"
    cfg, quick = tmp_path / "config.yaml", tmp_path / "quick.yaml"
    cfg.write_text("seeds: [0, 1]\n")
    quick.write_text("preset: quick\nround_scale: 0.25\n")
    assert (
        main(
            [
                "report",
                "table1",
                "--runs",
                str(runset["csv"]),
                "--experiment",
                "table1",
                "--out-prefix",
                str(prefix),
                "--config-file",
                str(cfg),
                "--config-file",
                str(quick),
            ]
        )
        == 0
    )
    t1 = read_table(f"{prefix}.csv")
    assert len(t1) == 5 and list(t1["algorithm"]) == ["fedavg", "fedprox", "upcycled", "fedprox", "upcycled"]
    pv = paper_values("table1")
    dirs = runset["dirs"]
    tq = sstats.t.ppf(0.975, len(SEEDS) - 1)
    for row in t1.to_dict("records"):
        key = ("fedavg",) if row["algorithm"] == "fedavg" else (row["algorithm"], row["mu"])
        for metric in ("train_acc", "test_acc"):
            vals = _cell_values(dirs, key, metric)
            assert row[f"{metric}_mean"] == pytest.approx(vals.mean(), rel=1e-12)
            assert row[f"{metric}_std"] == pytest.approx(vals.std(ddof=1), rel=1e-9, abs=1e-12)
            p = pv[(pv["dataset"] == "synthetic_1_1") & (pv["algorithm"] == row["algorithm"])]
            p = p[p["mu"].isna()] if row["algorithm"] == "fedavg" else p[np.isclose(p["mu"], row["mu"])]
            assert row[f"paper_{metric}"] == p[metric].iloc[0]
            assert row[f"diff_{metric}"] == pytest.approx(vals.mean() - p[metric].iloc[0])
            if row["algorithm"] == "upcycled":
                d = vals - _cell_values(dirs, ("fedprox", row["mu"]), metric)
                half = tq * d.std(ddof=1) / math.sqrt(len(d))
                assert row[f"{metric}_gain_mean"] == pytest.approx(d.mean(), abs=1e-9)
                assert row[f"{metric}_gain_ci_low"] == pytest.approx(d.mean() - half, abs=1e-9)
                assert row[f"{metric}_gain_ci_high"] == pytest.approx(d.mean() + half, abs=1e-9)
                # two seeds: too few for the claims page's verdict, which Table 1 gives
                assert row[f"verdict_{metric}"] == "too few seeds"
    md = Path(f"{prefix}.md").read_text()
    assert md.count("| Synthetic(1,1) |") == 1 and "| Synthetic(1,1) | 0.1 |" in md and "|  | 1 |" in md
    assert "69.70 (71.12)" in md and "75.69 (76.58)" in md  # the paper's FedAvg and FedProx (mu 1) cells
    for path in (f"{prefix}.md", f"{prefix}.tex", f"{prefix}.csv"):
        last = [ln for ln in Path(path).read_text().splitlines() if ln.strip() and not ln.startswith("\\end")][-1]
        named = [os.path.relpath(f) for f in (cfg, quick)]  # relative to the folder the command ran in
        shown = [tex_escape(f) if path.endswith(".tex") else f for f in named]
        assert "upfl 0.1.0" in last and "git " in last and all(f in last for f in shown)
        # The provenance names the preset, the data the runs were trained on, their seeds and how many runs.
        assert "preset quick" in last and "seeds 0 1" in last
        origin = "data: our generator's draw (synthetic_1_1, data_seed 0)"
        assert (tex_escape(origin) if path.endswith(".tex") else origin) in last and "runs made at git" in last
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", last)
    assert "\\begin{tabular}" in Path(f"{prefix}.tex").read_text()


def test_t_quantile_and_interval_match_scipy():
    for df in list(range(1, 41)) + [75, 200]:
        for level in (0.8, 0.9, 0.95, 0.99):
            assert t_quantile(level, df) == pytest.approx(sstats.t.ppf((1 + level) / 2, df), rel=1e-10)
    x = np.array([0.3, -0.1, 0.8, 0.45, 0.2])
    ci = mean_interval(x)
    lo, hi = sstats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sstats.sem(x))
    assert (ci.low, ci.high) == (pytest.approx(lo, rel=1e-10), pytest.approx(hi, rel=1e-10))
    assert ci.above_zero is False and mean_interval([1.0]).above_zero is None


def test_t_quantile_table_holds_scipys_floats():
    """The 95% critical values the report reads without scipy are scipy's own, to the last bit."""
    from scipy.special import stdtrit

    from upfl.report.stats import LEVEL, T95

    assert [float(stdtrit(df, (1 + LEVEL) / 2)) for df in range(1, len(T95) + 1)] == list(T95)
    assert [t_quantile(LEVEL, df) for df in (1, np.int64(5), 30.0)] == [T95[0], T95[4], T95[29]]
    assert t_quantile(LEVEL, 31) == float(stdtrit(31, (1 + LEVEL) / 2))


def test_paper_table1_values_are_complete():
    pv = paper_values("table1")
    assert set(pv["dataset"]) == {
        "synthetic_iid",
        "synthetic_0_0",
        "synthetic_0.5_0.5",
        "synthetic_1_1",
        "femnist",
        "sent140",
    }
    for _, grp in pv.groupby("dataset"):
        assert (grp["algorithm"] == "fedavg").sum() == 1 and grp.loc[grp["algorithm"] == "fedavg", "mu"].isna().all()
        for alg in ("fedprox", "upcycled"):
            assert sorted(grp.loc[grp["algorithm"] == alg, "mu"]) == [0.1, 0.3, 0.5, 1.0]
    assert ((pv[["train_acc", "test_acc"]] > 0) & (pv[["train_acc", "test_acc"]] < 100)).all().all()


def test_table2_numbers_equal_dataset_stats(runset, tmp_path):
    prefix = tmp_path / "table2"
    assert main(["report", "table2", "--out-prefix", str(prefix), runset["data"]]) == 0
    row = read_table(f"{prefix}.csv").iloc[0]
    st = dataset_stats(load_leaf(runset["data"]))
    for key in (
        "samples_total",
        "samples_train",
        "samples_test",
        "devices",
        "per_device_total_mean",
        "per_device_total_std",
        "per_device_train_mean",
        "per_device_train_std",
    ):
        assert row[key] == pytest.approx(st[key], rel=1e-12)
    paper = paper_values("table2").set_index("dataset").loc["synthetic_1_1"]
    assert row["reading"] == "total" and row["mean"] == pytest.approx(st["per_device_total_mean"])
    assert (row["paper_samples"], row["paper_test"], row["paper_devices"]) == (
        paper["samples"],
        paper["test"],
        paper["devices"],
    )
    md = Path(f"{prefix}.md").read_text()
    assert f"| {st['samples_total']} | {st['samples_train']} | {st['samples_test']} |" in md
    assert row["data_source"] == "synthetic" and int(row["data_seed"]) == 0
    assert "| our generator's draw (synthetic_1_1, data_seed 0) — preview, not the paper's data |" in md
    assert md.rstrip().splitlines()[-1].startswith("Provenance: upfl")


def test_time_ratios_equal_recomputation_from_metrics(runset, tmp_path):
    prefix = tmp_path / "time"
    assert (
        main(["report", "time", "--runs", str(runset["csv"]), "--experiment", "table1", "--out-prefix", str(prefix)])
        == 0
    )
    tt = read_table(f"{prefix}.csv")
    dirs = runset["dirs"]
    pooled = {"equal_iterations": [], "equal_rounds": []}
    for mu in (0.1, 1.0):
        row = tt[(tt["algorithm"] == "upcycled") & np.isclose(tt["mu"], mu)].iloc[0]
        it, rd = [], []
        for s in SEEDS:
            up, prox = metrics(dirs["upcycled", mu, s]), metrics(dirs["fedprox", mu, s])
            it.append(up.loc[up["iteration"] == 4, "cum_wall_s"].iloc[0] / prox["cum_wall_s"].iloc[-1])
            rd.append(up["cum_wall_s"].iloc[-1] / prox["cum_wall_s"].iloc[-1])
        assert row["ratio_equal_iterations_mean"] == pytest.approx(np.mean(it), rel=1e-12)
        assert row["ratio_equal_rounds_mean"] == pytest.approx(np.mean(rd), rel=1e-12)
        assert row["ratio_at_iteration"] == 4 and row["ratio_at_rounds"] == 4 and row["n_pairs"] == 2
        assert row["paper_ratio_equal_iterations"] == pytest.approx(0.52)
        pooled["equal_iterations"] += it
        pooled["equal_rounds"] += rd
        cell = [summary(dirs["upcycled", mu, s])["time"] for s in SEEDS]
        assert row["training_s_mean"] == pytest.approx(np.mean([t["train_s"] + t["upcycle_s"] for t in cell]))
    overall = tt[tt["dataset"] == "all"].iloc[0]
    for comp, vals in pooled.items():
        assert overall[f"ratio_{comp}_mean"] == pytest.approx(np.mean(vals), rel=1e-12)
    assert "48% less" in Path(f"{prefix}.md").read_text()


def _is_png(path):
    return Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and Path(path).stat().st_size > 5000


def test_convergence_figure_files_and_data(runset, tmp_path):
    prefix = tmp_path / "figs" / "conv"
    assert (
        main(
            [
                "report",
                "figure",
                "convergence",
                "--runs",
                str(runset["csv"]),
                "--experiment",
                "table1",
                "--out-prefix",
                str(prefix),
                "--metrics",
                "train_loss,test_acc",
            ]
        )
        == 0
    )
    assert _is_png(f"{prefix}.png") and Path(f"{prefix}.pdf").read_bytes()[:4] == b"%PDF"
    data = read_table(f"{prefix}.csv")
    assert set(data["line"]) == {"FedAvg", "FedProx", "Upcycled-FL"} and set(data["metric"]) == {
        "train_loss",
        "test_acc",
    }
    assert sorted(set(data["mu"])) == [0.1, 1.0]  # FedAvg drawn in both mu facets
    assert set(data.loc[data["line"] == "FedAvg", "mu"]) == {0.1, 1.0}
    up = data[(data["line"] == "Upcycled-FL") & np.isclose(data["mu"], 0.1) & (data["metric"] == "test_acc")]
    assert list(up["iteration"]) == [0, 2, 4, 6, 8]  # evaluated every 2 iterations: NaN rows skipped
    curves = [metrics(runset["dirs"]["upcycled", 0.1, s]).set_index("iteration")["test_acc"] for s in SEEDS]
    for r in up.to_dict("records"):
        vals = [c[r["iteration"]] for c in curves]
        assert (r["mean"], r["min"], r["max"]) == (pytest.approx(np.mean(vals)), min(vals), max(vals))
        assert r["n_seeds"] == len(SEEDS)


def test_each_algorithm_has_one_colour_across_figures(runset, tmp_path):
    """Every figure's CSV records each line's colour: one per algorithm, the same in every figure, and variants
    of one algorithm (here the lambda sweep's Upcycled-FL lines) shades of it."""
    from upfl.report.figures import ALGORITHM_COLOURS, csv_colour, line_algorithm

    seen: dict[str, set[str]] = {}
    for experiment, metrics_flag in (("table1", "train_loss,test_acc"), ("table1", "test_acc"), ("sweep", "test_acc")):
        prefix = tmp_path / f"{experiment}_{metrics_flag.replace(',', '_')}"
        assert (
            main(
                [
                    "report",
                    "figure",
                    "convergence",
                    "--runs",
                    str(runset["csv"]),
                    "--experiment",
                    experiment,
                    "--out-prefix",
                    str(prefix),
                    "--metrics",
                    metrics_flag,
                ]
            )
            == 0
        )
        data = read_table(f"{prefix}.csv")
        per_line = data.groupby("line")["colour"].nunique()
        assert (per_line == 1).all(), per_line
        for line, colour in data.groupby("line")["colour"].first().items():
            seen.setdefault(line, set()).add(colour)
            if line in ALGORITHM_COLOURS:
                assert colour == csv_colour(ALGORITHM_COLOURS[line])
            assert (
                len(
                    {
                        c
                        for ln, c in data.groupby("line")["colour"].first().items()
                        if line_algorithm(ln) != line_algorithm(line)
                    }
                    & {colour}
                )
                == 0
            )
    assert all(len(colours) == 1 for colours in seen.values()), seen
    assert {"FedAvg", "FedProx", "Upcycled-FL"} <= set(seen)


def test_figures_are_numbered_and_say_when_curves_differ_in_length(runset, tmp_path):
    from upfl.report.figures import figure_title, length_note

    assert figure_title("fig5") == "Figure 5" and figure_title("fig3_output") == "Figure 3 (output)"
    assert figure_title("ablation_momentum_curves") == "Not in the paper: ablation momentum curves"
    prefix = tmp_path / "fig5"
    assert (
        main(
            [
                "report",
                "figure",
                "convergence",
                "--runs",
                str(runset["csv"]),
                "--experiment",
                "table1",
                "--out-prefix",
                str(prefix),
                "--metrics",
                "test_acc",
            ]
        )
        == 0
    )
    note = length_note(read_table(f"{prefix}.csv"), "iteration")
    assert note.startswith(
        "Curves end at different points: FedAvg, FedProx at iteration 4; Upcycled-FL at "
        "iteration 8 (equal training rounds"
    )


def test_lambda_sweep_figure_files_and_data(runset, tmp_path):
    prefix = tmp_path / "sweep"
    assert (
        main(
            [
                "report",
                "figure",
                "lambda_sweep",
                "--runs",
                str(runset["csv"]),
                "--experiment",
                "sweep",
                "--out-prefix",
                str(prefix),
                "--metrics",
                "test_acc",
            ]
        )
        == 0
    )
    assert _is_png(f"{prefix}.png") and Path(f"{prefix}.pdf").stat().st_size > 1000
    data = read_table(f"{prefix}.csv")
    final = data[data["panel"] == "final"].sort_values("x")
    assert list(final["x"]) == pytest.approx([1 / 3.0, 1 / 1.43])
    ref = data[data["panel"] == "final_reference"].iloc[0]
    prox = [summary(runset["dirs"]["fedprox", 1.0, s])["final"]["test_acc"] for s in SEEDS]
    assert (ref["mean"], ref["min"], ref["max"]) == (pytest.approx(np.mean(prox)), min(prox), max(prox))
    assert {"FedProx", "λ = 2 (step 0.33)", "λ = 0.43 (step 0.70)"} <= set(data.loc[data["panel"] == "curve", "line"])


def test_a_sweeps_note_says_where_its_curves_end():
    """FedProx's curve ends at T, the sweep's at 2T: the note names the two ends, the sweep's lines as one."""
    from upfl.report.figures import sweep_length_note

    curves = pd.DataFrame(
        {"line": ["FedProx", "step = 0.3 (λ = 1.17)", "step = 0.5 (λ = 0.5)"], "x": [80.0, 160.0, 160.0]}
    )
    assert sweep_length_note(curves) == (
        "Curves end at different points: FedProx at iteration 80; Upcycled-FL at iteration 160 (equal training "
        "rounds: Upcycled-FL's even iterations train no device)."
    )
    assert sweep_length_note(curves.assign(x=160.0)) == ""


def test_a_sweep_legend_gives_each_point_as_configured_and_its_other_form():
    """A run given lambda shows its step; one given the step shows its lambda (Eq. (5)), never the step twice."""
    from upfl.report.figures import sweep_line

    nan = math.nan
    assert sweep_line({"algorithm": "upcycled", "mu": 1.0, "lam": 0.43, "step": nan, "coef": 1 / 1.43}) == (
        "λ = 0.43 (step 0.70)"
    )
    assert sweep_line({"algorithm": "upcycled", "mu": 0.5, "lam": nan, "step": 0.3, "coef": 0.3}) == (
        "step = 0.3 (λ = 1.17)"
    )
    assert sweep_line({"algorithm": "upcycled_fedavg", "mu": 0.0, "lam": nan, "step": 0.5, "coef": 0.5}) == (
        "step = 0.5"
    )


def test_where_filters_runs(runset, tmp_path):
    prefix = tmp_path / "one"
    assert (
        main(
            [
                "report",
                "figure",
                "convergence",
                "--runs",
                str(runset["csv"]),
                "--experiment",
                "table1",
                "--where",
                "mu=0,1",
                "--out-prefix",
                str(prefix),
            ]
        )
        == 0
    )
    assert set(read_table(f"{prefix}.csv")["mu"]) == {1.0}


def test_errors_name_the_problem(runset, tmp_path, capsys):
    empty = tmp_path / "unfinished"
    empty.mkdir()
    assert main(["report", "runs", "--out", str(tmp_path / "r.csv"), f"table1:{empty}"]) == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "no summary.json" in err
    assert (
        main(
            [
                "report",
                "table1",
                "--runs",
                str(runset["csv"]),
                "--experiment",
                "nope",
                "--out-prefix",
                str(tmp_path / "t"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "'nope'" in err and "sweep, table1" in err
    assert (
        main(
            [
                "report",
                "table1",
                "--runs",
                str(runset["csv"]),
                "--experiment",
                "sweep",
                "--out-prefix",
                str(tmp_path / "t"),
            ]
        )
        == 2
    )
    assert "differ in lam" in capsys.readouterr().err
    assert (
        main(
            [
                "report",
                "figure",
                "convergence",
                "--runs",
                str(runset["csv"]),
                "--experiment",
                "table1",
                "--where",
                "colour=red",
                "--out-prefix",
                str(tmp_path / "f"),
            ]
        )
        == 2
    )
    assert "colour" in capsys.readouterr().err
    assert (
        main(
            [
                "report",
                "time",
                "--runs",
                str(tmp_path / "missing.csv"),
                "--experiment",
                "table1",
                "--out-prefix",
                str(tmp_path / "t"),
            ]
        )
        == 2
    )
    assert "missing.csv" in capsys.readouterr().err
    assert not list(tmp_path.glob("t.*")) and not list(tmp_path.glob("f.*"))


@pytest.mark.parametrize("font_scale", [1.0, 1.1])
def test_figure_theme_equals_seaborns(font_scale):
    """set_theme gives the rcParams and colour codes of seaborn's whitegrid/paper theme (seaborn itself is not
    imported by the figure jobs), and colour_palette seaborn's palettes."""
    import matplotlib as mpl
    import seaborn as sns

    from upfl.report.theme import colour_palette, set_theme

    codes = mpl.colors.ColorConverter.colors
    default_codes = {code: mpl.colors.BASE_COLORS[code] for code in "bgrmyck"}
    with mpl.rc_context():
        sns.set_theme(style="whitegrid", context="paper", font_scale=font_scale)
        theirs, their_codes = dict(mpl.rcParams), dict(codes)
        mpl.rcParams.update(mpl.rcParamsDefault)
        for code, colour in default_codes.items():
            codes[code] = colour
        assert dict(codes) != their_codes
        set_theme(font_scale=font_scale)
        ours, our_codes = dict(mpl.rcParams), dict(mpl.colors.ColorConverter.colors)
    for key in ("image.cmap", "backend", "backend_fallback"):  # seaborn's own colormap; not a theme's business
        theirs.pop(key), ours.pop(key)
    assert ours == theirs
    assert our_codes == their_codes
    for n in (1, 3, 12):
        assert colour_palette("colorblind", n) == list(sns.color_palette("colorblind", n))
        assert colour_palette("viridis", n) == list(sns.color_palette("viridis", n_colors=n))
    assert colour_palette("colorblind")[2] == sns.color_palette("colorblind")[2]


def test_provenance_names_config_files_relative_to_the_workflow_folder(tmp_path, monkeypatch):
    from upfl.report.render import provenance_line

    monkeypatch.chdir(tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "quick.yaml").write_text("preset: quick\n")
    line = provenance_line([str(tmp_path / "config" / "quick.yaml"), "config/config.yaml"])
    assert "config config/quick.yaml (sha256 " in line and "preset quick" in line
    assert str(tmp_path) not in line and not re.search(r"(?:^|\s)/\w", line), line


def _merged(a, b, column):
    """What ``upfl.report.cells.paired`` equals: pandas' inner merge on seed, sorted by seed."""
    left = a[["seed", column]].rename(columns={column: "a"})
    right = b[["seed", column]].rename(columns={column: "b"})
    return left.merge(right, on="seed").sort_values("seed").reset_index(drop=True)


@pytest.mark.parametrize("seeds_a, seeds_b", [([3, 0, 1, 2], [2, 1, 0]), ([5, 1], [1, 5, 7]), ([0, 1], [2, 3])])
def test_paired_equals_merge_on_seed(seeds_a, seeds_b):
    from upfl.report.cells import paired

    rng = np.random.default_rng(len(seeds_a) * 10 + len(seeds_b))
    a = pd.DataFrame({"seed": seeds_a, "final_test_acc": rng.random(len(seeds_a)), "run_dir": "x"})
    b = pd.DataFrame({"seed": seeds_b, "final_test_acc": rng.random(len(seeds_b)), "run_dir": "y"})
    a.loc[a.index[0], "final_test_acc"] = np.nan
    got = paired(a, b, "final_test_acc")
    pd.testing.assert_frame_equal(got, _merged(a, b, "final_test_acc"))
    assert list(got["seed"]) == sorted(set(seeds_a) & set(seeds_b))


def test_paired_names_a_cell_with_a_repeated_seed():
    from upfl.report.cells import paired
    from upfl.report.collect import ReportError

    a = pd.DataFrame({"seed": [0, 0], "v": [0.1, 0.2]})
    b = pd.DataFrame({"seed": [0, 1], "v": [0.1, 0.2]})
    with pytest.raises(ReportError, match="the first cell has several runs with the same seed"):
        paired(a, b, "v")
    with pytest.raises(ReportError, match="the second cell has several runs with the same seed"):
        paired(b, a, "v")


def test_records_are_to_dicts_of_the_named_columns_the_frame_has():
    from upfl.report.cells import records

    frame = pd.DataFrame(
        {"run_dir": ["a", "b"], "seed": [0, 1], "lam": [0.5, np.nan], "other": ["x", "y"]}, index=[7, 3]
    ).astype({"run_dir": "str"})
    got = records(frame, ["run_dir", "seed", "lam", "sigma", "seed"])
    full = frame.to_dict("records")
    expected = [{k: r[k] for k in ("run_dir", "seed", "lam")} for r in full]
    assert repr(got) == repr(expected)  # NaN included, which == does not equal
    assert [[type(v) for v in r.values()] for r in got] == [[type(v) for v in r.values()] for r in expected]
    assert "sigma" not in got[0] and "other" not in got[0]


def test_momentum_curves_are_computed_once_per_cell_and_axis(monkeypatch, tmp_path):
    from upfl.report import ablations

    metrics = pd.DataFrame(
        {
            "iteration": [0, 1, 2],
            "kind": ["init", "train", "train"],
            "cum_wall_s": [0.0, 0.5, 1.0],
            "test_acc": [0.1, 0.4, 0.6],
        }
    )
    loads = []
    monkeypatch.setattr(ablations, "load_metrics", lambda d: loads.append(d) or metrics.copy())
    cell = pd.DataFrame({"run_dir": ["r0", "r1"], "seed": [0, 1]})
    memo: dict = {}
    by_round = ablations._curves(cell, "round", memo)
    assert ablations._curves(cell, "round", memo) is by_round
    by_time = ablations._curves(cell, "time", memo)
    assert loads == ["r0", "r1"], "each run's metrics read once for both axes"
    pd.testing.assert_frame_equal(by_round, ablations._curves(cell, "round"))
    pd.testing.assert_frame_equal(by_time, ablations._curves(cell, "time"))
    assert list(by_round["x"]) == [0.0, 1.0, 2.0] and list(by_time["x"]) == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("width_in", [3.0, 7.2, 14.4])
def test_bisected_wrap_breaks_lines_where_matplotlib_does(width_in, tmp_path):
    from upfl.report.privacy_tradeoff import TRADEOFF_NOTE
    from upfl.report.theme import pyplot, wrapped_figure_text

    plt = pyplot()
    notes = [
        TRADEOFF_NOTE,
        "short",
        "two  spaces and a verylongwordthatdoesnotfitanywhereonitsownlineatallnotevenclose " * 3,
        "first line\nsecond line " + "word " * 60,
    ]
    files = {}
    for kind in ("matplotlib", "bisected"):
        fig = plt.figure(figsize=(width_in, 2.0))
        texts = []
        for k, note in enumerate(notes):
            kwargs = {"ha": "center", "va": "top", "fontsize": "small"}
            x, y = (0.5, 1.0 - 0.25 * k) if k % 2 == 0 else (0.3, 1.0 - 0.25 * k)
            texts.append(
                fig.text(x, y, note, wrap=True, **kwargs)
                if kind == "matplotlib"
                else wrapped_figure_text(fig, x, y, note, **kwargs)
            )
        for dpi in (72, 100, 150):
            fig.set_dpi(dpi)
            renderer = fig.canvas.get_renderer()
            for t in texts:
                t._renderer = renderer
            files.setdefault(kind, []).append([t._get_wrapped_text() for t in texts])
        fig.set_dpi(100)
        for ext in ("png", "pdf"):
            fig.savefig(tmp_path / f"{kind}.{ext}", dpi=150, metadata={"Creator": None, "CreationDate": None})
        plt.close(fig)
    assert files["bisected"] == files["matplotlib"]
    assert any(len(lines[0].splitlines()) > 1 for lines in files["matplotlib"]), "the note is wrapped"
    from PIL import Image

    assert np.array_equal(
        np.asarray(Image.open(tmp_path / "matplotlib.png")), np.asarray(Image.open(tmp_path / "bisected.png"))
    )
    assert (tmp_path / "matplotlib.pdf").read_bytes() == (tmp_path / "bisected.pdf").read_bytes()


def test_metrics_are_read_once_while_the_file_stays_as_it_was(tmp_path, monkeypatch):
    from upfl.report import collect

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    header = "iteration,kind,cum_wall_s,train_loss,train_acc,test_loss,test_acc\n"
    (run_dir / "metrics.csv").write_text(header + "0,init,0.0,1.0,0.5,1.0,0.5\n1,train,0.1,0.9,0.6,0.9,0.6\n")
    reads = []
    read_csv = pd.read_csv
    monkeypatch.setattr(collect.pd, "read_csv", lambda *a, **k: reads.append(a[0]) or read_csv(*a, **k))
    first = collect.load_metrics(run_dir)
    first.loc[0, "test_acc"] = 99.0  # a caller's change stays in its copy
    second = collect.load_metrics(str(run_dir))
    assert len(reads) == 1 and second["test_acc"].tolist() == [0.5, 0.6]
    stat = (run_dir / "metrics.csv").stat()
    (run_dir / "metrics.csv").write_text(header + "0,init,0.0,1.0,0.5,1.0,0.5\n1,train,0.1,0.9,0.6,0.9,0.7\n")
    os.utime(run_dir / "metrics.csv", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # same size, new time
    assert collect.load_metrics(run_dir)["test_acc"].tolist() == [0.5, 0.7] and len(reads) == 2
    (run_dir / "metrics.csv").write_text(header)
    assert collect.load_metrics(run_dir).empty and len(reads) == 3


def test_close_log_ticks_are_labelled_on_a_second_line():
    """The schedule figure's c_1 axis: 0.9 and 1 sit 0.05 decades apart, their labels would overlap; a label too
    close to the one before it on its line goes to a second line, the others stay on the first."""
    from upfl.report.figures import staggered_log_labels

    labels = staggered_log_labels([0.3, 0.5, 0.7, 0.9, 1.0, 2.5, 5.0, 8.0])
    assert [label.strip() for label in labels] == ["0.3", "0.5", "0.7", "0.9", "1", "2.5", "5", "8"]
    assert [label.startswith("\n") for label in labels] == [False, False, False, True, False, False, False, False]
    assert staggered_log_labels([0.1, 1.0, 10.0]) == ["0.1", "1", "10"]


def test_variants_of_one_algorithm_differ_in_colour_dash_and_marker():
    """Up to five variants of one algorithm in a panel (noise levels, λ values): shades of its colour at least
    ΔE 12 apart (a glance tells them), each with its own dash and marker."""
    import itertools

    from fixtures_browser import colour_difference
    from upfl.report.figures import line_styles, palette_for

    for algorithm in ("FedAvg", "FedProx", "Upcycled-FL"):
        for n in range(2, 6):
            lines = [f"{algorithm} (λ = {k})" for k in range(n)]
            colours, styles = palette_for(lines), line_styles(lines)
            for a, b in itertools.combinations(lines, 2):
                assert colour_difference(colours[a], colours[b]) >= 12, (algorithm, n, a, b)
                assert styles[a] != styles[b]


def test_many_facets_wrap_onto_rows_of_at_most_four():
    """Up to four facets side by side (Figure 9's 4 data sets x 3 metrics stay 3 rows: the report's viewer cuts off
    the top of a figure taller than its window); a fifth wraps onto a second block of metric rows."""
    from upfl.report.figures import MAX_PANEL_COLUMNS, panel_layout, wrapped_panels

    assert MAX_PANEL_COLUMNS == 4
    assert wrapped_panels(4, 3) == (3, 4, [(0, 0), (0, 1), (0, 2), (0, 3)])
    assert wrapped_panels(5, 2) == (4, 4, [(0, 0), (0, 1), (0, 2), (0, 3), (2, 0)])
    assert wrapped_panels(1, 2) == (2, 1, [(0, 0)])
    assert wrapped_panels(3, 2, max_cols=2) == (4, 2, [(0, 0), (0, 1), (2, 0)])
    facets = [("synthetic_iid", 0.1), ("synthetic_0_0", 0.1), ("synthetic_0.5_0.5", 0.1), ("synthetic_1_1", 0.1)]
    rows, cols, pos = panel_layout(facets, 3)
    assert (rows, cols) == (3, 4) and pos[("synthetic_1_1", 0.1)] == (0, 3)
