"""benchmarks/quick_start.py's check of the README's expected result: the summary line it reads from the README and
from a run's claims page. Timings are the benchmark's job, not these tests'."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import quick_start  # noqa: E402


def test_the_readmes_expected_summary_is_one_line_of_verdict_counts():
    line = quick_start.readme_summary()
    assert line.endswith("not the paper's data).") and "\n" not in line
    assert all(f" {word}" in line for word in ("holds,", "does not hold,", "inconclusive,", "too few seeds,"))


def test_a_runs_summary_is_read_from_its_claims_page(tmp_path):
    assert quick_start.claims_summary(tmp_path) is None
    page = tmp_path / "results" / "tables" / "claims.md"
    page.parent.mkdir(parents=True)
    page.write_text("# The paper's claims, judged\n\nSummary: 1 holds, 2 does not hold (of 3 claims).\n\n| x |\n")
    assert quick_start.claims_summary(tmp_path) == "1 holds, 2 does not hold (of 3 claims)."


def test_the_readmes_line_matches_a_page_that_says_it(tmp_path):
    page = tmp_path / "results" / "tables" / "claims.md"
    page.parent.mkdir(parents=True)
    page.write_text(f"Summary: {quick_start.readme_summary()}\n")
    assert quick_start.claims_summary(tmp_path) == quick_start.readme_summary()
