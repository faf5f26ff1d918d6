"""A local folder served as a download mirror on 127.0.0.1 (the paper's files from ../shared/upstream in CI and
benchmarks; ``sources.<name>.url`` / ``upfl data fetch --url`` then point at it)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Static files, no request log on stderr."""

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve_folder(folder: str | Path) -> Iterator[str]:
    """Serve ``folder`` on a free port of 127.0.0.1 for the block; yields the base URL (ends with ``/``)."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}/"
        finally:
            httpd.shutdown()


class MirrorFetchError(RuntimeError):
    """``upfl data fetch`` from a served mirror failed; the message holds the command and its output."""


@contextlib.contextmanager
def fetched_from_mirror(
    mirror: str | Path, names: list[str], prefix: str = "upfl-mirror-"
) -> Iterator[tuple[str, Path]]:
    """Serve ``mirror`` (a copy of the authors' repository files) on 127.0.0.1, fetch the paper's data sets
    ``names`` from it through ``upfl data fetch`` (the real code path, in a fresh process) into a temporary
    resources folder, and yield (the mirror's URL, that folder) for the block."""
    import subprocess
    import sys
    import tempfile

    with serve_folder(mirror) as base, tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "upfl.cli",
            "data",
            "fetch",
            *names,
            "--resources",
            tmp,
            "--no-progress",
            "--url",
            f"paper={base}",
            "--backoff",
            "0.5",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise MirrorFetchError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        yield base, Path(tmp)
