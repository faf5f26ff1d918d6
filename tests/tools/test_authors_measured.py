"""tools/import_authors_measured.py: the authors' code's measured table to the packaged paper_values/authors_code.csv
(every row, each metric to a reporting choice and split, a row that cannot convert named by its line)."""

import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "import_authors_measured.py"
HEADER = (
    "impl,variant,c,dataset,mu,metric,n,fedprox_mean,fedprox_std,upcycled_mean,upcycled_std,gain_mean,gain_lo,"
    "gain_hi,seeds"
)


def measured(tmp_path, rows, name="measured.csv"):
    path = tmp_path / name
    path.write_text("# what was measured\n" + HEADER + "\n" + "\n".join(rows) + "\n")
    return path


def run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)


def test_every_row_becomes_a_reporting_choice_and_split(tmp_path):
    rows = [
        f"authors,{variant},{c},synthetic_1_1,1.0,{metric},{n},79.123456,2.5,81.0,1.5,1.87654321,0.9,2.8,0 1 2"
        for variant, c, n in (("paper", 0.7, 10), ("lr5e-3", 0.9, 10), ("lr5e-3_E10", 0.9, 3))
        for metric in ("final_train", "best_test", "last10_train")
    ]
    out = tmp_path / "authors_code.csv"
    proc = run_tool(measured(tmp_path, rows), "--out", out)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(out)
    assert len(table) == len(rows)
    assert set(zip(table["reporting"], table["split"], strict=True)) == {
        ("final", "train"),
        ("max", "test"),
        ("last10", "train"),
    }
    variants = table.drop_duplicates("variant").set_index("variant")
    assert variants.loc["as released", ["lr", "step", "epochs"]].tolist() == [0.05, 0.7, 20]
    assert variants.loc["tuning comment", ["lr", "step", "epochs"]].tolist() == [0.005, 0.9, 20]
    assert variants.loc["tuning comment, E 10", ["lr", "step", "epochs", "seeds"]].tolist() == [0.005, 0.9, 10, 3]
    assert table["gain"].iloc[0] == 1.8765 and table["fedprox"].iloc[0] == 79.1235
    assert table["seed_list"].iloc[0] == "0 1 2"


def test_a_row_that_cannot_convert_is_named_and_nothing_is_written(tmp_path):
    good = "authors,paper,0.7,synthetic_0_0,1.0,final_train,5,81.6,0.6,82.4,0.8,0.77,0.30,1.25,0 1 2 3 4"
    bad = "authors,paper,0.7,synthetic_0_0,1.0,final_train,5,81.6,0.6,82.4,0.8,0.77,0.30,oops,0 1 2 3 4"
    out = tmp_path / "authors_code.csv"
    proc = run_tool(measured(tmp_path, [good, bad]), "--out", out)
    assert proc.returncode == 1 and "measured.csv, line 3: cannot convert" in proc.stderr
    assert not out.exists()


def row(variant, c, metric, n, gain, seeds, dataset="synthetic_0.5_0.5"):
    return (
        f"authors,{variant},{c},{dataset},1.0,{metric},{n},80.0,0.8,81.0,0.8,{gain},{gain - 0.2},{gain + 0.2},{seeds}"
    )


def test_a_row_with_more_seeds_supersedes_the_rows_of_its_setting_with_fewer(tmp_path):
    first = measured(
        tmp_path,
        [
            row("paper", 0.7, "final_train", 5, 0.71, "0 1 2 3 4"),
            row("paper", 0.7, "best_train", 5, 0.92, "0 1 2 3 4"),
            row("lr5e-3", 0.7, "final_train", 5, 1.38, "0 1 2 3 4", "synthetic_1_1"),
            row("lr5e-3", 0.9, "final_train", 3, 2.0, "0 1 2", "synthetic_1_1"),
        ],
    )
    later = measured(
        tmp_path,
        [
            row("paper", 0.7, "final_train", 10, 0.52, " ".join(map(str, range(10)))),
            # supersedes the c 0.9 row of 3 seeds, not the c 0.7 row of the same variant name
            row("lr5e-3", 0.9, "final_train", 10, 2.3, " ".join(map(str, range(10))), "synthetic_1_1"),
            # fewer seeds than the row it meets: the row already there stays
            row("lr5e-3", 0.7, "final_train", 2, 9.9, "0 1", "synthetic_1_1"),
        ],
        "later.csv",
    )
    out = tmp_path / "authors_code.csv"
    proc = run_tool(first, later, "--out", out)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(out)
    got = {(r.dataset, r.variant, r.step, r.reporting, r.split): (r.seeds, r.gain) for r in table.itertuples()}
    assert got == {
        ("synthetic_0.5_0.5", "as released", 0.7, "final", "train"): (10, 0.52),
        ("synthetic_0.5_0.5", "as released", 0.7, "max", "train"): (5, 0.92),
        ("synthetic_1_1", "lr 5e-3", 0.7, "final", "train"): (5, 1.38),
        ("synthetic_1_1", "tuning comment", 0.9, "final", "train"): (10, 2.3),
    }
    # in the place of the row it supersedes
    assert table["seeds"].tolist() == [10, 5, 5, 10]


def test_two_different_measurements_on_as_many_seeds_are_an_error_naming_both(tmp_path):
    first = measured(tmp_path, [row("paper", 0.7, "final_train", 5, 0.71, "0 1 2 3 4")])
    later = measured(tmp_path, [row("paper", 0.7, "final_train", 5, 0.60, "5 6 7 8 9")], "later.csv")
    out = tmp_path / "authors_code.csv"
    proc = run_tool(first, later, "--out", out)
    assert proc.returncode == 1
    assert "later.csv, line 2 and " in proc.stderr and "measured.csv, line 2" in proc.stderr
    assert "on 5 seeds each" in proc.stderr and not out.exists()
    same = run_tool(first, first, "--out", out)
    assert same.returncode == 0 and len(pd.read_csv(out)) == 1


def test_the_packaged_table_is_the_tools_output_where_the_measurement_is_beside_the_clone(tmp_path):
    notes = ROOT.parent / "shared" / "notes"
    sources = [notes / "authors-code-measured.csv", notes / "authors-code-measured-more-seeds.csv"]
    packaged = pd.read_csv(ROOT / "src" / "upfl" / "report" / "paper_values" / "authors_code.csv")
    assert len(packaged) == 36 and packaged.groupby(["dataset", "variant"]).size().eq(6).all()
    final = packaged[packaged["reporting"] == "final"].set_index(["dataset", "variant", "split"])["seeds"]
    assert final[("synthetic_0.5_0.5", "as released", "train")] == 10
    assert final[("synthetic_1_1", "tuning comment, E 10", "test")] == 6
    if all(s.is_file() for s in sources):
        proc = run_tool(*sources, "--out", tmp_path / "again.csv")
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "again.csv").read_text() == (
            ROOT / "src" / "upfl" / "report" / "paper_values" / "authors_code.csv"
        ).read_text()
