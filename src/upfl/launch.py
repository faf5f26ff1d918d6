"""The ``upfl`` command's entry point: a command line handed to the workflow's fork server when one serves this
process's environment (:mod:`upfl.pipeline.forkserver`), run here otherwise.

A workflow job is a new ``upfl`` process that would import numpy, numba's kernels, torch, pandas or matplotlib again
before its first useful step. Under a local ``snakemake`` the fork server has imported them once. This module
imports only the standard library and :mod:`upfl.pipeline.fork_protocol`; it hands the server the command line,
the working folder, the environment and the standard streams (as file descriptors), forwards the signals it gets
to the forked command, and exits with the command's status. Whenever the server cannot take the command (none
named in ``$UPFL_FORK_SERVER_SOCKET``, gone, or an environment its imports were not made under), the command runs
in this process as it always did. ``python -m upfl.launch SOCKET_PATH`` is the server itself.
"""

from __future__ import annotations

import os
import signal
import sys

from .errors import EXIT_SERVER_LOST
from .pipeline.fork_protocol import SOCKET_ENV, interpreter, receive_message, send_message

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""The signals a job's process passes on to its forked command (Snakemake stops a job with SIGTERM or SIGINT)."""


def main() -> int:
    """Run ``upfl`` with this process's command line: through the fork server when it takes it, here otherwise."""
    path = os.environ.get(SOCKET_ENV)
    if path:
        status = run_on_server(path, sys.argv[1:])
        if status is not None:
            return status
    return run_here()


def run_here() -> int:
    """``upfl`` with ``sys.argv``, in this process."""
    from .cli import main as upfl

    return upfl()


def parse_here(argv: list[str]) -> object:
    """``argv`` parsed by ``upfl``'s parser (the fork server reads a command's server steps from it)."""
    from .cli import parse_words

    return parse_words(argv)


def request(argv: list[str]) -> dict:
    """What the server needs to run ``argv`` as this process would: the interpreter and package it must share, the
    working folder, the environment and the file-creation mask."""
    mask = os.umask(0)
    os.umask(mask)
    return {
        "argv": argv,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": mask,
        **interpreter(),
    }


def standard_streams_open() -> bool:
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        return False
    return True


def run_on_server(path: str, argv: list[str]) -> int | None:
    """The exit status of ``argv`` run by the fork server at ``path``; None when the server did not take it (the
    caller runs it itself). Once the command is forked, a signal this process gets is passed on to it."""
    import contextlib
    import socket

    if not standard_streams_open():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        send_message(sock, request(argv), [0, 1, 2])
        reply = receive_message(sock)
    except OSError:
        sock.close()
        return None
    if reply is None or "pid" not in reply:
        sock.close()
        return None
    pid = int(reply["pid"])

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # the command has just ended
            os.kill(pid, signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    outcome = receive_message(sock)  # a handled signal does not interrupt the wait (PEP 475)
    sock.close()
    if outcome is None:
        print(f"upfl: the fork server at {path} stopped while the command ran (pid {pid})", file=sys.stderr)
        return EXIT_SERVER_LOST
    if "signal" in outcome:  # ended by a signal: end this process by the same one, as the command's own would
        ended_by = int(outcome["signal"])
        signal.signal(ended_by, signal.SIG_DFL)
        os.kill(os.getpid(), ended_by)
        return 128 + ended_by
    return int(outcome["status"])


if __name__ == "__main__":  # python -m upfl.launch SOCKET_PATH: the fork server, its children running upfl
    from .pipeline.forkserver import serve

    sys.exit(serve(sys.argv[1], run_here, parse_here))
