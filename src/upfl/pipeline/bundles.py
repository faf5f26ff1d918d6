"""Many runs per job: stable bundles of the workflow's runs, formed when Snakemake parses the workflow.

Start-up (Python, torch, numba's cache, the job launch) costs more than a quick synthetic run, so the
workflow trains runs in *bundles*: one job, one process, several runs, each still calling
:func:`upfl.engine.simulation.run` with its own config, result folder, log and checkpoint (the data set is read
once per process and handed to ``run``).

Bundle formation (:func:`form_bundles`) is deterministic and stable: runs are partitioned by first requesting experiment
and job settings, sorted by run id (so a bundle's runs are grouped by data set), and cut with content-defined boundaries
(a run starts a new bundle when a hash of its id is 0 modulo ``runs_per_job``; at most ``2 * runs_per_job`` runs per
bundle). Adding or removing a run changes only the bundle it falls into. A run whose result is already finished is not
retrained when its bundle changes: every finished run is also kept in the *finished-run store*
(:mod:`upfl.engine.store`: keyed by config, data and code fingerprints, each file checksummed) from which
:func:`upfl.pipeline.bundle_trainer.train_bundle` restores it.
The process that trains one bundle is :mod:`upfl.pipeline.bundle_trainer`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import config as cfgmod


class BundleError(RuntimeError):
    """One or more runs of a bundle failed; the message names each failed run and its error."""


class SpecError(ValueError):
    """A bundle spec (a file, or the workflow config it is made from) is unusable; the message names it."""


@dataclass
class Bundle:
    """A group of runs trained by one job: its stable name, run ids (sorted) and job settings."""

    name: str
    experiment: str
    run_ids: list[str]
    job: dict[str, Any] = field(default_factory=dict)


def _id_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def bundle_name(experiment: str, first_run: str) -> str:
    """``<experiment>_<10 hex digits of the first run's id>``, usable as a Snakemake rule name."""
    safe = "".join(c if c.isalnum() else "_" for c in experiment)
    return f"{safe}_{hashlib.sha256(first_run.encode('utf-8')).hexdigest()[:10]}"


def chunk_stably(run_ids: list[str], size: int) -> list[list[str]]:
    """Content-defined chunks of the sorted ids, about ``size`` long: a chunk holding at least ``size // 2``
    ids ends before an id whose hash is 0 modulo ``size - size // 2 + 1`` (so chunks hold ``size`` ids on
    average), and at ``2 * size`` ids at most; a last chunk shorter than ``size // 2`` joins the one before where
    that stays within ``2 * size`` (a job of a few runs would pay a process start-up for little work). Inserting
    or removing one id changes the chunk it falls into, and rarely the next one (until the boundaries meet
    again); the chunks elsewhere stay as they were."""
    low = max(1, size // 2)
    chunks: list[list[str]] = []
    for rid in sorted(run_ids):
        if (
            not chunks
            or len(chunks[-1]) >= 2 * size
            or (len(chunks[-1]) >= low and _id_hash(rid) % (size - low + 1) == 0)
        ):
            chunks.append([])
        chunks[-1].append(rid)
    if len(chunks) > 1 and len(chunks[-1]) < low and len(chunks[-2]) + len(chunks[-1]) <= 2 * size:
        last = chunks.pop()
        chunks[-1] += last
    return chunks


def form_bundles(runs: dict[str, Any]) -> dict[str, Bundle]:
    """Bundles of the runs whose ``job.runs_per_job`` is above 1 (the others stay one job each).

    ``runs`` maps run id to a :class:`upfl.pipeline.plan.RunSpec` (``experiments``, ``dataset``, ``job``). Runs
    of one bundle share their first requesting experiment (so an edit of one experiment touches only its
    bundles, and a target trains no other experiment's runs except shared ones) and every job setting. A
    bundle may span data sets (each is loaded once): fewer, larger bundles pay start-up fewer times.
    """
    classes: dict[tuple, list[str]] = {}
    for rid, spec in runs.items():
        if int(spec.job.get("runs_per_job", 1)) <= 1:
            continue
        key = (spec.experiments[0], tuple(sorted(spec.job.items())))
        classes.setdefault(key, []).append(rid)
    bundles: dict[str, Bundle] = {}
    for (experiment, job_items), ids in sorted(classes.items()):
        job = dict(job_items)
        for chunk in chunk_stably(ids, int(job["runs_per_job"])):
            name = bundle_name(experiment, chunk[0])
            bundles[name] = Bundle(name, experiment, chunk, job)
    return bundles


SINGLE_RUN_LIMIT = 10_000
"""The most runs a workflow trains one per job (``runs_per_job: 1``; rule ``train``). Each such run is a job of a
wildcard rule whose pattern names every one of them (so that the rule makes no other run's files): Snakemake reads
that pattern again for each job, and the DAG of N single runs costs N times N (6,000: 48 CPU-seconds; the same runs
in bundles: 3). A config above it is refused (:func:`check_single_runs`); bundles have no such limit
(benchmarks/plan_scaling.py)."""


def check_single_runs(runs: dict[str, Any], bundles: dict[str, Bundle]) -> None:
    """:class:`~upfl.pipeline.config_errors.ExperimentError` when more than :data:`SINGLE_RUN_LIMIT` runs would be
    trained one per job, naming the count and the key that bundles them."""
    from .config_errors import ExperimentError

    bundled = sum(len(b.run_ids) for b in bundles.values())
    single = len(runs) - bundled
    if single > SINGLE_RUN_LIMIT:
        raise ExperimentError(
            f"job_defaults.runs_per_job: {single} runs would be trained one per job (runs_per_job 1), above the "
            f"limit of {SINGLE_RUN_LIMIT} (the DAG of single runs grows with their square; docs/pipeline.md "
            "\"Many runs per job\"); set runs_per_job above 1 (job_defaults, or an experiment's or group's job) to "
            "train them in bundles"
        )


SOFTMAX_FIRST_COST = 4.0
"""How much more a run with ``model.softmax_before_loss`` (the authors' loss) costs than the same run without it:
its kernels take a softmax, then the cross-entropy of it (FedProx, 80 iterations, the paper's synthetic sets:
0.25 s against 0.06 s per run in a bundle)."""


def run_work(doc: dict[str, Any]) -> float:
    """A run's estimated work in passes over its data set: training rounds x sampled fraction x local epochs
    (x pFedMe's inner steps), plus a third of a pass per evaluated iteration (forward only), x
    :data:`SOFTMAX_FIRST_COST` for the authors' loss. Only the order of bundles depends on it
    (:func:`bundle_priorities`), never a result. Reads the run document directly (keys it lacks take
    :class:`upfl.config.RunConfig`'s defaults): resolving 2,000 configs would cost the DAG a second."""
    from ..draws.rounds import training_rounds_before
    from ..names import base_name

    default = cfgmod.RunConfig()

    def key(section: str, name: str) -> Any:
        value = doc.get(section, {}).get(name) if isinstance(doc.get(section), dict) else None
        return getattr(getattr(default, section), name) if value is None else value

    algorithm = key("algorithm", "name")
    rounds = int(doc.get("rounds", default.rounds))
    inner = int(key("algorithm", "personal_steps")) if base_name(algorithm) == "pfedme" else 1
    training = training_rounds_before(algorithm, rounds) * float(key("devices", "frac")) * int(key("solver", "epochs"))
    cost = SOFTMAX_FIRST_COST if key("model", "softmax_before_loss") else 1.0
    return (training * inner + rounds / max(1, int(key("evaluation", "every"))) / 3) * cost


def bundle_priorities(bundles: dict[str, Bundle], runs: dict[str, Any]) -> dict[str, int]:
    """Snakemake priorities of the bundle jobs: more estimated work (:func:`run_work`), higher priority, all above
    Snakemake's default 0 (the workflow puts data sets and reports above every bundle). Longest first is the classic
    makespan heuristic: on two cores the last job to start is a short one, not a bundle that keeps one core busy while
    the other idles."""
    work = {name: sum(run_work(runs[r].doc) for r in b.run_ids) for name, b in bundles.items()}
    return {name: rank + 1 for rank, name in enumerate(sorted(work, key=lambda n: (work[n], n)))}


def bundle_spec(
    bundle: Bundle,
    runs: dict[str, Any],
    data_dir: Callable[[str], str],
    run_dir: Callable[[str], str],
    log_path: Callable[[str], str],
) -> dict[str, Any]:
    """The JSON document ``upfl run-many --spec`` reads: per run its id, data, result folder, log and config.

    Runs are listed (and trained) data set by data set and seed by seed, so that runs sharing a data set and
    seed follow each other: their batch plans and noise draws are reused (:class:`upfl.draws.batch_plans.DrawCache`).
    """
    job = bundle.job
    concurrent = max(1, int(job.get("runs_per_gpu", 1)))
    order = sorted(bundle.run_ids, key=lambda r: (runs[r].dataset, runs[r].seed, r))
    return {
        "bundle": bundle.name,
        "threads": max(1, int(job.get("threads", 1)) // concurrent),
        "concurrent": concurrent,
        "runs": [
            {
                "id": rid,
                "data": data_dir(runs[rid].dataset),
                "out": run_dir(rid),
                "log": log_path(rid),
                "config": runs[rid].doc,
            }
            for rid in order
        ],
    }
