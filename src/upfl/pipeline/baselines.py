"""docs/pipeline.md's generated sections, laid out as a Flower Baselines page: the experimental setup of each
experiment (task, model, data, hyper-parameters, seeds) and, per table and figure, the command that makes it, its
files and the paper's table or figure; generated from the plan of ``config/config.yaml`` (``python
tools/doc_numbers.py``) so that they cannot drift from what the workflow runs."""

from __future__ import annotations

from typing import Any

from ..paper_order import paper_figure
from .outputs import output_files, output_kind
from .plan import build_plan, resolve_preset

SETUP_SECTION = "## Experimental setup"
OUTPUTS_SECTION = "## Tables and figures"
MODEL_TASKS = {
    "logreg": "multinomial logistic regression",
    "binary_logreg": "binary logistic regression",
    "mlp": "MLP (2 hidden layers)",
    "cnn": "CNN",
    "lstm": "stacked LSTM on GloVe embeddings",
}
PAPER_TABLES = {
    "table1": "Table 1",
    "table2": "Table 2",
    "time": "Section 6 (training time)",
    "privacy_output": "Section 6, Figures 3 and 11",
    "privacy_objective": "Section 6, Figures 3 and 9",
    "privacy_real": "Figure 12",
}
"""Outputs that are not named ``fig<N>`` but stand for a place in the paper."""


def _values(values) -> str:
    distinct = sorted({v for v in values if v is not None}, key=lambda v: (str(type(v)), v))
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in distinct)


def _algorithms(docs: list[dict[str, Any]]) -> str:
    """'FedAvg T 80; FedProx T 80 (μ 0.1, 1); Upcycled-FL T 160 (μ 0.1, 1; λ 0.04, 0.43)'."""
    from ..report.styles import ALGORITHM_STYLES

    def label(name: str) -> str:
        base = name.removeprefix("upcycled_")
        return (
            ALGORITHM_STYLES[name][0]
            if name in ALGORITHM_STYLES
            else (f"upcycled {ALGORITHM_STYLES[base][0]}" if base in ALGORITHM_STYLES else name)
        )

    parts = []
    for name in dict.fromkeys(d["algorithm"]["name"] for d in docs):
        mine = [d for d in docs if d["algorithm"]["name"] == name]
        extra = (
            [f"μ {_values(d['algorithm'].get('mu') for d in mine)}"]
            if any(d["algorithm"].get("mu") for d in mine)
            else []
        )
        lams = _values(d["algorithm"].get("lam") for d in mine)
        steps = _values(d["algorithm"].get("step") for d in mine)
        extra += [f"λ {lams}"] * bool(lams) + [f"step {steps}"] * bool(steps)
        parts.append(
            f"{label(name)} T {_values(d['rounds'] for d in mine)}" + (f" ({'; '.join(extra)})" if extra else "")
        )
    return "; ".join(parts)


def _paper_place(name: str) -> str:
    figure = paper_figure(name)
    if figure:
        number, part = figure
        return f"Figure {number}" + (f" ({part})" if part else "")
    return PAPER_TABLES.get(name, "not in the paper (ours)")


def setup_section(config: dict[str, Any]) -> str:
    """'## Experimental setup': one row per experiment of the full config."""
    from ..report.paper_numbers import dataset_label

    plan = build_plan({**config, "preset": "full"})
    resolved = resolve_preset({**config, "preset": "full"})
    lines = [
        SETUP_SECTION,
        "",
        (
            "Generated from `config/config.yaml` by `python tools/doc_numbers.py`: one row per experiment of the "
            "full config. The task is classification everywhere; every run samples a fraction of the devices per "
            "iteration, some of them stragglers that run fewer local epochs."
        ),
        "",
        (
            "| Experiment | Data | Model | Algorithms (iterations T) | Devices per iteration, stragglers | "
            "Local solver (E, batch, lr, momentum) | Seeds |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for experiment, run_ids in plan.experiments.items():
        runs = [plan.runs[r] for r in run_ids]
        docs = [r.doc for r in runs]
        data = ", ".join(
            dict.fromkeys(
                dataset_label(resolved["datasets"][d].get("setting", d))
                + (" (generator draws)" if resolved["datasets"][d]["source"] == "synthetic" else "")
                for d in dict.fromkeys(r.dataset for r in runs)
            )
        )
        model = _values(MODEL_TASKS.get(d["model"]["name"], d["model"]["name"]) for d in docs)
        devices = (
            f"{_values(d['devices']['frac'] for d in docs)}; {_values(d['devices'].get('straggler', 0) for d in docs)}"
        )
        solver = " / ".join(_values(d["solver"][k] for d in docs) for k in ("epochs", "batch_size", "lr", "momentum"))
        lines.append(
            f"| `{experiment}` | {data} | {model} | {_algorithms(docs)} | {devices} | {solver} | "
            f"{_values(r.seed for r in runs)} |"
        )
    return "\n".join(lines) + "\n"


def outputs_section(config: dict[str, Any]) -> str:
    """'## Tables and figures': per output of the full config, the command that makes it, its files, its place in the
    paper and what it shows (its experiment's description; for an experiment's later outputs, what their kind shows of
    the same runs)."""
    plan = build_plan({**config, "preset": "full"})
    target_of = {name: target for target, names in plan.targets.items() for name in names}
    lines = [
        OUTPUTS_SECTION,
        "",
        (
            "Generated like the setup above. Each table and figure with the command that makes it (the target "
            "before any `--config`), its files and the place in the paper it reproduces; the report "
            "(`snakemake --report results/report.html`) shows each with its caption, and the claims page judges "
            "the paper's statements about it (*Expected results*). With the quick preset: the same target with "
            "`--configfile config/quick.yaml` after it."
        ),
        "",
        "| Output | Command | Files | Paper | What it shows |",
        "|---|---|---|---|---|",
    ]
    first_of: dict[str, str] = {}
    for name, out in plan.outputs.items():
        experiment = out["experiment"]
        if experiment in first_of:
            what = f"the runs of `{first_of[experiment]}`: {output_kind(out['kind']).describe}"
        else:
            first_of[experiment] = name
            what = str(config["experiments"][experiment].get("description", "")).replace("|", "\\|")
        files = sorted({f.rsplit(".", 1)[0] + ".*" for f in output_files(out["kind"], name)})
        lines.append(
            f"| `{name}` | `snakemake --cores all {target_of.get(name, name)}` | "
            f"{', '.join(f'`{f}`' for f in files)} | {_paper_place(name)} | {what} |"
        )
    return "\n".join(lines) + "\n"
