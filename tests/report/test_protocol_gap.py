"""The protocol_gap table, its reporting-choice columns, and the claims page's "Why the headline differs"."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from upfl import config as cfgmod
from upfl.report.claims import write_claims
from upfl.report.collect import collect_runs, curve_columns
from upfl.report.paper_numbers import paper_values
from upfl.report.protocol_gap import headline_section, protocol_gap_frame, write_protocol_gap
from upfl.report.tables import table1_frame


def fake_run(root, dataset, algorithm, seed, authors, curve, source="paper"):
    """A run folder with a summary.json and a metrics.csv whose train/test accuracy follow ``curve``, on a data
    folder whose meta.json names ``source``."""
    data = root / "data" / source / dataset
    data.mkdir(parents=True, exist_ok=True)
    (data / "meta.json").write_text(json.dumps({"name": dataset, "source": source}))
    alg = {"name": algorithm, "mu": 1.0}
    alg.update(
        {"step": 0.7} if authors and algorithm == "upcycled" else {"lam": 0.43} if algorithm == "upcycled" else {}
    )
    doc = {
        "data": {"path": str(data)},
        "seed": seed,
        "rounds": len(curve),
        "algorithm": alg,
        "model": {"name": "logreg", "softmax_before_loss": authors},
        "devices": {"straggler": 0.9},
    }
    cfg = cfgmod.from_dict(doc)
    folder = root / f"{dataset}_{algorithm}_{seed}_{authors}_{source}"
    folder.mkdir()
    lines = ["iteration,kind,train_loss,train_acc,test_loss,test_acc", "0,init,1,0.1,1,0.1"]
    lines += [f"{i},train,0.5,{a},0.5,{a - 0.01}" for i, a in enumerate(curve, 1)]
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    final = {
        "iteration": len(curve),
        "train_loss": 0.5,
        "train_acc": curve[-1],
        "test_loss": 0.5,
        "test_acc": curve[-1] - 0.01,
    }
    (folder / "summary.json").write_text(
        json.dumps({"final": final, "best": final, "config": cfgmod.to_dict(cfg), "seed": seed})
    )
    return str(folder)


def make_gap_runs(tmp_path, source="paper"):
    """Synthetic(1,1): 3 seeds; Upcycled-FL ends 1 (faithful) or 2 (authors) points above FedProx; every
    FedProx curve peaks at 0.9 mid-run."""
    pairs = []
    for seed in range(3):
        for authors, lift in ((False, 0.01), (True, 0.02)):
            base = 0.70 + 0.01 * seed
            prox = [base] * 5 + [0.9] + [base] * 14
            up = [base + lift] * 20
            for algorithm, curve in (("fedprox", prox), ("upcycled", up)):
                pairs.append(
                    ("protocol_gap", fake_run(tmp_path, "synthetic_1_1", algorithm, seed, authors, curve, source))
                )
    return collect_runs(pairs)


@pytest.fixture
def gap_runs(tmp_path):
    return make_gap_runs(tmp_path)


def test_curve_columns_read_the_best_and_the_last_ten_after_the_initial_model(tmp_path):
    run = fake_run(tmp_path, "synthetic_1_1", "fedprox", 0, False, [0.5] * 5 + [0.9] + [0.6] * 4 + [0.7] * 10)
    cols = curve_columns(run)
    assert cols["max_train_acc"] == 0.9 and cols["last10_train_acc"] == pytest.approx(0.7)
    assert cols["max_test_acc"] == pytest.approx(0.89)
    assert all(math.isnan(v) for v in curve_columns(tmp_path / "no_such_run").values())


def test_curve_columns_equal_pandas_max_and_mean_to_the_bit(tmp_path):
    """An initial row, unevaluated iterations (empty cells), fewer than ten values of one metric and none of
    another: the columns are the floats pandas' own selection, max and mean give."""
    rng = np.random.default_rng(3)
    rows = ["iteration,kind,cum_wall_s,train_loss,train_acc,test_loss,test_acc", "0,init,0,1,0.31,1,0.3"]
    for i in range(1, 41):
        train = "" if i % 3 else repr(float(rng.random()))
        test = repr(float(rng.random())) if i > 33 else ""
        rows.append(f"{i},train,{i / 10},0.5,{train},0.5,{test}")
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    curve = metrics[metrics["kind"] != "init"]
    cols = curve_columns(tmp_path)
    for key in ("train_acc", "test_acc"):
        values = curve[key].dropna().astype(float)
        assert cols[f"max_{key}"] == float(values.max())
        assert cols[f"last10_{key}"] == float(values.iloc[-10:].mean())
    assert len(curve["test_acc"].dropna()) == 7
    (tmp_path / "metrics.csv").write_text("\n".join(rows[:1] + [r.rsplit(",", 1)[0] + "," for r in rows[1:]]) + "\n")
    assert math.isnan(curve_columns(tmp_path)["max_test_acc"]) and math.isnan(
        curve_columns(tmp_path)["last10_test_acc"]
    )


def test_gap_rows_pair_on_seed_under_each_reporting_choice_with_the_reference_beside(gap_runs):
    frame = protocol_gap_frame(gap_runs)
    ours = frame[frame["implementation"].str.startswith("upfl")].set_index(["implementation", "reporting", "split"])
    assert ours.loc[("upfl, the paper's model", "final", "train"), "gain"] == pytest.approx(1.0)
    assert ours.loc[("upfl, the authors' protocol", "final", "train"), "gain"] == pytest.approx(2.0)
    assert ours.loc[("upfl, the authors' protocol", "final", "train"), "seeds"] == 3
    assert ours.loc[("upfl, the paper's model", "max", "train"), "gain"] == pytest.approx(
        100 * (0.71 + 0.01 * 1) - 90.0
    )
    assert ours.loc[("upfl, the paper's model", "final", "train"), "paper_gain"] == pytest.approx(82.88 - 75.69)
    assert math.isnan(ours.loc[("upfl, the paper's model", "max", "train"), "paper_gain"])
    ref = frame[frame["implementation"].str.startswith("the authors' code")]
    measured = paper_values("authors_code")
    measured = measured[measured["dataset"] == "synthetic_1_1"]
    assert set(ref["dataset"]) == {"synthetic_1_1"} and len(ref) == len(measured) == 4 * 3 * 2
    for implementation in ref["implementation"].unique():
        rows = ref[ref["implementation"] == implementation]
        assert sorted(zip(rows["reporting"], rows["split"], strict=True)) == sorted(
            (c, s) for c in ("final", "max", "last10") for s in ("train", "test")
        )
    released = ref[
        (ref["implementation"] == "the authors' code (measured)")
        & (ref["reporting"] == "final")
        & (ref["split"] == "train")
    ].iloc[0]
    row = measured[
        (measured["variant"] == "as released") & (measured["reporting"] == "final") & (measured["split"] == "train")
    ].iloc[0]
    assert [released[k] for k in ("fedprox", "gain", "gain_ci_low", "gain_ci_high", "seeds")] == [
        row[k] for k in ("fedprox", "gain", "gain_ci_low", "gain_ci_high", "seeds")
    ]
    tuned = ref[ref["implementation"].str.contains("tuning comment, E 10")]
    assert tuned["implementation"].iloc[0].endswith("(lr 0.005, step 0.9, E 10)")
    # its final rows are the 6-seed measurement, which supersedes the 3-seed one; max and last10 keep 3 seeds
    assert tuned.groupby("reporting")["seeds"].max().to_dict() == {"final": 6, "last10": 3, "max": 3}


def test_a_generator_draw_gets_neither_the_papers_figure_nor_the_authors_code(tmp_path):
    frame = protocol_gap_frame(make_gap_runs(tmp_path, source="synthetic"))
    assert set(frame["implementation"]) == {"upfl, the paper's model", "upfl, the authors' protocol"}
    assert frame["paper_gain"].isna().all() and len(frame) == 2 * 3 * 2
    section = "\n".join(headline_section(make_gap_runs(tmp_path / "b", "synthetic")))
    assert "not on the paper's released data" in section and "of the authors' code measured" not in section
    write_protocol_gap(make_gap_runs(tmp_path / "c", source="synthetic"), str(tmp_path / "gap"), "test")
    md = (tmp_path / "gap.md").read_text()
    assert "on draws of upfl's synthetic generator (not the paper's data)" in md
    assert "the authors' code, measured on the same data" not in md and "paper_values/authors_code.md" not in md


def test_written_table_and_claims_section_state_the_measured_numbers(gap_runs, tmp_path):
    write_protocol_gap(gap_runs, str(tmp_path / "gap"), "test")
    md = (tmp_path / "gap.md").read_text()
    assert "| Synthetic(1,1) | upfl, the authors' protocol | final | train | 3 |" in md
    assert pd.read_csv(tmp_path / "gap.csv", comment="#")["implementation"].nunique() == 2 + 4
    # the target's own page carries the claims page's section, then the table; its caption names these runs' iterations
    assert md.index("## Why the headline differs") < md.index("## The table")
    assert "FedProx and Upcycled-FL (20/20 iterations) at μ = 1, 90% stragglers, on the paper's released" in md
    section = "\n".join(headline_section(gap_runs))
    assert section.startswith("## Why the headline differs")
    assert "upfl, the paper's model +1.00" in section and "the authors' code (measured) +1.61 [+0.91, +2.30]" in section
    assert headline_section(gap_runs[~gap_runs["softmax_before_loss"]]) == []
    write_claims(gap_runs, str(tmp_path / "claims"), "test")
    claims = (tmp_path / "claims.md").read_text()
    assert (
        "## Why the headline differs" in claims and "Every verdict uses the accuracy at the final iteration" in claims
    )


def test_table1_csv_carries_the_other_reporting_choices(gap_runs):
    faithful = gap_runs[~gap_runs["softmax_before_loss"]]
    frame = table1_frame(faithful).set_index("algorithm")
    assert frame.loc["fedprox", "max_train_acc_mean"] == pytest.approx(90.0)
    assert frame.loc["upcycled", "last10_train_acc_mean"] == pytest.approx(100 * (0.71 + 0.01))


@pytest.mark.parametrize("preset", ["full", "quick"])
def test_report_caption_fits_the_preset(preset):
    """The Snakemake report's caption of the protocol_gap table (rendered as Snakemake renders captions: Jinja with
    the workflow config as ``snakemake.config``) names the paper's data and the authors' code only on the full
    config."""
    import types
    from pathlib import Path

    import jinja2
    from docutils.core import publish_parts

    text = (Path(__file__).resolve().parents[2] / "workflow" / "report" / "protocol_gap.rst").read_text()
    caption = jinja2.Environment().from_string(text).render(snakemake=types.SimpleNamespace(config={"preset": preset}))
    html = publish_parts(caption, writer="html")["body"]
    if preset == "full":
        assert "80 iterations" in caption and "every measured row of the authors' code" in caption
    else:
        assert "previewed by preset <tt" in html or "previewed by preset <code" in html
        assert "not the paper's data" in caption and "80 iterations)" not in caption
        assert "Neither the paper's Table 1 figure nor the authors' code's results are shown" in caption


def test_welch_interval_matches_scipy_on_two_samples():
    from scipy import stats as sps

    from upfl.report.stats import mean_interval, std_from_interval, welch_interval

    a, b = [1.2, 0.4, 2.0, 0.9, 1.1, 0.3, 1.7], [0.7, 0.8, 0.6, 0.75, 0.71]
    diff, low, high = welch_interval(mean_interval(a), mean_interval(b))
    ci = sps.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (diff, low, high) == pytest.approx((sum(a) / 7 - sum(b) / 5, ci.low, ci.high))
    ib = mean_interval(b)
    assert std_from_interval(ib.low, ib.high, ib.n) == pytest.approx(ib.std)


def gap_pairs(tmp_path, seeds):
    """Synthetic(0.5,0.5), both implementations: Upcycled-FL ends 0.4, 0.6 or 0.8 points above FedProx by seed."""
    pairs = []
    for seed in seeds:
        for authors in (False, True):
            base = 0.80 + 0.002 * seed
            for algorithm, lift in (("fedprox", 0.0), ("upcycled", 0.004 + 0.002 * (seed % 3))):
                pairs.append(
                    (
                        "protocol_gap",
                        fake_run(tmp_path, "synthetic_0.5_0.5", algorithm, seed, authors, [base + lift] * 4),
                    )
                )
    return pairs


def spread_line(runs, split="train"):
    section = "\n".join(headline_section(runs))
    return next(
        ln
        for ln in section.splitlines()
        if ln.startswith(f"- Synthetic(0.5,0.5), final {split} accuracy, the authors' code against upfl")
    )


def test_fewer_seeds_in_the_authors_code_get_upfl_rows_on_those_seeds_and_a_spread_line(tmp_path):
    runs = collect_runs(gap_pairs(tmp_path, range(12)))
    frame = protocol_gap_frame(runs)
    same = frame[frame["implementation"] == "upfl, the authors' protocol, seeds 0-9"]
    assert len(same) == 3 * 2 and (same["seeds"] == 10).all()
    final = same[(same["reporting"] == "final") & (same["split"] == "train")].iloc[0]
    assert final["gain"] == pytest.approx(100 * (0.004 + 0.002 * (0 + 1 + 2) * 3 / 10))
    line = spread_line(runs)
    assert "; upfl on the same seeds 0-9 +0.58 [" in line and "; on all 12 seeds +" in line
    assert line.count("Welch 95% interval") == 2 and "seed spread" in line


def test_the_authors_codes_10_seed_rows_supersede_its_5_and_3_seed_rows_on_the_page(tmp_path):
    """The packaged table's (0.5,0.5) final rows are the 10-seed measurement and its E 10 tuning-comment rows the
    6-seed one: the table and the spread line print them; with as many seeds as upfl's the line compares all."""
    ref = paper_values("authors_code")
    final = ref[ref["reporting"] == "final"].set_index(["dataset", "variant", "split"])
    theirs = final.loc[("synthetic_0.5_0.5", "as released", "train")]
    assert theirs["seeds"] == 10 and theirs["gain"] == pytest.approx(0.5195)
    assert final.loc[("synthetic_1_1", "tuning comment, E 10", "train"), "seeds"] == 6
    runs = collect_runs(gap_pairs(tmp_path, range(10)))
    frame = protocol_gap_frame(runs)
    assert not frame["implementation"].str.contains(", seeds").any()
    row = frame[
        (frame["implementation"] == "the authors' code (measured)")
        & (frame["reporting"] == "final")
        & (frame["split"] == "train")
    ].iloc[0]
    assert row["seeds"] == 10 and row["gain"] == pytest.approx(0.5195)
    line = spread_line(runs)
    assert line.startswith(
        "- Synthetic(0.5,0.5), final train accuracy, the authors' code against upfl under the authors' protocol: "
        "the authors' code +0.52 [+0.31, +0.73] pp (10 seeds;"
    )
    assert "; upfl on all 10 seeds +0.58 [" in line and line.count("Welch 95% interval") == 1
    assert "the authors' code +0.78 [+0.37, +1.20] pp (10 seeds;" in spread_line(runs, "test")
