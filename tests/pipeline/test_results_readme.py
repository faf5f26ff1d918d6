"""results/README.md is generated from the plan of config/config.yaml, so it cannot go stale."""

from pathlib import Path

import yaml

from upfl.pipeline.outputs import output_files
from upfl.pipeline.plan import build_plan
from upfl.pipeline.results_readme import results_readme

ROOT = Path(__file__).resolve().parents[2]


def test_results_readme_matches_the_plan():
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    text = (ROOT / "results" / "README.md").read_text(encoding="utf-8")
    assert text == results_readme(config), "results/README.md is stale: run python tools/results_readme.py"
    for preset in ("full", "quick"):
        plan = build_plan({**config, "preset": preset})
        section = text.split(f"## Preset `{preset}`")[1].split("\n## ")[0]
        assert f"{len(plan.runs)} runs on {len(plan.datasets)} data sets" in section
        for name, out in plan.outputs.items():
            for f in output_files(out["kind"], name):
                assert f"`{f.removeprefix('results/')}`" in section, (preset, f)
