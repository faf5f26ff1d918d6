"""How an ``upfl`` process and the workflow's fork server talk (:mod:`upfl.launch`, :mod:`upfl.pipeline.forkserver`):
length-prefixed JSON messages over a Unix socket, the job's standard streams passed along with the first one. Only
the standard library, so that the ``upfl`` entry point stays light."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

SOCKET_ENV = "UPFL_FORK_SERVER_SOCKET"
"""The environment variable naming the fork server's socket (set by the workflow for its jobs)."""

HEADER = struct.Struct("!Q")
"""A message's length, before its JSON body."""


def interpreter() -> dict[str, str]:
    """What a command's process must share with the fork server besides the environment: the interpreter, the
    environment prefix (a venv) and the upfl package."""
    return {
        "executable": os.path.realpath(sys.executable),
        "prefix": sys.prefix,
        "package": os.path.dirname(os.path.dirname(os.path.realpath(__file__))),
    }


def send_message(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    """Send ``message``; ``fds`` (open file descriptors) go with its header, for the receiver to use as its own."""
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
