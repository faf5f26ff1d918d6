"""docs/run-config.md generated from the run config's dataclasses: every key with its default, allowed values
and the docstring under its field (:func:`reference_markdown`)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from typing import Any

from .config import CHOICES, HASH_EXCLUDED, RunConfig


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a config dataclass (the string literal that follows its annotation)."""
    import ast
    import inspect

    definition = ast.parse(inspect.getsource(cls)).body[0]
    if not isinstance(definition, ast.ClassDef):
        raise TypeError(f"{cls.__name__}: not a class definition")
    body = definition.body
    docs = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def reference_markdown() -> str:
    """docs/run-config.md: every run-config key with its default, allowed values and meaning, from this module."""
    default = RunConfig()
    lines = [
        "# Run config reference",
        "",
        "The keys of `upfl run --config run.yaml` and `--set KEY=VALUE`, of `run_defaults` and `set` in the",
        "workflow config, and of the Flower apps' run config. Generated from `src/upfl/config.py` by",
        "`python tools/run_config_reference.py` (a test checks it is current). Unknown keys are errors naming",
        "the key; `algorithm.*` keys an algorithm does not read are refused ([algorithms.md](algorithms.md)).",
        "Keys marked *not hashed* do not change a run's results and are left out of its config hash.",
        "",
        "| key | default | meaning |",
        "|---|---|---|",
    ]

    def cell(value: Any) -> str:
        if value is None or value == "":
            return "none"
        return f"`{value}`" if isinstance(value, str) else f"`{json.dumps(value)}`"

    def markdown(text: str) -> str:
        text = re.sub(r":(?:mod|func|class|data):`([^`]+)`", r"`\1`", text)
        return re.sub(r"``([^`]+)``", r"`\1`", text)

    def rows(cls: type, obj: Any, prefix: str) -> None:
        docs = attribute_docs(cls)
        for f in dataclasses.fields(cls):
            key, value = prefix + f.name, getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                rows(type(value), value, key + ".")
                continue
            meaning = docs.get(f.name, "")
            if key in CHOICES:
                meaning += f" One of {', '.join(f'`{c}`' for c in CHOICES[key])}."
            if key in HASH_EXCLUDED or key.split(".")[0] in HASH_EXCLUDED:
                meaning += " *Not hashed.*"
            lines.append(f"| `{key}` | {cell(value)} | {markdown(meaning.strip())} |")

    rows(RunConfig, default, "")
    return "\n".join(lines) + "\n"
