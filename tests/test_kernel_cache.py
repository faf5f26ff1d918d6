"""numba's cache of the compiled kernels: damaged files are rebuilt and named, never a traceback; a read-only install
with a read-only HOME falls back to a temporary cache, said in one line, and the kernels still run."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = "from upfl.draws.compiled import warm_up; warm_up(); print('kernels ran')"


def run(env_changes: dict, pythonpath: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update({"PYTHONPATH": str(pythonpath), **env_changes})
    return subprocess.run([sys.executable, "-c", WARM_UP], env=env, capture_output=True, text=True, timeout=600)


def test_damaged_cache_files_are_rebuilt_and_the_folder_named(tmp_path):
    cache = tmp_path / "cache"
    first = run({"NUMBA_CACHE_DIR": str(cache)}, ROOT / "src")
    assert first.returncode == 0, first.stderr[-3000:]
    data = sorted(cache.rglob("*.nbc"))
    index = sorted(cache.rglob("*.nbi"))
    assert data and index
    for path in data[::2]:  # cut short
        path.write_bytes(path.read_bytes()[:40])
    for path in index[1::2]:  # overwritten with other bytes
        path.write_bytes(os.urandom(300))
    damaged = run({"NUMBA_CACHE_DIR": str(cache)}, ROOT / "src")
    assert damaged.returncode == 0 and "kernels ran" in damaged.stdout, damaged.stderr[-3000:]
    assert "Traceback" not in damaged.stderr
    folder = str(data[0].parent)
    assert f"numba's cache in {folder} held damaged files" in damaged.stderr
    assert "compiled again" in damaged.stderr and "delete the *.nbi and *.nbc files in" in damaged.stderr
    again = run({"NUMBA_CACHE_DIR": str(cache)}, ROOT / "src")  # rebuilt: loads quietly
    assert again.returncode == 0 and again.stderr.strip() == "", again.stderr[-3000:]


def test_a_read_only_install_and_home_fall_back_to_a_temporary_cache_in_one_line(tmp_path):
    # An installed copy whose __pycache__ folders cannot be made (a file stands there: not writable, even by root)
    # and a HOME under which nothing can be made.
    site = tmp_path / "site"
    shutil.copytree(ROOT / "src" / "upfl", site / "upfl", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in [p for p in (site / "upfl").rglob("*") if p.is_dir()] + [site / "upfl"]:
        (folder / "__pycache__").write_text("read-only install\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = run({"HOME": "/dev/null/home", "TMPDIR": str(temp), "PYTHONDONTWRITEBYTECODE": "1"}, site)
    assert proc.returncode == 0 and "kernels ran" in proc.stdout, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("upfl: numba cannot write its cache"), proc.stderr[-3000:]
    cached = temp / f"upfl-numba-cache-{os.getuid()}"
    assert str(cached) in lines[0] and list(cached.rglob("*.nbi"))
