"""What a command pays around its work: the cyclic garbage collector paused while modules load (:func:`paused_gc`)
and the interpreter's teardown skipped once a command has written everything (:func:`exit_now`). Measured by
benchmarks/startup.py; docs/benchmarks.md says where a run's start-up goes."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off inside (as it was after). Importing torch and numba, and loading numba's
    kernels, allocates hundreds of thousands of objects that all live on: the collections they trigger find nothing
    to free and cost a sixth of the imports' CPU time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def exit_now(status: int) -> None:
    """End the process with ``status`` once standard output and error are flushed, without the interpreter's
    teardown: with torch and numba loaded it frees every module's objects one by one, half a CPU-second that frees
    nothing the system would not. Only for a command line whose every file is written and closed (``atexit``
    handlers do not run)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more to say there
            stream.flush()
    os._exit(status)
