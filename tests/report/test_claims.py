"""The claims page from small result folders made here: verdicts, intervals, the spread across draws, the
privacy marks, diverged runs left out, and 'not measured here' rows with their reasons."""

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from upfl import config as cfgmod
from upfl.cli import main
from upfl.data import generate_synthetic
from upfl.report.claim_rules import (
    MIN_PAIRS,
    PREVIEW,
    TOO_FEW,
    VERDICTS,
    half_unit,
    verdict_direction,
    verdict_equivalence,
    verdict_gain,
)
from upfl.report.claims import write_claims
from upfl.report.collect import read_runs
from upfl.report.paper_numbers import table1_value
from upfl.report.stats import mean_interval

SEEDS = (0, 1, 2, 3, 4)


def make_run(
    root: Path,
    name: str,
    dataset: str,
    alg: str,
    seed: int,
    acc: tuple[float, float],
    rounds: int,
    mu: float = 1.0,
    lam: float | None = None,
    step: float | None = None,
    privacy: dict | None = None,
    loss_slope: float = 0.01,
    extra: dict | None = None,
    devices: dict | None = None,
    options: dict | None = None,
) -> str:
    """A run folder as `upfl run` writes it (summary.json, metrics.csv) with chosen final accuracies."""
    algorithm = {
        "name": alg,
        **({"mu": mu} if alg != "fedavg" else {}),
        **({"lam": lam} if lam is not None else {}),
        **({"step": step} if step is not None else {}),
        **(options or {}),
    }
    doc = {
        "data": {"path": str(root / "data" / dataset)},
        "rounds": rounds,
        "seed": seed,
        "algorithm": algorithm,
        "devices": devices or {"frac": 0.3, "straggler": 0.9},
        "privacy": privacy or {"mechanism": "none"},
    }
    if (privacy or {}).get("mechanism") == "output":
        doc["devices"] = {"frac": 1.0, "straggler": 0.0}
    cfg = cfgmod.from_dict(
        {
            **doc,
            "privacy": {
                k: v for k, v in (privacy or {"mechanism": "none"}).items() if k in ("mechanism", "sigma", "tau")
            },
        }
    )
    rows, cum = [], 0.0
    for t in range(rounds + 1):
        train = alg != "upcycled" or t % 2 == 1
        wall = 0.0 if t == 0 else (1.0 if train else 0.001)
        cum += wall
        last = t == rounds
        rows.append(
            {
                "iteration": t,
                "kind": "init" if t == 0 else ("train" if train else "upcycle"),
                "train_loss": 1.0 - loss_slope * t,
                "train_acc": acc[0] if last else 0.5,
                "test_loss": 1.0,
                "test_acc": acc[1] if last else 0.5,
                "devices": 9,
                "local_steps": 10,
                "data_accesses": 9,
                "wall_s": wall,
                "cum_wall_s": cum,
            }
        )
    out = root / "runs" / name
    out.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(out / "metrics.csv", index=False)
    training = sum(1 for r in rows if r["kind"] == "train")
    final = {
        "iteration": rounds,
        "train_loss": rows[-1]["train_loss"],
        "train_acc": acc[0],
        "test_loss": 1.0,
        "test_acc": acc[1],
    }
    summary = {
        "final": final,
        "best": final,
        "config": cfgmod.to_dict(cfg),
        "config_hash": "x",
        "seed": seed,
        "upfl_version": "test",
        "git_commit": "test",
        "torch_version": "test",
        "device": "cpu",
        "time": {"train_s": float(training), "upcycle_s": 0.001 * (rounds - training), "eval_s": 0.0, "total_s": cum},
        "training_rounds": training,
        "privacy": {k: v for k, v in (privacy or {"mechanism": "none"}).items() if k not in ("sigma", "tau")},
    }
    summary.update(extra or {})
    (out / "summary.json").write_text(json.dumps(summary))
    return str(out)


def gains_for(paper_gain: float, spread: float, seed: int) -> float:
    """A per-seed gain (in accuracy units) around ``paper_gain`` pp with a seed-dependent wiggle of ``spread`` pp."""
    return (paper_gain + spread * (seed - 2) / 2) / 100.0


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("claims")
    specs = []
    # Table 1 cells on the paper's data: (data set, mu, lam) -> our gain (pp) and its per-seed wiggle (pp).
    cells = {
        ("synthetic_1_1", 1.0, 0.43): (0.7, 0.2),  # far below the paper's +7.19: does not hold
        ("synthetic_0_0", 0.1, 0.04): (3.0, 0.2),  # paper +2.75 inside: holds
        ("synthetic_iid", 0.1, 0.04): (1.0, 6.0),
    }  # wide: inconclusive
    for (ds, mu, lam), (gain, wiggle) in cells.items():
        base = table1_value(ds, "fedprox", mu)
        for seed in SEEDS:
            prox = (base[0] / 100 + 0.001 * seed, base[1] / 100 + 0.001 * seed)
            g = gains_for(gain, wiggle, seed)
            specs.append("table1:" + make_run(root, f"{ds}_prox_{mu}_{seed}", ds, "fedprox", seed, prox, 8, mu))
            specs.append(
                "table1:"
                + make_run(root, f"{ds}_up_{mu}_{seed}", ds, "upcycled", seed, (prox[0] + g, prox[1] + g), 16, mu, lam)
            )
    # A diverged run (flagged in summary.json) that would sink the Synthetic(0,0) verdict if it counted.
    specs.append(
        "table1:"
        + make_run(
            root,
            "diverged",
            "synthetic_0_0",
            "upcycled",
            5,
            (0.1, 0.1),
            16,
            0.1,
            0.04,
            extra={"diverged": {"iteration": 9, "kind": "train", "what": "train_loss is nan"}},
        )
    )
    specs.append("table1:" + make_run(root, "diverged_prox", "synthetic_0_0", "fedprox", 5, (0.8, 0.8), 8, 0.1))
    # Three fresh draws of the (1,1) generator, mu 1: the gain is +7 pp on one draw, +0.5 on the others.
    # The first two are written by our generator, as `upfl synth --draw` writes them (meta.json: the data set's name
    # and its generator setting apart); the third is named freely, with a meta.json of an earlier form that names
    # its generator setting in `name`: in each, the setting and data seed come from meta.json.
    for draw in (0, 1):
        generate_synthetic(
            f"synthetic_1_1_draw{draw}",
            root / "data" / f"synthetic_1_1_draw{draw}",
            data_seed=draw,
            num_devices=3,
            setting="synthetic_1_1",
        )
    (root / "data" / "fresh_one").mkdir(parents=True)
    (root / "data" / "fresh_one" / "meta.json").write_text(json.dumps({"name": "synthetic_1_1", "data_seed": 2}))
    for draw, gain in ((0, 7.0), (1, 0.5), (2, 0.5)):
        for seed in (1, 2, 3):
            ds = f"synthetic_1_1_draw{draw}" if draw < 2 else "fresh_one"
            specs.append("table1_draws:" + make_run(root, f"{ds}_prox_{seed}", ds, "fedprox", seed, (0.7, 0.7), 8))
            g = gains_for(gain, 0.2, seed)
            specs.append(
                "table1_draws:"
                + make_run(root, f"{ds}_up_{seed}", ds, "upcycled", seed, (0.7 + g, 0.7 + g), 16, 1.0, 0.43)
            )
    # Figure 2 (right): the larger step has the lower training loss all along.
    for seed in SEEDS:
        for step, slope in ((0.9, 0.03 + 0.001 * seed), (0.3, 0.01)):
            specs.append(
                "fig2_lambda:"
                + make_run(
                    root,
                    f"sweep_{step}_{seed}",
                    "synthetic_0.5_0.5",
                    "upcycled",
                    seed,
                    (0.8, 0.8),
                    16,
                    0.5,
                    step=step,
                    loss_slope=slope,
                )
            )

    # Section 6, output perturbation on Synthetic(iid) and (0,0): FedProx sigma 1; Upcycled-FL sigma 1 (equal
    # noise, half the epsilon) and 0.7071 (equal epsilon); the accuracy gain at equal epsilon is about +1 pp.
    def private(eps_bar, eps_max, sigma):
        return {
            "mechanism": "output",
            "sigma": sigma,
            "tau": 10,
            "epsilon_bar": {"paper_formula": eps_bar / 2, "sound": eps_bar, "paper_sensitivity": eps_bar / 3},
            "epsilon_max": {"paper_formula": eps_max / 2, "sound": eps_max, "paper_sensitivity": eps_max / 3},
        }

    for ds in ("synthetic_iid", "synthetic_0_0"):
        for seed in SEEDS:
            common = {"mu": 0.1}
            specs.append(
                "privacy_output:"
                + make_run(
                    root,
                    f"p_{ds}_prox_{seed}",
                    ds,
                    "fedprox",
                    seed,
                    (0.7, 0.7),
                    8,
                    privacy=private(5000.0, 14000.0, 1.0),
                    **common,
                )
            )
            specs.append(
                "privacy_output:"
                + make_run(
                    root,
                    f"p_{ds}_upn_{seed}",
                    ds,
                    "upcycled",
                    seed,
                    (0.72, 0.72),
                    8,
                    lam=0.04,
                    privacy=private(2500.0, 7000.0, 1.0),
                    **common,
                )
            )
            g = gains_for(1.0, 0.2, seed)
            specs.append(
                "privacy_output:"
                + make_run(
                    root,
                    f"p_{ds}_upe_{seed}",
                    ds,
                    "upcycled",
                    seed,
                    (0.7 + g, 0.7 + g),
                    8,
                    lam=0.04,
                    privacy=private(5000.0, 14000.0, 0.7071),
                    **common,
                )
            )
    # Where the data came from (each data set's meta.json): Synthetic(1,1) the authors' released draw,
    # Synthetic(0,0) our generator's draw; the others say nothing.
    for ds, meta in (
        ("synthetic_1_1", {"source": "paper", "setting": "synthetic_1_1", "commit": "4dd74006fb42"}),
        ("synthetic_0_0", {"source": "synthetic", "setting": "synthetic_0_0", "data_seed": 3}),
    ):
        (root / "data" / ds).mkdir(parents=True, exist_ok=True)
        (root / "data" / ds / "meta.json").write_text(json.dumps(meta))
    csv = root / "runs.csv"
    assert main(["report", "runs", "--out", str(csv), *specs]) == 0
    prefix = root / "tables" / "claims"
    assert main(["report", "claims", "--runs", str(csv), "--out-prefix", str(prefix), "--excluded", "femnist"]) == 0
    frame = pd.read_csv(f"{prefix}.csv", comment="#").set_index("id")
    return {"root": root, "frame": frame, "md": Path(f"{prefix}.md").read_text(), "csv": csv}


def test_verdict_rule_cases():
    assert verdict_gain(7.19, 0.5, 0.9, 10)[0] == "does not hold"  # a gain, far smaller than claimed
    assert verdict_gain(7.19, 6.0, 8.0, 10)[0] == "holds"
    assert verdict_gain(7.19, 8.0, 9.0, 10)[0] == "holds"  # larger than claimed
    assert verdict_gain(7.19, -1.0, 9.0, 10)[0] == "inconclusive"
    assert verdict_gain(7.19, -1.0, 3.0, 10)[0] == "does not hold"  # the paper's figure excluded
    assert verdict_gain(7.19, -3.0, -1.0, 10)[0] == "does not hold"
    assert verdict_gain(48, 47.6, 47.7, 10, half_unit("48"))[0] == "holds"  # 48 printed: 47.5 is within
    assert verdict_gain(48, 47.0, 47.4, 10, half_unit("48"))[0] == "does not hold"
    assert verdict_gain(-1.82, -3.0, -1.0, 10)[0] == "holds"  # the paper's FedProx-above cell
    assert verdict_gain(-1.82, 0.5, 1.0, 10)[0] == "does not hold"
    assert verdict_gain(7.19, 6.0, 8.0, 1)[0] == TOO_FEW
    assert verdict_equivalence(1.0, 0.95, 1.05, 5)[0] == "holds"
    assert verdict_equivalence(1.0, 1.2, 1.3, 5)[0] == "does not hold"
    assert verdict_equivalence(1.0, 0.95, 1.2, 5)[0] == "inconclusive"
    assert verdict_direction(-1, -0.3, -0.1, 5)[0] == "holds"
    assert verdict_direction(-1, 0.1, 0.3, 5)[0] == "does not hold"
    assert verdict_direction(-1, -0.1, 0.3, 5)[0] == "inconclusive"
    assert half_unit("7.19") == pytest.approx(0.005) and half_unit("12.0") == pytest.approx(0.05)


def _gains(root, ds, mu, key):
    out = []
    for seed in SEEDS:
        up = json.loads((root / "runs" / f"{ds}_up_{mu}_{seed}" / "summary.json").read_text())["final"][key]
        prox = json.loads((root / "runs" / f"{ds}_prox_{mu}_{seed}" / "summary.json").read_text())["final"][key]
        out.append((up - prox) * 100)
    return out


def test_table1_rows_verdicts_and_intervals(page):
    f, root = page["frame"], page["root"]
    expect = {
        ("synthetic_1_1", 1.0): "does not hold",
        ("synthetic_0_0", 0.1): "holds",
        ("synthetic_iid", 0.1): "inconclusive",
    }
    for (ds, mu), verdict in expect.items():
        for key in ("train_acc", "test_acc"):
            row = f.loc[f"table1/{ds}/mu{mu:g}/{key}"]
            ci = mean_interval(_gains(root, ds, mu, key))
            assert row["verdict"] == verdict
            assert row["n_pairs"] == 5
            assert row["ours"] == pytest.approx(ci.mean) and row["ci_low"] == pytest.approx(ci.low)
            assert row["ci_high"] == pytest.approx(ci.high)
            up, prox = table1_value(ds, "upcycled", mu), table1_value(ds, "fedprox", mu)
            assert row["paper"] == pytest.approx(up[key == "test_acc"] - prox[key == "test_acc"])
    assert "smaller than the paper's" in f.loc["table1/synthetic_1_1/mu1/train_acc", "why"]


def test_diverged_runs_are_left_out_and_said_so(page):
    assert page["frame"].loc["table1/synthetic_0_0/mu0.1/train_acc", "n_pairs"] == 5
    assert "1 of" in page["md"] and "flagged 'diverged'" in page["md"]


def test_not_measured_rows_say_why(page):
    f = page["frame"]
    fem = f.loc["table1/femnist/mu0.3/train_acc"]
    assert fem["verdict"] == "not measured here" and "excluded from this pipeline run" in fem["why"]
    sent = f.loc["table1/sent140/mu0.1/test_acc"]
    assert sent["verdict"] == "not measured here" and "real data was not downloaded" in sent["why"]
    assert f.loc["table1/synthetic_1_1/mu0.5/train_acc", "verdict"] == "not measured here"
    objective = f[f.index.str.startswith("privacy/objective/")]
    assert len(objective) == 4 and set(objective["verdict"]) == {"not measured here"}
    assert set(f[f.index.str.startswith("fig12/")]["verdict"]) == {"not measured here"}
    assert f.loc["fig4/femnist/none/train_acc", "verdict"] == "not measured here"
    bases = f.loc["bases"]
    assert bases["verdict"] == "not measured here" and "no runs of experiment upcycling_bases" in bases["why"]
    assert "| not measured here" not in page["md"] or "**not measured here**" in page["md"]


def test_spread_across_draws(page):
    row = page["frame"].loc["table1/synthetic_1_1/mu1/train_acc"]
    assert row["draws_n"] == 3
    assert row["draws_min"] == pytest.approx(0.5) and row["draws_max"] == pytest.approx(7.0)
    assert row["draws_above_zero"] == 3 and row["draws_below_zero"] == 0
    assert math.isnan(page["frame"].loc["table1/synthetic_0_0/mu0.1/train_acc", "draws_n"])
    assert "0.50 to +7.00 over 3 draws" in page["md"]


def test_time_and_lambda_claims(page):
    f = page["frame"]
    eq = f.loc["time/equal_iterations"]
    # At 8 iterations FedProx trains 8 times (8 s), Upcycled-FL 4 times + 4 free steps (4.004 s): 49.95% less;
    # at 8 training rounds Upcycled-FL has also made 8 free steps (its 16th iteration included): 8.008 s.
    # Every seed's runs are timed alike here, so the interval has zero width: no evidence, inconclusive.
    assert eq["ours"] == pytest.approx((1 - 4.004 / 8) * 100) and eq["verdict"] == "inconclusive"
    rounds = f.loc["time/equal_rounds"]
    assert rounds["ours"] == pytest.approx(8.008 / 8) and rounds["verdict"] == "inconclusive"
    assert "zero-width" in eq["why"] and "zero-width" in rounds["why"]
    lam = f.loc["fig2/lambda_sweep/synthetic_0.5_0.5"]
    assert lam["verdict"] == "holds" and lam["ours"] < 0 and lam["n_pairs"] == 5


def test_privacy_claims_and_marks(page):
    f = page["frame"]
    loss = f.loc["privacy/output/privacy_loss/sound"]
    assert loss["ours"] == pytest.approx(50.0) and loss["verdict"] == "holds" and loss["paper"] == 12.0
    assert loss["meaningful_guarantee"] == "no" and "worst device's ε 14000" in loss["privacy_level"]
    acc = f.loc["privacy/output/train_acc"]
    assert acc["n_pairs"] == 10 and acc["ours"] == pytest.approx(1.0) and acc["verdict"] == "does not hold"
    assert f.loc["privacy/output/time", "verdict"] == "inconclusive"  # timed alike: a zero-width interval
    assert "no meaningful guarantee (ε > 10)" in page["md"]


def test_page_states_the_rule_and_counts(page):
    md = page["md"]
    assert "Verdict rule." in md and "inconclusive" in md
    counts = page["frame"]["verdict"].value_counts()
    assert f"{counts['holds']} holds" in md and f"{counts['not measured here']} not measured here" in md
    assert set(page["frame"]["verdict"]) <= set(VERDICTS)
    assert f"at least {MIN_PAIRS} paired seeds" in md


@pytest.mark.parametrize("n", range(0, MIN_PAIRS))
def test_below_the_minimum_of_pairs_no_verdict(n):
    """An interval that would hold with enough pairs gives no verdict below the minimum, for every rule."""
    for verdict, why in (
        verdict_gain(7.19, 6.0, 8.0, n),
        verdict_equivalence(1.0, 0.95, 1.05, n),
        verdict_direction(+1, 0.1, 0.3, n),
    ):
        assert verdict == TOO_FEW and f"at least {MIN_PAIRS}" in why
    assert verdict_gain(7.19, 6.0, 8.0, MIN_PAIRS)[0] == "holds"


def test_identical_differences_are_no_evidence():
    """Every pair giving the same difference makes a zero-width interval: inconclusive, whatever its place."""
    ci = mean_interval([0.88] * MIN_PAIRS)
    assert ci.low == pytest.approx(0.88) and ci.high == pytest.approx(0.88)
    for verdict, why in (
        verdict_gain(0.5, ci.low, ci.high, ci.n),
        verdict_gain(7.19, ci.low, ci.high, ci.n),
        verdict_equivalence(1.0, 1.0, 1.0, ci.n),
        verdict_direction(+1, ci.low, ci.high, ci.n),
    ):
        assert verdict == "inconclusive" and "zero-width" in why


def test_page_with_two_seeds_and_identical_differences(page, tmp_path):
    """Two seeds per cell (the quick preset's) give 'too few seeds (2)' and print no interval; five seeds with one
    difference each print the mean alone and no verdict of the interval."""
    runs = read_runs(page["csv"])
    two = runs[runs["seed"].astype(int) < 2]
    frame = write_claims(two, str(tmp_path / "two"), "test")
    md = (tmp_path / "two.md").read_text()
    row = frame.set_index("id").loc["table1/synthetic_1_1/mu1/train_acc"]
    assert row["verdict"] == TOO_FEW and row["n_pairs"] == 2 and f"**{TOO_FEW} (2)**" in md
    line = next(ln for ln in md.splitlines() if "μ = 1 (" in ln and "Synthetic(1,1)" in ln)
    assert "[" not in line.split("|")[4]


def test_rows_name_their_data_and_mark_previews(page):
    f, md = page["frame"], page["md"]
    paper_row, generated = f.loc["table1/synthetic_1_1/mu1/test_acc"], f.loc["table1/synthetic_0_0/mu0.1/test_acc"]
    assert paper_row["data_origin"] == "the authors' released draw at commit 4dd7400" and not paper_row["preview"]
    assert generated["data_origin"] == "our generator's draw (synthetic_0_0, data_seed 3)" and generated["preview"]
    # The diverged Upcycled-FL run is left out; its FedProx partner (seed 5) stays among the runs read.
    assert generated["seeds"] == "0 1 2 3 4 5" and generated["n_runs"] == 11
    assert md.count(PREVIEW) >= 2 and "seeds 0 1 2 3 4 5; 11 runs" in md


def test_draws_table_and_figure(page, tmp_path):
    csv = page["csv"]
    table, figure = tmp_path / "tables" / "table1_draws", tmp_path / "figures" / "table1_draws"
    assert (
        main(
            [
                "report",
                "draws",
                "--runs",
                str(csv),
                "--experiment",
                "table1_draws",
                "--reference-runs",
                str(csv),
                "--reference-experiment",
                "table1",
                "--out-prefix",
                str(table),
                "--figure-prefix",
                str(figure),
            ]
        )
        == 0
    )
    frame = pd.read_csv(f"{table}.csv", comment="#")
    sub = frame[(frame["setting"] == "synthetic_1_1") & (frame["metric"] == "train_acc")]
    ref = sub[sub["source"] == "paper's draw"].iloc[0]
    assert ref["gain_mean"] == pytest.approx(0.7) and ref["n_pairs"] == 5
    assert ref["paper_gain"] == pytest.approx(82.88 - 75.69)
    draws = sub[sub["source"] == "fresh draw"].set_index("draw")
    assert sorted(draws.index) == [0, 1, 2] and draws.loc[2, "dataset"] == "fresh_one"
    assert draws.loc[0, "gain_mean"] == pytest.approx(7.0) and draws.loc[1, "gain_mean"] == pytest.approx(0.5)
    ci = mean_interval([gains_for(0.5, 0.2, s) * 100 for s in (1, 2, 3)])
    assert draws.loc[1, "gain_ci_low"] == pytest.approx(ci.low) and draws.loc[1, "n_pairs"] == 3
    md = Path(f"{table}.md").read_text()
    assert "3 / 0 of 3" in md and "+7.19" in md
    reference = md.split("reference runs (experiment table1): ", 1)[1]  # the 'paper's draw' column's runs
    table1_runs = pd.read_csv(csv, comment="#")
    seeds = sorted(
        {
            int(s)
            for s, e in zip(table1_runs["seed"], table1_runs["experiments"], strict=True)
            if "table1" in e.split(";")
        }
    )
    assert reference.startswith("data: ") and f"seeds {' '.join(map(str, seeds))};" in reference
    assert Path(f"{figure}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and Path(f"{figure}.pdf").stat().st_size > 0
    assert len(pd.read_csv(f"{figure}.csv", comment="#")) == len(frame)


def test_draws_figure_has_its_title_and_says_what_it_shows(page, tmp_path, monkeypatch):
    """The draws figure names itself and carries the table's caption (what the points, bars and colours are)."""
    import upfl.report.figures as figures
    from upfl.report.collect import read_runs
    from upfl.report.fresh_data_sets import DRAWS_CAPTION, write_draws

    saved = {}
    save = figures.save_figure
    monkeypatch.setattr(figures, "save_figure", lambda fig, prefix: (saved.update(fig=fig), save(fig, prefix)))
    runs = read_runs(page["csv"])
    draws = runs[runs["experiments"].str.contains("table1_draws")]
    reference = runs[runs["experiments"].str.split(";").map(lambda e: "table1" in e)]
    write_draws(draws, reference, str(tmp_path / "t"), str(tmp_path / "table1_draws"), "provenance")
    fig = saved["fig"]
    assert fig.get_suptitle() == "Not in the paper: table1 draws"
    notes = [" ".join(t.get_text().split()) for t in fig.texts]
    assert " ".join(DRAWS_CAPTION.split()) in notes
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert all(label.count("\n") == 1 for label in labels)  # two short lines: a long one ran into the next row's


def test_sensitivity_table(tmp_path):
    specs, expected = [], {}
    combos = {
        ("bernoulli", "partial"): 1.0,
        ("exact", "partial"): 2.0,
        ("bernoulli", "drop"): 3.0,
        ("exact", "drop"): -1.0,
    }
    for (draw, policy), gain in combos.items():
        devices = {"frac": 0.3, "straggler": 0.9, "straggler_draw": draw, "straggler_policy": policy}
        for seed in (1, 2, 3):
            g = gains_for(gain, 0.4, seed)
            specs.append(
                "s:"
                + make_run(
                    tmp_path,
                    f"prox_{draw}_{policy}_{seed}",
                    "synthetic_1_1",
                    "fedprox",
                    seed,
                    (0.75, 0.75),
                    8,
                    devices=devices,
                )
            )
            specs.append(
                "s:"
                + make_run(
                    tmp_path,
                    f"up_{draw}_{policy}_{seed}",
                    "synthetic_1_1",
                    "upcycled",
                    seed,
                    (0.75 + g, 0.75 + g),
                    16,
                    1.0,
                    0.43,
                    devices=devices,
                )
            )
        expected[(draw, policy)] = mean_interval([gains_for(gain, 0.4, s) * 100 for s in (1, 2, 3)])
    csv = tmp_path / "runs.csv"
    assert main(["report", "runs", "--out", str(csv), *specs]) == 0
    runs = pd.read_csv(csv)
    assert set(runs["straggler_draw"]) == {"bernoulli", "exact"} and set(runs["policy"]) == {"partial", "drop"}
    prefix = tmp_path / "sens"
    assert main(["report", "sensitivity", "--runs", str(csv), "--experiment", "s", "--out-prefix", str(prefix)]) == 0
    frame = pd.read_csv(f"{prefix}.csv", comment="#")
    assert len(frame) == 4
    for r in frame.to_dict("records"):
        ci = expected[(r["straggler_draw"], r["policy"])]
        assert r["train_acc_gain_mean"] == pytest.approx(ci.mean) and r["train_acc_gain_ci_low"] == pytest.approx(
            ci.low
        )
        assert r["n_pairs"] == 3 and r["default"] == ((r["straggler_draw"], r["policy"]) == ("bernoulli", "partial"))
    md = Path(f"{prefix}.md").read_text().splitlines()
    first = next(line for line in md if line.startswith("| Synthetic(1,1)"))
    assert "| bernoulli | partial |" in first


def test_bases_claims_one_row_per_base(tmp_path):
    """'Upcycling is orthogonal to the base': Upcycled-on-base minus base per seed, direction rule."""
    specs, root = [], tmp_path
    gains = {
        ("fedavg", "upcycled_fedavg"): (3.0, 0.4),  # clearly above 0: holds
        ("scaffold", "upcycled_scaffold"): (-2.0, 0.4),  # clearly below 0: does not hold
        ("fedprox", "upcycled"): (0.5, 8.0),
    }  # wide: inconclusive
    for (plain, up), (gain, wiggle) in gains.items():
        mu = 1.0 if plain == "fedprox" else 0.0
        for seed in SEEDS:
            acc = 0.6 + 0.01 * seed
            g = gains_for(gain, wiggle, seed)
            specs.append(
                "upcycling_bases:" + make_run(root, f"{plain}_{seed}", "synthetic_1_1", plain, seed, (acc, acc), 8, mu)
            )
            specs.append(
                "upcycling_bases:"
                + make_run(
                    root,
                    f"{up}_{seed}",
                    "synthetic_1_1",
                    up,
                    seed,
                    (acc + g, acc + g),
                    16,
                    mu,
                    lam=0.43 if up == "upcycled" else None,
                    step=None if up == "upcycled" else 0.7,
                )
            )
    # FedNova without its upcycled version: a row saying so.
    specs.append("upcycling_bases:" + make_run(root, "fednova_0", "synthetic_1_1", "fednova", 0, (0.6, 0.6), 8, 0.0))
    # A diverged upcycled run that would sink FedAvg's verdict if it counted.
    specs.append(
        "upcycling_bases:"
        + make_run(
            root,
            "bad",
            "synthetic_1_1",
            "upcycled_fedavg",
            7,
            (0.0, 0.0),
            16,
            0.0,
            step=0.7,
            extra={"diverged": {"iteration": 3, "kind": "train", "what": "nan"}},
        )
    )
    specs.append("upcycling_bases:" + make_run(root, "bad_base", "synthetic_1_1", "fedavg", 7, (0.9, 0.9), 8, 0.0))
    csv = root / "runs.csv"
    assert main(["report", "runs", "--out", str(csv), *specs]) == 0
    prefix = root / "claims"
    assert main(["report", "claims", "--runs", str(csv), "--out-prefix", str(prefix)]) == 0
    f = pd.read_csv(f"{prefix}.csv", comment="#").set_index("id")
    rows = f[f["section"] == "Upcycling on other base algorithms"]
    assert list(rows.index) == [
        "bases/synthetic_1_1/s0.9/fedavg",
        "bases/synthetic_1_1/s0.9/fedprox",
        "bases/synthetic_1_1/s0.9/fednova",
        "bases/synthetic_1_1/s0.9/scaffold",
    ]
    for (plain, _), (gain, wiggle) in gains.items():
        row = rows.loc[f"bases/synthetic_1_1/s0.9/{plain}"]
        ci = mean_interval([gains_for(gain, wiggle, s) * 100 for s in SEEDS])
        assert row["n_pairs"] == 5 and row["ours"] == pytest.approx(ci.mean)
        assert row["ci_low"] == pytest.approx(ci.low) and row["ci_high"] == pytest.approx(ci.high)
        assert math.isnan(row["paper"]) and row["experiment"] == "upcycling_bases"
    assert rows.loc["bases/synthetic_1_1/s0.9/fedavg", "verdict"] == "holds"
    assert rows.loc["bases/synthetic_1_1/s0.9/scaffold", "verdict"] == "does not hold"
    assert rows.loc["bases/synthetic_1_1/s0.9/fedprox", "verdict"] == "inconclusive"
    nova = rows.loc["bases/synthetic_1_1/s0.9/fednova"]
    assert nova["verdict"] == "not measured here" and "upcycled version" in nova["why"]
    md = Path(f"{prefix}.md").read_text()
    assert "## Upcycling on other base algorithms" in md and "Upcycled SCAFFOLD − SCAFFOLD" in md
    # The experiment name comes from the `bases` role; another name finds no runs and says so.
    assert (
        main(
            [
                "report",
                "claims",
                "--runs",
                str(csv),
                "--out-prefix",
                str(prefix),
                "--experiment-for",
                "bases=other_bases",
            ]
        )
        == 0
    )
    f = pd.read_csv(f"{prefix}.csv", comment="#").set_index("id")
    assert f.loc["bases", "verdict"] == "not measured here" and "other_bases" in f.loc["bases", "why"]


def test_momentum_information_section(tmp_path):
    """Upcycled-FL against FedProx + server momentum per beta: information on the page, no verdict, no claim."""
    specs, root = [], tmp_path
    for seed in SEEDS:
        specs.append(
            "ablation_momentum:" + make_run(root, f"prox_{seed}", "synthetic_1_1", "fedprox", seed, (0.7, 0.7), 8)
        )
        specs.append(
            "ablation_momentum:"
            + make_run(root, f"up_{seed}", "synthetic_1_1", "upcycled", seed, (0.72, 0.72 + 0.001 * seed), 16, lam=0.43)
        )
        for beta, acc in ((0.3, 0.71), (0.9, 0.74)):
            specs.append(
                "ablation_momentum:"
                + make_run(
                    root,
                    f"m{beta}_{seed}",
                    "synthetic_1_1",
                    "fedavgm",
                    seed,
                    (acc, acc),
                    8,
                    options={"server_momentum": beta},
                )
            )
    csv = root / "runs.csv"
    assert main(["report", "runs", "--out", str(csv), *specs]) == 0
    prefix = root / "claims"
    assert main(["report", "claims", "--runs", str(csv), "--out-prefix", str(prefix)]) == 0
    md = Path(f"{prefix}.md").read_text()
    info = md[md.index("## Information: upcycling or server momentum?") :]
    rows = [line for line in info.splitlines() if line.startswith("| Synthetic")]
    assert len(rows) == 2
    low = mean_interval([(0.72 + 0.001 * s - 0.71) * 100 for s in SEEDS])
    high = mean_interval([(0.72 + 0.001 * s - 0.74) * 100 for s in SEEDS])
    assert "β = 0.3" in rows[0] and f"+{low.mean:.2f} [+{low.low:.2f}, +{low.high:.2f}]" in rows[0]
    assert "β = 0.9" in rows[1] and f"{high.mean:.2f}".replace("-", "−") in rows[1].replace("-", "−")
    assert rows[0].rstrip(" |").endswith("5")
    frame = pd.read_csv(f"{prefix}.csv", comment="#")
    assert not frame["claim"].str.contains("momentum").any()


def test_each_rows_provenance_is_that_of_its_own_runs(page):
    """claims_frame computes the provenance columns once per experiment and data set: every row's equal those of
    the runs it was computed from."""
    from upfl.report.claim_rules import without_diverged
    from upfl.report.claims import claims_frame, provenance_columns, row_runs
    from upfl.report.collect import read_runs

    runs = read_runs(page["csv"])
    frame, _ = claims_frame(runs, excluded=["femnist"])
    kept, _ = without_diverged(runs)
    keys = ("data_origin", "preview", "seeds", "n_runs")
    rows = frame.to_dict("records")
    assert len({(r["experiment"], r["dataset"]) for r in rows}) < len(rows), "rows share their runs"
    for r in rows:
        assert {k: r[k] for k in keys} == provenance_columns(row_runs(kept, r))
    assert {r["n_runs"] for r in rows} - {0}, "some rows read runs"


def test_table1_gives_the_claims_pages_verdict_in_its_words(page, tmp_path):
    """Table 1's verdict column and the claims page judge each cell by one rule and name it in the same words; with
    fewer than 5 pairs both say 'too few seeds (n)'."""
    prefix = tmp_path / "table1"
    args = ["report", "table1", "--runs", str(page["csv"]), "--experiment", "table1", "--out-prefix", str(prefix)]
    assert main(args) == 0
    table = pd.read_csv(f"{prefix}.csv", comment="#")
    md = Path(f"{prefix}.md").read_text()
    claims = page["frame"]
    judged = 0
    for row in table[table["algorithm"] == "upcycled"].to_dict("records"):
        for key in ("train_acc", "test_acc"):
            claim = claims.loc[f"table1/{row['dataset']}/mu{row['mu']:g}/{key}"]
            assert row[f"verdict_{key}"] == claim["verdict"], (row["dataset"], row["mu"], key)
            judged += 1
    assert judged == 6 and {"holds", "does not hold", "inconclusive"} <= set(claims["verdict"])
    assert "| verdict (claims page) |" in md and "| holds |" in md and "| does not hold |" in md
    assert not re.search(r"\| (yes|no|train only|test only) \|", md)
    # Two seeds: too few for a verdict, on both pages.
    few = read_runs(page["csv"])
    few = few[few["seed"].isin([0, 1])]
    few.to_csv(tmp_path / "few.csv", index=False)
    assert main([*args[:3], str(tmp_path / "few.csv"), *args[4:]]) == 0
    md = Path(f"{prefix}.md").read_text()
    assert md.count("| too few seeds (2) |") == 3 and "holds" not in md.split("| verdict (claims page) |")[1]
