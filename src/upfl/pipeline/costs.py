"""What a plan will cost before it starts: one line per part (synthetic, FEMNIST, Sent140) with its runs, its training
jobs and an estimate of its core-hours on this machine.

The estimate is the sum over the part's runs of (training rounds x the CPU-seconds of one training round of the run's
model + evaluations x the CPU-seconds of one evaluation), a training round scaled by the run's fraction of devices and
local epochs against the measured ones (0.3, 20). The per-round costs are the ones ``benchmarks/real_data.py
--paper-sized`` measured on this machine (kept in :func:`machine_cache_path`, for this CPU model and core count), or
else the benchmark figures committed in the source tree (``benchmarks/results/real_data.json`` and ``engine.json``),
named as such, with the CPU they were measured on. Reading them is the parse's only work: nothing is
measured or written there.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..draws.rounds import training_rounds_before
from ..measured import machine, machine_cache_path, read_json

MEASURED_FRAC, MEASURED_EPOCHS = 0.3, 20
"""The fraction of devices and local epochs of the measured rounds (benchmarks/real_data.py)."""

GPU_ADVISED_HOURS = 3.0
"""A part estimated above this many core-hours on the CPU gets the line's advice to use a GPU."""

PARTS = ("synthetic", "FEMNIST", "Sent140")
PART_OF_SOURCE = {"femnist": "FEMNIST", "sent140": "Sent140"}
"""A data set's ``source`` -> its part; every other source is the synthetic part."""

GPU_ADVICE = (
    "a GPU is advised: on a machine with CUDA, run_defaults.device auto (config/config.yaml) trains there and "
    "profiles/default runs one GPU job at a time (resources gpu=1); on SLURM --workflow-profile profiles/slurm"
)


def reference_costs(benchmarks: Path) -> dict[str, dict[str, float]]:
    """Per-round CPU-seconds committed in the source tree: the real-data models' paper-sized rounds
    (``real_data.json``: the ``auto`` batching's, else the fastest measured, which ``auto`` then takes) and W1's
    logistic regression (``engine.json``, the numba solver, one thread)."""
    costs: dict[str, dict[str, float]] = {}
    paper = read_json(benchmarks / "real_data.json").get("round_paper_sized", {})
    for name, row in paper.items():
        if not isinstance(row, dict):
            continue
        measured = {b: r for b, r in row.items() if isinstance(r, dict) and "train_cpu_s" in r}
        if measured:
            best = measured.get("auto") or min(measured.values(), key=lambda r: r["train_cpu_s"])
            costs[name] = {"train_cpu_s": best["train_cpu_s"], "eval_cpu_s": best["eval_cpu_s"]}
    w1 = read_json(benchmarks / "engine.json").get("numba", {}).get("fedprox80", {})
    if "per_training_round_s" in w1:
        costs["logreg"] = {"train_cpu_s": w1["per_training_round_s"], "eval_cpu_s": w1["per_evaluation_s"]}
    return costs


def round_costs(cache: Path, benchmarks: Path) -> tuple[dict[str, dict[str, float]], str]:
    """Per-model round costs and where they come from: this machine's (``cache``) where kept for it, the rest from
    the source tree's benchmark files (:func:`reference_costs`)."""
    kept = read_json(cache)
    here = kept.get("models", {}) if kept.get("machine") == machine() else {}
    costs = {**reference_costs(benchmarks), **here}
    if here:
        return costs, f"per-round costs measured on this machine {kept.get('measured', '')}".rstrip()
    if not costs:
        return costs, "no measured round found (python benchmarks/real_data.py --paper-sized measures this machine)"
    floor = read_json(benchmarks / "real_data.json").get("round_paper_sized", {}).get("floor", {})
    where = f"an {floor['cpu_model']} ({floor.get('isa', '?')})" if floor.get("cpu_model") else "the project's machine"
    return costs, (
        f"per-round costs measured on {where}, committed in benchmarks/results/ (python benchmarks/real_data.py "
        "--paper-sized measures this one)"
    )


def model_cost_name(model: str) -> str:
    """The measured model a run's model is costed as: the logistic regressions as W1's."""
    return "logreg" if model in ("logreg", "binary_logreg") else model


@functools.lru_cache(maxsize=1)
def default_run_config() -> Any:
    """:class:`upfl.config.RunConfig`'s defaults (made once: a plan costs thousands of runs)."""
    from .. import config as cfgmod

    return cfgmod.RunConfig()


def run_core_seconds(doc: Mapping[str, Any], costs: Mapping[str, Mapping[str, float]]) -> float | None:
    """Estimated CPU-seconds of one run (its run-config document; keys it lacks take
    :class:`upfl.config.RunConfig`'s defaults, as :func:`upfl.pipeline.bundles.run_work` reads them); None where its
    model was never measured. pFedMe's inner steps multiply its training rounds' cost."""
    from ..names import base_name

    default = default_run_config()

    def key(section: str, name: str) -> Any:
        value = doc.get(section, {}).get(name) if isinstance(doc.get(section), Mapping) else None
        return getattr(getattr(default, section), name) if value is None else value

    model = model_cost_name(str(key("model", "name")))
    if model not in costs:
        return None
    algorithm = str(key("algorithm", "name"))
    rounds = int(doc.get("rounds", default.rounds))
    inner = int(key("algorithm", "personal_steps")) if base_name(algorithm) == "pfedme" else 1
    scale = float(key("devices", "frac")) / MEASURED_FRAC * int(key("solver", "epochs")) / MEASURED_EPOCHS * inner
    last = key("evaluation", "last")
    window = rounds if last is None else min(rounds, int(last))
    evaluations = window // max(1, int(key("evaluation", "every"))) + 1
    training = training_rounds_before(algorithm, rounds)
    return training * costs[model]["train_cpu_s"] * scale + evaluations * costs[model]["eval_cpu_s"]


def part_of(dataset: str, datasets: Mapping[str, Any]) -> str:
    """The part (:data:`PARTS`) of a data set of the config's ``datasets``."""
    entry = datasets.get(dataset)
    source = entry.get("source") if isinstance(entry, Mapping) else None
    return PART_OF_SOURCE.get(str(source), "synthetic")


def hours_text(seconds: float) -> str:
    hours = seconds / 3600
    if hours >= 10:
        return f"{hours:.0f}"
    return f"{hours:.1f}" if hours >= 0.1 else f"{hours:.2f}"


def plan_cost_lines(
    runs: Mapping[str, Any],
    job_runs: Iterable[Iterable[str]],
    datasets: Mapping[str, Any],
    costs: Mapping[str, Mapping[str, float]],
    source: str,
) -> list[str]:
    """One line per part with runs: its runs, its training jobs (``job_runs``: the run ids of each job), the estimated
    core-hours on the CPU and, above :data:`GPU_ADVISED_HOURS`, the advice to use a GPU; then where the costs come
    from. ``runs``: run id -> an object with ``dataset`` and ``doc`` (:class:`upfl.pipeline.plan.RunSpec`)."""
    count = dict.fromkeys(PARTS, 0)
    jobs = dict.fromkeys(PARTS, 0)
    seconds = dict.fromkeys(PARTS, 0.0)
    unmeasured: dict[str, set[str]] = {p: set() for p in PARTS}
    for spec in runs.values():
        part = part_of(spec.dataset, datasets)
        count[part] += 1
        cost = run_core_seconds(spec.doc, costs)
        if cost is None:
            unmeasured[part].add(str(spec.doc.get("model", {}).get("name")))
        else:
            seconds[part] += cost
    for ids in job_runs:
        for part in {part_of(runs[r].dataset, datasets) for r in ids}:
            jobs[part] += 1
    lines = []
    for part in PARTS:
        if not count[part]:
            continue
        job_word = "training job" if jobs[part] == 1 else "training jobs"
        line = f"plan {part}: {count[part]} runs in {jobs[part]} {job_word}, about {hours_text(seconds[part])} "
        line += "core-hours on this CPU"
        if unmeasured[part]:
            line += f" and the runs of model {', '.join(sorted(unmeasured[part]))}, whose rounds were never measured"
        if seconds[part] / 3600 > GPU_ADVISED_HOURS:
            line += f"; {GPU_ADVICE}"
        lines.append(line)
    if lines:
        lines.append(f"plan costs: {source}")
    return lines


def plan_cost_summary(
    runs: Mapping[str, Any],
    bundles: Mapping[str, Any],
    single_runs: Iterable[str],
    config: Mapping[str, Any],
    workflow_dir: str | os.PathLike,
) -> list[str]:
    """The workflow's plan lines (:func:`plan_cost_lines`): each bundle and each single run is a training job; the
    costs are this machine's (:func:`machine_cache_path`) or the source tree's (``benchmarks/results/`` beside
    ``workflow_dir``)."""
    costs, source = round_costs(machine_cache_path(), Path(workflow_dir).parent / "benchmarks" / "results")
    jobs = [b.run_ids for b in bundles.values()] + [[r] for r in single_runs]
    return plan_cost_lines(runs, jobs, config.get("datasets", {}), costs, source)


def real_half_core_hours(runs: Mapping[str, Any], benchmarks: Path) -> float | None:
    """Estimated core-hours on the CPU of ``runs`` (the real-data half's) from the source tree's measured rounds
    (:func:`reference_costs`); None where a model's round was never measured."""
    costs = reference_costs(benchmarks)
    seconds = [run_core_seconds(spec.doc, costs) for spec in runs.values()]
    if any(s is None for s in seconds):
        return None
    return sum(s for s in seconds if s is not None) / 3600
