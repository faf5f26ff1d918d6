"""Checkpoints of a run: where they live, what they are keyed by, how they are read safely.

A checkpoint is ``<root>/<key>/state.npz``: a NumPy archive of the run's arrays (the global models, the algorithm's
state) and one entry ``meta``, the rest as JSON (iteration, metrics rows, times, key, format). The key
(:func:`checkpoint_key`) covers everything a resumed run must share with the run that wrote it: the config hash, the
data's content (:func:`data_fingerprint`), the code that computes the numbers (:func:`code_fingerprint`) and the
result folder OUT. The default root is ``OUT/.checkpoints`` (created at the first checkpoint, removed when the run
ends), so a run never writes outside its own folder unless ``checkpoint.dir`` says so.

Concurrency: a run holds an exclusive ``flock`` on ``<root>/<key>/lock`` (the file holds its PID) for
as long as it runs; a second run with the same key (same config, data, code and OUT) is refused with
:class:`CheckpointBusy` instead of resuming a checkpoint that is still being written. Runs with
different OUT folders have different keys and never share a checkpoint.

Private runs (``privacy.mechanism`` other than ``none``): the run folder (what people share) holds nothing
beyond what the run releases. The checkpoint there keeps the global models (released: they are the noisy
aggregates) and the algorithm's public state; the algorithm's *device state*
(:attr:`upfl.algorithms.base.Algorithm.device_state`: state computed from the devices' own, un-noised local
models, such as FedDyn's lagged gradients, from which w_prev - h_i / alpha recovers a device's raw local model)
goes to ``<device state root>/<key>/device_state.npz`` instead (:func:`device_state_root`: ``$UPFL_DEVICE_STATE_DIR``,
default ``$XDG_STATE_HOME/upfl/device-state`` or ``~/.local/state/upfl/device-state``), a folder outside the run
folder, mode 0700, the file 0600, removed with the checkpoint when the run ends; ``run.json`` beside it names the
run folder and checkpoint it belongs to, so that ``upfl store gc`` removes the state of an interrupted run whose run
folder is gone (:func:`orphaned_device_states`). A root inside the run folder is refused. Without that file a
private run cannot resume exactly: it starts over.

Reading: ``numpy.load(allow_pickle=False)`` and JSON, so a checkpoint holds data only (a planted pickle is refused,
never run), and neither writing nor reading one needs torch; every failure (unreadable, truncated, wrong shapes,
another key) is a :class:`CheckpointError` that names the file and says it can be removed. Arrays come back as
NumPy arrays whatever the run saved (tensors are saved as their arrays).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .. import config as cfgmod
from ..files import atomic_path, make_dirs, sha256_file
from ..torch_build import torch_version

FORMAT = 2
DEFAULT_DIRNAME = ".checkpoints"
STATE_FILE = "state.npz"
LOCK_FILE = "lock"
DEVICE_STATE_FILE = "device_state.npz"
DEVICE_STATE_ENV = "UPFL_DEVICE_STATE_DIR"
DEVICE_OWNER_FILE = "run.json"
"""Beside a private run's device state: the run folder and checkpoint it belongs to (what ``upfl store gc`` reads
to remove the state of a run that is gone)."""
CHECKPOINT_MODE = 0o600
"""The mode of ``state.npz`` whatever the umask."""
NUMERIC_EXCLUDED = ("report", "commands", "cli.py")
"""Parts of the upfl package that cannot change a run's numbers (left out of :func:`code_fingerprint`): the top
folders and modules below ``src/upfl``."""


class CheckpointError(ValueError):
    """A checkpoint cannot be used; the message names the file and says it can be removed."""


class CheckpointBusy(RuntimeError):
    """Another process holds the checkpoint of this run (same config, data, code and OUT)."""


ARRAY_GROUPS = ("algorithm_state", "device_state")
"""Entries of a saved state that map names to arrays (kept as ``<group>.<name>`` in the archive)."""


def as_array(value) -> np.ndarray:
    """A tensor's array on the CPU, or an array as it is."""
    return value if isinstance(value, np.ndarray) else value.detach().cpu().numpy()


def write_archive(f: BinaryIO, state: dict[str, Any]) -> None:
    """``state`` to ``f``: its arrays and tensors (top level, or in :data:`ARRAY_GROUPS`) as NumPy arrays, the rest
    as the JSON entry ``meta``."""
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {}
    for name, value in state.items():
        if name in ARRAY_GROUPS:
            arrays.update({f"{name}.{k}": as_array(v) for k, v in value.items()})
            meta[name] = sorted(value)
        elif isinstance(value, (int, float, str, list, dict, type(None))):
            meta[name] = value
        else:
            arrays[name] = as_array(value)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    save: Callable[..., None] = np.savez
    save(f, **arrays)


def read_archive(path: Path) -> dict[str, Any]:
    """What :func:`write_archive` wrote, its arrays as NumPy arrays; pickled objects are refused."""
    with np.load(path, allow_pickle=False) as archive:
        state = json.loads(archive["meta"].tobytes().decode("utf-8"))
        if not isinstance(state, dict):
            raise ValueError(f"meta holds a {type(state).__name__}, not a mapping")
        grouped = {f"{group}.{k}" for group in ARRAY_GROUPS for k in state.get(group) or ()}
        for group in ARRAY_GROUPS:
            if group in state:
                state[group] = {k: archive[f"{group}.{k}"] for k in state[group]}
        state.update({name: archive[name] for name in archive.files if name != "meta" and name not in grouped})
    return state


def data_fingerprint(path: str | os.PathLike) -> str:
    """The data set's digest (:func:`upfl.data.digest.folder_digest`): SHA-256 (16 hex digits) over the relative
    path and sha256 of every file of the folder, read from ``<folder>.digest.json`` while that record holds, else
    hashed once per process for each state of the folder.

    Regenerating the data at the same path (other seed, other source, edited files) changes it.
    """
    from ..data.digest import folder_digest

    return folder_digest(path)


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """SHA-256 (16 hex digits) of the upfl sources that compute a run's numbers, and torch's version
    (:func:`package_fingerprint` of the installed package).

    A checkpoint written by other code (an edited solver, another torch) is not resumed, and a finished run is not
    restored from the store. Read once per process: the code a process runs is the code it imported (the
    workflow's fork server reads it once its imports are done, for every command it forks).
    """
    return package_fingerprint(Path(__file__).resolve().parents[1])


def package_fingerprint(package: Path) -> str:
    """SHA-256 (16 hex digits) of torch's version and of every ``.py`` file below ``package`` (the upfl package's
    folder) with its relative path, :data:`NUMERIC_EXCLUDED` aside."""
    h = hashlib.sha256(str(torch_version()).encode())
    for file in sorted(package.rglob("*.py")):
        rel = file.relative_to(package)
        if rel.parts[0] in NUMERIC_EXCLUDED:
            continue
        h.update(f"{rel.as_posix()}\0{sha256_file(file)}\n".encode())
    return h.hexdigest()[:16]


def checkpoint_key(cfg: cfgmod.RunConfig, out: str | os.PathLike, data_fp: str, code_fp: str) -> str:
    """The checkpoint folder name: config hash, data and code fingerprints and the real path of OUT."""
    text = "\n".join([cfgmod.config_hash(cfg), data_fp, code_fp, os.path.realpath(out)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def checkpoint_root(cfg: cfgmod.RunConfig, out: str | os.PathLike) -> Path:
    """``checkpoint.dir`` when set, else ``OUT/.checkpoints``."""
    return Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else Path(out) / DEFAULT_DIRNAME


def device_state_root() -> Path:
    """Where private runs keep their device state for resuming: ``$UPFL_DEVICE_STATE_DIR``, else
    ``$XDG_STATE_HOME/upfl/device-state``, else ``~/.local/state/upfl/device-state`` (never inside a run folder)."""
    given = os.environ.get(DEVICE_STATE_ENV)
    if given:
        return Path(given)
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "upfl" / "device-state"


def _inside(path: Path, folder: Path) -> bool:
    path, folder = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return path == folder or folder in path.parents


class Checkpoint:
    """One run's checkpoint slot: lock it, load it, save to it, remove it.

    ``device_root``: where the device state of a private run goes (None: it stays in the checkpoint)."""

    def __init__(
        self, root: Path, key: str, owned_root: bool, device_root: Path | None = None, out: Path | None = None
    ):
        self.root, self.key, self.owned_root = Path(root), key, owned_root
        self.out = Path(out) if out is not None else None
        self.dir = self.root / key
        self.file = self.dir / STATE_FILE
        self.device_dir = Path(device_root) / key if device_root is not None else None
        self.device_file = self.device_dir / DEVICE_STATE_FILE if self.device_dir is not None else None
        self._lock_fd: int | None = None

    def acquire(self) -> None:
        """Take the exclusive lock of this slot (creating its folder, owner-only: 0700); :class:`CheckpointBusy` if
        held."""
        make_dirs(self.root)
        self.dir.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise CheckpointBusy(
                    f"{self.dir}: another run of the same config, data and --out is running "
                    f"(PID {holder}); wait for it or use another --out"
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def prune_stale(self, log) -> None:
        """Remove other slots of an OUT-owned root (other config, data or code) that no run holds."""
        if not self.owned_root or not self.root.is_dir():
            return
        for other in self.root.iterdir():
            if other.name == self.key or not other.is_dir():
                continue
            lock = other / LOCK_FILE
            if lock.exists():
                fd = os.open(lock, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue
                finally:
                    os.close(fd)
            shutil.rmtree(other, ignore_errors=True)
            if self.device_dir is not None:
                shutil.rmtree(self.device_dir.parent / other.name, ignore_errors=True)
            log(f"removed stale checkpoint {other} (made for another config, data set or code version)")

    def remove(self) -> None:
        """Delete this slot, its device state, and the OUT-owned root when nothing else is left in it."""
        self.release()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.device_dir is not None:
            shutil.rmtree(self.device_dir, ignore_errors=True)
        if self.owned_root:
            with contextlib.suppress(OSError):
                self.root.rmdir()

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` (arrays or tensors, lists, dicts, numbers, strings) atomically, owner-only (0600, whatever
        the umask): only the run that wrote it resumes from it."""
        with atomic_path(self.file, mode=CHECKPOINT_MODE) as tmp, open(tmp, "wb") as f:
            write_archive(f, {"format": FORMAT, "key": self.key, **state})

    def save_device_state(self, state: dict[str, Any], t: int) -> None:
        """Write a private run's device state to :attr:`device_file`, owner-only (folders 0700, file 0600),
        atomically."""
        if self.device_dir is None or self.device_file is None:
            raise CheckpointError(f"{self.file}: a run without privacy keeps no device state")
        self.device_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.device_dir.mkdir(mode=0o700, exist_ok=True)
        for folder in (self.device_dir.parent, self.device_dir):
            os.chmod(folder, 0o700)
        owner = self.device_dir / DEVICE_OWNER_FILE
        if not owner.exists():
            run = os.path.realpath(self.out) if self.out is not None else None
            with atomic_path(owner, mode=CHECKPOINT_MODE) as staged:
                staged.write_text(json.dumps({"run": run, "checkpoint": os.path.realpath(self.dir)}) + "\n")
        fd, tmp = tempfile.mkstemp(prefix=f".{DEVICE_STATE_FILE}.", suffix=".tmp", dir=self.device_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                write_archive(f, {"format": FORMAT, "key": self.key, "t": t, "device_state": state})
            os.replace(tmp, self.device_file)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def load_device_state(self) -> tuple[int, dict[str, np.ndarray]] | None:
        """(iteration, device state) saved beside this checkpoint, or None when there is none (another machine,
        removed)."""
        if self.device_file is None or not self.device_file.exists():
            return None
        try:
            saved = read_archive(self.device_file)
        except Exception as e:
            raise CheckpointError(
                f"{self.device_file}: not a readable device state ({type(e).__name__}); remove it "
                f"(rm -r {self.device_dir}) and {self.dir} to start the run over"
            ) from None
        state = saved.get("device_state") if isinstance(saved, dict) else None
        if (
            saved.get("key") != self.key
            or not isinstance(state, dict)
            or not all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items())
        ):
            raise CheckpointError(
                f"{self.device_file}: not this run's device state; remove it (rm -r "
                f"{self.device_dir}) and {self.dir} to start the run over"
            )
        t = saved.get("t")
        if isinstance(t, bool) or not isinstance(t, int):
            raise CheckpointError(
                f"{self.device_file}: no iteration; remove it (rm -r {self.device_dir}) to start over"
            )
        return t, state

    def load(self, shapes: dict[str, tuple[int, ...]], rounds: int) -> dict[str, Any] | None:
        """The checkpoint's state, or ``None`` when there is none; :class:`CheckpointError` when unusable.

        ``shapes`` gives the expected shape of each weight tensor (``w``, ``w_prev``); ``rounds`` is T.
        """
        if not self.file.exists():
            return None
        try:
            state = read_archive(self.file)
        except Exception as e:  # any archive, JSON or I/O failure: the file is not a usable checkpoint
            self._fail(
                f"not a readable checkpoint ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
            )
        self._check(state, shapes, rounds)
        return state

    def _fail(self, reason: str) -> None:
        raise CheckpointError(f"{self.file}: {reason}; remove it (rm -r {self.dir}) to start the run over")

    def _check(self, state: Any, shapes: dict[str, tuple[int, ...]], rounds: int) -> None:
        if not isinstance(state, dict):
            self._fail(f"holds a {type(state).__name__}, not a checkpoint mapping")
        missing = [k for k in ("format", "key", "t", "rows", "times", *shapes) if k not in state]
        if missing:
            self._fail(f"missing entries {', '.join(missing)}")
        if state["format"] != FORMAT:
            self._fail(f"checkpoint format {state['format']!r}, this upfl reads {FORMAT}")
        if state["key"] != self.key:
            self._fail(f"written for key {state['key']!r}, not this run's {self.key!r}")
        t = state["t"]
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t < rounds:
            self._fail(f"iteration {t!r} is not in 1..{rounds - 1}")
        for name, shape in shapes.items():
            value = state[name]
            if not isinstance(value, np.ndarray) or tuple(value.shape) != tuple(shape):
                got = tuple(value.shape) if isinstance(value, np.ndarray) else type(value).__name__
                self._fail(f"{name} has shape {got}, this model needs {tuple(shape)}")
        rows = state["rows"]
        if not isinstance(rows, list) or len(rows) != t + 1 or not all(isinstance(r, dict) for r in rows):
            self._fail(f"metrics rows do not match iteration {t}")
        if not isinstance(state["times"], dict):
            self._fail("times entry is not a mapping")
        extra = state.get("algorithm_state")
        if extra is not None and not (
            isinstance(extra, dict) and all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in extra.items())
        ):
            self._fail("algorithm_state is not a mapping of names to arrays")


def open_checkpoint(cfg: cfgmod.RunConfig, out: str | os.PathLike, data_path: str | os.PathLike) -> Checkpoint:
    """The checkpoint slot of a run (not locked, nothing created yet); a private run's device state goes to
    :func:`device_state_root` (a root inside OUT is a :class:`CheckpointError`)."""
    key = checkpoint_key(cfg, out, data_fingerprint(data_path), code_fingerprint())
    device_root = None
    if cfg.privacy.mechanism != "none":
        device_root = device_state_root()
        if _inside(device_root, Path(out)):
            raise CheckpointError(
                f"{DEVICE_STATE_ENV}={device_root}: inside the run folder {out}; a private run's "
                "device state must live outside what is shared"
            )
    return Checkpoint(
        checkpoint_root(cfg, out), key, owned_root=not cfg.checkpoint.dir, device_root=device_root, out=Path(out)
    )


def orphaned_device_states(root: str | os.PathLike | None = None) -> list[Path]:
    """The device-state folders (:func:`device_state_root`) whose run is gone: interrupted private runs whose run
    folder, or checkpoint, was removed since (their device state can no longer resume anything). A folder without
    the record of its run (:data:`DEVICE_OWNER_FILE`, written with the state) is kept."""
    base = Path(root) if root is not None else device_state_root()
    if not base.is_dir():
        return []
    found = []
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        try:
            owner = json.loads((folder / DEVICE_OWNER_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if not isinstance(owner, dict):
            continue
        run, checkpoint = owner.get("run"), owner.get("checkpoint")
        gone = (isinstance(run, str) and not os.path.isdir(run)) or (
            isinstance(checkpoint, str) and not os.path.isdir(checkpoint)
        )
        if gone:
            found.append(folder)
    return found
