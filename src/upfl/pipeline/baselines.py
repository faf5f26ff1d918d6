"""docs/baselines.md, in the shape of a Flower Baselines page: the experimental setup of each experiment (task,
model, data, hyper-parameters, seeds) and, per table and figure, the command that makes it; generated from the
plan of ``config/config.yaml`` so that it cannot drift from what the workflow runs."""

from __future__ import annotations

from typing import Any

from .plan import build_plan, resolve_preset

MODEL_TASKS = {"logreg": "multinomial logistic regression", "binary_logreg": "binary logistic regression",
               "mlp": "MLP (2 hidden layers)", "cnn": "CNN", "lstm": "stacked LSTM on GloVe embeddings"}
ALGORITHM_NAMES = {"fedavg": "FedAvg", "fedprox": "FedProx", "upcycled": "Upcycled-FL"}


def _values(values) -> str:
    distinct = sorted({v for v in values if v is not None}, key=lambda v: (str(type(v)), v))
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in distinct)


def _algorithms(docs: list[dict[str, Any]]) -> str:
    """'FedAvg T 80; FedProx T 80 (μ 0.1, 1); Upcycled-FL T 160 (μ 0.1, 1; λ 0.04, 0.43)'."""
    parts = []
    for name in dict.fromkeys(d["algorithm"]["name"] for d in docs):
        mine = [d for d in docs if d["algorithm"]["name"] == name]
        label = ALGORITHM_NAMES.get(name, name)
        extra = [f"μ {_values(d['algorithm'].get('mu') for d in mine)}"] if any(
            d["algorithm"].get("mu") for d in mine) else []
        lams = _values(d["algorithm"].get("lam") for d in mine)
        steps = _values(d["algorithm"].get("step") for d in mine)
        extra += [f"λ {lams}"] * bool(lams) + [f"step {steps}"] * bool(steps)
        parts.append(f"{label} T {_values(d['rounds'] for d in mine)}" + (f" ({'; '.join(extra)})" if extra else ""))
    return "; ".join(parts)


def baselines_page(config: dict[str, Any]) -> str:
    from ..report.paper_numbers import dataset_label

    plan = build_plan({**config, "preset": "full"})
    resolved = resolve_preset({**config, "preset": "full"})
    target_of = {name: target for target, names in plan.targets.items() for name in names}
    lines = ["# Upcycled-FL as a baseline", "",
             "**Paper:** [Federated Learning with Reduced Information Leakage and Computation]"
             "(https://arxiv.org/abs/2310.06341) (Yin, Tan, Zhang, Khalili and Liu, TMLR).", "",
             "**What is implemented:** FedAvg, FedProx and Upcycled-FL (every even iteration the server-only "
             "extrapolation of Eq. (5)), their private versions (output and objective perturbation), the ablations, "
             "and a Flower strategy ([flower.md](flower.md)). Generated from `config/config.yaml` by "
             "`python tools/doc_numbers.py`.", "",
             "**Data sets:** the four synthetic sets of the paper (the authors' released draws; `make quick` uses "
             "our generator's draws instead, offline), FEMNIST and Sent140 from LEAF ([data.md](data.md)).", "",
             "**Hardware:** the synthetic experiments run on CPUs (2 cores suffice); FEMNIST and Sent140 want a GPU. "
             "Times: [numbers.md](numbers.md).", "",
             "## Environment setup", "", "```", "make install   # .venv: CPU torch (a CUDA build: see README.md), "
             "upfl, Snakemake 9", "```", "",
             "## Experimental setup", "",
             "One row per experiment of the full config: the task is classification everywhere; every run samples "
             "a fraction of the devices per iteration, some of them stragglers that run fewer local epochs.", "",
             "| Experiment | Data | Model | Algorithms (iterations T) | Devices per iteration, stragglers | "
             "Local solver (E, batch, lr, momentum) | Seeds |", "|---|---|---|---|---|---|---|"]
    for experiment, run_ids in plan.experiments.items():
        runs = [plan.runs[r] for r in run_ids]
        docs = [r.doc for r in runs]
        data = ", ".join(dict.fromkeys(
            dataset_label(resolved["datasets"][d].get("setting", d))
            + (" (generator draws)" if resolved["datasets"][d]["source"] == "synthetic" else "")
            for d in dict.fromkeys(r.dataset for r in runs)))
        model = _values(MODEL_TASKS.get(d["model"]["name"], d["model"]["name"]) for d in docs)
        devices = (f"{_values(d['devices']['frac'] for d in docs)}; "
                   f"{_values(d['devices'].get('straggler', 0) for d in docs)}")
        solver = " / ".join(_values(d["solver"][k] for d in docs) for k in ("epochs", "batch_size", "lr", "momentum"))
        lines.append(f"| `{experiment}` | {data} | {model} | {_algorithms(docs)} | {devices} | {solver} | "
                     f"{_values(r.seed for r in runs)} |")
    lines += ["", "## Running the experiments and expected results", "",
              "Each table and figure with the command that makes it (targets before any `--config`); the report "
              "(`snakemake --report results/report.html`) shows each with its caption beside the paper's value, "
              "and the claims page judges each of the paper's statements. What the paper reports for each is in "
              "the report's caption and on the claims page.", "",
              "| Output | Command | Files | What it shows |", "|---|---|---|---|"]
    for name, out in plan.outputs.items():
        description = str(config["experiments"][out["experiment"]].get("description", "")).replace("|", "\\|")
        target = target_of.get(name, name)
        lines.append(f"| `{name}` | `snakemake --cores all {target}` | `results/{'tables' if out['kind'] in ('table1', 'time', 'privacy_table', 'momentum_table', 'bases_table', 'sensitivity', 'protocol_gap', 'draws') else 'figures'}/{name}.*` | {description} |")
    lines += ["", "The quick preset: the same targets with `--config preset=quick` after them (our generator's draws, "
              "a quarter of the iterations, 2 seeds), e.g. `snakemake --cores all fig5 --config preset=quick`.", ""]
    return "\n".join(lines)
