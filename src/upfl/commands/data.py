"""``upfl data``: fetch the real data sets' archives and the paper's released files; prepare data sets.

    upfl data fetch femnist sent140 [--resources DIR] [--from-archive [NAME=]PATH] [--url NAME=URL]
    upfl data fetch paper_synthetic [--url paper=MIRROR] [--from-mirror DIR]   (also converts: DIR/data/paper/<set>)
    upfl data fetch --source by_class sent140 ...   (archive sources, not data sets)
    upfl data prepare femnist --out DIR [--resources DIR] [--seed N] [--set KEY=VALUE ...]
    upfl data prepare paper_synthetic_1_1 --out DIR [--resources DIR] [--sha256 NAME=HEX ...]
    upfl data extract ARCHIVE TARGET [--member NAME ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import sys
from pathlib import Path
from typing import Any

from . import plain_help
from ..errors import EXIT_FAILED, EXIT_INPUT
from ..data.sources import (DATASET_SOURCES, DEADLINE, MAX_BYTES, PAPER_SET_SOURCES, PAPER_SYNTHETIC_SETS, SOURCES,
                            dataset_folder,
                            resolve_sources)

SPEC_DATASETS = ("femnist", "sent140")
"""Data sets ``upfl data prepare`` builds from archives (their specs: FemnistSpec, Sent140Spec). The builders
(numpy, PIL, tqdm, http) are imported by the commands that use them, not by every ``upfl`` command."""
PAPER_SETS = {f"paper_{s}": s for s in PAPER_SYNTHETIC_SETS}


def spec_class(dataset: str):
    """The spec dataclass of a data set of :data:`SPEC_DATASETS`."""
    from ..data.femnist import FemnistSpec
    from ..data.sent140 import Sent140Spec

    return {"femnist": FemnistSpec, "sent140": Sent140Spec}[dataset]


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"{flag} expects NAME=VALUE, got {item!r}")
        out[key] = value
    return out


def archive_assignments(items: list[str] | None) -> dict[str, Path]:
    """``--from-archive`` values: ``NAME=PATH``, or a bare PATH whose file name is a source's."""
    by_file = {s.filename: s.name for s in SOURCES.values() if not s.mirror}
    out: dict[str, Path] = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if sep and name in SOURCES:
            out[name] = Path(path)
            continue
        guess = by_file.get(Path(item).name)
        if guess is None:
            raise ValueError(f"--from-archive {item!r}: file name is none of {', '.join(by_file)}; "
                             f"write NAME=PATH with NAME one of {', '.join(SOURCES)}")
        out[guess] = Path(item)
    return out


def spec_with(dataset: str, settings: list[str] | None, num_devices: int | None = None):
    """The data set's spec with ``--set KEY=VALUE`` overrides (values parsed as JSON, else text)."""
    cls = spec_class(dataset)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    changes: dict[str, Any] = {}
    for key, raw in _pairs(settings, "--set").items():
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


def check_fetch_flags(args: argparse.Namespace) -> None:
    """Named errors for flag values a download cannot use (before anything is fetched)."""
    if args.retries < 0:
        raise ValueError(f"--retries: must be >= 0 (attempts after the first), got {args.retries}")
    if args.backoff < 0:
        raise ValueError(f"--backoff: must be >= 0 seconds, got {args.backoff}")
    if args.timeout <= 0:
        raise ValueError(f"--timeout: must be > 0 seconds, got {args.timeout}")
    if not args.deadline > 0:
        raise ValueError(f"--deadline: must be > 0 seconds, got {args.deadline}")
    if args.max_bytes < 1:
        raise ValueError(f"--max-bytes: must be >= 1, got {args.max_bytes}")


def cmd_fetch(args: argparse.Namespace) -> int:
    from ..data.download import fetch_source
    from ..data.paper import build_paper_synthetic

    check_fetch_flags(args)
    urls, checksums = _pairs(args.url, "--url"), _pairs(args.sha256, "--sha256")
    # With --source, NAMES are archive sources, not data sets: `sent140` is the tweets archive alone, without glove.
    sources = resolve_sources(args.names, urls=urls, checksums=checksums, sources_only=args.source)
    local = archive_assignments(args.from_archive)
    unknown = set(local) - {s.name for s in sources}
    if unknown:
        raise ValueError(f"--from-archive given for {sorted(unknown)}, which this fetch does not include")
    for src in sources:
        from_archive = local.get(src.name)
        if from_archive is None and args.from_mirror and src.mirror:
            from_archive = Path(args.from_mirror) / src.filename.split("/", 1)[1]
        path = fetch_source(src, args.resources, cache_dir=args.cache, from_archive=from_archive,
                            retries=args.retries, backoff=args.backoff, timeout=args.timeout,
                            deadline=args.deadline, max_bytes=args.max_bytes, progress=not args.no_progress)
        print(f"{src.name:9s} {path}")
    if not args.source:
        for setting in paper_sets_of(args.names):
            out = build_paper_synthetic(setting, args.resources, dataset_folder(args.resources, "paper", setting),
                                        sources=sources)
            print(f"{setting:9s} {out}")
    return 0


def paper_sets_of(names: list[str]) -> list[str]:
    """The paper's synthetic sets a fetch of data set ``names`` includes (converted after the download)."""
    sets = []
    for name in names:
        members = set(DATASET_SOURCES.get(name, ()))
        sets += [s for s in PAPER_SYNTHETIC_SETS if set(PAPER_SET_SOURCES[f"paper_{s}"]) <= members and s not in sets]
    return sets


def _resource(folder: Path, name: str) -> Path:
    """An archive of the resources folder, verified (sha256, zip intact); never downloaded here."""
    from ..data.download import DownloadError, fetch_source, read_recorded_sha256

    source = SOURCES[name]
    path = folder / source.filename
    if not path.exists():
        raise DownloadError(f"{path}: missing; run 'upfl data fetch {name}' (or pass --from-archive) first")
    if read_recorded_sha256(path) is not None:
        # verified when it was fetched (against the known sha256, or a mirror's); check that record
        source = dataclasses.replace(source, sha256=None)
    return fetch_source(source, folder)


def cmd_prepare(args: argparse.Namespace) -> int:
    from ..data.paper import build_paper_synthetic, femnist_device_counts

    if args.dataset in PAPER_SETS:
        setting = PAPER_SETS[args.dataset]
        if args.set or args.num_devices is not None:
            raise ValueError(f"{args.dataset}: the paper's released set has no settings (--set, --num-devices)")
        sources = resolve_sources([args.dataset], urls=_pairs(args.url, "--url"),
                                  checksums=_pairs(args.sha256, "--sha256"))
        print(build_paper_synthetic(setting, args.resources, args.out, name=args.name, sources=sources))
        return 0
    if args.name or args.url:
        raise ValueError(f"--url and --name are for the paper's sets ({', '.join(PAPER_SETS)}), not {args.dataset}")
    spec = spec_with(args.dataset, args.set, args.num_devices)
    index = None
    if args.dataset == "femnist" and spec.sizes == "paper_index":
        # The authors' per-device counts (their FEMNIST index), checked against the pinned sha256.
        checksums = _pairs(args.sha256, "--sha256")
        train, test, index = femnist_device_counts(args.resources, resolve_sources(
            ["paper_femnist"], checksums={k: v for k, v in checksums.items() if k.startswith("paper_femnist")}))
        if args.num_devices is not None and args.num_devices != len(train):
            raise ValueError(f"--num-devices {args.num_devices}: the FEMNIST device index has {len(train)} devices")
        spec = dataclasses.replace(spec, num_devices=len(train), train_counts=train, test_counts=test)
    elif args.sha256:
        raise ValueError(f"--sha256 is for the paper's files (paper sets, FEMNIST's device index), not {args.dataset}")
    res = Path(args.resources)
    progress = not args.no_progress
    paths = [_resource(res, name) for name in DATASET_SOURCES[args.dataset] if not SOURCES[name].mirror]
    if args.dataset == "femnist":
        from ..data.femnist import build_femnist

        out = build_femnist(*paths, args.out, seed=args.seed, spec=spec, progress=progress, device_index=index)
    else:
        from ..data.sent140 import build_sent140

        out = build_sent140(*paths, args.out, seed=args.seed, spec=spec, progress=progress)
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    bad = meta.get("malformed")
    if bad and bad["count"]:
        shown = ", ".join(f"line {n} ({why})" for n, why in bad["lines"][:10])
        print(f"skipped {bad['count']} malformed rows: {shown}{' ...' if bad['count'] > 10 else ''}", file=sys.stderr)
    print(out)
    return 0


def cmd_extract(args: argparse.Namespace) -> int:
    from ..data.archive import extract_zip

    patterns = args.member or []
    select = (lambda n: any(fnmatch.fnmatch(n, p) or fnmatch.fnmatch(n.rsplit("/", 1)[-1], p) for p in patterns)) \
        if patterns else None
    for path in extract_zip(args.archive, args.target, select):
        print(path)
    return 0


def _guard(func):
    def run(args: argparse.Namespace) -> int:
        from ..data.archive import ArchiveError
        from ..data.download import DownloadError
        from ..data.leaf import DatasetError

        try:
            return func(args)
        except (DownloadError, ArchiveError) as e:
            print(f"upfl data: error: {e}", file=sys.stderr)
            return EXIT_FAILED
        except (DatasetError, ValueError, KeyError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else e
            print(f"upfl data: error: {msg}", file=sys.stderr)
            return EXIT_INPUT
    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``data`` with sub-commands ``fetch``, ``prepare`` and ``extract``."""
    p = subparsers.add_parser("data", help="download and prepare data sets (the paper's synthetic sets, FEMNIST, Sent140)",
                              description=plain_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="data_command", metavar="{fetch,prepare,extract}")
    sub.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--resources", default="resources", help="folder of the archives (default: resources)")
        q.add_argument("--no-progress", action="store_true", help="no progress bars")

    f = sub.add_parser("fetch", help="download (or place) archives, verified by sha256")
    f.add_argument("names", nargs="+", help="data sets (femnist, sent140, all = both; paper_synthetic, "
                   "paper_synthetic_<set>, paper_femnist) or, with --source, source names")
    common(f)
    f.add_argument("--source", action="store_true",
                   help="NAMES are archive sources only (sent140 = the tweets archive, without glove)")
    f.add_argument("--cache", default=None, help="download cache for .part files (default: RESOURCES/.download-cache)")
    f.add_argument("--from-archive", action="append", metavar="[NAME=]PATH",
                   help="use an archive obtained elsewhere (offline machines); repeatable")
    f.add_argument("--url", action="append", metavar="NAME=URL", help="mirror URL for a source; repeatable")
    f.add_argument("--sha256", action="append", metavar="NAME=HEX", help="known checksum for a source; repeatable")
    f.add_argument("--from-mirror", metavar="DIR",
                   help="the paper's files from a local copy of the authors' repository files "
                        "(DIR/<repo>/<commit>/<path>, e.g. a copy of shared/upstream), checked like a download")
    f.add_argument("--retries", type=int, default=5, help="attempts after the first (default 5)")
    f.add_argument("--backoff", type=float, default=1.0, help="seconds before the first retry, doubling (default 1)")
    f.add_argument("--timeout", type=float, default=60.0, help="seconds one read may wait (socket timeout; default 60)")
    f.add_argument("--deadline", type=float, default=DEADLINE,
                   help=f"seconds one file's download may take in all, retries included (default {DEADLINE:g})")
    f.add_argument("--max-bytes", type=int, default=MAX_BYTES,
                   help=f"the most bytes of a download whose length the server does not announce (default {MAX_BYTES})")
    f.set_defaults(func=_guard(cmd_fetch))

    pr = sub.add_parser("prepare", help="build FEMNIST, Sent140 or a paper synthetic set as a LEAF folder")
    pr.add_argument("dataset", choices=sorted(SPEC_DATASETS) + list(PAPER_SETS))
    pr.add_argument("--out", required=True, help="output data set folder")
    common(pr)
    pr.add_argument("--seed", type=int, default=0, help="data seed (the 'data' random stream; default 0)")
    pr.add_argument("--num-devices", type=int, default=None,
                    help="devices of the prepared set (default: the data set's spec)")
    pr.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override a spec field (FemnistSpec / Sent140Spec), e.g. train_total=62")
    pr.add_argument("--sha256", action="append", metavar="NAME=HEX",
                    help="paper sets: checksum of a file instead of the pinned one (a mirror of other files); repeatable")
    pr.add_argument("--url", action="append", metavar="NAME=URL",
                    help="paper sets: where the files were fetched from (paper=MIRROR), recorded in meta.json")
    pr.add_argument("--name", default=None, help="paper sets: the data set's name in meta.json (default: the set)")
    pr.set_defaults(func=_guard(cmd_prepare))

    e = sub.add_parser("extract", help="extract members of a zip safely (refuses escaping entries)")
    e.add_argument("archive")
    e.add_argument("target")
    e.add_argument("--member", action="append", help="name or glob of members to extract; repeatable")
    e.set_defaults(func=_guard(cmd_extract))
    return p
