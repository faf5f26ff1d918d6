"""The report's per-output captions and their place in the paper's order: what each table or figure shows (its
experiment's description), which data (the authors' released draw or our generator's, per data set) and how many
seeds stand behind each value or band. ``workflow/rules/common.smk`` puts them in the config for the caption
templates of ``workflow/report/`` when a report is made."""

from __future__ import annotations

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
