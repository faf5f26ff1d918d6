"""``upfl store forget RUN_DIR...``: remove runs' finished-run store entries and result files.

The next ``snakemake`` then retrains those runs (their results are neither on disk nor in the store). The
store entry of a run is found by the config hash its ``summary.json`` records (:func:`upfl.engine.store.forget`).
"""

from __future__ import annotations

import argparse


def cmd_store_forget(args: argparse.Namespace) -> int:
    from ..engine.store import forget

    for path in forget(args.store, args.run_dirs):
        print(f"removed {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from ..engine.store import DEFAULT_STORE

    p = sub.add_parser("store", help="the finished-run store (results/finished)")
    actions = p.add_subparsers(dest="action", required=True)
    f = actions.add_parser(
        "forget", help="remove runs' store entries and result files: the next snakemake retrains them"
    )
    f.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run's result folder (results/runs/<run id>)")
    f.add_argument("--store", default=DEFAULT_STORE, help=f"the store (default {DEFAULT_STORE})")
    f.set_defaults(func=cmd_store_forget)
