"""A local folder served as a download mirror on 127.0.0.1 (the paper's files from ../shared/upstream in CI and
benchmarks; ``sources.<name>.url`` / ``upfl data fetch --url`` then point at it)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from pathlib import Path
from typing import Iterator


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
