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
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .. import config as cfgmod
from ..files import publish_mode, write_bytes, write_text

RESULT_FILES = ("metrics.csv", "summary.json")
"""A run's result files, in the order they are written (``summary.json`` last: it marks a finished run)."""
MANIFEST = "manifest.json"
DEFAULT_STORE = os.path.join("results", "finished")


class StoreMismatch(ValueError):
    """A store entry cannot be restored; the message names the entry file and what is wrong with it."""


def identity(cfg: cfgmod.RunConfig) -> dict[str, str]:
    """What made a run's result: config hash, data fingerprint, code fingerprint (:mod:`upfl.engine.checkpoints`)."""
    from ..engine.checkpoints import code_fingerprint, data_fingerprint

    return {"config_hash": cfgmod.config_hash(cfg), "data_fingerprint": data_fingerprint(cfg.data.path),
            "code_fingerprint": code_fingerprint()}


def entry_path(store: str | os.PathLike, ident: dict[str, str]) -> Path:
    """``<store>/<config hash>-<data fingerprint>-<code fingerprint>``."""
    return Path(store) / f"{ident['config_hash']}-{ident['data_fingerprint']}-{ident['code_fingerprint']}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=".new", dir=entry.parent))
    try:
        files = {}
        for name in RESULT_FILES:
            data = (run_dir / name).read_bytes()
            (tmp / name).write_bytes(data)
            files[name] = _sha256(data)
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
        raise StoreMismatch(f"{entry}: could not be saved in {SAVE_ATTEMPTS} attempts (other processes kept "
                            "replacing it)")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _move_aside(entry: Path) -> None:
    """Remove a damaged entry: renamed onto an empty folder of a unique name (an atomic step another process cannot
    collide with), then deleted; nothing when another process moved it first."""
    aside = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=".damaged", dir=entry.parent))
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
        raise StoreMismatch(f"{manifest_path}: made for {manifest.get('identity') if isinstance(manifest, dict) else manifest!r}, "
                            f"not this run's {ident}")
    checksums = manifest.get("files")
    if not isinstance(checksums, dict) or sorted(checksums) != sorted(RESULT_FILES):
        raise StoreMismatch(f"{manifest_path}: 'files' must give the checksum of {', '.join(RESULT_FILES)}")
    out = {}
    for name in RESULT_FILES:
        try:
            data = (entry / name).read_bytes()
        except OSError as e:
            raise StoreMismatch(f"{entry / name}: unreadable ({e.strerror})") from None
        if _sha256(data) != checksums[name]:
            raise StoreMismatch(f"{entry / name}: checksum {_sha256(data)[:16]} does not match the manifest's "
                                f"{str(checksums[name])[:16]} (the file was changed after the run)")
        out[name] = data
    return out


def restore(entry: Path, ident: dict[str, str], run_dir: Path) -> bool:
    """Write the entry's checked result files into ``run_dir`` (``summary.json`` last); ``False`` when there
    is no entry, :class:`StoreMismatch` (and nothing written) when it fails its checksums."""
    if not entry.is_dir():
        return False
    files = verified_files(entry, ident)
    for name in RESULT_FILES:
        write_bytes(run_dir / name, files[name])
    return True


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
        for name in reversed(RESULT_FILES):
            if (run_dir / name).exists():
                (run_dir / name).unlink()
                removed.append(run_dir / name)
    return removed
