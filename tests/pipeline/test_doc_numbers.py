"""One source for every number the docs state: docs/numbers.md, docs/pipeline.md's setup and outputs, the README's time
table and docs/testing.md's duration are what `python tools/doc_numbers.py` makes from the plan and benchmarks/results/,
and no other page states the presets' run or job counts, or the solver's speed-up, differently."""

import json
import re
from pathlib import Path

import pytest
import yaml

from upfl.pipeline import doc_numbers
from upfl.pipeline.baselines import OUTPUTS_SECTION, SETUP_SECTION, outputs_section, setup_section
from upfl.pipeline.doc_numbers import (
    README_SECTION,
    TESTING_SECTION,
    numbers,
    numbers_page,
    quick_start_times,
    readme_section,
    replace_section,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "config" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def generated():
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return config, numbers(config, ROOT / "benchmarks" / "results")


def test_generated_pages_match_their_sources(generated):
    config, n = generated
    assert (ROOT / "docs" / "numbers.md").read_text(encoding="utf-8") == numbers_page(n), (
        "docs/numbers.md is stale: python tools/doc_numbers.py"
    )
    pipeline = (ROOT / "docs" / "pipeline.md").read_text(encoding="utf-8")
    assert (
        replace_section(
            replace_section(pipeline, SETUP_SECTION, setup_section(config)), OUTPUTS_SECTION, outputs_section(config)
        )
        == pipeline
    ), "docs/pipeline.md is stale: python tools/doc_numbers.py"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert replace_section(readme, README_SECTION, readme_section(n)) == readme, "README's time table is stale"
    testing = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    assert replace_section(testing, TESTING_SECTION, doc_numbers.testing_section(n)) == testing


def test_the_numbers_are_the_plans(generated):
    _, n = generated
    full, quick = n["plan"]["full"], n["plan"]["quick"]
    assert full["runs"] == full["synthetic_runs"] + full["real_runs"] and quick["real_runs"] == 0
    page = (ROOT / "docs" / "numbers.md").read_text(encoding="utf-8")
    assert f"| `quick` | {quick['runs']} |" in page and f"| `full` | {full['runs']} |" in page
    results_readme = (ROOT / "results" / "README.md").read_text(encoding="utf-8")
    assert f"{full['runs']} runs on" in results_readme and f"{quick['runs']} runs on" in results_readme


def stated_counts(text: str, subject: str) -> list[int]:
    """Numbers stated as the subject's runs or jobs: 'the quick preset has 350 runs', 'the full config's 2098
    runs', 'quick preset ... 11 training jobs' (within one sentence, at most 80 characters apart)."""
    pattern = rf"{subject}[^.|\n]{{0,80}}?\b(\d{{2,5}}) (?:distinct )?(?:training )?(?:runs|jobs)\b"
    return [int(m) for m in re.findall(pattern, text, re.I)]


def test_no_page_states_a_preset_count_differently(generated):
    _, n = generated
    allowed = {"quick (?:preset|run)": n["plan"]["quick"], "full config": n["plan"]["full"]}
    wrong = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for subject, counts in allowed.items():
            for value in stated_counts(text, subject):
                if value not in counts.values():
                    wrong.append(f"{path.relative_to(ROOT)}: {subject!r} stated with {value}")
    assert not wrong, wrong
    speedup = n["solver_speedup"]
    for path in DOCS:
        for stated in re.findall(r"\b(\d+)x speed-up", path.read_text(encoding="utf-8")):
            assert f"{stated}x" == speedup, f"{path.name}: {stated}x speed-up (benchmarks say {speedup})"


def test_the_count_check_finds_a_stale_number():
    assert stated_counts(
        "The quick preset has 350 (it leaves out x) runs; the quick preset has 350 runs.", "quick preset"
    ) == [350]
    assert stated_counts("the full config's 2098 runs 111 training jobs", "full config") == [2098]


def test_times_are_ranges_with_their_machine(tmp_path):
    record = {
        "machine": {"cpu": "Intel Xeon", "vector": "AVX2", "cores": 2},
        "numba_cache": "cold",
        "kernels_warm_up": {"seconds": 96.0},
        "load_average_before": [2.0],
        "load_average_after": [3.5],
    }
    runs = [{**record, "wall_s": 120.4, "cpu_s": 180.0}, {**record, "wall_s": 75.2, "cpu_s": 150.0}]
    (tmp_path / "quick_start.json").write_text(json.dumps({"measurements": runs}))
    [row] = quick_start_times(tmp_path)
    assert row == {
        "machine": "2 cores of an Intel Xeon (AVX2)",
        "cache": "cold",
        "n": 2,
        "wall": "75-120 s",
        "cpu": "150-180 s",
        "kernels": "96 s",
        "load": "2.0-3.5",
    }


def test_the_readme_times_come_from_quiet_machines_where_measured(tmp_path):
    """A run started under load (one-minute load average of half the cores or more) is left out of the README's
    range where the same machine and cache state has a quiet one, and so are runs of older commits; docs/numbers.md
    keeps every run."""
    machine = {"cpu": "Intel Xeon", "vector": "AVX-512", "cores": 2}
    runs = [
        {
            "machine": machine,
            "numba_cache": "cold",
            "kernels_warm_up": {},
            "wall_s": wall,
            "cpu_s": 190.0,
            "load_average_before": [before],
            "load_average_after": [2.0],
        }
        for wall, before in [(129.0, 0.1), (1306.0, 8.9)]
    ]
    (tmp_path / "quick_start.json").write_text(json.dumps({"measurements": runs}))
    assert [r["wall"] for r in quick_start_times(tmp_path)] == ["129-1306 s"]
    assert [r["wall"] for r in quick_start_times(tmp_path, quiet=True)] == ["129 s"]
    runs[0]["load_average_before"] = [1.2]
    (tmp_path / "quick_start.json").write_text(json.dumps({"measurements": runs}))
    assert [r["wall"] for r in quick_start_times(tmp_path, quiet=True)] == ["129-1306 s"]
    newer = {**runs[0], "wall_s": 72.0, "load_average_before": [0.6], "commit": "b", "measured_at": "2026-12-06T21:36Z"}
    older = [{**r, "commit": "a", "measured_at": "2026-12-06T07:26Z"} for r in runs]
    (tmp_path / "quick_start.json").write_text(json.dumps({"measurements": [*older, newer]}))
    assert [r["wall"] for r in quick_start_times(tmp_path, quiet=True)] == ["72 s"]  # the latest commit's
    assert [r["wall"] for r in quick_start_times(tmp_path)] == ["72-1306 s"]


def test_the_readme_time_table_gives_one_number_per_cell():
    """The README's time table: one time per row (the ranges, machines and busy runs are docs/numbers.md's)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index(README_SECTION) :].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Part")]
    assert len(rows) == 4
    for row in rows:
        time = row.strip("|").split("|")[-1].strip()
        cpu_estimate = r"(; about \d+ core-hours on the CPU²)?"
        assert re.fullmatch(rf"\d+ s¹?|not yet timed on a GPU{cpu_estimate}|not measured yet", time), row
