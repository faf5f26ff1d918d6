"""The data sets ``upfl data prepare NAME`` builds, and the ``source`` a workflow config names, in one table.

Each :class:`PreparedDataset` says what it is, which of ``upfl data prepare``'s optional flags it reads and the
function that builds it (:mod:`upfl.data.prepare`). The CLI reads this table and nothing else: a new
downloadable data set is one entry here and its builder, with no edit of :mod:`upfl.commands.data`.

A workflow config's ``datasets.<name>.source`` is one of :data:`WORKFLOW_SOURCES`; ``source: leaf`` with a
``path`` is a LEAF-format folder brought in by config alone (:mod:`upfl.data.leaf_folder`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import prepare
from .sources import PAPER_SYNTHETIC_SETS

OPTIONAL_FLAGS = {
    "seed": "--seed",
    "settings": "--set",
    "num_devices": "--num-devices",
    "checksums": "--sha256",
    "urls": "--url",
    "name": "--name",
    "path": "--path",
}
"""The optional fields of a :class:`prepare.PrepareRequest` and the ``upfl data prepare`` flag of each."""


@dataclass(frozen=True)
class PreparedDataset:
    """One data set ``upfl data prepare`` builds: ``reads`` names the optional request fields it uses."""

    name: str
    summary: str
    build: Callable[[prepare.PrepareRequest], Path]
    reads: frozenset[str] = field(default_factory=frozenset)

    def check_request(self, request: prepare.PrepareRequest) -> None:
        """``ValueError`` naming a flag that was given but that this data set does not read."""
        for key, flag in OPTIONAL_FLAGS.items():
            if key not in self.reads and getattr(request, key) not in (None, {}, ()):
                reads = ", ".join(OPTIONAL_FLAGS[k] for k in OPTIONAL_FLAGS if k in self.reads) or "none"
                raise ValueError(f"{flag}: not read by 'upfl data prepare {self.name}' (it reads: {reads})")


def _entries() -> list[PreparedDataset]:
    spec = frozenset({"seed", "settings", "num_devices"})
    entries = [
        PreparedDataset(
            "femnist",
            "FEMNIST from NIST SD19 (by_class.zip) and the authors' device index",
            prepare.prepare_femnist,
            spec | {"checksums"},
        ),
        PreparedDataset("sent140", "Sent140 from Sentiment140 and GloVe", prepare.prepare_sent140, spec),
    ]
    entries += [
        PreparedDataset(
            f"paper_{s}",
            f"the paper's released {s} (the authors' files)",
            prepare.paper_set_builder(s),
            frozenset({"checksums", "urls", "name"}),
        )
        for s in PAPER_SYNTHETIC_SETS
    ]
    entries.append(
        PreparedDataset(
            "leaf",
            "an existing LEAF-format folder (--path), checked and copied",
            prepare.prepare_leaf_folder,
            frozenset({"path", "name"}),
        )
    )
    return entries


DATASETS: dict[str, PreparedDataset] = {d.name: d for d in _entries()}
"""``upfl data prepare`` NAME -> its entry."""

ARCHIVE_SOURCES = ("femnist", "sent140")
"""Workflow sources built from downloaded archives by ``upfl data prepare <source>`` (rule ``leaf_dataset``)."""

WORKFLOW_SOURCES = ("paper", "synthetic", *ARCHIVE_SOURCES, "leaf")
"""``datasets.<name>.source`` of a workflow config (the schema's enum is tested against this)."""

DATASET_KEYS = {
    "source": WORKFLOW_SOURCES,
    "setting": ("paper", "synthetic"),
    "data_seed": ("synthetic", *ARCHIVE_SOURCES),
    "options": ARCHIVE_SOURCES,
    "path": ("leaf",),
    "model": WORKFLOW_SOURCES,
}
"""The keys of a workflow config's ``datasets.<name>`` entry and the sources that read each."""


def check_dataset_entry(name: str, entry: dict[str, Any]) -> None:
    """``ValueError`` naming ``datasets.<name>.<key>`` for a key its source does not read, or a missing path."""
    source = entry.get("source")
    if source not in WORKFLOW_SOURCES:
        raise ValueError(f"datasets.{name}.source: {source!r}; known: {', '.join(WORKFLOW_SOURCES)}")
    for key in entry:
        if key not in DATASET_KEYS:
            raise ValueError(f"datasets.{name}.{key}: unknown key; known: {', '.join(DATASET_KEYS)}")
        if source not in DATASET_KEYS[key]:
            raise ValueError(
                f"datasets.{name}.{key}: not read for source {source} (only {', '.join(DATASET_KEYS[key])})"
            )
    if source == "leaf" and not (isinstance(entry.get("path"), str) and entry["path"].strip()):
        raise ValueError(
            f"datasets.{name}.path: required for source leaf (an existing LEAF-format folder with train/ and test/)"
        )
    if "model" in entry and not (isinstance(entry["model"], str) and entry["model"]):
        raise ValueError(
            f"datasets.{name}.model: a model name (logreg, binary_logreg, mlp, cnn, lstm), got {entry['model']!r}"
        )
