"""Atomic file writes and provenance shared by every writer in the package."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import __version__


def current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish_mode(path: str | os.PathLike) -> None:
    """Give a finished temporary file or folder its published mode (:func:`published_mode`).

    ``mkstemp`` and ``mkdtemp`` create 0600 files and 0700 folders whatever the umask; published
    results must be readable by whoever the umask lets read them (0644 / 0755 under umask 022).
    """
    os.chmod(path, published_mode(os.path.isdir(path)))


def published_mode(folder: bool = False) -> int:
    """0644 for a file, 0755 for a ``folder``, less what the process umask takes away: never writable by anyone
    but the owner, whatever the umask (umask 000 gives 0644, not 0666), and a stricter umask (027, 077) is kept."""
    return (0o755 if folder else 0o644) & ~current_umask()


def make_dirs(path: str | os.PathLike) -> None:
    """``mkdir -p path``, each folder it creates with its published mode (:func:`published_mode`, whatever the
    umask)."""
    path = Path(path)
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    mode = published_mode(folder=True)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir()
            os.chmod(folder, mode)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary file stays private (0600) while it is written; the published file gets ``mode`` exactly, or by
    default :func:`published_mode`.
    """
    path = Path(path)
    make_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():
            os.chmod(tmp_path, published_mode() if mode is None else mode)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def replace_dir(src: Path, dst: Path) -> None:
    """Move a completed folder ``src`` onto ``dst``, replacing an existing ``dst`` as a whole.

    ``src`` (typically from ``mkdtemp``, 0700) is given the umask's folder mode first.
    The old ``dst`` is first renamed onto an empty folder of a unique name beside it (never a name another
    process or host could also pick), and removed once ``src`` is in place.
    """
    publish_mode(src)
    if not dst.exists():
        os.replace(src, dst)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".old", dir=dst.parent))
    os.replace(dst, old)
    try:
        os.replace(src, dst)
    except OSError:
        os.replace(old, dst)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_texts(texts: dict[Any, str]) -> None:
    """Write several files all or none: every file is written to a temporary sibling first, and the renames
    (in the order given) follow only when every write succeeded. A full or read-only file system leaves the
    files as they were. Each folder is made once, each file written through the descriptor that created it, and
    the published mode (:func:`published_mode`) read once: a run's three result files cost a third of the
    system calls."""
    written: list[tuple[Path, Path]] = []
    folders: set[Path] = set()
    try:
        for name, text in texts.items():
            path = Path(name)
            if path.parent not in folders:
                make_dirs(path.parent)
                folders.add(path.parent)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            written.append((Path(tmp_name), path))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        mode = published_mode()
        for tmp, path in written:
            os.chmod(tmp, mode)
            os.replace(tmp, path)
    finally:
        for tmp, _ in written:
            if tmp.exists():
                tmp.unlink()


def json_text(obj: Any) -> str:
    """``obj`` as strict JSON text: NaN and infinities become ``null`` (never a bare ``NaN``)."""
    return json.dumps(json_safe(obj), indent=2, sort_keys=False, allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as strict JSON (:func:`json_text`)."""
    write_text(path, json_text(obj))


def json_safe(obj: Any) -> Any:
    """``obj`` with numpy/torch scalars as Python numbers, paths as text and non-finite floats as ``None``."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if not isinstance(obj, (str, int, float, bool, type(None))) and hasattr(obj, "item"):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool, type(None))):
        return obj
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@functools.lru_cache(maxsize=8)
def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """The git commit of the working tree (with ``-dirty`` when modified), or None. Read once per process
    (the code a process runs is the code it imported; `upfl run-many` trains many runs per process)."""
    here = Path(cwd) if cwd is not None else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("-dirty" if dirty else "") if sha else None


def provenance() -> dict[str, Any]:
    """Package version, git commit, the versions of the libraries on the numeric path and Python's, and the
    instruction set the compiled kernels target (:func:`kernel_isa`): recorded in every result file."""
    from .torch_build import torch_version

    return {
        "upfl_version": __version__,
        "git_commit": git_commit(),
        "torch_version": torch_version(),
        "python_version": platform.python_version(),
        **library_versions(),
        "kernel_isa": kernel_isa(),
    }


NUMERIC_LIBRARIES = ("numpy", "numba", "scipy", "dp-accounting")
"""The distributions on a run's numeric path besides torch (whose version :mod:`upfl.torch_build` reads): each
recorded as ``<name>_version`` (``dp_accounting_version``) in a run's summary.json and in runs.csv."""
ENVIRONMENT_KEYS = (
    "torch_version",
    "python_version",
    *(f"{name.replace('-', '_')}_version" for name in NUMERIC_LIBRARIES),
    "kernel_isa",
)
"""The summary.json keys that say which environment computed a run's numbers (a table's provenance line names
those that differ between its runs)."""


@functools.lru_cache(maxsize=1)
def library_versions() -> dict[str, str | None]:
    """``<name>_version`` of each of :data:`NUMERIC_LIBRARIES`, read from the installed distributions' metadata
    (nothing imported); None for one not installed."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in NUMERIC_LIBRARIES:
        try:
            out[f"{name.replace('-', '_')}_version"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[f"{name.replace('-', '_')}_version"] = None
    return out


def cpu_flags() -> set[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


TORCH_AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}


@functools.lru_cache(maxsize=1)
def kernel_isa() -> str:
    """The instruction set the compiled kernels target: ``numba <CPU name> (<vector features>); torch <capability>``.

    numba compiles for ``$NUMBA_CPU_NAME`` or the host CPU that llvmlite names; torch picks its kernels by
    ``$ATEN_CPU_CAPABILITY`` or the CPU's flags (``torch.backends.cpu.get_cpu_capability()`` where torch is
    imported already; the same rule otherwise, so a run that never imports torch does not for this)."""
    flags = cpu_flags()
    numba_cpu = os.environ.get("NUMBA_CPU_NAME")
    if not numba_cpu:
        try:
            import llvmlite.binding as llvm

            numba_cpu = llvm.get_host_cpu_name()
        except Exception:  # noqa: BLE001 - no llvmlite: the record says so
            numba_cpu = "unknown"
    features = " ".join(f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f") if f in flags) or "none"
    torch_mod = sys.modules.get("torch")
    capability = None
    if torch_mod is not None:
        with contextlib.suppress(Exception):
            capability = str(torch_mod.backends.cpu.get_cpu_capability())
    if capability is None:
        asked = os.environ.get("ATEN_CPU_CAPABILITY", "").upper()
        if asked in ("DEFAULT", "AVX2", "AVX512"):
            capability = asked
        else:
            capability = "AVX512" if flags >= TORCH_AVX512 else "AVX2" if {"avx2", "fma"} <= flags else "DEFAULT"
    return f"numba {numba_cpu} ({features}); torch {capability}"
