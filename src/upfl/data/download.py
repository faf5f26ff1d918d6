"""Downloads with resume, retries and checksums; offline use of archives obtained elsewhere.

A download streams into ``<cache>/<filename>.part``, is checked (length, sha256, and a validator:
a zip with a known sha256 must open; a zip without one must pass every member's CRC-32), and only
then lands in the resources folder under its final name. The sha256 is the known one when given;
otherwise the computed one is recorded beside the file as ``<file>.sha256`` (``sha256sum`` format)
and checked on every later use. Nothing in the resources folder looks complete unless it passed
these checks.

Resuming: ``<filename>.part.json`` records the URL, the server's ETag / Last-Modified and the sha256
of the bytes written so far. A ``.part`` is resumed (``Range`` + ``If-Range``) only if that record
exists and its bytes still match; the server's answer must confirm the same object, else the
download starts over. Concurrent fetches of one archive take turns through ``<filename>.lock``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from ..files import atomic_path, published_mode, sha256_file, write_json, write_text
from .archive import ArchiveError, check_zip, verify_zip
from .sources import DEADLINE, MAX_BYTES, Source

CHUNK = 1 << 16
CACHE_DIR = ".download-cache"
OFFLINE_HINT = "download the files elsewhere and give them with --from-mirror DIR (or --from-archive FILE)"


class DownloadError(RuntimeError):
    """A download or an archive failed a check; the message names the URL or file, expected and got."""


class _Retry(Exception):
    """A transient failure: try again (resuming from what the .part file holds)."""


def sidecar(path: str | os.PathLike) -> Path:
    """``<file>.sha256``: where the checksum of a downloaded file is recorded."""
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def read_recorded_sha256(path: str | os.PathLike) -> str | None:
    """The checksum recorded beside ``path``, or ``None`` when there is none."""
    side = sidecar(path)
    if not side.exists():
        return None
    text = side.read_text(encoding="utf-8").split()
    if not text or not re.fullmatch(r"[0-9a-fA-F]{64}", text[0]):
        raise DownloadError(f"{side}: not a sha256 record (expected '<64 hex digits>  <name>')")
    return text[0].lower()


def record_sha256(path: str | os.PathLike, digest: str) -> None:
    write_text(sidecar(path), f"{digest}  {Path(path).name}\n")


def verify_file(path: str | os.PathLike, expected: str | None = None) -> str:
    """Check a file against the known sha256, else the recorded one; record it if neither exists.

    Returns the digest. A mismatch raises :class:`DownloadError` naming the file, expected and got.
    """
    path = Path(path)
    got = sha256_file(path)
    recorded = read_recorded_sha256(path)
    want = expected.lower() if expected else recorded
    if want is None:
        record_sha256(path, got)
        return got
    if got != want:
        origin = "known checksum" if expected else f"checksum recorded in {sidecar(path)}"
        raise DownloadError(f"{path}: sha256 mismatch ({origin}): expected {want}, got {got}")
    if recorded != got:
        record_sha256(path, got)
    return got


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """``bytes START-END/TOTAL`` -> ``(START, TOTAL)``; ``bytes */TOTAL`` -> ``(None, TOTAL)``."""
    if not value:
        return None, None
    m = re.fullmatch(r"\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*", value)
    if not m:
        return None, None
    start = int(m.group(1)) if m.group(1) is not None else None
    total = int(m.group(2)) if m.group(2) != "*" else None
    return start, total


def _strong_validator(etag: str | None, last_modified: str | None) -> str | None:
    """The ``If-Range`` value that names this exact object: a strong ETag, else Last-Modified, else None."""
    if etag and not etag.startswith("W/"):
        return etag
    return last_modified or None


def state_file(part: Path) -> Path:
    """``<name>.part.json``: which object a ``.part`` holds (URL, ETag, Last-Modified) and its verified prefix."""
    return part.with_name(part.name + ".json")


def _save_state(part: Path, state: dict, size: int, digest: str) -> None:
    write_json(state_file(part), {**state, "size": size, "sha256": digest})


def _discard(part: Path) -> None:
    for p in (part, state_file(part)):
        if p.exists():
            p.unlink()


def _resume_point(url: str, part: Path, log: Callable[[str], None]) -> tuple[int, dict, hashlib._Hash]:
    """How many bytes of ``part`` may be resumed, the object they belong to, and their running sha256.

    A ``.part`` is resumed only when its state file names the same URL and a strong validator, and the
    first ``size`` bytes still hash to the recorded sha256 (bytes past it, written after the last record,
    are cut). Anything else (a corrupted or foreign ``.part``) is discarded and the download starts over.
    """
    h = hashlib.sha256()
    if not part.exists():
        _discard(part)
        return 0, {}, h
    try:
        state = json.loads(state_file(part).read_text(encoding="utf-8"))
        size, digest = int(state["size"]), str(state["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        state, size, digest = None, 0, ""
    reason = None
    if state is None:
        reason = "no record of what it holds"
    elif state.get("url") != url:
        reason = f"it was started from {state.get('url')}"
    elif not _strong_validator(state.get("etag"), state.get("last_modified")):
        reason = "the server gave no ETag or Last-Modified to confirm a resume against"
    elif part.stat().st_size < size:
        reason = f"it holds {part.stat().st_size} bytes, {size} were recorded"
    if reason is None:
        with open(part, "r+b") as f:
            f.truncate(size)
            while block := f.read(CHUNK * 16):
                h.update(block)
        if h.hexdigest() != digest:
            reason = "its bytes no longer match the sha256 recorded while downloading (corrupted)"
    if reason:
        log(f"{part}: not resuming ({reason}); starting over")
        _discard(part)
        return 0, {}, hashlib.sha256()
    return size, state, h


def _check_budget(url: str, part: Path, written: int, total: int | None, max_bytes: int, deadline: float) -> None:
    """:class:`DownloadError` (the ``.part`` removed) once a body passes its announced length or the size cap,
    or the download passes its total deadline; neither is retried."""
    limit = total if total is not None else max_bytes
    if written > limit:
        _discard(part)
        what = f"the announced {total}" if total is not None else f"the cap of {max_bytes} bytes (--max-bytes)"
        raise DownloadError(f"{url}: the server sent more than {what}; nothing kept")
    if time.monotonic() > deadline:
        raise DownloadError(
            f"{url}: not finished within the total deadline (--deadline); {written} bytes kept in "
            f"{part}, run again to resume"
        )


def _attempt(
    url: str,
    part: Path,
    timeout: float,
    progress: bool,
    label: str,
    log: Callable[[str], None] = lambda m: None,
    max_bytes: int = MAX_BYTES,
    deadline: float = float("inf"),
) -> None:
    """One HTTP request writing to ``part``; returns when ``part`` holds the whole file.

    A resume sends ``Range`` with ``If-Range`` (the object's strong ETag or Last-Modified): a server
    that honours it answers 206 only for the same object, else 200 with the whole new object; a 206
    whose ETag or Last-Modified differs from the recorded one (a server ignoring ``If-Range``) restarts.
    """
    have, state, h = _resume_point(url, part, log)
    req = urllib.request.Request(url, headers={"User-Agent": "upfl-data/1", "Accept-Encoding": "identity"})
    if have:
        req.add_header("Range", f"bytes={have}-")
        validator = _strong_validator(state.get("etag"), state.get("last_modified"))
        assert validator is not None  # _resume_point resumes only against a strong validator
        req.add_header("If-Range", validator)
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:
            _, total = _content_range(e.headers.get("Content-Range"))
            e.close()
            if total == have:
                return
            _discard(part)
            raise _Retry(f"HTTP 416 for a resume from byte {have}; restarting") from None
        if e.code in (408, 429) or e.code >= 500:
            raise _Retry(f"HTTP {e.code} {e.reason}") from None
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, socket.gaierror):  # a name that does not resolve will not resolve in a minute
            raise DownloadError(
                f"{url}: host name lookup failed ({e.reason}); offline or behind a proxy? {OFFLINE_HINT}"
            ) from None
        raise _Retry(f"{type(e).__name__}: {e}") from None
    except (OSError, http.client.HTTPException) as e:
        raise _Retry(f"{type(e).__name__}: {e}") from None
    with resp:
        length = resp.headers.get("Content-Length")
        length = int(length) if length is not None and length.isdigit() else None
        etag, modified = resp.headers.get("ETag"), resp.headers.get("Last-Modified")
        if resp.status == 206:
            start, total = _content_range(resp.headers.get("Content-Range"))
            if start != have:
                _discard(part)
                raise _Retry(f"server resumed from byte {start}, asked for {have}; restarting")
            if (etag or None) != state.get("etag") or (modified or None) != state.get("last_modified"):
                _discard(part)
                raise _Retry("server sent part of another version of the file (ETag/Last-Modified changed); restarting")
            if total is None and length is not None:
                total = have + length
            mode = "ab"
        else:
            have, total, mode, h = 0, length, "wb", hashlib.sha256()
            state = {"url": url, "etag": etag or None, "last_modified": modified or None}
        bar = tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=label, disable=not progress, leave=False)
        written, since = have, 0
        try:
            with open(part, mode) as out:
                try:
                    while True:
                        try:
                            block = resp.read1(CHUNK)  # what has arrived: a dripping server meets the deadline
                        except http.client.IncompleteRead as e:
                            out.write(e.partial)
                            h.update(e.partial)
                            written += len(e.partial)
                            raise _Retry("connection closed mid-transfer") from None
                        except (OSError, http.client.HTTPException) as e:
                            raise _Retry(f"{type(e).__name__} mid-transfer: {e}") from None
                        if not block:
                            break
                        _check_budget(url, part, written + len(block), total, max_bytes, deadline)
                        try:
                            out.write(block)
                        except OSError as e:
                            raise DownloadError(
                                f"{part}: cannot write the download ({e.strerror}); nothing published"
                            ) from None
                        h.update(block)
                        written += len(block)
                        since += len(block)
                        bar.update(len(block))
                        if since >= STATE_EVERY:
                            out.flush()
                            _save_state(part, state, written, h.hexdigest())
                            since = 0
                finally:
                    if part.exists():
                        with contextlib.suppress(OSError):  # a full disk: the record is best effort
                            out.flush()
                            _save_state(part, state, written, h.hexdigest())
        finally:
            bar.close()
    size = part.stat().st_size
    if total is not None and size < total:
        raise _Retry(f"connection closed after {size} of {total} bytes")
    if total is not None and size > total:
        _discard(part)
        raise DownloadError(f"{url}: received {size} bytes, more than the announced {total}")


def _publish(part: Path, dest: Path) -> None:
    """Move a finished ``.part`` onto ``dest`` (rename, or copy-then-rename across file systems), with its published
    mode (:func:`upfl.files.published_mode`, whatever the umask)."""
    os.chmod(part, published_mode())
    try:
        os.replace(part, dest)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        with atomic_path(dest) as tmp:
            shutil.copyfile(part, tmp)
        part.unlink()


def _quarantine(part: Path) -> Path:
    bad = (
        part.with_name(part.name[: -len(".part")] + ".bad")
        if part.name.endswith(".part")
        else part.with_name(part.name + ".bad")
    )
    os.replace(part, bad)
    if state_file(part).exists():
        state_file(part).unlink()
    return bad


@contextlib.contextmanager
def _fetch_lock(cache: Path, name: str, log: Callable[[str], None]):
    """Hold ``<cache>/<name>.lock`` (``flock``): a second fetch of the same archive waits for the first."""
    cache.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            log(f"{name}: another process is fetching it; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def download(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    retries: int = 5,
    backoff: float = 1.0,
    timeout: float = 60.0,
    progress: bool = True,
    validate: Callable[[Path], None] | None = None,
    log: Callable[[str], None] | None = None,
    max_bytes: int = MAX_BYTES,
    deadline: float = DEADLINE,
) -> Path:
    """Download ``url`` to ``dest`` unless ``dest`` is already there (then only verified).

    Resumes ``<cache_dir>/<name>.part`` across attempts and across calls when the server confirms the
    same object (``If-Range``); waits ``backoff * 2**attempt`` seconds between attempts. ``timeout`` bounds
    one read, ``deadline`` the whole download (attempts and waits); a body without Content-Length is capped at
    ``max_bytes``; a host name that does not resolve is not retried. Two processes
    fetching the same ``dest`` take turns (a lock in the cache); the second finds it published and
    verifies it. A checksum mismatch or a failed ``validate`` moves the data to ``<name>.bad`` in the
    cache and raises :class:`DownloadError`.
    """
    log = log or _stderr
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise DownloadError(f"retries must be an integer >= 0, got {retries!r}")
    if timeout <= 0 or backoff < 0:
        raise DownloadError(f"timeout must be > 0 and backoff >= 0, got timeout {timeout!r}, backoff {backoff!r}")
    dest = Path(dest)
    if dest.exists():
        verify_file(dest, sha256)
        return dest
    cache = Path(cache_dir) if cache_dir is not None else dest.parent / CACHE_DIR
    with _fetch_lock(cache, dest.name, log):
        if dest.exists():
            verify_file(dest, sha256)
            return dest
        return _download_locked(
            url,
            dest,
            cache,
            sha256,
            retries,
            backoff,
            timeout,
            progress,
            validate,
            log,
            max_bytes,
            time.monotonic() + deadline,
        )


def _download_locked(
    url, dest, cache, sha256, retries, backoff, timeout, progress, validate, log, max_bytes, deadline
) -> Path:
    part = cache / (dest.name + ".part")
    reasons: list[str] = []
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(max(0.0, min(backoff * 2 ** (attempt - 1), 60.0, deadline - time.monotonic())))
        try:
            _attempt(
                url,
                part,
                min(timeout, max(0.1, deadline - time.monotonic())),
                progress,
                dest.name,
                log,
                max_bytes,
                deadline,
            )
            break
        except _Retry as e:
            reasons.append(str(e))
    else:
        have = part.stat().st_size if part.exists() else 0
        raise DownloadError(
            f"{url}: download incomplete after {retries + 1} attempts ({reasons[-1]}); "
            f"{have} bytes kept in {part}, run again to resume"
        )
    got = sha256_file(part)
    if sha256 and got != sha256.lower():
        bad = _quarantine(part)
        raise DownloadError(
            f"{url}: sha256 mismatch for {dest.name}: expected {sha256.lower()}, got {got} (data moved to {bad})"
        )
    if validate is not None:
        try:
            validate(part)
        except (ArchiveError, ValueError) as e:
            bad = _quarantine(part)
            raise DownloadError(f"{url}: downloaded {dest.name} failed validation: {e} (data moved to {bad})") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    record_sha256(dest, got)
    if state_file(part).exists():
        state_file(part).unlink()
    _publish(part, dest)
    return dest


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def copy_archive(
    src: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    validate: Callable[[Path], None] | None = None,
) -> Path:
    """Place an archive obtained elsewhere (``--from-archive``) at ``dest``, checked like a download."""
    src, dest = Path(src), Path(dest)
    if not src.is_file():
        raise DownloadError(f"{src}: --from-archive file does not exist")
    got = sha256_file(src)
    if sha256 and got != sha256.lower():
        raise DownloadError(f"{src}: sha256 mismatch for {dest.name}: expected {sha256.lower()}, got {got}")
    if validate is not None:
        try:
            validate(src)
        except (ArchiveError, ValueError) as e:
            raise DownloadError(f"{src}: failed validation: {e}") from None
    if src.resolve() != dest.resolve():
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
    record_sha256(dest, got)
    return dest


def validator_for(filename: str, sha256: str | None = None) -> Callable[[Path], None] | None:
    """The check of a file type before it is published: a zip with a known sha256 must open with an intact
    central directory; a zip without one (trust on first use) must also pass every member's CRC-32."""
    if not filename.endswith(".zip"):
        return None
    return check_zip if sha256 else verify_zip


def fetch_source(
    source: Source,
    resources: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    from_archive: str | os.PathLike | None = None,
    **kwargs,
) -> Path:
    """Make ``<resources>/<source.filename>`` present and verified: placed archive, local copy or download."""
    dest = Path(resources) / source.filename
    validate = validator_for(source.filename, source.sha256)
    if from_archive is not None:
        return copy_archive(from_archive, dest, sha256=source.sha256, validate=validate)
    if dest.exists():
        if read_recorded_sha256(dest) is not None:
            validate = validator_for(source.filename, "recorded")
        if validate is not None:
            try:
                validate(dest)
            except (ArchiveError, ValueError) as e:
                raise DownloadError(f"{dest}: archive in the resources folder failed validation: {e}") from None
        verify_file(dest, source.sha256)
        return dest
    # Files in sub-folders (the paper's mytrain.pt of four sets) keep their .part files apart.
    cache = (Path(cache_dir) if cache_dir is not None else Path(resources) / CACHE_DIR) / Path(source.filename).parent
    return download(source.url, dest, sha256=source.sha256, cache_dir=cache, validate=validate, **kwargs)


STATE_EVERY = 8 << 20
"""Bytes between two records of a ``.part`` file's verified prefix (:func:`state_file`)."""
