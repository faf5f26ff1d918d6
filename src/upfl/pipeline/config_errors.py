"""What the workflow says about a config it cannot use: one short line naming the key, its value and what is
allowed (never the schema itself), and a misspelt target named with the closest known one."""

from __future__ import annotations

import json
from typing import Any


class ExperimentError(ValueError):
    """The workflow config is inconsistent; the message names the experiment and key."""


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def schema_error_text(error: Any) -> str:
    """One line for a JSON-schema ``error`` of the workflow config: the key, the value, what is allowed, and for an
    unknown key the closest known one; never the schema itself."""
    import difflib

    path = list(error.absolute_path)
    where = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(path))
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(k for k in error.instance if k not in allowed)
        key = unknown[0] if unknown else "?"
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"{where + '.' if where else ''}{key}: unknown key; allowed: {', '.join(allowed)}{hint}"
    where = where or "(top level)"
    if error.validator == "enum":
        choices = ", ".join(str(v) for v in error.validator_value)
        return f"{where}: value {_short(error.instance)} is not allowed; allowed: {choices}"
    if error.validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        sign = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[error.validator]
        return (
            f"{where}: value {_short(error.instance)} is not allowed; allowed: numbers {sign} {error.validator_value}"
        )
    if error.validator == "type":
        return f"{where}: value {_short(error.instance)} is not allowed; allowed: {error.validator_value}"
    if error.validator == "oneOf" and error.context:
        deepest = max(error.context, key=lambda e: len(e.absolute_path))
        return schema_error_text(deepest)
    return f"{where}: value {_short(error.instance)} is not allowed ({error.validator} {_short(error.validator_value)})"


def check_workflow_config(config: dict[str, Any], schema_path: str) -> None:
    """Check the workflow config against its JSON schema, filling in the schema's defaults (``default`` of an
    object's property, set where the config lacks it, as ``snakemake.utils.validate`` sets them); raise
    :class:`ExperimentError` with one short line for the first problem (see :func:`schema_error_text`). One pass
    over the config: every parse of the workflow (each cluster job's included) pays for it."""
    import copy

    import jsonschema
    import yaml

    with open(schema_path, encoding="utf-8") as f:
        schema = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a SafeLoader
    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def properties_with_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from check_properties(validator, properties, instance, schema)

    validator = jsonschema.validators.extend(base, {"properties": properties_with_defaults})(schema)
    errors = sorted(
        validator.iter_errors(config),
        key=lambda e: (len(list(e.absolute_path)), [str(p) for p in e.absolute_path]),
    )
    if errors:
        raise ExperimentError(schema_error_text(errors[0]))


def command_line_targets(argv: list[str]) -> list[str]:
    """The targets of a Snakemake command line, as Snakemake's own parser reads them (``--configfile A B fig5``
    takes fig5 as a config file); its words after the program where it cannot be parsed."""
    import contextlib
    import io

    try:
        from snakemake.cli import get_argument_parser  # type: ignore[import-untyped]

        with contextlib.redirect_stderr(io.StringIO()):
            return list(get_argument_parser().parse_known_args(argv[1:])[0].targets or [])
    except (ImportError, SystemExit):
        return argv[1:]


def misspelt_targets(argv: list[str], known: list[str]) -> list[str]:
    """One line per target of a Snakemake command line that looks misspelt (not a known target or rule, but close
    to one): 'fig55: not a target of this config; did you mean fig5?'."""
    import difflib
    import re

    lines = []
    for word in command_line_targets(argv):
        if not re.fullmatch(r"[A-Za-z]\w*", word) or word in known:
            continue
        close = difflib.get_close_matches(word, known, n=1, cutoff=0.75)
        if close:
            lines.append(f"{word}: not a target of this config; did you mean {close[0]}?")
    return lines
