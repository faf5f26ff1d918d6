"""``upfl run-many``: train a bundle of runs in one process (data, torch and the compiled solver load once).

    upfl run-many --spec results/bundles/<name>.json [--concurrent K] [--threads T] [--store DIR | --no-store]
                  [--clear-results] [--benchmark results/benchmarks/bundles/<name>.tsv]

    upfl bundle-specs results/bundles/<name>-<digest>.json ...   (the workflow's rule bundle_specs)
    upfl run-lists results/experiments/<experiment>/runs-<digest>.list ...   (the workflow's rule run_lists)

The spec (written by the workflow's job ``upfl bundle-specs``, :mod:`upfl.pipeline.specs`) lists runs, each with its id,
data set folder, result folder, log file and run-config document; every run is :func:`upfl.engine.simulation.run` with
that config, exactly as ``upfl run`` would train it. Runs that fail do not stop the others; the command
then exits 1 and names them. ``--benchmark`` writes the job's wall time, peak memory and CPU time in the
first columns of a Snakemake benchmark file (:func:`write_benchmark`), measured by the process itself: Snakemake's
``benchmark:`` directive samples the process tree's memory maps every second, which cost its scheduler more CPU
than it measured.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Iterable

from ..pipeline.fork_protocol import SERVER_AHEAD

BENCHMARK_COLUMNS = ("s", "h:m:s", "max_rss", "cpu_time")
"""The first columns of a Snakemake benchmark file, and CPU time: wall seconds, the same as h:m:s, peak resident
memory in MB (the process or its largest child), user + system CPU seconds of the process and its children."""


def write_benchmark(path: str, seconds: float, results: Iterable[str | os.PathLike] = ()) -> None:
    """``path``: a tab-separated header and one row of :data:`BENCHMARK_COLUMNS` (written atomically), its
    modification time never older than any of the files ``results`` that exist (the bundle's run files).

    The workflow takes a run file newer than its bundle's benchmark file for one edited since the bundle ran
    (workflow/rules/common.smk, ``experiment_results``). Written after them, the benchmark file is newer unless the
    wall clock was set back in between (a virtual machine's clock corrected by its host): its time is then raised to
    theirs, so that a run the bundle has just written never reads as edited, and the report is not built again."""
    from ..files import write_text

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    hours, rest = divmod(int(seconds), 3600)
    row = (
        f"{seconds:.4f}",
        f"{hours}:{rest // 60:02d}:{rest % 60:02d}",
        f"{max(own.ru_maxrss, children.ru_maxrss) / 1024:.2f}",
        f"{own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime:.2f}",
    )
    write_text(path, "\t".join(BENCHMARK_COLUMNS) + "\n" + "\t".join(row) + "\n")
    newest = max((m for m in map(_mtime_ns, results) if m is not None), default=None)
    if newest is not None and os.stat(path).st_mtime_ns < newest:
        os.utime(path, ns=(newest, newest))


def _mtime_ns(path: str | os.PathLike) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None


def cmd_run_many(args: argparse.Namespace) -> int:
    from ..pipeline.bundle_trainer import BundleError, SpecError, load_spec, train_bundle

    start = time.perf_counter()
    try:
        spec = load_spec(args.spec)
    except SpecError as e:
        print(f"upfl run-many: error: {e}", file=sys.stderr)
        return 2
    if args.clear_results:
        from ..pipeline.specs import clear_results

        clear_results(spec)
    try:
        train_bundle(
            spec, store=None if args.no_store else args.store, concurrent=args.concurrent, threads=args.threads
        )
    except BundleError as e:
        print(f"upfl run-many: error: {e}", file=sys.stderr)
        return 1
    if args.benchmark:
        from ..pipeline.specs import result_files

        runs_files = [path for run in spec["runs"] for path in result_files(run)]
        write_benchmark(args.benchmark, time.perf_counter() - start, runs_files)
    return 0


def write_planned_files(command: str, what: str, write, files) -> int:
    """``write(files)`` (a writer of :mod:`upfl.pipeline.specs`) and its count; a SpecError is one line, status 2."""
    from ..pipeline.specs import SpecError

    try:
        written = write(files)
    except SpecError as e:
        print(f"upfl {command}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} {what}")
    return 0


def cmd_bundle_specs(args: argparse.Namespace) -> int:
    from ..pipeline.specs import write_specs

    return write_planned_files("bundle-specs", "bundle specs", write_specs, args.files)


def cmd_run_lists(args: argparse.Namespace) -> int:
    from ..pipeline.specs import write_run_lists

    return write_planned_files("run-lists", "run lists", write_run_lists, args.files)


def read_data_ahead(args: argparse.Namespace) -> str:
    """The fork server's step before a bundle (:func:`upfl.pipeline.bundle_trainer.load_spec_data`)."""
    from ..pipeline.bundle_trainer import load_spec_data

    return load_spec_data(args)


def register(sub: argparse._SubParsersAction) -> None:
    from ..engine.store import DEFAULT_STORE

    p = sub.add_parser("run-many", help="train a bundle of run configs in one process")
    p.add_argument("--spec", required=True, help="bundle spec JSON (results/bundles/<name>.json)")
    p.add_argument(
        "--concurrent",
        type=int,
        default=None,
        help="runs trained at once by separate processes (default: the spec's; on a GPU they share it)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads per run (default: the spec's)")
    p.add_argument(
        "--store",
        default=DEFAULT_STORE,
        help=f"finished-run store: finished runs are kept and restored from here (default {DEFAULT_STORE})",
    )
    p.add_argument("--no-store", action="store_true", help="neither restore from nor write to the store")
    p.add_argument(
        "--clear-results",
        action="store_true",
        help="remove each run's summary.json and metrics.csv first (the workflow's bundle jobs: a run whose settings "
        "changed is trained anew; finished runs are restored from the store)",
    )
    p.add_argument(
        "--benchmark",
        default=None,
        help="write the job's wall time, peak memory (MB) and CPU time here (Snakemake's benchmark format)",
    )
    p.set_defaults(func=cmd_run_many, **{SERVER_AHEAD: read_data_ahead})

    s = sub.add_parser("bundle-specs", help="write bundle spec files from the workflow's config (rule bundle_specs)")
    s.add_argument(
        "files", nargs="*", help="spec files results/bundles/<bundle>-<digest>.json to write (default: every one)"
    )
    s.set_defaults(func=cmd_bundle_specs)
    lists = sub.add_parser(
        "run-lists", help="write the report jobs' run lists from the workflow's config (rule run_lists)"
    )
    lists.add_argument(
        "files",
        nargs="*",
        help="run list files results/experiments/<experiment>/runs-<digest>.list (default: every one)",
    )
    lists.set_defaults(func=cmd_run_lists)
