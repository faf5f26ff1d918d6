"""The report's per-output captions and their place in the paper's order: what each table or figure shows (its
experiment's description), which data (the authors' released draw or our generator's, per data set) and how many
seeds stand behind each value or band. ``workflow/rules/common.smk`` puts the tables' in the config for the caption
templates of ``workflow/report/`` when a report is made; each figure's caption is written beside it by the job that
draws it (:func:`figure_caption`), as a caption template cannot tell which of its job's figures it describes."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .plan import Plan

FIGURE_KINDS = ("convergence", "lambda_sweep", "privacy_tradeoff", "momentum_curves", "schedule_figure", "draws")


def seed_phrase(seeds: list[int]) -> str:
    listed = " ".join(map(str, seeds[:6])) + (" ..." if len(seeds) > 6 else "")
    return f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} ({listed})"


def output_captions(config: dict[str, Any], plan: Plan) -> dict[str, str]:
    """Per output of the plan: '<what it shows> Data: <per data set, its origin>. <how many seeds per value or
    band>.' ``config`` is the preset-resolved workflow config (its ``datasets`` and ``experiments``)."""
    from ..report.collect import origin_text
    from ..report.paper_numbers import dataset_label

    captions = {}
    for name, out in plan.outputs.items():
        experiment = out["experiment"]
        runs = [plan.runs[r] for r in plan.experiments.get(experiment, [])]
        what = str(config.get("experiments", {}).get(experiment, {}).get("description", "")).strip()
        datasets = list(dict.fromkeys(r.dataset for r in runs))
        specs = config.get("datasets", {})
        data = "; ".join(
            f"{dataset_label(d)}: "
            f"{origin_text(specs[d].get('source'), specs[d].get('setting', d), specs[d].get('data_seed'))}"
            for d in datasets
            if d in specs
        )
        seeds = sorted({r.seed for r in runs})
        if out["kind"] in FIGURE_KINDS:
            per = f"Each line is the mean over {seed_phrase(seeds)}; its band spans their minimum to maximum."
        else:
            per = f"Each value is over {seed_phrase(seeds)} (mean ± sample std; paired intervals pair on seed)."
        where = f" Runs of the experiment selected: {'; '.join(out['where'])}." if out.get("where") else ""
        captions[name] = f"{what} Data: {data or 'none planned'}.{where} {per}".strip()
    return captions


RST_SPECIAL = re.compile(r"([\\*`|_\[\]<>])")


def rst_text(text: str) -> str:
    """``text`` as reStructuredText shows it verbatim: its markup characters backslash-escaped."""
    return RST_SPECIAL.sub(r"\\\1", text)


def experiment_description(config_files: Sequence[str], experiment: str) -> str:
    """``experiments.<experiment>.description`` of the workflow config files (the last file that gives one wins;
    '' when none does or a file cannot be read)."""
    import yaml

    description = ""
    for config_file in config_files:
        try:
            doc = yaml.safe_load(Path(config_file).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        exp = (doc.get("experiments") or {}).get(experiment) if isinstance(doc, dict) else None
        if isinstance(exp, dict) and exp.get("description"):
            description = str(exp["description"]).strip()
    return description


def figure_caption(
    name: str, kind: str, description: str, origins: list[str], seeds: list[int], where: Sequence[str], provenance: str
) -> str:
    """A figure's caption in the report (reStructuredText, written beside the figure as ``NAME.rst`` by the job
    that draws it): its number in the paper, what it shows, the data, what a line or band is over, the runs
    selected, the CSV behind it and the provenance line (the code, config, data, seeds and runs)."""
    from ..report.figures import figure_title

    parts = [f"**{rst_text(figure_title(name))}** (``{name}``)."]
    if description:
        parts.append(rst_text(description))
    parts.append(f"Data: {rst_text('; '.join(origins) or 'none')}.")
    if kind in FIGURE_KINDS:
        parts.append(f"Each line is the mean over {seed_phrase(seeds)}; its band spans their minimum to maximum.")
    else:
        parts.append(f"Each value is over {seed_phrase(seeds)}.")
    if where:
        parts.append(f"Runs of the experiment selected: {rst_text('; '.join(where))}.")
    parts.append(f"The numbers plotted are in ``results/figures/{name}.csv``.")
    return " ".join(parts) + f"\n\n*Provenance:* {rst_text(provenance)}\n"


def table_captions(config: dict[str, Any], plan: Plan, rule_of: Callable[[str], str]) -> dict[str, str]:
    """The per-output part of each table's caption in the report, keyed ``<report rule>/<caption template>``
    (what a caption template of ``workflow/report/`` can look up: its job's rule; the outputs of one rule sharing a
    template are joined)."""
    from .outputs import output_kind

    captions = output_captions(config, plan)
    keyed: dict[str, list[str]] = {}
    for name, out in plan.outputs.items():
        kind = output_kind(out["kind"])
        if kind.tables:
            keyed.setdefault(f"{rule_of(out['experiment'])}/{kind.caption}", []).append(captions[name])
    return {key: " ".join(dict.fromkeys(texts)) for key, texts in keyed.items()}
