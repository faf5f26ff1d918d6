"""The report's front page and captions: the paper's headline numbers beside ours, figures in the paper's order,
and a caption per output naming what it shows, its data and its seeds."""

from pathlib import Path

import yaml

from upfl.paper_order import paper_order_label
from upfl.pipeline.captions import output_captions
from upfl.pipeline.plan import build_plan, resolve_preset
from upfl.report.front import headline_numbers, headline_table_rst

ROOT = Path(__file__).resolve().parents[2]


def test_headline_numbers_put_the_papers_beside_ours(tmp_path):
    rows = [
        "id,paper,ours,verdict",
        "table1/synthetic_iid/mu0.1/train_acc,1.02,1.18,holds",
        "table1/synthetic_1_1/mu1/train_acc,7.19,-0.06,does not hold",
        "table1/femnist/mu0.1/train_acc,25.99,,not measured here",
        "table1/synthetic_iid/mu0.1/test_acc,1.17,0.88,holds",
        "time/equal_iterations,48,44.75,holds",
        "# provenance: upfl 0.1.0",
    ]
    (tmp_path / "claims.csv").write_text("\n".join(rows) + "\n")
    table1, time = headline_numbers(tmp_path / "claims.csv")
    # the paper's range over the cells measured here (FEMNIST's 25.99 is not), ours over the same cells
    assert table1["paper"] == "+1.02 to +7.19" and table1["ours"] == "-0.06 to +1.18"
    assert table1["verdicts"] == "1 does not hold, 1 holds, 1 not measured here"
    assert time == {
        "what": "Training time saved at equal iterations (%)",
        "paper": "+48.00",
        "ours": "+44.75",
        "verdicts": "1 holds",
    }
    rst = headline_table_rst([table1, time])
    assert rst.startswith(".. list-table::") and "     - +48.00" in rst
    assert headline_numbers(tmp_path / "missing.csv") == []


def test_figures_sort_in_the_papers_order():
    names = ["fig11", "fig2_convergence", "fig3_output", "lambda_schedule", "fig12_output", "fig5"]
    ordered = sorted(names, key=paper_order_label)
    assert ordered == ["fig2_convergence", "fig3_output", "fig5", "fig11", "fig12_output", "lambda_schedule"]
    assert paper_order_label("fig3_output") == "Figure 03 (output)"


def test_every_output_has_a_caption_with_its_data_and_seeds():
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for preset, data, seeds in (
        ("quick", "our generator's draw", "2 seeds"),
        ("full", "the authors' released draw", "5 seeds"),
    ):
        selected = {**config, "preset": preset}
        plan = build_plan(selected)
        captions = output_captions(resolve_preset(selected), plan)
        assert set(captions) == set(plan.outputs)
        assert data in captions["table1"] and seeds in captions["table1"], captions["table1"]
        assert captions["fig5"].startswith("Figure 5:") and "band spans" in captions["fig5"]
