"""config/README.md is the workflow config's key reference: every key of the schema is documented there and
every documented key exists in the schema. docs/run-config.md is generated from upfl.config_reference and current."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = "<name>"


def schema_keys(node: dict, path: str, defs: dict, out: set[str]) -> set[str]:
    """Dotted key paths of a JSON schema: ``<name>`` for a mapping's free keys, ``[]`` for list items."""
    if "$ref" in node:
        return schema_keys(defs[node["$ref"].split("/")[-1]], path, defs, out)
    for combined in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(combined, []):
            schema_keys(sub, path, defs, out)
    for key, sub in node.get("properties", {}).items():
        child = f"{path}.{key}" if path else key
        out.add(child)
        schema_keys(sub, child, defs, out)
    free = [node["additionalProperties"]] if isinstance(node.get("additionalProperties"), dict) else []
    for sub in [*free, *node.get("patternProperties", {}).values()]:
        schema_keys(sub, f"{path}.{PLACEHOLDER}", defs, out)
    if isinstance(node.get("items"), dict):
        schema_keys(node["items"], f"{path}[]", defs, out)
    return out


def normalised(key: str, top_level: set[str]) -> str:
    """A preset's key is the top-level key it replaces; an experiment's or group's ``job`` has job_defaults' keys."""
    preset = re.match(r"presets\.<name>\.(\w+)(.*)$", key)
    if preset and preset.group(1) in top_level:
        key = preset.group(1) + preset.group(2)
    return re.sub(r"^experiments\.<name>\.(groups\[\]\.)?job\.", "job_defaults.", key)


def documented_keys(readme: str) -> set[str]:
    """The backticked keys in the first column of the README's key table."""
    table = readme.split("## Keys", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and not set(cells[1].strip()) <= set("-"):
            keys |= {k for k in re.findall(r"`([^`]+)`", cells[1]) if re.match(r"[a-z<]", k)}
    return keys


def pattern(key: str) -> re.Pattern:
    """A key with placeholders (``<name>``, ``<role>``, ``paper_<set>``) matches any one component there."""
    parts = re.split(r"(<[a-z]+>)", key)
    return re.compile("".join(r"[^.]+" if re.fullmatch(r"<[a-z]+>", p) else re.escape(p) for p in parts) + "$")


def covers(documented: str, key: str) -> bool:
    return bool(pattern(documented).match(key) or pattern(key).match(documented))


def key_reference_problems(readme: str) -> tuple[list[str], list[str]]:
    """(schema keys the README lacks, README keys the schema lacks)."""
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    raw = schema_keys(schema, "", schema.get("definitions", {}), set())
    top_level = {k for k in raw if "." not in k and "[" not in k}
    required = {normalised(k, top_level) for k in raw}
    docs = documented_keys(readme)
    undocumented = sorted(
        k for k in required if not any(covers(d, k) or d.startswith((k + ".", k + "[")) for d in docs)
    )
    unknown = sorted(d for d in docs if not any(covers(d, k) for k in required | {"presets.<name>.<key>"}))
    return undocumented, unknown


def test_every_schema_key_is_documented_and_every_documented_key_exists():
    undocumented, unknown = key_reference_problems((ROOT / "config" / "README.md").read_text())
    assert not undocumented, f"schema keys missing from config/README.md: {undocumented}"
    assert not unknown, f"config/README.md documents keys the schema does not have: {unknown}"


def test_a_dropped_row_and_an_invented_key_are_both_found():
    readme = (ROOT / "config" / "README.md").read_text()
    lam_row = next(
        line for line in readme.splitlines() if line.startswith("| `experiments.<name>.groups[].runs[].lam`")
    )
    edited = readme.replace(lam_row + "\n", "").replace(
        "| `round_scale` |", "| `job_defaults.nodes` | int | 1 | invented |\n| `round_scale` |"
    )
    assert key_reference_problems(edited) == (["experiments.<name>.groups[].runs[].lam"], ["job_defaults.nodes"])
    assert covers("sources.<name>.url", "sources.paper.url") and covers("claims.<role>", "claims.bases")


def test_run_config_reference_is_current_and_lists_every_key():
    from upfl import config as cfgmod
    from upfl.config_reference import reference_markdown

    text = (ROOT / "docs" / "run-config.md").read_text(encoding="utf-8")
    assert text == reference_markdown(), "docs/run-config.md is stale: run python tools/run_config_reference.py"
    listed = set(re.findall(r"^\| `([a-z_.0-9]+)` \|", text, re.M))
    flat = set(_flat_keys(cfgmod.to_dict(cfgmod.RunConfig())))
    assert listed == flat
    assert all(line.rstrip(" |").split("|")[-1].strip() for line in text.splitlines() if line.startswith("| `")), (
        "a run-config key without a meaning: give its field a docstring in src/upfl/config.py"
    )


def _flat_keys(doc: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in doc.items():
        if isinstance(value, dict) and key != "options":
            out += _flat_keys(value, f"{prefix}{key}.")
        else:
            out.append(prefix + key)
    return out
