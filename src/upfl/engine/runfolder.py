"""The result folder OUT of ``upfl run``: checked before any work starts.

OUT may be new, empty, or hold the files of a previous run of the same config (then they are
replaced). A path that is a file, or a folder holding another config's ``summary.json``, is refused
(:class:`RunFolderError`) unless ``--force`` is given for the latter.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class RunFolderError(ValueError):
    """OUT cannot take this run's results; the message names OUT and the way out."""


def check_out(out: str | os.PathLike, config_hash: str, force: bool = False) -> Path:
    """Refuse an OUT that is a file, or that holds another config's results (unless ``force``)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out}: exists and is not a folder")
    summary = out / "summary.json"
    if force or not summary.exists():
        return out
    try:
        other = json.loads(summary.read_text(encoding="utf-8")).get("config_hash")
    except (OSError, ValueError, AttributeError) as e:
        raise RunFolderError(
            f"--out {out}: holds a summary.json that cannot be read ({e}); "
            f"pass --force to overwrite it or choose another --out"
        ) from None
    if other != config_hash:
        raise RunFolderError(
            f"--out {out}: holds the results of another config (config hash {other}, this run "
            f"{config_hash}); pass --force to overwrite them or choose another --out"
        )
    return out
