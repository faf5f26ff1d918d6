"""The finished-run store: results kept by what made them, restored only when every byte checks out.

An entry is ``<store>/<config hash>-<data fingerprint>-<code fingerprint>/`` (the fingerprints of
:mod:`upfl.engine.checkpoints`: the data set's file contents, the package sources that compute the numbers and
torch's version), never the commit's name: every state of the code, committed or not, has its own entries. An
entry holds the run's result files and ``manifest.json``: the identity it was made for and the SHA-256 of
each file. Restoring reads each file once, checks its checksum against the manifest and writes the bytes it
checked; any mismatch is reported by file name and the run is retrained (its new result replaces the entry).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path

from .. import config as cfgmod
from ..files import publish_mode, write_bytes, write_text
from ..integrity import RECORD, RESULT_FILES, IntegrityError, mismatches, read_record, record_text, sha256_bytes

MANIFEST = "manifest.json"
DEFAULT_STORE = os.path.join("results", "finished")


class StoreMismatch(ValueError):
    """A store entry cannot be restored; the message names the entry file and what is wrong with it."""


TEMPORARY = re.compile(r"\.(?P<entry>[^.]+)\.(?:(?P<host>.+)\.(?P<pid>\d+)\.)?[^.]+\.(?:new|damaged)")
"""A save's temporary folder, ``.<entry>.<host>.<pid>.<random>.new`` (``.damaged``: an entry being removed);
folders of an older upfl have no host and PID."""
FOREIGN_TEMPORARY_AGE_S = 24 * 3600
"""A temporary folder of another host (a shared store), or without a PID, counts as left by an interrupted save
once it is this old."""


def _temp_prefix(entry: Path) -> str:
    return f".{entry.name}.{socket.gethostname().replace('/', '_')}.{os.getpid()}."


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def stale_temporaries(store: str | os.PathLike) -> list[Path]:
    """The temporary folders of saves that were interrupted (killed): those of this host whose process is gone, and
    any other older than :data:`FOREIGN_TEMPORARY_AGE_S`. A save in progress keeps its folder."""
    store_dir = Path(store)
    if not store_dir.is_dir():
        return []
    host, now, found = socket.gethostname().replace("/", "_"), time.time(), []
    for path in sorted(store_dir.glob(".*")):
        match = TEMPORARY.fullmatch(path.name)
        if match is None or not path.is_dir():
            continue
        if match["host"] == host and match["pid"] is not None:
            stale = not _pid_alive(int(match["pid"]))
        else:
            try:
                stale = now - path.stat().st_mtime > FOREIGN_TEMPORARY_AGE_S
            except FileNotFoundError:
                continue
        if stale:
            found.append(path)
    return found


def folder_bytes(path: Path) -> int:
    """The bytes of the files below ``path`` (0 for what vanished meanwhile)."""
    total = 0
    for f in path.rglob("*"):
        try:
            if f.is_file() and not f.is_symlink():
                total += f.stat().st_size
        except OSError:
            pass
    return total


def remove_stale_temporaries(store: str | os.PathLike) -> list[tuple[Path, int]]:
    """Remove what interrupted saves left in ``store`` (:func:`stale_temporaries`); each folder and its bytes."""
    removed = []
    for path in stale_temporaries(store):
        size = folder_bytes(path)
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append((path, size))
    return removed


_SWEPT: set[str] = set()
"""The stores this process has swept of interrupted saves' folders (once each: a store holds thousands of entries)."""


def sweep_once(store: str | os.PathLike) -> list[tuple[Path, int]]:
    """:func:`remove_stale_temporaries`, the first time this process saves into ``store``."""
    key = os.path.realpath(store)
    if key in _SWEPT:
        return []
    _SWEPT.add(key)
    try:
        return remove_stale_temporaries(store)
    except OSError:
        return []


def unwritable_reason(store: str | os.PathLike) -> str | None:
    """None when a save can write into ``store`` (made if missing); otherwise what stops it, naming the folder: a
    read-only store, one without permission, a full disk. Checked before any run trains."""
    store_dir = Path(store)
    try:
        store_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".write-check.", suffix=".tmp", dir=store_dir)
        try:
            os.write(fd, b"0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as e:
        return f"{store_dir}: the finished-run store cannot be written ({e.strerror or e})"
    return None


def identity(cfg: cfgmod.RunConfig) -> dict[str, str]:
    """What made a run's result: config hash, data fingerprint, code fingerprint (:mod:`upfl.engine.checkpoints`)."""
    from .checkpoints import code_fingerprint, data_fingerprint

    return {
        "config_hash": cfgmod.config_hash(cfg),
        "data_fingerprint": data_fingerprint(cfg.data.path),
        "code_fingerprint": code_fingerprint(),
    }


def entry_path(store: str | os.PathLike, ident: dict[str, str]) -> Path:
    """``<store>/<config hash>-<data fingerprint>-<code fingerprint>``."""
    return Path(store) / f"{ident['config_hash']}-{ident['data_fingerprint']}-{ident['code_fingerprint']}"


SAVE_ATTEMPTS = 1000
"""How often :func:`save` tries to put its entry in place while other processes replace a damaged one."""


def save(entry: Path, run_dir: Path, ident: dict[str, str]) -> None:
    """Keep ``run_dir``'s result files in ``entry`` with their checksums; the entry appears whole or not at all.

    Several processes (or hosts sharing the folder) may save one entry at once: the entry is a folder renamed into
    place, which fails while another whole entry is there. That one is kept when it passes its checksums for this
    identity (two trainings of one run differ only in their timings); a damaged one is first moved aside under a
    name of its own and removed. No process fails because another saved first, and none leaves a folder behind.
    """
    entry.parent.mkdir(parents=True, exist_ok=True)
    sweep_once(entry.parent)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(entry), suffix=".new", dir=entry.parent))
    try:
        files = {}
        for name in RESULT_FILES:
            data = (run_dir / name).read_bytes()
            (tmp / name).write_bytes(data)
            files[name] = sha256_bytes(data)
        write_text(tmp / MANIFEST, json.dumps({"identity": ident, "files": files}, indent=1, sort_keys=True) + "\n")
        publish_mode(tmp)
        for _ in range(SAVE_ATTEMPTS):
            try:
                os.rename(tmp, entry)
                return
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            try:
                verified_files(entry, ident)
                return
            except StoreMismatch:
                _move_aside(entry)
        raise StoreMismatch(
            f"{entry}: could not be saved in {SAVE_ATTEMPTS} attempts (other processes kept replacing it)"
        )
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _move_aside(entry: Path) -> None:
    """Remove a damaged entry: renamed onto an empty folder of a unique name (an atomic step another process cannot
    collide with), then deleted; nothing when another process moved it first."""
    aside = Path(tempfile.mkdtemp(prefix=_temp_prefix(entry), suffix=".damaged", dir=entry.parent))
    try:
        os.rename(entry, aside)
    except FileNotFoundError:
        pass
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def verified_files(entry: Path, ident: dict[str, str]) -> dict[str, bytes]:
    """The entry's result files, each checked against the manifest; :class:`StoreMismatch` names what fails."""
    manifest_path = entry / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreMismatch(f"{manifest_path}: missing (an entry without checksums is not trusted)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreMismatch(f"{manifest_path}: unreadable ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("identity") != ident:
        raise StoreMismatch(
            f"{manifest_path}: made for {manifest.get('identity') if isinstance(manifest, dict) else manifest!r}, "
            f"not this run's {ident}"
        )
    checksums = manifest.get("files")
    if not isinstance(checksums, dict) or sorted(checksums) != sorted(RESULT_FILES):
        raise StoreMismatch(f"{manifest_path}: 'files' must give the checksum of {', '.join(RESULT_FILES)}")
    out = {}
    for name in RESULT_FILES:
        try:
            data = (entry / name).read_bytes()
        except OSError as e:
            raise StoreMismatch(f"{entry / name}: unreadable ({e.strerror})") from None
        if sha256_bytes(data) != checksums[name]:
            raise StoreMismatch(
                f"{entry / name}: checksum {sha256_bytes(data)[:16]} does not match the manifest's "
                f"{str(checksums[name])[:16]} (the file was changed after the run)"
            )
        out[name] = data
    return out


def restore(entry: Path, ident: dict[str, str], run_dir: Path) -> bool:
    """Write the entry's checked result files into ``run_dir`` (``summary.json`` last); ``False`` when there
    is no entry, :class:`StoreMismatch` (and nothing written) when it fails its checksums."""
    if not entry.is_dir():
        return False
    _write_run(run_dir, ident["config_hash"], verified_files(entry, ident))
    return True


def _write_run(run_dir: Path, config_hash: str, files: dict[str, bytes]) -> None:
    """A run's result files and their checksum record, ``summary.json`` last."""
    write_bytes(run_dir / RESULT_FILES[0], files[RESULT_FILES[0]])
    write_text(run_dir / RECORD, record_text(config_hash, files))
    write_bytes(run_dir / RESULT_FILES[1], files[RESULT_FILES[1]])


def forget(store: str | os.PathLike, run_dirs: list[str | os.PathLike]) -> list[Path]:
    """Remove the store entries of the runs in ``run_dirs`` (found by the config hash in their ``summary.json``)
    and those runs' result files, so that the next ``snakemake`` retrains them. Returns what was removed."""
    removed: list[Path] = []
    for run_dir in map(Path, run_dirs):
        summary = run_dir / "summary.json"
        try:
            config_hash = json.loads(summary.read_text(encoding="utf-8"))["config_hash"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise StoreMismatch(f"{summary}: cannot read the run's config_hash ({e})") from None
        if not isinstance(config_hash, str) or not config_hash.isalnum():
            raise StoreMismatch(f"{summary}: config_hash {config_hash!r} is not a hash")
        store_dir = Path(store)
        for entry in sorted(store_dir.glob(f"{config_hash}-*")) if store_dir.is_dir() else []:
            shutil.rmtree(entry)
            removed.append(entry)
        for name in (*reversed(RESULT_FILES), RECORD):
            if (run_dir / name).exists():
                (run_dir / name).unlink()
                removed.append(run_dir / name)
    return removed


def _entries_holding(store: str | os.PathLike | None, config_hash: str, checksums: dict[str, str]) -> list[Path]:
    """The store entries of ``config_hash`` whose manifest gives exactly ``checksums`` (those of one training)."""
    store_dir = Path(store) if store else None
    if store_dir is None or not store_dir.is_dir() or not config_hash.isalnum():
        return []
    found = []
    for entry in sorted(store_dir.glob(f"{config_hash}-*")):
        try:
            manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(manifest, dict) and manifest.get("files") == checksums:
            found.append(entry)
    return found


def _restore_recorded(
    run_dir: Path, config_hash: str, checksums: dict[str, str], store: str | os.PathLike | None
) -> Path | None:
    """Write back the files of a store entry that holds exactly the recorded ones (checked again); its path."""
    for entry in _entries_holding(store, config_hash, checksums):
        try:
            manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
            files = verified_files(entry, manifest["identity"])
        except (StoreMismatch, OSError, ValueError, KeyError, TypeError):
            continue
        _write_run(run_dir, config_hash, files)
        return entry
    return None


def _set_aside(run_dir: Path) -> Path:
    """Move a run's result files (not its record) into ``<run>/.damaged-<UTC time>/``: kept, never published."""
    import datetime as dt

    aside = run_dir / f".damaged-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}"
    aside.mkdir()
    for name in RESULT_FILES:
        if (run_dir / name).exists():
            os.replace(run_dir / name, aside / name)
    return aside


def check_published(
    run_dir: str | os.PathLike, store: str | os.PathLike | None = DEFAULT_STORE, move_aside: bool = True
) -> str:
    """Make sure a finished run's files are the ones its training wrote before they are published.

    ``verified``: they match the run's ``checksums.json``. ``restored``: they did not, and a store entry holding
    the recorded files was written back. ``adopted``: the run has no record (trained before records were kept) and a
    store entry holds exactly its files, which gives the record. Otherwise the files are moved aside
    (``<run>/.damaged-<time>/``, so the next ``snakemake`` retrains the run) and :class:`IntegrityError` names each
    file and what was done; without ``move_aside`` (``upfl report runs --no-store``) they are only named, nothing
    moved.
    """
    run_dir = Path(run_dir)
    record = None
    try:
        record = read_record(run_dir)
    except IntegrityError as e:
        problems = [str(e)]
    else:
        problems = []
    if record is not None:
        problems = mismatches(run_dir, record)
        if not problems:
            return "verified"
        if _restore_recorded(run_dir, record["config_hash"], record["files"], store):
            return "restored"
    elif not problems:
        try:
            files = {name: (run_dir / name).read_bytes() for name in RESULT_FILES}
            config_hash = json.loads(files["summary.json"].decode("utf-8"))["config_hash"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            problems = [f"{run_dir}: result files unreadable ({e})"]
        else:
            checksums = {name: sha256_bytes(data) for name, data in files.items()}
            if isinstance(config_hash, str) and _entries_holding(store, config_hash, checksums):
                write_text(run_dir / RECORD, record_text(config_hash, files))
                return "adopted"
            problems = [
                f"{run_dir}: no {RECORD} and no store entry holding these files: its numbers cannot be "
                "checked against its training"
            ]
    if not move_aside:
        raise IntegrityError("; ".join(problems) + "; named only (nothing moved, nothing restored)")
    aside = _set_aside(run_dir)
    raise IntegrityError(
        "; ".join(problems) + f"; no store entry holds the trained files: moved to {aside}, "
        "the next snakemake retrains the run"
    )
