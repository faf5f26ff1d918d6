"""YAML read as data: duplicate keys refused everywhere; a run config's anchors and aliases refused
(:class:`DataLoader`), a workflow config's expansion bounded (:func:`check_workflow_yaml`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError


class UniqueKeys:
    """A YAML loader's mapping constructor that refuses a key given twice (naming the line of the first)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # an unhashable key: SafeLoader names it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


class DataLoader(UniqueKeys, yaml.SafeLoader):
    """YAML read as data: anchors, aliases (and so merge keys) and duplicate keys are refused, so a config
    cannot expand into more than it spells out, and no value is silently replaced by a later one."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(
                None,
                None,
                f"anchor or alias {event.anchor!r}: refused (configs are data; write the value out)",
                event.start_mark,
            )
        return super().compose_node(parent, index)


# libyaml's CSafeLoader where PyYAML was built with it, else the pure-Python SafeLoader (a base mypy cannot resolve)
class WorkflowLoader(UniqueKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The workflow config's loader: anchors and aliases allowed (its grids share run lists), duplicate keys
    refused (:class:`UniqueKeys`), and the document as expanded (every alias written out) bounded
    by :data:`MAX_EXPANDED_NODES`. It parses with libyaml where PyYAML has it (a tenth of the pure-Python parser's
    time; the same nodes and marks)."""


MAX_EXPANDED_NODES = 1_000_000
"""The most YAML nodes a workflow config may expand to (the paper's config expands to about 10,000)."""


def read_yaml(text: str) -> Any:
    """A YAML document read with :class:`DataLoader`."""
    return yaml.load(text, Loader=DataLoader)  # noqa: S506 - DataLoader is a SafeLoader


def _expanded_nodes(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Nodes of ``node`` with every alias written out (each shared node counted once per use, computed once)."""
    if id(node) not in sizes:
        sizes[id(node)] = 0  # a recursive alias counts as nothing more (SafeLoader builds it as a cycle)
        children = node.value if isinstance(node.value, list) else []
        flat = [n for item in children for n in (item if isinstance(item, tuple) else (item,))]
        sizes[id(node)] = 1 + sum(_expanded_nodes(n, sizes) for n in flat)
    return sizes[id(node)]


def check_workflow_yaml(path: str | Path) -> None:
    """:class:`ConfigError` naming ``path`` when a workflow config has a duplicate key, or expands (aliases written
    out) to more than :data:`MAX_EXPANDED_NODES` nodes: checked before anything walks the config."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        loader = WorkflowLoader(text)
        try:
            root = loader.get_single_node()
            if root is not None:
                size = _expanded_nodes(root, {})
                if size > MAX_EXPANDED_NODES:
                    raise ConfigError(
                        f"{path}: expands to {size:,} YAML nodes once its aliases are written out "
                        f"(at most {MAX_EXPANDED_NODES:,}): an alias bomb?"
                    )
                loader.construct_document(root)  # duplicate keys
        finally:
            loader.dispose()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the config ({e})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
