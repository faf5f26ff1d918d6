"""The ``upfl`` command's entry point: a command line handed to the workflow's fork server when one serves this
process's environment (:mod:`upfl.pipeline.forkserver`), run here otherwise.

A workflow job is a new ``upfl`` process that would import numpy, numba's kernels, torch, pandas or matplotlib again
before its first useful step. Under a local ``snakemake`` the fork server has imported them once; this module, which
imports nothing beyond the standard library, hands it the command line, the working folder, the environment and the
standard streams (as file descriptors), forwards the signals it gets to the forked command, and exits with the
command's status. Whenever the server cannot take the command (none named in ``$UPFL_FORK_SERVER_SOCKET``, gone, or
an environment its imports were not made under), the command runs in this process as it always did.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "UPFL_FORK_SERVER_SOCKET"
"""The environment variable naming the fork server's socket (set by the workflow for its jobs)."""

HEADER = struct.Struct("!Q")
"""A message's length, before its JSON body."""

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""The signals a job's process passes on to its forked command (Snakemake stops a job with SIGTERM or SIGINT)."""

STATUS_SERVER_LOST = 70
"""The exit status when the server goes away while the command runs (``EX_SOFTWARE``): the command's own status is
unknown."""


def main() -> int:
    """Run ``upfl`` with this process's command line: through the fork server when it takes it, here otherwise."""
    path = os.environ.get(SOCKET_ENV)
    if path:
        status = run_on_server(path, sys.argv[1:])
        if status is not None:
            return status
    from .cli import main as run_here

    return run_here()


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


def interpreter() -> dict[str, str]:
    """What a command's process must share with the fork server besides the environment: the interpreter, the
    environment prefix (a venv) and the upfl package."""
    return {
        "executable": os.path.realpath(sys.executable),
        "prefix": sys.prefix,
        "package": os.path.dirname(os.path.realpath(__file__)),
    }


def send_message(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    body = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [HEADER.pack(len(body))], fds)
    else:
        sock.sendall(HEADER.pack(len(body)))
    sock.sendall(body)


def receive_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes from ``sock``; fewer only when the other end closed."""
    parts = []
    while size:
        part = sock.recv(min(size, 1 << 20))
        if not part:
            break
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def receive_message(sock: socket.socket) -> dict | None:
    """The next message on ``sock``, or None when the other end closed before a whole one."""
    header = receive_exactly(sock, HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    body = receive_exactly(sock, size)
    return json.loads(body) if len(body) == size else None


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
        return STATUS_SERVER_LOST
    if "signal" in outcome:  # ended by a signal: end this process by the same one, as the command's own would
        ended_by = int(outcome["signal"])
        signal.signal(ended_by, signal.SIG_DFL)
        os.kill(os.getpid(), ended_by)
        return 128 + ended_by
    return int(outcome["status"])
