"""The installed torch, read without importing it: its version and the GPU runtimes it was built for (torch's own
``torch/version.py``). A run on the compiled solver records torch's version and decides that no GPU can be in use
without paying torch's import (most of a CPU-second)."""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path


@functools.cache
def installed_torch() -> dict[str, str | None]:
    """``{"version", "cuda", "hip"}`` of the installed torch (each None where torch says so, every one None
    without torch): from the imported module where it is imported, else from the constants of its version.py."""
    imported = sys.modules.get("torch")
    if imported is not None:
        v = imported.version
        return {"version": imported.__version__, "cuda": v.cuda, "hip": getattr(v, "hip", None)}
    spec = importlib.util.find_spec("torch")
    found: dict[str, str | None] = {"version": None, "cuda": None, "hip": None}
    if spec is None or spec.origin is None:
        return found
    names = {"__version__": "version", "cuda": "cuda", "hip": "hip"}
    tree = ast.parse((Path(spec.origin).parent / "version.py").read_text(encoding="utf-8"))
    for node in tree.body:
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else getattr(node, "target", None)
        )
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id in names and isinstance(value, ast.Constant):
            found[names[target.id]] = None if value.value is None else str(value.value)
    return found


def torch_version() -> str | None:
    """``torch.__version__`` of the installed torch (None without torch)."""
    return installed_torch()["version"]


def gpu_build() -> bool:
    """Whether the installed torch was built for a GPU runtime (CUDA or ROCm); a CPU-only build never finds one."""
    found = installed_torch()
    return found["cuda"] is not None or found["hip"] is not None
