"""A run's result files as trained: their SHA-256, recorded when the run is written and checked when it is published.

``OUT/checksums.json`` holds the run's config hash and the SHA-256 of ``metrics.csv`` and ``summary.json``, written
with them by the run (and by a restore from the finished-run store). ``runs.csv`` (``upfl report runs``) and the
figures that read ``metrics.csv`` publish a run's numbers only where its files still have these checksums.

What this defends against: accidents (a file edited by hand, an editor's autosave, a script writing into the wrong
folder), sync tools (rsync, a cloud folder or a copy cut short or mixing two hosts' versions), bad merges (a result
file taken from another branch). What it does not: someone who rewrites a result file *and* its checksum (the
record is not signed; it is no defence against a deliberate forgery), or a run whose numbers were wrong when it was
trained (a checksum says the bytes are the ones written, not that they are right).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

RESULT_FILES = ("metrics.csv", "summary.json")
"""A run's result files, in the order they are written (``summary.json`` last: it marks a finished run)."""
RECORD = "checksums.json"


class IntegrityError(ValueError):
    """A run's result files do not match what was recorded when it was trained; the message names each file."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_text(config_hash: str, files: dict[str, bytes]) -> str:
    """The text of ``checksums.json`` for result files ``files`` (name -> bytes) of a run of ``config_hash``."""
    return (
        json.dumps(
            {"config_hash": config_hash, "files": {n: sha256_bytes(files[n]) for n in RESULT_FILES}},
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )


def read_record(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """A run folder's recorded checksums; None when it has none; :class:`IntegrityError` when it is unreadable."""
    path = Path(run_dir) / RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IntegrityError(f"{path}: unreadable ({e})") from None
    files = record.get("files") if isinstance(record, dict) else None
    if (
        not isinstance(files, dict)
        or sorted(files) != sorted(RESULT_FILES)
        or not isinstance(record.get("config_hash"), str)
    ):
        raise IntegrityError(
            f"{path}: not a checksum record (config_hash and the SHA-256 of {', '.join(RESULT_FILES)})"
        )
    return record


def mismatches(run_dir: str | os.PathLike, record: dict[str, Any]) -> list[str]:
    """One line per result file of ``run_dir`` that is missing, unreadable or other than ``record`` says."""
    problems = []
    for name in RESULT_FILES:
        path = Path(run_dir) / name
        try:
            digest = sha256_bytes(path.read_bytes())
        except OSError as e:
            problems.append(f"{path}: unreadable ({e.strerror})")
            continue
        if digest != record["files"][name]:
            problems.append(
                f"{path}: checksum {digest[:16]} is not the {str(record['files'][name])[:16]} recorded "
                f"in {RECORD} when the run was trained (the file was changed since)"
            )
    return problems


def check_file(run_dir: str | os.PathLike, name: str) -> None:
    """:class:`IntegrityError` when the run has a record and its file ``name`` does not match it."""
    record = read_record(run_dir)
    if record is None:
        return
    path = Path(run_dir) / name
    digest = sha256_bytes(path.read_bytes())
    if digest != record["files"][name]:
        raise IntegrityError(
            f"{path}: checksum {digest[:16]} is not the {str(record['files'][name])[:16]} recorded "
            f"in {RECORD} when the run was trained (the file was changed since; rebuild runs.csv, "
            "which restores or retrains the run)"
        )
