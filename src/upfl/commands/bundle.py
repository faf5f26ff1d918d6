"""``upfl run-many``: train a bundle of runs in one process (data, torch and the compiled solver load once).

    upfl run-many --spec results/bundles/<name>.json [--concurrent K] [--threads T] [--store DIR | --no-store]

The spec (written by the workflow, ``upfl.bundles.bundle_spec``) lists runs, each with its id, data set
folder, result folder, log file and run-config document; every run is :func:`upfl.simulation.run` with
that config, exactly as ``upfl run`` would train it. Runs that fail do not stop the others; the command
then exits 1 and names them.
"""

from __future__ import annotations

import argparse
import sys


def cmd_run_many(args: argparse.Namespace) -> int:
    from ..bundles import BundleError, load_spec, train_bundle

    try:
        spec = load_spec(args.spec)
        train_bundle(spec, store=None if args.no_store else args.store, concurrent=args.concurrent,
                     threads=args.threads)
    except BundleError as e:
        print(f"upfl run-many: error: {e}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from ..bundles import DEFAULT_STORE

    p = sub.add_parser("run-many", help="train a bundle of run configs in one process")
    p.add_argument("--spec", required=True, help="bundle spec JSON (results/bundles/<name>.json)")
    p.add_argument("--concurrent", type=int, default=None,
                   help="runs trained at once by separate processes (default: the spec's; on a GPU they share it)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per run (default: the spec's)")
    p.add_argument("--store", default=DEFAULT_STORE,
                   help=f"finished-run store: finished runs are kept and restored from here (default {DEFAULT_STORE})")
    p.add_argument("--no-store", action="store_true", help="neither restore from nor write to the store")
    p.set_defaults(func=cmd_run_many)
