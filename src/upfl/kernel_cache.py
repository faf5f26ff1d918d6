"""numba's cache of the compiled kernels: a writable place for it, and damaged files rebuilt, never a traceback.

numba keeps a compiled kernel next to its source (``__pycache__``) or under the user's cache folder
(``~/.cache/numba``). A read-only install with a read-only HOME (a container, a shared install) has neither:
:func:`prepare` then points numba to a temporary folder and says so in one line. A cache file cut short or
overwritten (a full disk, a copy of another machine's cache) would stop the first run that loads it with an
unpickling traceback: :func:`guard_module` gives every kernel a cache that removes that kernel's damaged files,
compiles it again and names the folder. That cache also loads a kernel without loading numba's whole CPU target
(:func:`checked_cache_class`).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import sys
import tempfile
from typing import Any


def _probe() -> None:
    """A function whose code object numba's cache locators read (only its line number)."""


def notice(message: str) -> None:
    print(f"upfl: {message}", file=sys.stderr, flush=True)


def writable_cache_found(source_file: str) -> bool:
    """Whether numba finds a cache folder it can write for kernels of ``source_file`` (NUMBA_CACHE_DIR, next to the
    source, or the user's cache folder: numba's own locators, asked in numba's order)."""
    from numba.core import caching

    for locator in (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator, caching.UserWideCacheLocator):
        try:
            if locator.from_function(_probe, source_file) is not None:
                return True
        except OSError:
            continue
    return False


def temporary_cache_dir() -> str:
    """``<temp>/upfl-numba-cache-<uid>`` (private to the user), or a fresh temporary folder when that one is not
    usable."""
    path = os.path.join(tempfile.gettempdir(), f"upfl-numba-cache-{os.getuid() if hasattr(os, 'getuid') else 0}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        if os.access(path, os.W_OK | os.X_OK):
            return path
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="upfl-numba-cache-")


def prepare(source_file: str) -> None:
    """Before the kernels of ``source_file`` are decorated: when numba has no writable cache folder for them, point
    it (``numba.config.CACHE_DIR``) to :func:`temporary_cache_dir`, with a one-line notice. A NUMBA_CACHE_DIR the
    user set is left to numba."""
    from numba.core import config

    if getattr(config, "CACHE_DIR", "") or writable_cache_found(source_file):  # options set at import from the env
        return
    cache_dir = temporary_cache_dir()
    setattr(config, "CACHE_DIR", cache_dir)  # noqa: B010 - numba.core.config declares its options at run time
    notice(
        f"numba cannot write its cache next to {os.path.dirname(os.path.abspath(source_file))} nor under HOME; "
        f"the compiled kernels are cached in {cache_dir} instead (set NUMBA_CACHE_DIR to keep them "
        "elsewhere)"
    )


@functools.lru_cache(maxsize=1)
def checked_cache_class() -> type:
    """numba's ``FunctionCache`` with a load that survives damaged files (:func:`guard_module`)."""
    from numba.core.caching import FunctionCache

    class CheckedCache(FunctionCache):
        """A kernel's cache whose damaged index or data files are removed and the kernel compiled again."""

        noticed: set[str] = set()

        def __init__(self, py_func: Any) -> None:
            super().__init__(py_func)
            self.kernel = f"{py_func.__module__}.{py_func.__qualname__}"

        def load_overload(self, sig: Any, target_context: Any) -> Any:
            """numba's load without its refresh of the CPU target: a kernel read from the cache is machine code that
            needs numba's runtime (NRT, initialised here) and the modules its environments name, not the target's
            registries of implementations (``numba.np.linalg``, ``arraymath`` and the rest, which import
            ``scipy.linalg``: half a CPU-second). A kernel compiled in this process refreshes the target first, as
            numba's compiler always does."""
            from numba.core.runtime import rtsys

            try:
                rtsys.initialize(target_context)
                with self._guard_against_spurious_io_errors():
                    return self._load_overload(sig, target_context)
                return None
            except Exception as e:  # noqa: BLE001 - any unreadable cache file: compile again
                self.remove_files()
                folder = self._cache_path
                if folder not in self.noticed:
                    self.noticed.add(folder)
                    notice(
                        f"numba's cache in {folder} held damaged files ({type(e).__name__} loading "
                        f"{self.kernel}); they were removed and the kernels compiled again. To clear that cache: "
                        f"delete the *.nbi and *.nbc files in {folder}"
                    )
                return None

        def remove_files(self) -> None:
            index = self._cache_file._index_path
            for path in [index, *glob.glob(glob.escape(index[: -len(".nbi")]) + ".*.nbc")]:
                with contextlib.suppress(OSError):
                    os.remove(path)

    return CheckedCache


def guard_module(namespace: dict[str, Any]) -> None:
    """Give every cached kernel among a module's globals the cache of :func:`checked_cache_class`."""
    from numba.core.caching import FunctionCache
    from numba.core.dispatcher import Dispatcher

    checked = checked_cache_class()
    for value in namespace.values():
        if isinstance(value, Dispatcher) and type(getattr(value, "_cache", None)) is FunctionCache:
            value._cache = checked(value.py_func)  # type: ignore[attr-defined]  # numba's private per-kernel cache
