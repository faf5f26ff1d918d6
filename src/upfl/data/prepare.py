"""The builders behind ``upfl data prepare`` (listed in :mod:`upfl.data.registry`) and the conversion after a fetch.

Each builder takes a :class:`PrepareRequest` and returns the folder it wrote. The heavy modules (numpy, PIL,
torch, tqdm) are imported by the builder that needs them, so reading the table costs nothing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .sources import (
    DATASET_SOURCES,
    PAPER_SET_SOURCES,
    PAPER_SYNTHETIC_SETS,
    SOURCES,
    Source,
    dataset_folder,
    resolve_sources,
)


@dataclass(frozen=True)
class PrepareRequest:
    """What ``upfl data prepare`` was asked: the output folder, the resources folder and the optional flags
    (``None`` or empty when not given)."""

    out: Path
    resources: Path = Path("resources")
    progress: bool = True
    seed: int | None = None
    settings: dict[str, str] = field(default_factory=dict)
    num_devices: int | None = None
    checksums: dict[str, str] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    path: Path | None = None


def spec_class(dataset: str) -> type:
    """The spec dataclass of a data set built from archives (``femnist``: FemnistSpec, ``sent140``: Sent140Spec)."""
    if dataset == "femnist":
        from .femnist import FemnistSpec

        return FemnistSpec
    from .sent140 import Sent140Spec

    return Sent140Spec


def spec_with(dataset: str, settings: dict[str, str], num_devices: int | None = None) -> Any:
    """The data set's spec with ``--set KEY=VALUE`` overrides (values parsed as JSON, else text)."""
    cls = spec_class(dataset)
    fields = {f.name for f in dataclasses.fields(cls)}
    changes: dict[str, Any] = {}
    for key, raw in settings.items():
        if key not in fields:
            raise ValueError(f"--set {key}: unknown {dataset} setting; known: {', '.join(fields)}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        changes[key] = tuple(value) if isinstance(value, list) else value
    if num_devices is not None:
        changes["num_devices"] = num_devices
    return dataclasses.replace(cls(), **changes)


def resource(folder: Path, name: str) -> Path:
    """An archive of the resources folder, verified (sha256, zip intact); never downloaded here."""
    from .download import DownloadError, fetch_source, read_recorded_sha256

    source = SOURCES[name]
    path = folder / source.filename
    if not path.exists():
        raise DownloadError(f"{path}: missing; run 'upfl data fetch {name}' (or pass --from-archive) first")
    if read_recorded_sha256(path) is not None:
        # verified when it was fetched (against the known sha256, or a mirror's); check that record
        source = dataclasses.replace(source, sha256=None)
    return fetch_source(source, folder)


def archives_of(dataset: str, resources: Path) -> list[Path]:
    """The verified archives a data set is built from (its sources, the paper's index files aside)."""
    return [resource(Path(resources), name) for name in DATASET_SOURCES[dataset] if not SOURCES[name].mirror]


def prepare_femnist(request: PrepareRequest) -> Path:
    """FEMNIST (docs/data.md): with ``sizes: paper_index`` (the default) the authors' per-device counts."""
    from .femnist import build_femnist
    from .paper import femnist_device_counts

    spec = spec_with("femnist", request.settings, request.num_devices)
    index = None
    if spec.sizes == "paper_index":
        # The authors' per-device counts (their FEMNIST index), checked against the pinned sha256.
        checksums = {k: v for k, v in request.checksums.items() if k.startswith("paper_femnist")}
        train, test, index = femnist_device_counts(
            request.resources, resolve_sources(["paper_femnist"], checksums=checksums)
        )
        if request.num_devices is not None and request.num_devices != len(train):
            raise ValueError(f"--num-devices {request.num_devices}: the FEMNIST device index has {len(train)} devices")
        spec = dataclasses.replace(spec, num_devices=len(train), train_counts=train, test_counts=test)
    elif request.checksums:
        raise ValueError(f"--sha256 is for FEMNIST's device index (sizes paper_index), not for sizes {spec.sizes!r}")
    (by_class,) = archives_of("femnist", request.resources)
    return build_femnist(
        by_class, request.out, seed=request.seed or 0, spec=spec, progress=request.progress, device_index=index
    )


def prepare_sent140(request: PrepareRequest) -> Path:
    """Sent140 (docs/data.md): tweets grouped into devices, GloVe embeddings of the words used."""
    from .sent140 import build_sent140

    spec = spec_with("sent140", request.settings, request.num_devices)
    sentiment, glove = archives_of("sent140", request.resources)
    return build_sent140(sentiment, glove, request.out, seed=request.seed or 0, spec=spec, progress=request.progress)


def paper_set_builder(setting: str) -> Callable[[PrepareRequest], Path]:
    """The builder of the paper's released set ``setting``: its four files converted to a LEAF folder."""

    def build(request: PrepareRequest) -> Path:
        from .paper import build_paper_synthetic

        sources = resolve_sources([f"paper_{setting}"], urls=request.urls, checksums=request.checksums)
        return build_paper_synthetic(setting, request.resources, request.out, name=request.name, sources=sources)

    build.__name__ = build.__qualname__ = f"prepare_paper_{setting}"
    build.__doc__ = f"The paper's released {setting}, converted (docs/data.md)."
    return build


def prepare_leaf_folder(request: PrepareRequest) -> Path:
    """An existing LEAF-format folder (``--path``), checked and copied with its provenance (docs/data.md)."""
    from .leaf_folder import import_leaf_folder

    if request.path is None:
        raise ValueError("--path: required for 'upfl data prepare leaf' (the LEAF-format folder to bring in)")
    return import_leaf_folder(request.path, request.out, name=request.name)


def paper_sets_of(names: list[str] | tuple[str, ...]) -> list[str]:
    """The paper's synthetic sets a fetch of data set ``names`` includes (converted after the download)."""
    sets: list[str] = []
    for name in names:
        members = set(DATASET_SOURCES.get(name, ()))
        sets += [s for s in PAPER_SYNTHETIC_SETS if set(PAPER_SET_SOURCES[f"paper_{s}"]) <= members and s not in sets]
    return sets


def convert_fetched(
    names: list[str] | tuple[str, ...], resources: str | Path, sources: list[Source]
) -> list[tuple[str, Path]]:
    """After ``upfl data fetch NAMES``: each paper set the fetch completed, converted to its folder under
    ``<resources>/data/paper/``; (setting, folder) pairs."""
    from .paper import build_paper_synthetic

    out = []
    for setting in paper_sets_of(names):
        folder = dataset_folder(resources, "paper", setting)
        out.append((setting, build_paper_synthetic(setting, resources, folder, sources=sources)))
    return out
