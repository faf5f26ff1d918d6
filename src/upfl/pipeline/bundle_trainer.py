"""The process that trains one bundle (``upfl run-many --spec``): each run of the spec in turn, or several at once.

Each run still calls :func:`upfl.engine.simulation.run` with its own config, result folder, log and checkpoint;
the data set is read once per process. A finished run is restored from, and saved to, the finished-run store
(:mod:`upfl.engine.store`). The spec is written at parse time by :func:`upfl.pipeline.bundles.bundle_spec`.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import config as cfgmod
from ..engine import store as storemod
from ..engine.store import DEFAULT_STORE
from ..progress import progress_text
from .bundles import BundleError, SpecError


def run_config(entry: dict[str, Any], threads: int) -> cfgmod.RunConfig:
    """The run config of one spec entry: what ``upfl run --data D --threads T --set ...`` resolves to."""
    doc = json.loads(json.dumps(entry["config"]))
    cfgmod.set_key(doc, "data.path", str(entry["data"]))
    if threads:
        cfgmod.set_key(doc, "threads", int(threads))
    return cfgmod.from_dict(doc)


def data_state(path: str) -> tuple:
    """What tells that a data set folder's files are the ones read before: the name, device and inode, size and
    change times of the folder's ``meta.json`` and of each file in its ``train/`` and ``test/`` (a file rewritten,
    even in place, changes its change time; one replaced by a rename, its inode; the same path from another working
    folder names other files)."""
    state: list[tuple] = []
    for split in ("", "train", "test"):
        try:
            with os.scandir(os.path.join(path, split)) as entries:
                for entry in entries:
                    if split or entry.name == "meta.json":
                        st = entry.stat()
                        state.append(
                            (split, entry.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                        )
        except OSError as e:
            state.append((split, e.errno))
    return tuple(sorted(state))


def data_bytes(state: tuple) -> int:
    """The bytes of a data set's files, from its :func:`data_state`."""
    return sum(entry[4] for entry in state if len(entry) == 7)


@functools.lru_cache(maxsize=8)
def _loaded(path: str, state: tuple):
    from ..data import load_leaf

    return load_leaf(path)


def load_data(path: str):
    """The data set at ``path`` (relative to the working folder), read once per process while its files are
    unchanged (:func:`data_state`; the last 8 kept): runs only read it. A bundle forked by the workflow's fork server
    finds the sets the server read ahead of it (:func:`load_spec_data`)."""
    return _loaded(path, data_state(path))


AHEAD_LIMIT_BYTES = 64 << 20
"""The largest data set (its files' bytes) the fork server reads ahead of a bundle: the synthetic sets are 3-16 MB;
a real-data set (FEMNIST's JSON is gigabytes) is read by its bundle alone, and the server, which keeps the last 8 it
read for the rest of the run, holds at most a few hundred MB of them."""


def load_spec_data(args: argparse.Namespace) -> str:
    """The fork server's step before ``upfl run-many`` (:data:`upfl.pipeline.fork_protocol.SERVER_AHEAD`): read
    the data sets of the bundle's runs, as :func:`train_entry` would, so that this bundle and every later one on the
    same files find them read (those up to :data:`AHEAD_LIMIT_BYTES`). A bundle trained by several processes at
    once reads its data in each of them."""
    spec = load_spec(args.spec)
    if int(args.concurrent if args.concurrent is not None else spec.get("concurrent", 1)) > 1:
        return "no data read ahead (several processes at once)"
    threads = int(args.threads if args.threads is not None else spec.get("threads", 0))
    firsts = {str(entry["data"]): entry for entry in spec["runs"]}
    paths = [str(run_config(entry, threads).data.path) for entry in firsts.values()]
    small = [path for path in paths if data_bytes(data_state(path)) <= AHEAD_LIMIT_BYTES]
    before = _loaded.cache_info().misses
    for path in small:
        load_data(path)
    read = _loaded.cache_info().misses - before
    large = (
        "" if small == paths else f", {len(paths) - len(small)} over {AHEAD_LIMIT_BYTES >> 20} MB left to the bundle"
    )
    return f"{len(paths)} data set(s): {read} read, {len(small) - read} read before{large}"


def _acc(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _restored(kept: Path, ident: dict[str, str], out: Path, log: Callable[[str], None]) -> bool:
    """Restore a stored result into ``out``; a failed checksum is logged by file name (the run is retrained)."""
    try:
        return storemod.restore(kept, ident, out)
    except storemod.StoreMismatch as e:
        log(f"store entry not used, retraining: {e}")
        return False


def train_entry(entry: dict[str, Any], threads: int, store: str | None, save: bool = True) -> dict[str, Any]:
    """Train (or restore) one run of a bundle; never raises for the run's own errors. The objects the process holds
    when it starts are frozen (:func:`gc.freeze`): refcounting still frees them, the cycle collector skips them, so
    that its full collections (every few dozen runs, a tenth of a second each with torch and numba loaded) cost
    little.

    Returns ``{"id", "status": trained|restored|failed, "seconds", "error"}``. The run's log file gets its
    progress lines, or the traceback when it fails. ``save``: keep a trained run in the store (False where the
    store cannot be written, :func:`upfl.engine.store.unwritable_reason`); a save that fails all the same (the
    disk filled meanwhile) is a warning in the run's log: its result is published without the store.
    """
    from ..engine.simulation import run

    gc.freeze()
    rid, out = entry["id"], Path(entry["out"])
    log_path = Path(entry["log"]) if entry.get("log") else None
    start = time.perf_counter()
    if log_path:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") if log_path else open(os.devnull, "w") as log_file:

        def log(message: str) -> None:
            print(message, file=log_file, flush=True)

        try:
            cfg = run_config(entry, threads)
            ident = storemod.identity(cfg) if store else None
            kept = storemod.entry_path(store, ident) if store and ident is not None else None
            if kept is not None and ident is not None and _restored(kept, ident, out, log):
                log(
                    f"run {rid}: finished result restored from {kept} (same config, data and code, checksums "
                    "verified; not retrained)"
                )
                return {"id": rid, "status": "restored", "seconds": time.perf_counter() - start, "error": None}
            log(f"run {rid}: training ({cfgmod.config_hash(cfg)}) -> {out}")
            summary = run(cfg, out, log=log, data=load_data(str(cfg.data.path)))
            if kept is not None and ident is not None and save:
                try:
                    storemod.save(kept, out, ident)
                except OSError as e:
                    log(
                        f"warning: {kept.parent}: not kept in the finished-run store ({e.strerror or e}); "
                        "the result is published without it"
                    )
            f = summary["final"]
            if summary.get("diverged"):  # a result (summary.json records it), as `upfl run`'s exit status 3
                d = summary["diverged"]
                log(f"diverged at iteration {d['iteration']} ({d['kind']}): {d['what']}; summary.json records it")
            log(f"final iteration {f['iteration']}: train_acc {_acc(f['train_acc'])} test_acc {_acc(f['test_acc'])}")
            return {"id": rid, "status": "trained", "seconds": time.perf_counter() - start, "error": None}
        except Exception as e:  # noqa: BLE001 - one run's failure must not stop the bundle
            log_file.write(traceback.format_exc())
            return {
                "id": rid,
                "status": "failed",
                "seconds": time.perf_counter() - start,
                "error": f"{type(e).__name__}: {e}",
            }


def _concurrent_results(entries: list[dict[str, Any]], threads: int, store: str | None, workers: int, save: bool):
    """Runs trained by ``workers`` processes at once (each imports torch and loads the solver once);
    on a GPU they share the device, on the CPU they share the cores."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(train_entry, e, threads, store, save) for e in entries]
        for fut in futures:
            yield fut.result()


def train_bundle(
    spec: dict[str, Any],
    store: str | None = DEFAULT_STORE,
    concurrent: int | None = None,
    threads: int | None = None,
    echo: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
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
    # A store that cannot be written is found before any run trains: one warning, and the runs' results are
    # published without it (finished entries are still restored from it).
    unwritable = storemod.unwritable_reason(store) if store else None
    if unwritable:
        echo(f"warning: {unwritable}; this bundle's runs are published without the store (none is kept in it)")
    save = unwritable is None
    start = time.perf_counter()
    if workers > 1 and len(entries) > 1:
        results_iter = _concurrent_results(entries, threads, store, min(workers, len(entries)), save)
    else:
        results_iter = (train_entry(e, threads, store, save) for e in entries)
    results = []
    for i, res in enumerate(results_iter, 1):
        results.append(res)
        detail = f": {res['error']} (log: {entries[i - 1].get('log')})" if res["error"] else ""
        done = progress_text(i, len(entries), time.perf_counter() - start, "runs")
        echo(f"[{i}/{len(entries)}] {res['status']} {res['id']} in {res['seconds']:.2f} s{detail}; {done}")
        sys.stdout.flush()
    failed = [r for r in results if r["status"] == "failed"]
    counts = {s: sum(r["status"] == s for r in results) for s in ("trained", "restored", "failed")}
    echo(
        f"bundle {name}: {counts['trained']} trained, {counts['restored']} restored, {counts['failed']} failed "
        f"in {time.perf_counter() - start:.1f} s"
    )
    if failed:
        raise BundleError(
            f"bundle {name}: {len(failed)} of {len(entries)} runs failed: "
            + "; ".join(f"{r['id']} ({r['error']})" for r in failed)
        )
    return results


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (null, an array, a number...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {list: "an array", str: "a string", int: "a number", float: "a number", dict: "an object"}.get(
        type(value), type(value).__name__
    )


def _check_spec(spec: Any, where: str = "bundle spec") -> None:
    """:class:`SpecError` naming ``where`` (the spec file) unless ``spec`` is a mapping whose ``runs`` is a
    non-empty list of mappings, each with ``id``, ``data``, ``out`` and ``config``, no result folder twice."""
    if not isinstance(spec, dict):
        raise SpecError(f"{where}: a bundle spec is a JSON object with 'runs', not {_json_kind(spec)}")
    if not isinstance(spec.get("runs"), list) or not spec["runs"]:
        raise SpecError(f"{where}: 'runs' must be a non-empty array")
    seen = set()
    for i, e in enumerate(spec["runs"]):
        if not isinstance(e, dict):
            raise SpecError(f"{where}: runs[{i}] is {_json_kind(e)}, not an object with id, data, out, config")
        missing = [k for k in ("id", "data", "out", "config") if k not in e]
        if missing:
            raise SpecError(f"{where}: runs[{i}] lacks {', '.join(missing)}")
        if not isinstance(e["config"], dict):
            raise SpecError(f"{where}: runs[{i}] ({e['id']}): 'config' must be an object")
        if e["out"] in seen:
            raise SpecError(f"{where}: runs[{i}] ({e['id']}): result folder {e['out']} is used twice")
        seen.add(e["out"])


def load_spec(path: str | os.PathLike) -> dict[str, Any]:
    """A bundle spec file, checked (:func:`_check_spec`; a spec named by its digest must have it): every error
    is a :class:`SpecError` naming the file."""
    from .specs import check_spec_file

    try:
        text = Path(path).read_text(encoding="utf-8")
        spec = json.loads(text)
    except OSError as e:
        raise SpecError(f"{path}: cannot read bundle spec ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    _check_spec(spec, str(path))
    check_spec_file(path, text)
    return spec
