"""The sensitivity experiment's report (upfl.report.gain_grid): cells paired across the grid, the base and the knobs
each setting varies, the largest gain stated on the claims page, and the written table and figure."""

import json

import pandas as pd
import pytest

from upfl import config as cfgmod
from upfl.report.claims import write_claims
from upfl.report.collect import ReportError, collect_runs
from upfl.report.gain_grid import (
    base_setting,
    bracket,
    bracket_text,
    gain_grid_frame,
    grid_edges,
    largest_gains,
    write_gain_grid,
)


def grid_run(
    root, algorithm, seed, final, authors=False, lr=0.05, epochs=20, step=None, rounds=None, mu=1.0, experiment=None
):
    """A finished run folder of the sensitivity experiment on the paper's Synthetic(1,1) with final train accuracy
    ``final`` (test 1 point lower)."""
    data = root / "data" / "synthetic_1_1"
    data.mkdir(parents=True, exist_ok=True)
    (data / "meta.json").write_text(json.dumps({"name": "synthetic_1_1", "source": "paper"}))
    alg = {"name": algorithm, "mu": mu}
    if algorithm == "upcycled":
        alg.update({"step": step} if step is not None else {"step": 0.7} if authors else {"lam": 0.43})
    rounds = rounds or (160 if algorithm == "upcycled" else 80)
    doc = {
        "data": {"path": str(data)},
        "seed": seed,
        "rounds": rounds,
        "algorithm": alg,
        "model": {"name": "logreg", "softmax_before_loss": authors},
        "devices": {"straggler": 0.9},
        "solver": {"lr": lr, "epochs": epochs},
    }
    folder = root / f"{algorithm}_{seed}_{authors}_{lr}_{epochs}_{step}_{rounds}_{mu}"
    folder.mkdir()
    final_metrics = {
        "iteration": rounds,
        "train_loss": 0.5,
        "train_acc": final,
        "test_loss": 0.5,
        "test_acc": final - 0.01,
    }
    (folder / "metrics.csv").write_text(
        f"iteration,kind,train_loss,train_acc,test_loss,test_acc\n{rounds},train,0.5,{final},0.5,{final - 0.01}\n"
    )
    (folder / "summary.json").write_text(
        json.dumps(
            {
                "final": final_metrics,
                "best": final_metrics,
                "seed": seed,
                "config": cfgmod.to_dict(cfgmod.from_dict(doc)),
            }
        )
    )
    return (experiment or "sensitivity", str(folder))


def make_grid_runs(root):
    """Synthetic(1,1), 3 seeds, both protocols: base, lr 0.005 (FedProx 0.70, Upcycled-FL +5 points), step 0.9 (on the
    base FedProx, +3), E 10 crossed with lr 0.005 (+1), T 40 / 80 (+2); the base gains +1 (paper) / +2 (authors)."""
    runs = []
    for seed in range(3):
        noise = 0.001 * seed
        for authors, lift in ((False, 0.01), (True, 0.02)):
            base = 0.75 + noise
            runs += [
                grid_run(root, "fedprox", seed, base, authors),
                grid_run(root, "upcycled", seed, base + lift, authors),
            ]
            runs += [
                grid_run(root, "fedprox", seed, 0.70 + noise, authors, lr=0.005),
                grid_run(root, "upcycled", seed, 0.75 + noise + 0.005 * seed, authors, lr=0.005),
            ]
            runs += [grid_run(root, "upcycled", seed, base + 0.03, authors, step=0.9)]
            runs += [
                grid_run(root, "fedprox", seed, 0.70, authors, lr=0.005, epochs=10),
                grid_run(root, "upcycled", seed, 0.71, authors, lr=0.005, epochs=10),
            ]
            runs += [
                grid_run(root, "fedprox", seed, 0.60, authors, rounds=40),
                grid_run(root, "upcycled", seed, 0.62, authors, rounds=80),
            ]
    return collect_runs(runs)


@pytest.fixture
def grid_runs(tmp_path):
    return make_grid_runs(tmp_path)


def test_settings_pair_fedprox_at_half_the_iterations_and_name_the_knobs_they_vary(grid_runs):
    frame = gain_grid_frame(grid_runs)
    assert len(frame) == 2 * 5 and (frame["pairs"] == 3).all()
    paper = frame[frame["protocol"] == "paper's model"].set_index("varied")
    assert sorted(paper.index) == ["", "coef", "fedprox_rounds", "lr", "lr,epochs"]
    assert bool(paper.loc["", "base"]) and paper.loc["", "gain_train"] == pytest.approx(1.0)
    assert paper.loc["lr", "gain_train"] == pytest.approx(5.5)  # +5 and 0.5 point per seed: +5, +5.5, +6
    assert paper.loc["coef", "fedprox_train"] == pytest.approx(paper.loc["", "fedprox_train"])  # one FedProx cell
    assert paper.loc["coef", "gain_train"] == pytest.approx(3.0) and paper.loc["coef", "coef"] == 0.9
    assert (paper.loc["fedprox_rounds", "fedprox_rounds"], paper.loc["fedprox_rounds", "upcycled_rounds"]) == (40, 80)
    assert paper.loc["", "coef"] == pytest.approx(1 / 1.43)
    assert paper.loc["lr", "gain_test"] == pytest.approx(paper.loc["lr", "gain_train"])
    authors = frame[frame["protocol"] == "authors' protocol"].set_index("varied")
    assert authors.loc["", "coef"] == pytest.approx(0.7) and authors.loc["", "gain_train"] == pytest.approx(2.0)


def test_largest_gain_is_stated_with_where_and_how_many_settings(grid_runs):
    lines = largest_gains(gain_grid_frame(grid_runs))
    assert lines[0].startswith(
        "- In 10 settings (1 data sets x 2 protocols x the grid; 3 seed pairs each, seeds 0-2) no mean "
        "gain in final training accuracy exceeds +5.50 pp: +5.50 ["
    )
    assert "That is the largest of this grid, whose edges are lr 0.005-0.05, c 0.699-0.9, E 10-20, T 40-80." in lines[0]
    assert "Around it: at the grid's edge in lr 0.005 (the lowest value tried there)" in lines[0]
    assert (
        "on Synthetic(1,1), authors' protocol, lr 0.005" in lines[0]
        or "on Synthetic(1,1), paper's model, lr 0.005" in lines[0]
    )
    assert (
        lines[1].startswith("- Synthetic(1,1): largest gain +5.50")
        and "the paper's Table 1 gain at μ = 1: +7.19 pp" in lines[1]
    )
    assert "not measured on held-out seeds (no held-out runs)" in lines[1] and len(lines) == 2


def test_written_table_figure_and_claims_section(grid_runs, tmp_path):
    frame = write_gain_grid(grid_runs, None, str(tmp_path / "t" / "grid"), str(tmp_path / "f" / "grid"), "test")
    md = (tmp_path / "t" / "grid.md").read_text()
    assert "## How large can the gain get" in md and "| Synthetic(1,1) | paper's model | lr 0.005, E 10 |" in md
    assert (tmp_path / "f" / "grid.png").stat().st_size > 0 and (tmp_path / "f" / "grid.pdf").exists()
    points = pd.read_csv(tmp_path / "f" / "grid.csv", comment="#")
    # one line per data set x protocol and knob varied alone: the base and that knob's settings
    assert sorted(points["knob"].unique()) == ["coef", "fedprox_rounds", "lr"]
    assert len(points[(points["knob"] == "lr") & (points["protocol"] == "paper's model")]) == 2
    assert len(pd.read_csv(tmp_path / "t" / "grid.csv", comment="#")) == len(frame)
    write_claims(grid_runs, str(tmp_path / "claims"), "test")
    assert "## How large can the gain get" in (tmp_path / "claims.md").read_text()


def held_out_runs(root):
    """The fixture's lr 0.005 setting again on seeds 10-12 (experiment sensitivity_held_out), where its gain is +2
    (paper) / +1 (authors) instead of +5.5, and the base, +1."""
    runs = []
    for seed in range(10, 13):
        for authors, lift in ((False, 0.02), (True, 0.01)):
            runs += [
                grid_run(root, "fedprox", seed, 0.70, authors, lr=0.005, experiment="sensitivity_held_out"),
                grid_run(root, "upcycled", seed, 0.70 + lift, authors, lr=0.005, experiment="sensitivity_held_out"),
                grid_run(root, "fedprox", seed, 0.75, authors, experiment="sensitivity_held_out"),
                grid_run(root, "upcycled", seed, 0.76, authors, experiment="sensitivity_held_out"),
            ]
    return collect_runs(runs)


def test_each_data_sets_best_setting_is_measured_again_on_the_held_out_seeds(grid_runs, tmp_path):
    """The best setting is chosen on seeds 0-2 (lr 0.005, +5.5 under either protocol; the first of the tie, the
    authors' protocol, in frame order) and read on seeds 10-12, where that same setting gains +1: the page says
    both and why they differ; the table's held-out column is filled on that row alone."""
    held = held_out_runs(tmp_path / "held")
    frame = gain_grid_frame(grid_runs)
    best = frame.loc[frame["gain_train"].idxmax()]
    assert (best["protocol"], best["lr"]) == ("authors' protocol", 0.005)
    lines = largest_gains(frame, gain_grid_frame(held))
    line = next(ln for ln in lines if ln.startswith("- Synthetic(1,1): largest gain +5.50"))
    assert (
        "(authors' protocol, lr 0.005; FedProx 70.10%) in 10 settings (around it: at the grid's edge in lr 0.005 (the "
        "lowest value tried there), E 20 (the highest value tried there); not varied around it: μ, c, B, T); on the "
        "held-out seeds 10-12 +1.00" in line
    )
    assert "(3 pairs; FedProx 70.00%)" in line
    assert lines[-1].startswith("- Why the two differ: each in-sample figure is the largest of many noisy means")
    assert "biased upward" in lines[-1]
    table = tmp_path / "t" / "grid"
    written = write_gain_grid(grid_runs, held, str(table), str(tmp_path / "f" / "grid"), "test")
    filled = written[written["held_out_gain_train"].notna()]
    assert len(filled) == 1 and filled.iloc[0]["held_out_gain_train"] == pytest.approx(1.0)
    assert filled.iloc[0]["held_out_seeds"] == "seeds 10-12" and filled.iloc[0]["held_out_pairs"] == 3
    md = table.with_suffix(".md").read_text()
    assert "| Held-out gain train pp [95% CI] |" in md and "| +1.00 [+1.00, +1.00] (seeds 10-12) |" in md
    assert "on the held-out seeds 10-12 +1.00" in md
    # the claims page reads the held-out runs by their role
    write_claims(pd.concat([grid_runs, held], ignore_index=True), str(tmp_path / "claims"), "test")
    assert "on the held-out seeds 10-12 +1.00" in (tmp_path / "claims.md").read_text()


def test_held_out_runs_without_the_best_setting_say_so(grid_runs, tmp_path):
    runs = collect_runs(
        [
            grid_run(tmp_path, alg, seed, 0.75, authors, experiment="sensitivity_held_out")
            for seed in (10, 11)
            for authors in (False, True)
            for alg in ("fedprox", "upcycled")
        ]
    )
    lines = largest_gains(gain_grid_frame(grid_runs), gain_grid_frame(runs))
    assert "; not run on the held-out seeds;" in lines[1]


def knob_frame(points):
    """A gain-grid frame of one data set and protocol from (lr, c, E, gain) points; μ 1, batch 32, T 80."""
    return pd.DataFrame(
        [
            {
                "dataset": "synthetic_1_1",
                "protocol": "authors' protocol",
                "mu": 1.0,
                "lr": lr,
                "coef": c,
                "epochs": e,
                "batch_size": 32.0,
                "fedprox_rounds": 80.0,
                "gain_train": g,
            }
            for lr, c, e, g in points
        ]
    )


def test_bracket_finds_the_nearest_values_tried_on_each_side_with_the_other_knobs_held():
    frame = knob_frame(
        [
            (0.05, 0.7, 20, 1.0),
            (0.005, 0.9, 10, 3.0),  # the best
            (0.0025, 0.9, 10, 2.9),
            (0.00125, 0.9, 10, 2.5),
            (0.0125, 0.9, 10, 2.0),
            (0.005, 0.8, 10, 2.8),
            (0.005, 1.0, 10, 2.7),
            (0.005, 0.9, 20, 2.2),
            (0.0025, 0.9, 20, 9.0),  # another E: not a neighbour in lr of the best
        ]
    )
    best = frame.iloc[1].to_dict()
    found = bracket(frame, best)
    assert found["lr"] == (0.0025, 0.0125) and found["coef"] == (0.8, 1.0) and found["epochs"] == (None, 20.0)
    assert found["batch_size"] == (None, None) and found["mu"] == (None, None)
    text = bracket_text(frame, best)
    assert text == (
        "bracketed in lr 0.005 between 0.0025 and 0.0125, c 0.9 between 0.8 and 1; at the grid's edge in E 10 "
        "(the lowest value tried there); not varied around it: μ, B, T"
    )
    assert grid_edges(frame) == "lr 0.00125-0.05, c 0.7-1, E 10-20"


def test_a_best_coefficient_of_1_is_bracketed_by_its_range():
    frame = knob_frame([(0.005, 1.0, 10, 3.0), (0.005, 0.9, 10, 2.0)])
    assert bracket_text(frame, frame.iloc[0].to_dict()) == (
        "bracketed in c 1 (the end of its range) above 0.9; not varied around it: μ, lr, E, B, T"
    )


def test_an_upcycled_cell_without_its_fedprox_is_an_error_naming_what_is_missing(tmp_path):
    runs = collect_runs([grid_run(tmp_path, "upcycled", 0, 0.8), grid_run(tmp_path, "fedprox", 0, 0.8, lr=0.01)])
    with pytest.raises(ReportError, match="no Upcycled-FL cell has a FedProx cell at half its iterations"):
        gain_grid_frame(runs)


def test_the_authors_gradient_factor_equals_autograd():
    import math

    import torch

    from upfl.report.protocol_gap import authors_gradient_factor

    for wrong in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99):
        z = torch.tensor([[math.log((1 - wrong) / wrong), 0.0]], requires_grad=True)
        y = torch.tensor([0])
        (paper,) = torch.autograd.grad(torch.nn.functional.cross_entropy(z, y), z)
        (authors,) = torch.autograd.grad(torch.nn.functional.cross_entropy(torch.softmax(z, 1), y), z)
        assert authors_gradient_factor(wrong) == pytest.approx((authors[0, 0] / paper[0, 0]).item(), rel=1e-5)


def test_the_smaller_step_lines_set_the_grids_learning_rates_beside_the_authors_protocol(grid_runs):
    from upfl.report.protocol_gap import headline_section

    base = grid_runs[
        (grid_runs["lr"].astype(float) == 0.05)
        & (grid_runs["epochs"].astype(int) == 20)
        & (grid_runs["rounds"].astype(int) == grid_runs["algorithm"].map({"fedprox": 80, "upcycled": 160}))
        & ~(grid_runs["coef"].astype(float) >= 0.8)
    ]
    lines = "\n".join(headline_section(base.assign(experiments="protocol_gap"), grid_runs)).splitlines()
    step = next(ln for ln in lines if ln.startswith("- Is the authors' loss a smaller step? Synthetic(1,1)"))
    # the paper's model at lr 0.005: FedProx 70.1% (70 + 0.1 on average over seeds), gain +5.50; the authors'
    # protocol at lr 0.05: FedProx 75.10%, gain +2.00, outside the interval of +5.50
    assert "the paper's model at lr 0.005 gives FedProx 70.10-70.10% and gains +5.50 to +5.50 pp" in step
    assert "the authors' protocol at lr 0.05 gives FedProx 75.10% and +2.00 pp (this table); 1 of the 1 smaller" in step
    assert any(
        ln.startswith("- Per sample, the authors' loss scales the paper's gradient") and "0.14 at 0.9" in ln
        for ln in lines
    )
    assert not any("smaller step" in ln for ln in headline_section(base.assign(experiments="protocol_gap")))


def test_the_base_is_the_centre_of_the_one_knob_lines_not_the_most_common_values():
    """A grid gone on past its edges around (lr 0.005, c 1, E 10) has c 1 in most settings, yet the base
    stays the point the one-knob lines start from (lr 0.05, c 0.7, E 20): it has the most settings one knob away."""
    star = [(0.05, 0.7, 20, 1.0)] + [(lr, 0.7, 20, 1.0) for lr in (0.0025, 0.005, 0.025, 0.1)]
    star += [(0.05, c, 20, 1.0) for c in (0.3, 0.5, 0.9)] + [(0.05, 0.7, e, 1.0) for e in (5, 10)]
    cluster = [(lr, 1.0, 10, 2.0) for lr in (0.0003125, 0.000625, 0.00125, 0.0025, 0.005, 0.0125)]
    cluster += [(lr, 1.0, e, 2.0) for lr in (0.0025, 0.005) for e in (5, 20)] + [(0.005, 0.9, 10, 2.0)]
    frame = knob_frame(star + cluster)
    assert frame["coef"].value_counts().idxmax() == 1.0
    base = base_setting(frame)
    assert (base["lr"], base["coef"], base["epochs"]) == (0.05, 0.7, 20)


def test_upfl_report_gain_grid_reads_the_held_out_runs_as_its_reference(grid_runs, tmp_path):
    """The command the workflow runs: the grid's runs table, and the held-out experiment's as --reference-runs."""
    import subprocess
    import sys

    held = held_out_runs(tmp_path / "held")
    pd.concat([grid_runs, held], ignore_index=True).to_csv(tmp_path / "runs.csv", index=False)
    table, figure = tmp_path / "t" / "grid", tmp_path / "f" / "grid"
    runs = str(tmp_path / "runs.csv")
    proc = subprocess.run(
        [sys.executable, "-m", "upfl.cli", "report", "gain-grid", "--runs", runs, "--experiment", "sensitivity"]
        + ["--reference-runs", runs, "--reference-experiment", "sensitivity_held_out"]
        + ["--out-prefix", str(table), "--figure-prefix", str(figure)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    md = table.with_suffix(".md").read_text()
    assert "on the held-out seeds 10-12 +1.00" in md and "reference runs (experiment sensitivity_held_out)" in md
