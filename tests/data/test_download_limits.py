"""Downloads are bounded: a total deadline, a size cap without Content-Length, no retry of a failed name lookup."""

import socket
import threading
import time
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from upfl.data import download as dl


class Hostile(BaseHTTPRequestHandler):
    """``/endless``: a body without Content-Length that never ends; ``/drip``: one byte every 0.1 s."""

    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                if self.path == "/endless":
                    self.wfile.write(b"x" * 65536)
                else:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.1)
        except OSError:
            pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_body_without_length_is_capped_and_nothing_is_left(server, tmp_path):
    with pytest.raises(dl.DownloadError, match=r"more than the cap of 1000000 bytes \(--max-bytes\)"):
        dl.download(
            f"{server}/endless",
            tmp_path / "f.zip",
            cache_dir=tmp_path / "c",
            max_bytes=1_000_000,
            retries=3,
            backoff=0,
            progress=False,
            log=lambda m: None,
        )
    assert not (tmp_path / "f.zip").exists() and not (tmp_path / "c" / "f.zip.part").exists()


def test_a_dripping_server_meets_the_total_deadline(server, tmp_path):
    start = time.monotonic()
    with pytest.raises(dl.DownloadError, match=r"total deadline \(--deadline\)"):
        dl.download(
            f"{server}/drip",
            tmp_path / "f.zip",
            cache_dir=tmp_path / "c",
            timeout=3,
            deadline=1.5,
            retries=5,
            backoff=0,
            progress=False,
            log=lambda m: None,
        )
    assert time.monotonic() - start < 6
    assert not (tmp_path / "f.zip").exists()


def test_a_failed_name_lookup_is_not_retried_and_names_from_mirror(tmp_path, monkeypatch):
    calls = []

    def unresolvable(*args, **kwargs):
        calls.append(args)
        raise urllib.error.URLError(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))

    monkeypatch.setattr(dl.urllib.request, "urlopen", unresolvable)
    start = time.monotonic()
    with pytest.raises(dl.DownloadError, match=r"host name lookup failed.*--from-mirror DIR"):
        dl.download(
            "http://no-such-host.invalid/f.zip",
            tmp_path / "f.zip",
            cache_dir=tmp_path / "c",
            retries=5,
            backoff=1,
            progress=False,
            log=lambda m: None,
        )
    assert len(calls) == 1 and time.monotonic() - start < 1


def test_fetch_flags_for_the_bounds_are_checked(tmp_path, capsys):
    from upfl.cli import main

    assert main(["data", "fetch", "sent140", "--resources", str(tmp_path), "--deadline", "0"]) == 2
    assert "--deadline: must be > 0" in capsys.readouterr().err
    assert main(["data", "fetch", "sent140", "--resources", str(tmp_path), "--max-bytes", "0"]) == 2
    assert "--max-bytes: must be >= 1" in capsys.readouterr().err
