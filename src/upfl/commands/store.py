"""``upfl store forget RUN_DIR...``: remove runs' finished-run store entries and result files;
``upfl store gc``: remove what interrupted work left behind.

The next ``snakemake`` then retrains the forgotten runs (their results are neither on disk nor in the store). The
store entry of a run is found by the config hash its ``summary.json`` records (:func:`upfl.engine.store.forget`).
``gc`` removes the temporary folders of saves that were killed (``.<entry>.*.new``) and the device state that
interrupted private runs left outside their run folder once that run folder is gone, and prints the bytes freed.
"""

from __future__ import annotations

import argparse


def cmd_store_forget(args: argparse.Namespace) -> int:
    from ..engine.store import forget

    for path in forget(args.store, args.run_dirs):
        print(f"removed {path}")
    return 0


def cmd_store_gc(args: argparse.Namespace) -> int:
    import shutil

    from ..engine.checkpoints import device_state_root, orphaned_device_states
    from ..engine.store import folder_bytes, remove_stale_temporaries

    freed = 0
    for path, size in remove_stale_temporaries(args.store):
        print(f"removed {path} ({size} bytes; an interrupted save)")
        freed += size
    root = args.device_state or device_state_root()
    for folder in orphaned_device_states(root):
        size = folder_bytes(folder)
        shutil.rmtree(folder, ignore_errors=True)
        print(f"removed {folder} ({size} bytes; device state of a private run that is gone)")
        freed += size
    print(f"freed {freed} bytes ({freed / 2**20:.1f} MiB)")
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
    g = actions.add_parser(
        "gc",
        help="remove what interrupted work left: killed saves' temporary folders in the store, device state of "
        "private runs whose run folder is gone; prints the bytes freed",
    )
    g.add_argument("--store", default=DEFAULT_STORE, help=f"the store (default {DEFAULT_STORE})")
    g.add_argument(
        "--device-state",
        default=None,
        help="the device-state folder (default: $UPFL_DEVICE_STATE_DIR, else $XDG_STATE_HOME/upfl/device-state)",
    )
    g.set_defaults(func=cmd_store_gc)
