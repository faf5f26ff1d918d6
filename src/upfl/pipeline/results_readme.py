"""``results/README.md``: what the full config and each preset build, computed from the plan
(``python tools/results_readme.py`` writes it; a test checks that it matches)."""

from __future__ import annotations

from typing import Any

from .outputs import output_files
from .plan import build_plan, resolve_preset

RESULTS_LAYOUT = """\
- `runs/<data set>/<model>/<algorithm>/<mu..._lam...>/s<stragglers>_f<frac>/T<iterations>/seed<seed>/`:
  `metrics.csv` (one row per iteration), `summary.json` (final metrics, resolved config, provenance) and
  `checksums.json` (their SHA-256 as trained, checked before they are published); an unfinished run keeps its
  checkpoints in `.checkpoints/` inside its folder, a run whose files were found changed keeps them in
  `.damaged-<time>/`.
- `runs.csv`: one row per run with its config keys, final metrics and data source (load it with pandas).
- `experiments/<experiment>/runs.csv`: the runs of one experiment.
- `tables/`: each table as HTML (the formatted page), CSV, Markdown and for Table 1 and privacy LaTeX;
  `tables/claims.*`: the paper's claims, judged. `figures/`: PNG, PDF, the CSV behind each figure and its
  caption in the report (`.rst`: what it shows, its data, seeds and provenance).
- `bundles/`: the spec of each training job that trains many runs (`<bundle>-<digest>.json`, named by its
  content); `finished/`: the finished runs of a bundle, restored from there when a bundle job reruns.
- `logs/`, `benchmarks/`: per-job logs and timings.
- `report.html`: `snakemake --report results/report.html` (every table and figure that exists, in one page).
"""


def results_readme(config: dict[str, Any]) -> str:
    """``results/README.md``: what the full config and each preset build (runs, data sets and the files of every
    target), computed from the plan so that it cannot drift from the workflow."""
    lines = [
        "# results/",
        "",
        "Outputs of the workflow; nothing but this README is tracked by git. This file is generated from "
        "`config/config.yaml` by `python tools/results_readme.py` (a test checks that it matches the plan).",
        "",
    ]
    for preset in ["full", *config.get("presets", {})]:
        plan = build_plan({**config, "preset": preset})
        resolved = resolve_preset({**config, "preset": preset})
        selects = (
            "" if preset == "full" else f" --config preset={preset}"
        )  # after any target: --config takes every word
        command = f"snakemake --cores all{selects}"
        sources = sorted({resolved["datasets"][d]["source"] for d in plan.datasets})
        lines += [
            f"## Preset `{preset}`: `{command}`",
            "",
            f"{len(plan.runs)} runs on {len(plan.datasets)} data sets (sources: {', '.join(sources)}); "
            f"{len(plan.outputs)} report outputs. Targets (`snakemake --cores all TARGET{selects}`) and their "
            "files:",
            "",
        ]
        for target, names in sorted(plan.targets.items()):
            files = [f.removeprefix("results/") for n in names for f in output_files(plan.outputs[n]["kind"], n)]
            lines.append(f"- `{target}`: " + ", ".join(f"`{f}`" for f in files))
        lines += [
            "- every build: `runs.csv`, `tables/table2.csv`, `tables/table2.md`, `tables/table2.html`, "
            "`tables/claims.csv`, `tables/claims.md`, `tables/claims.html`",
            "",
        ]
    lines += ["## Layout", "", RESULTS_LAYOUT]
    return "\n".join(lines).rstrip("\n") + "\n"
