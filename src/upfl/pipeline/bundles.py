"""Many runs per job: stable bundles of the workflow's runs and the process that trains one bundle.

Start-up (Python, torch, numba's cache, the job launch) costs more than a quick synthetic run, so the
workflow trains runs in *bundles*: one job, one process, several runs, each still calling
:func:`upfl.engine.simulation.run` with its own config, result folder, log and checkpoint (the data set is read
once per process and handed to ``run``).

Bundle formation (:func:`form_bundles`) is deterministic and stable: runs are partitioned by first requesting
experiment and job settings, sorted by run id (so a bundle's runs are grouped by data set), and cut with content-defined boundaries (a run starts a new bundle when a
hash of its id is 0 modulo ``runs_per_job``; at most ``2 * runs_per_job`` runs per bundle). Adding or
removing a run changes only the bundle it falls into. A run whose result is already finished is not
retrained when its bundle changes: every finished run is also kept in the *finished-run store*
(:mod:`upfl.pipeline.store`: keyed by config, data and code fingerprints, each file checksummed) from which
:func:`train_bundle` restores it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import config as cfgmod
from . import store as storemod
from ..files import write_text
from .store import DEFAULT_STORE


class BundleError(RuntimeError):
    """One or more runs of a bundle failed; the message names each failed run and its error."""


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
    average), and at ``2 * size`` ids at most. Inserting or removing one id changes the chunk it falls into, and rarely the next one (until
    the boundaries meet again); the chunks elsewhere stay as they were."""
    low = max(1, size // 2)
    chunks: list[list[str]] = []
    for rid in sorted(run_ids):
        if (not chunks or len(chunks[-1]) >= 2 * size
                or (len(chunks[-1]) >= low and _id_hash(rid) % (size - low + 1) == 0)):
            chunks.append([])
        chunks[-1].append(rid)
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


def run_work(doc: dict[str, Any]) -> float:
    """A run's estimated work in passes over its data set: training rounds x sampled fraction x local epochs
    (x pFedMe's inner steps), plus a third of a pass per evaluated iteration (forward only). Only the order of
    bundles depends on it (:func:`bundle_priorities`), never a result. Reads the run document directly (keys it
    lacks take :class:`upfl.config.RunConfig`'s defaults): resolving 2,000 configs would cost the DAG a second."""
    from ..engine.draws import training_rounds_before
    from ..names import base_name

    default = cfgmod.RunConfig()

    def key(section: str, name: str) -> Any:
        value = doc.get(section, {}).get(name) if isinstance(doc.get(section), dict) else None
        return getattr(getattr(default, section), name) if value is None else value

    algorithm = key("algorithm", "name")
    rounds = int(doc.get("rounds", default.rounds))
    inner = int(key("algorithm", "personal_steps")) if base_name(algorithm) == "pfedme" else 1
    training = training_rounds_before(algorithm, rounds) * float(key("devices", "frac")) * int(key("solver", "epochs"))
    return training * inner + rounds / max(1, int(key("evaluation", "every"))) / 3


def bundle_priorities(bundles: dict[str, Bundle], runs: dict[str, Any]) -> dict[str, int]:
    """Snakemake priorities of the bundle jobs: more estimated work (:func:`run_work`), higher priority, all above
    the reports' 0. Longest first is the classic makespan heuristic: on two cores the last job to start is a
    short one, not a bundle that keeps one core busy while the other idles."""
    work = {name: sum(run_work(runs[r].doc) for r in b.run_ids) for name, b in bundles.items()}
    return {name: rank + 1 for rank, name in enumerate(sorted(work, key=lambda n: (work[n], n)))}


def bundle_spec(bundle: Bundle, runs: dict[str, Any], data_dir: Callable[[str], str],
                run_dir: Callable[[str], str], log_path: Callable[[str], str]) -> dict[str, Any]:
    """The JSON document ``upfl run-many --spec`` reads: per run its id, data, result folder, log and config.

    Runs are listed (and trained) data set by data set and seed by seed, so that runs sharing a data set and
    seed follow each other: their batch plans and noise draws are reused (:class:`upfl.solvers.torch_backend.DrawCache`).
    """
    job = bundle.job
    concurrent = max(1, int(job.get("runs_per_gpu", 1)))
    order = sorted(bundle.run_ids, key=lambda r: (runs[r].dataset, runs[r].seed, r))
    return {
        "bundle": bundle.name,
        "threads": max(1, int(job.get("threads", 1)) // concurrent),
        "concurrent": concurrent,
        "runs": [{"id": rid, "data": data_dir(runs[rid].dataset), "out": run_dir(rid), "log": log_path(rid),
                  "config": runs[rid].doc} for rid in order],
    }


def run_config(entry: dict[str, Any], threads: int) -> cfgmod.RunConfig:
    """The run config of one spec entry: what ``upfl run --data D --threads T --set ...`` resolves to."""
    doc = json.loads(json.dumps(entry["config"]))
    cfgmod.set_key(doc, "data.path", str(entry["data"]))
    if threads:
        cfgmod.set_key(doc, "threads", int(threads))
    return cfgmod.from_dict(doc)


@functools.lru_cache(maxsize=4)
def load_data(path: str):
    """A data set loaded once per bundle process (the last 4 kept): runs only read it."""
    from ..data import load_leaf

    return load_leaf(path)


def _acc(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _restored(kept: Path, ident: dict[str, str], out: Path, log: Callable[[str], None]) -> bool:
    """Restore a stored result into ``out``; a failed checksum is logged by file name (the run is retrained)."""
    try:
        return storemod.restore(kept, ident, out)
    except storemod.StoreMismatch as e:
        log(f"store entry not used, retraining: {e}")
        return False


def train_entry(entry: dict[str, Any], threads: int, store: str | None) -> dict[str, Any]:
    """Train (or restore) one run of a bundle; never raises for the run's own errors.

    Returns ``{"id", "status": trained|restored|failed, "seconds", "error"}``. The run's log file gets its
    per-iteration lines, or the traceback when it fails.
    """
    from ..engine.simulation import run

    rid, out = entry["id"], Path(entry["out"])
    log_path = Path(entry["log"]) if entry.get("log") else None
    start = time.perf_counter()
    if log_path:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    with (open(log_path, "w", encoding="utf-8") if log_path else open(os.devnull, "w")) as log_file:
        def log(message: str) -> None:
            print(message, file=log_file, flush=True)

        try:
            cfg = run_config(entry, threads)
            ident = storemod.identity(cfg) if store else None
            kept = storemod.entry_path(store, ident) if store else None
            if kept is not None and _restored(kept, ident, out, log):
                log(f"run {rid}: finished result restored from {kept} (same config, data and code, checksums "
                    "verified; not retrained)")
                return {"id": rid, "status": "restored", "seconds": time.perf_counter() - start, "error": None}
            log(f"run {rid}: training ({cfgmod.config_hash(cfg)}) -> {out}")
            summary = run(cfg, out, log=log, data=load_data(str(cfg.data.path)))
            if kept is not None:
                storemod.save(kept, out, ident)
            f = summary["final"]
            if summary.get("diverged"):  # a result (summary.json records it), as `upfl run`'s exit status 3
                d = summary["diverged"]
                log(f"diverged at iteration {d['iteration']} ({d['kind']}): {d['what']}; summary.json records it")
            log(f"final iteration {f['iteration']}: train_acc {_acc(f['train_acc'])} test_acc {_acc(f['test_acc'])}")
            return {"id": rid, "status": "trained", "seconds": time.perf_counter() - start, "error": None}
        except Exception as e:  # noqa: BLE001 - one run's failure must not stop the bundle
            log_file.write(traceback.format_exc())
            return {"id": rid, "status": "failed", "seconds": time.perf_counter() - start,
                    "error": f"{type(e).__name__}: {e}"}


def _concurrent_results(entries: list[dict[str, Any]], threads: int, store: str | None, workers: int):
    """Runs trained by ``workers`` processes at once (each imports torch and loads the solver once);
    on a GPU they share the device, on the CPU they share the cores."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(train_entry, e, threads, store) for e in entries]
        for fut in futures:
            yield fut.result()


def train_bundle(spec: dict[str, Any], store: str | None = DEFAULT_STORE, concurrent: int | None = None,
                 threads: int | None = None, echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Train every run of a bundle spec (see :func:`bundle_spec`) in this process, or ``concurrent`` at once.

    Every run is attempted; runs that fail leave the others' results in place, and a :class:`BundleError`
    naming each failed run is raised at the end.
    """
    entries = spec["runs"]
    _check_spec(spec)
    workers = max(1, int(concurrent if concurrent is not None else spec.get("concurrent", 1)))
    threads = int(threads if threads is not None else spec.get("threads", 0))
    name = spec.get("bundle", "bundle")
    echo(f"bundle {name}: {len(entries)} runs, {workers} at a time, {threads or 'default'} threads each")
    start = time.perf_counter()
    if workers > 1 and len(entries) > 1:
        results_iter = _concurrent_results(entries, threads, store, min(workers, len(entries)))
    else:
        results_iter = (train_entry(e, threads, store) for e in entries)
    results = []
    for i, res in enumerate(results_iter, 1):
        results.append(res)
        detail = f": {res['error']} (log: {entries[i - 1].get('log')})" if res["error"] else ""
        echo(f"[{i}/{len(entries)}] {res['status']} {res['id']} in {res['seconds']:.2f} s{detail}")
        sys.stdout.flush()
    failed = [r for r in results if r["status"] == "failed"]
    counts = {s: sum(r["status"] == s for r in results) for s in ("trained", "restored", "failed")}
    echo(f"bundle {name}: {counts['trained']} trained, {counts['restored']} restored, {counts['failed']} failed "
         f"in {time.perf_counter() - start:.1f} s")
    if failed:
        raise BundleError(f"bundle {name}: {len(failed)} of {len(entries)} runs failed: "
                          + "; ".join(f"{r['id']} ({r['error']})" for r in failed))
    return results


def _check_spec(spec: dict[str, Any]) -> None:
    if not isinstance(spec.get("runs"), list) or not spec["runs"]:
        raise BundleError("bundle spec: 'runs' must be a non-empty list")
    seen = set()
    for i, e in enumerate(spec["runs"]):
        missing = [k for k in ("id", "data", "out", "config") if k not in e]
        if missing:
            raise BundleError(f"bundle spec: runs[{i}] lacks {', '.join(missing)}")
        if e["out"] in seen:
            raise BundleError(f"bundle spec: runs[{i}] ({e['id']}): result folder {e['out']} is used twice")
        seen.add(e["out"])


def load_spec(path: str | os.PathLike) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise BundleError(f"{path}: cannot read bundle spec ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise BundleError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None


def write_spec_if_changed(path: str | os.PathLike, spec: dict[str, Any]) -> str:
    """Write ``spec`` to ``path`` (atomically) unless the file holds it already, so that its modification
    time changes only with its content; returns ``path``."""
    text = json.dumps(spec, indent=1, sort_keys=True) + "\n"
    try:
        if Path(path).read_text(encoding="utf-8") == text:
            return str(path)
    except OSError:
        pass
    write_text(path, text)
    return str(path)
