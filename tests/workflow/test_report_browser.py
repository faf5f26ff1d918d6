"""The report as its reader sees it: a small workflow built and reported by Snakemake (`snakemake --report`), opened
in a real browser (Debian's chromium, headless, through Playwright: tests/fixtures_browser.py) at a 1400 px window.
Each result's caption as the viewer shows it, the figures' provenance, the menus' order, the front page's counts and
the page's paths are checked there.

Needs chromium and Playwright (.ci/run installs chromium; Playwright is in the test extra). Without them the tests
are skipped with that reason, except under CI (`CI=true`), where a missing browser is a failure."""

import itertools
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from fixtures_browser import browser_page, colour_difference, figure_legibility, why_no_browser
from fixtures_workflow import snakemake, workflow_copy

pytestmark = pytest.mark.workflow

if why_no_browser() and os.environ.get("CI") != "true":
    pytest.skip(why_no_browser(), allow_module_level=True)

# Three algorithms, 2 seeds, 2 iterations: Table 1 on two data sets, the time table, two figures named as the paper's
# (drawn in the order the config lists them, shown in the paper's) and one that is not the paper's; Figure 5 with
# two Upcycled-FL variants on four data sets (as wide as the paper's Figure 5 once was: 4 facet columns).
CONFIG = """\
preset: full
seeds: [0, 1]
run_defaults:
  device: cpu
  solver: {epochs: 2, batch_size: 32, lr: 0.05, momentum: 0.5}
  devices: {frac: 0.3}
  evaluation: {every: 1}
  checkpoint: {every: 1}
datasets:
  synthetic_iid: {source: synthetic}
  synthetic_0_0: {source: synthetic}
  synthetic_0.5_0.5: {source: synthetic}
  synthetic_1_1: {source: synthetic}
experiments:
  table1:
    description: "Table 1 at fixture scale."
    set: {devices.straggler: 0.9}
    groups:
      - datasets: [synthetic_iid, synthetic_1_1]
        runs:
          - {algorithm: fedavg, rounds: 2}
          - {algorithm: fedprox, rounds: 2, mu: 1}
          - {algorithm: upcycled, rounds: 4, mu: 1, lam: 0.43}
    outputs:
      - {kind: table1, name: table1}
      - {kind: time, name: time}
      - {kind: convergence, name: fig2_left, metrics: [train_loss]}
      - {kind: convergence, name: test_accuracy, metrics: [test_acc]}
  lambdas:
    description: "Two lambdas of Upcycled-FL beside FedAvg and FedProx."
    set: {devices.straggler: 0.9}
    groups:
      - datasets: [synthetic_iid, synthetic_0_0, synthetic_0.5_0.5, synthetic_1_1]
        runs:
          - {algorithm: fedavg, rounds: 2}
          - {algorithm: fedprox, rounds: 2, mu: 1}
          - {algorithm: upcycled, rounds: 4, mu: 1, lam: 0.43}
          - {algorithm: upcycled, rounds: 4, mu: 1, lam: 0.2}
    outputs:
      - {kind: convergence, name: fig5}
"""
FIGURES = ("fig2_left", "fig5", "test_accuracy")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """The workflow's folder, built and reported (results/report.html)."""
    wd = workflow_copy(tmp_path_factory.mktemp("browser"))
    (wd / "config" / "config.yaml").write_text(CONFIG)
    snakemake(wd, "--cores", "2")
    snakemake(wd, "--report", "results/report.html")
    return wd


def reported_results(page) -> dict[str, dict]:
    """The report's results as its viewer holds them (file name -> entry: caption HTML, labels)."""
    entries = page.evaluate("JSON.stringify(Object.values(results))")
    return {e["filename"]: e for e in json.loads(entries)}


def menu(page, category: str) -> list[str]:
    """The entries the reader sees in a category of the Results menu, top to bottom."""
    page.evaluate(f"app.showCategory({category!r})")
    page.wait_for_timeout(300)
    lines = [t.strip() for t in page.locator("nav").first.inner_text().splitlines() if t.strip()]
    return lines[lines.index(category) + 1 :]


def caption_panel(page, filename: str) -> str:
    """The text of a result's caption panel, opened as the reader opens it (the result's info)."""
    path = next(p for p, e in page.evaluate("Object.entries(results)") if e["filename"] == filename)
    page.evaluate(f"app.showResultInfo({path!r})")
    page.wait_for_timeout(300)
    return page.locator("nav").first.inner_text()


def test_every_result_has_its_own_caption_and_each_figure_its_provenance(report):
    with browser_page(report / "results" / "report.html") as page:
        results = reported_results(page)
        panels = {name: caption_panel(page, f"{name}.png") for name in FIGURES}
    assert {f"{n}.png" for n in FIGURES} <= set(results)
    by_output: dict[str, set[str]] = {}
    for filename, entry in results.items():
        caption = entry["caption"]
        assert "system-message" not in caption and "System Message" not in caption, (filename, caption)
        assert "problematic" not in caption, (filename, caption)
        assert re.sub(r"<[^>]+>", "", caption).strip(), f"{filename}: empty caption"
        by_output.setdefault(filename.rsplit(".", 1)[0], set()).add(caption)
    # One caption per output (a table's HTML and CSV share theirs), none shared between outputs.
    captions = [c for texts in by_output.values() for c in texts]
    assert all(len(texts) == 1 for texts in by_output.values()), by_output
    assert len(set(captions)) == len(captions), "two outputs share a caption"
    for name in FIGURES:
        text = panels[name]
        assert "System Message" not in text and "drawn before its job wrote its caption" not in text, text
        assert f"{name}" in text and "Data: our generator's draw" in text, text
        assert "Each line is the mean over 2 seeds (0 1)" in text, text
        provenance = text[text.index("Provenance:") :]
        assert re.search(r"git \w+", provenance) and "config config/config.yaml (sha256 " in provenance, provenance
        assert "seeds 0 1" in provenance and re.search(r"\b(12|32) runs made at git", provenance), provenance
    assert "Figure 5" in panels["fig5"] and "Figure 2 (left)" in panels["fig2_left"]
    assert "Not in the paper: test accuracy" in panels["test_accuracy"]


def test_menus_follow_the_paper_and_the_front_page_counts_tables_and_figures(report):
    with browser_page(report / "results" / "report.html") as page:
        tables, figures = menu(page, "Tables"), menu(page, "Figures")
        page.evaluate("app.showReportInfo()")
        front = page.locator("#app").inner_text()
    assert tables == ["Table 1", "Table 2", "Tables, more: time"], tables
    assert [f for f in figures if f != "FIGURE"] == ["Figure 02 (left)", "Figure 05", "More: test accuracy"], figures
    assert "(tables: 3, figures: 3, claims: 1)" in front, front[:2000]


def test_the_report_names_no_path_of_the_working_folder(report):
    html = (report / "results" / "report.html").read_text(encoding="utf-8")
    for folder in {str(report), str(report.resolve())}:
        assert folder not in html, f"report.html holds {folder}: {html[max(0, html.find(folder) - 200) :][:400]}"


SMALLEST_SHOWN_PX = 9
"""The least size of a figure's text as the viewer shows it (at a 1400 px window)."""


def test_every_figures_text_is_legible_where_the_viewer_shows_it(report):
    """Each figure opened in the viewer: its displayed width over its natural width times its smallest text's size
    (the PNG's text chunk, written by upfl.report.figures.save_figure) is at least 9 px, and none of it lies above
    the viewer's reach (the viewer centres a figure vertically and cuts the top off one taller than the window)."""
    with browser_page(report / "results" / "report.html") as page:
        sizes = figure_legibility(page)
    assert set(sizes) == {f"{n}.png" for n in FIGURES}
    for name, s in sizes.items():
        assert s["smallest_text_px"] > 0 and s["shown_px"] > 0, (name, s)
        assert s["shown_text_px"] >= SMALLEST_SHOWN_PX, (name, s)
        assert s["cut_off_px"] <= 0, (name, s)


def test_no_two_series_of_a_panel_share_a_near_equal_colour(report):
    """Per panel of each figure (its CSV's data set, mu and metric), the lines' colours differ by ΔE >= 12 (shades
    of one algorithm's colour included)."""
    compared = 0
    for name in FIGURES:
        data = pd.read_csv(report / "results" / "figures" / f"{name}.csv", comment="#")
        for _, panel in data.groupby(["dataset", "mu", "metric"], dropna=False):
            colours = panel.drop_duplicates("line").set_index("line")["colour"]
            for a, b in itertools.combinations(colours.index, 2):
                assert colour_difference(colours[a], colours[b]) >= 12, (name, a, colours[a], b, colours[b])
                compared += 1
    assert compared >= 8 * 6  # 4 lines (6 pairs) in each of fig5's 8 panels, and more
