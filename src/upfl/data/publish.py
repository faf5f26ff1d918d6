"""Publish a LEAF folder together with side files (embeddings, vocabulary, image index) atomically.

:func:`upfl.data.leaf.write_leaf` writes ``train/``, ``test/`` and ``meta.json``; real data sets
add files beside them. Those are written first into a staging folder, their sha256 go into
``meta.json`` under ``extra_files``, and the finished folder replaces the target in one rename, so
a half-written data set never looks complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..files import replace_dir, sha256_file
from .leaf import write_leaf


def write_dataset(
    path: str | os.PathLike,
    users: list[str],
    train: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
    test: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
    meta: dict[str, Any],
    extras: dict[str, Callable[[Path], None]] | None = None,
) -> Path:
    """``write_leaf`` plus ``extras`` (file name -> function writing that file), all or nothing."""
    root = Path(path)
    root.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".stage", dir=root.parent))
    try:
        side = stage / "extras"
        side.mkdir()
        digests: dict[str, str] = {}
        for name, writer in (extras or {}).items():
            writer(side / name)
            digests[name] = sha256_file(side / name)
        inner = write_leaf(stage / root.name, users, train, test, {**meta, "extra_files": digests})
        for name in digests:
            os.replace(side / name, inner / name)
        replace_dir(inner, root)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return root
