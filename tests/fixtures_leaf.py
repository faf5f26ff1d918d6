"""Fixture archives in the layouts of LEAF's sources, and a local HTTP server with Range support.

Importable by any test (``from fixtures_leaf import ...``): the data tests and the pipeline tests
build the same tiny archives. Nothing here touches the network beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import re
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from PIL import Image

LETTERS_A_J = "abcdefghij"


def png_bytes(rng: np.random.Generator, size: int = 128) -> bytes:
    """A white ``size`` x ``size`` greyscale PNG with a random dark stroke (unique bytes)."""
    img = np.full((size, size), 255, dtype=np.uint8)
    r0, c0 = rng.integers(16, size - 48, 2)
    h, w = rng.integers(8, 40, 2)
    img[r0 : r0 + h, c0 : c0 + w] = rng.integers(0, 120, (h, w), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img, mode="L").save(buf, format="PNG")
    return buf.getvalue()


@dataclass
class NistFixture:
    by_class: Path
    images_per_letter: dict[str, int]
    excluded_by_class: int
    conflicts: int


def make_nist_zips(
    folder: Path, per_letter: int = 16, seed: int = 0, other_classes: str = "0A", with_root: bool = True
) -> NistFixture:
    """``by_class.zip`` in NIST's layout.

    ``<hex>/hsf_<k>/...png`` (kept), plus ``train_<hex>/`` copies and an ``hsf_mit`` folder (both
    dropped by LEAF's filter), and one image of 'a' whose bytes appear again under 'b' (a conflict:
    the first class keeps it).
    """
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    pre_c = "by_class/" if with_root else ""
    classes = [(ch, f"{ord(ch):x}") for ch in LETTERS_A_J + other_classes]
    class_entries: list[tuple[str, bytes]] = []
    counts: dict[str, int] = {}
    k = 0
    for ch, hx in classes:
        n = per_letter if ch in LETTERS_A_J else 3
        counts[ch] = n
        for i in range(n):
            data = png_bytes(rng)
            part = f"hsf_{i % 2}"
            class_entries.append((f"{pre_c}{hx}/{part}/{part}_{k:05d}.png", data))
            class_entries.append((f"{pre_c}{hx}/train_{hx}/train_{hx}_{k:05d}.png", data))
            k += 1
        data = png_bytes(rng)
        class_entries.append((f"{pre_c}{hx}/hsf_mit/mit_{k:05d}.png", data))
        k += 1
    first_a = next(data for name, data in class_entries if "/hsf_0/" in name)
    class_entries.append((f"{pre_c}62/hsf_1/hsf_1_{k:05d}.png", first_a))
    by_class = folder / "by_class.zip"
    with zipfile.ZipFile(by_class, "w", zipfile.ZIP_STORED) as zf:
        for name, data in class_entries:
            zf.writestr(name, data)
    return NistFixture(by_class, counts, len(classes), 1)


SENT_WORDS = ["good", "bad", "happy", "sad", "day", "love", "hate", "work", "home", "the", "a", "i", "is", "so"]


@dataclass
class Sent140Fixture:
    path: Path
    rows: int
    malformed_lines: dict[int, str]
    users: dict[str, int]


def make_sent140_zip(
    folder: Path, users: int = 40, seed: int = 0, csv_name: str = "training.1600000.processed.noemoticon.csv"
) -> Sent140Fixture:
    """``trainingandtestdata.zip`` with a few hundred rows in the Sentiment140 CSV format.

    ISO-8859-1, no header, ``polarity, id, date, query, user, text``; users with 2-20 tweets;
    a few malformed lines (wrong column count, polarity 2, a non-numeric polarity) whose line
    numbers are returned, and one Latin-1 accented tweet.
    """
    rng = np.random.default_rng(seed)
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    per_user: dict[str, int] = {}
    line = 0
    malformed: dict[int, str] = {}
    for u in range(users):
        name = f"user_{u:03d}"
        n = int(rng.integers(2, 21))
        per_user[name] = n
        for _ in range(n):
            pol = int(rng.choice([0, 4]))
            words = rng.choice(SENT_WORDS, size=int(rng.integers(3, 35)))
            text = " ".join(words) + rng.choice(["!", ".", " ?", " isn't it"])
            writer.writerow([pol, 1000 + line, "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", name, text])
            line += 1
        if u % 13 == 5:
            buf.write('"0","1","Mon Apr 06","NO_QUERY","only five columns"\n')
            line += 1
            malformed[line] = "columns"
        if u % 17 == 3:
            writer.writerow([2, 1, "Mon Apr 06", "NO_QUERY", name, "neutral is not a training polarity"])
            line += 1
            malformed[line] = "polarity"
    writer.writerow([4, 99, "Mon Apr 06", "NO_QUERY", "user_000", "caf\u00e9 cr\u00e8me good day"])
    line += 1
    per_user["user_000"] += 1
    writer.writerow(["x", 98, "Mon Apr 06", "NO_QUERY", "user_000", "polarity not a number"])
    line += 1
    malformed[line] = "polarity"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainingandtestdata.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(csv_name, buf.getvalue().encode("iso-8859-1"))
        zf.writestr("testdata.manual.2009.06.14.csv", b'"4","3","Mon May 11","kindle2","tpryan","ok"\n')
    return Sent140Fixture(path, line, malformed, per_user)


def make_glove_zip(
    folder: Path, words: list[str] | None = None, dim: int = 300, seed: int = 0, member: str = "glove.6B.300d.txt"
) -> Path:
    """``glove.6B.zip`` with ``word v1 .. v<dim>`` lines (plus a 50d file that must be ignored)."""
    rng = np.random.default_rng(seed)
    words = words if words is not None else SENT_WORDS[:-2] + [".", "!", "?", ",", "isn't", "unused"]
    lines = [w + " " + " ".join(f"{v:.5f}" for v in rng.normal(size=dim)) for w in words]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "glove.6B.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, "\n".join(lines) + "\n")
        zf.writestr("glove.6B.50d.txt", "good " + " ".join(["0.1"] * 50) + "\n")
    return path


def glove_vectors(path: Path, member: str = "glove.6B.300d.txt") -> dict[str, np.ndarray]:
    """The vectors of a fixture GloVe zip, for checking an embedding matrix."""
    with zipfile.ZipFile(path) as zf:
        text = zf.read(member).decode("utf-8")
    out = {}
    for line in text.splitlines():
        parts = line.split(" ")
        out[parts[0]] = np.array([float(v) for v in parts[1:]], dtype=np.float32)
    return out


@dataclass
class ServerLog:
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    if_range: list[str | None] = field(default_factory=list)


def etag_of(data: bytes) -> str:
    """The strong ETag the fixture server gives ``data`` (changes with the content)."""
    return '"' + hashlib.sha256(data).hexdigest()[:20] + '"'


class ArchiveServer:
    """Serve ``files`` (URL path -> bytes) on 127.0.0.1 with ``Range`` support.

    ``drop_once[path] = n``: the first full request for ``path`` announces the whole length,
    sends ``n`` bytes and closes the connection. ``truncate[path] = n``: every response
    announces the whole length and sends at most ``n`` bytes of it. Responses carry a strong
    ``ETag`` (from the content) and a ``Last-Modified`` unless ``validators`` is False;
    ``if_range`` is ``"honour"`` (a resume whose ``If-Range`` names another version gets the whole
    new file, as RFC 9110 asks) or ``"ignore"`` (ranges served whatever ``If-Range`` says).
    """

    def __init__(self, files: dict[str, bytes], port: int = 0):
        self.files = dict(files)
        self.port = port
        self.drop_once: dict[str, int] = {}
        self.truncate: dict[str, int] = {}
        self.no_range = False
        self.validators = True
        self.if_range = "honour"
        self.last_modified = "Wed, 01 Jan 2025 00:00:00 GMT"
        self.delay = 0.0
        self.log = ServerLog()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str) -> str:
        return self.base + path

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                rng = self.headers.get("Range")
                server.log.requests.append((self.path, rng))
                server.log.if_range.append(self.headers.get("If-Range"))
                if server.delay:
                    time.sleep(server.delay)
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                m = re.fullmatch(r"bytes=(\d+)-", rng or "")
                cond = self.headers.get("If-Range")
                if (
                    m
                    and cond is not None
                    and server.if_range == "honour"
                    and (not server.validators or cond not in (etag_of(data), server.last_modified))
                ):
                    m = None
                if m and not server.no_range:
                    start = int(m.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                if server.validators:
                    self.send_header("ETag", etag_of(data))
                    self.send_header("Last-Modified", server.last_modified)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                limit = len(body)
                if self.path in server.drop_once and start == 0:
                    limit = server.drop_once.pop(self.path)
                elif self.path in server.truncate:
                    limit = max(0, server.truncate[self.path] - start)
                if limit < len(body):
                    self.wfile.write(body[:limit])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        return Handler

    def __enter__(self) -> ArchiveServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def serve_folder(folder: Path, port: int = 0) -> Iterator[ArchiveServer]:
    """Serve every file of ``folder`` at ``/<name>`` (on ``port``; 0: a free one)."""
    files = {f"/{p.name}": p.read_bytes() for p in Path(folder).iterdir() if p.is_file()}
    with ArchiveServer(files, port=port) as srv:
        yield srv


def run_data_cli(argv: list[str]) -> int:
    """Run ``upfl data ...`` through the command module's ``register`` (as ``upfl.cli`` does)."""
    import argparse

    from upfl.commands import data as data_cmd

    parser = argparse.ArgumentParser(prog="upfl")
    data_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def fetch_served(folder: Path, dataset: str, files: dict[str, str], resources: Path) -> list[Path]:
    """Serve ``folder`` on 127.0.0.1 and fetch ``dataset``'s sources from it through the real download path.

    ``files`` maps each source name to its file name in ``folder``; the data set's other sources (FEMNIST's
    device index) are not fetched.
    """
    from upfl.data.download import fetch_source
    from upfl.data.sources import resolve_sources

    with serve_folder(folder) as srv:
        urls = {name: srv.url("/" + file) for name, file in files.items()}
        sources = [s for s in resolve_sources([dataset], urls=urls) if s.name in files]
        return [fetch_source(s, resources, progress=False, backoff=0) for s in sources]


def make_leaf_archives(folder: Path) -> dict[str, Path]:
    """All three fixture archives in ``folder``, by source name (by_class, sent140, glove)."""
    nist = make_nist_zips(folder)
    return {"by_class": nist.by_class, "sent140": make_sent140_zip(folder).path, "glove": make_glove_zip(folder)}


def mirror_config(srv: ArchiveServer, archives: dict[str, Path]) -> dict[str, dict[str, str]]:
    """The workflow's ``sources`` mapping pointing every archive at ``srv``."""
    return {name: {"url": srv.url("/" + path.name)} for name, path in archives.items()}


def main(argv: list[str] | None = None) -> int:
    """``python tests/fixtures_leaf.py serve [--port 8765] [--dir DIR]``: build and serve the archives.

    The server of config/fixtures.yaml's mirrors (``snakemake --configfile config/fixtures.yaml``);
    runs until interrupted.
    """
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="fixtures_leaf.py", description=main.__doc__)
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--dir", default=None, help="where to write the archives (default: a temp folder)")
    args = parser.parse_args(argv)
    folder = Path(args.dir or tempfile.mkdtemp(prefix="upfl-fixtures-"))
    archives = make_leaf_archives(folder)
    with serve_folder(folder, port=args.port) as srv:
        for name, path in archives.items():
            print(f"{name:9s} {srv.url('/' + path.name)}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
