"""``upfl kernels warm-up --out FILE``: compile the numba solver's kernels into numba's cache (or load them from it).

The workflow runs it once before the CPU training jobs (rule ``warm_up_kernels``, docs/pipeline.md): on a fresh
clone the compile takes about 20 CPU-seconds, and bundles that start together would each pay it. FILE records
what was done (JSON: numba's version, the threads, the seconds, the package's provenance); a training job does not
read it. Without numba it records that, and the runs use the torch solver.
"""

from __future__ import annotations

import argparse
import json
import time

from ..pipeline.fork_protocol import SERVER_AFTER


def cmd_kernels_warm_up(args: argparse.Namespace) -> int:
    from ..files import provenance, write_texts
    from ..solvers.selection import numba_solver

    start = time.perf_counter()
    solver = numba_solver(args.threads)
    seconds = time.perf_counter() - start
    record = {"numba": None, "threads": args.threads, "seconds": round(seconds, 3), **provenance()}
    if solver is not None:
        import numba

        record["numba"] = numba.__version__
    write_texts({args.out: json.dumps(record, indent=2) + "\n"})
    print(f"numba {record['numba'] or 'not installed: runs use the torch solver'}; {seconds:.1f} s")
    return 0


def load_into_fork_server(args: argparse.Namespace) -> str:
    """The fork server's step after a successful warm-up (:data:`upfl.pipeline.fork_protocol.SERVER_AFTER`): the
    single-threaded kernels loaded from numba's cache into the server, so that the training jobs it forks later
    start with them (about 0.2 CPU-s a job). Kernels for more threads are left to the jobs, whose thread pools the
    server must not start."""
    if args.threads != 1:
        return f"kernels not loaded ahead (--threads {args.threads}: only single-threaded ones are)"
    from ..solvers.selection import numba_solver

    return "kernels loaded" if numba_solver(1) is not None else "no numba: no kernels to load"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kernels", help="the compiled (numba) solver's kernels")
    actions = p.add_subparsers(dest="action", required=True)
    w = actions.add_parser("warm-up", help="compile the kernels into numba's cache, or load them from it")
    w.add_argument(
        "--threads",
        type=int,
        default=1,
        help="numba threads of the jobs that will use them (1: the single-threaded kernels; default 1)",
    )
    w.add_argument("--out", required=True, help="JSON record of the warm-up (written all or nothing)")
    w.set_defaults(func=cmd_kernels_warm_up, **{SERVER_AFTER: load_into_fork_server})
