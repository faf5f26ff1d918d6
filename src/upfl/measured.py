"""What the benchmarks measured on this machine, kept for later processes: each real-data model's per-round
CPU-seconds (read by the workflow's plan lines, :mod:`upfl.pipeline.costs`) and its faster way to batch the
per-device gradients (read by ``model.options.batching: auto``, :meth:`upfl.models.networks.TorchModel.strategy`).

``benchmarks/real_data.py --paper-sized`` writes them (:func:`save_machine_costs`); nothing else does, and a parse or
a run only reads them. They hold for one CPU model and core count (:func:`machine`): another machine's are ignored.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """What the cached costs hold for: the CPU model and the number of cores."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model, "cpu_count": os.cpu_count()}


def machine_cache_path() -> Path:
    """Where this machine's per-round costs are kept: ``UPFL_ROUND_COSTS``, else ``round_costs.json`` in the user's
    cache folder (``XDG_CACHE_HOME`` or ``~/.cache``) under ``upfl/``."""
    if os.environ.get("UPFL_ROUND_COSTS"):
        return Path(os.environ["UPFL_ROUND_COSTS"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "upfl" / "round_costs.json"


def save_machine_costs(
    path: Path, costs: Mapping[str, Mapping[str, float]], batching: Mapping[str, str] | None = None
) -> None:
    """Keep ``costs`` (model -> ``train_cpu_s``, ``eval_cpu_s``) and the faster ``batching`` of each model measured
    for this machine in ``path``, atomically; the models already kept and not measured again stay."""
    from .files import write_texts

    kept = read_json(path)
    same = kept.get("machine") == machine()
    models = dict(kept.get("models", {})) if same else {}
    models.update({name: dict(cost) for name, cost in costs.items()})
    faster = {**(kept.get("batching", {}) if same else {}), **(batching or {})}
    doc = {
        "machine": machine(),
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "models": models,
        "batching": faster,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_texts({path: json.dumps(doc, indent=2) + "\n"})


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; empty where it is missing or unreadable (a cost estimate never stops a plan)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


@functools.lru_cache(maxsize=8)
def _measured_batching(path: str, mtime_ns: int) -> dict[str, str]:
    kept = read_json(Path(path))
    found = kept.get("batching", {}) if kept.get("machine") == machine() else {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def measured_batching(model: str) -> str | None:
    """The faster batching of ``model`` measured on this machine's CPU (:func:`save_machine_costs`), or None."""
    path = machine_cache_path()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return None
    return _measured_batching(str(path), mtime).get(model)
