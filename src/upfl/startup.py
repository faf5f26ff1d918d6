"""What a command pays around its work: the cyclic garbage collector paused while modules load (:func:`paused_gc`)
and the interpreter's teardown skipped once a command has written everything (:func:`exit_now`). Measured by
benchmarks/startup.py; docs/benchmarks.md says where a run's start-up goes."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator

ONE_COMMAND = {"process": False}
"""``process``: True in a process started as one ``upfl`` command line that ends through :func:`exit_now` (set by
:func:`upfl.cli.main`), where what a command imports lives to the end."""


@contextlib.contextmanager
def paused_gc(freeze: bool = False) -> Iterator[None]:
    """The cyclic garbage collector off inside (as it was after). Importing torch and numba, and loading numba's
    kernels, allocates hundreds of thousands of objects that all live on: the collections they trigger find nothing
    to free and cost a sixth of the imports' CPU time. ``freeze``, in a one-command process (:data:`ONE_COMMAND`):
    the objects alive at the end are moved out of the collector's sight (:func:`gc.freeze`), so that the full
    collections of the work that follows do not walk the modules' objects again (a twentieth of a figure job's CPU
    time); elsewhere (a test calling ``main``, a library user) nothing is frozen."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze and ONE_COMMAND["process"]:
            gc.freeze()
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
