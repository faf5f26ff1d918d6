"""How an ``upfl`` process and the workflow's fork server talk (:mod:`upfl.launch`, :mod:`upfl.pipeline.forkserver`):
length-prefixed JSON messages over a Unix socket, the job's standard streams passed along with the first one. Only
the standard library, imported where a message is sent or read, so that the ``upfl`` entry point of a process
that no server serves imports nothing more."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

SOCKET_ENV = "UPFL_FORK_SERVER_SOCKET"
"""The environment variable naming the fork server's socket (set by the workflow for its jobs)."""

SERVER_AHEAD = "server_ahead"
"""The parsed command's attribute (its parser's default) naming a step the fork server runs before forking it:
``step(args) -> str``, what it did (for the server's log), run in the job's folder; its result is what the child,
and every later one, inherits."""

SERVER_AFTER = "server_after"
"""Likewise, a step the fork server runs once the command has exited with status 0."""

HEADER_SIZE = 8
"""A message's length (big-endian, 8 bytes), before its JSON body."""


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
    import json
    import socket

    body = json.dumps(message).encode()
    header = len(body).to_bytes(HEADER_SIZE, "big")
    if fds:
        socket.send_fds(sock, [header], fds)
    else:
        sock.sendall(header)
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
    return receive_message_and_fds(sock, 0)[0]


def receive_message_and_fds(sock: socket.socket, max_fds: int) -> tuple[dict | None, list[int]]:
    """The next message on ``sock`` and the file descriptors (at most ``max_fds``) sent with it by
    :func:`send_message`, now open in this process; the message is None when the other end closed before a whole
    one (the descriptors that came are still returned, for the caller to close)."""
    import json
    import socket

    fds: list[int] = []
    if max_fds:
        header, fds, _flags, _address = socket.recv_fds(sock, HEADER_SIZE, max_fds)
        header += receive_exactly(sock, HEADER_SIZE - len(header)) if header else b""
    else:
        header = receive_exactly(sock, HEADER_SIZE)
    if len(header) < HEADER_SIZE:
        return None, fds
    size = int.from_bytes(header, "big")
    body = receive_exactly(sock, size)
    return (json.loads(body) if len(body) == size else None), fds
