"""``upfl data``: fetch the real data sets' archives and the paper's released files; prepare data sets.

upfl data fetch femnist sent140 [--resources DIR] [--from-archive [NAME=]PATH] [--url NAME=URL]
upfl data fetch paper_synthetic [--url paper=MIRROR] [--from-mirror DIR]   (also converts: DIR/data/paper/<set>)
upfl data fetch --source by_class sent140 ...   (archive sources, not data sets)
upfl data prepare femnist --out DIR [--resources DIR] [--seed N] [--set KEY=VALUE ...]
upfl data prepare paper_synthetic_1_1 --out DIR [--resources DIR] [--sha256 NAME=HEX ...]
upfl data prepare leaf --path LEAF_FOLDER --out DIR [--name NAME]   (check and copy a LEAF-format folder)
upfl data extract ARCHIVE TARGET [--member NAME ...]
upfl data digest FOLDER [--out FILE]   (the data set's digest, written to FOLDER.digest.json)
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path

from ..data.registry import DATASETS
from ..data.sources import DEADLINE, MAX_BYTES, SOURCES, resolve_sources
from ..errors import EXIT_FAILED, EXIT_INPUT, DatasetError
from . import plain_help


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
            raise ValueError(
                f"--from-archive {item!r}: file name is none of {', '.join(by_file)}; "
                f"write NAME=PATH with NAME one of {', '.join(SOURCES)}"
            )
        out[guess] = Path(item)
    return out


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
    from ..data.prepare import convert_fetched

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
        path = fetch_source(
            src,
            args.resources,
            cache_dir=args.cache,
            from_archive=from_archive,
            retries=args.retries,
            backoff=args.backoff,
            timeout=args.timeout,
            deadline=args.deadline,
            max_bytes=args.max_bytes,
            progress=not args.no_progress,
        )
        print(f"{src.name:9s} {path}")
    if not args.source:
        for setting, out in convert_fetched(args.names, args.resources, sources):
            print(f"{setting:9s} {out}")
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    """Build the data set ``args.dataset`` of :data:`upfl.data.registry.DATASETS` with the flags it reads."""
    from ..data.prepare import PrepareRequest

    entry = DATASETS[args.dataset]
    request = PrepareRequest(
        out=Path(args.out),
        resources=Path(args.resources),
        progress=not args.no_progress,
        seed=args.seed,
        settings=_pairs(args.set, "--set"),
        num_devices=args.num_devices,
        checksums=_pairs(args.sha256, "--sha256"),
        urls=_pairs(args.url, "--url"),
        name=args.name,
        path=Path(args.path) if args.path else None,
    )
    entry.check_request(request)
    out = entry.build(request)
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
    select = (
        (lambda n: any(fnmatch.fnmatch(n, p) or fnmatch.fnmatch(n.rsplit("/", 1)[-1], p) for p in patterns))
        if patterns
        else None
    )
    for path in extract_zip(args.archive, args.target, select):
        print(path)
    return 0


def cmd_digest(args: argparse.Namespace) -> int:
    from ..data.digest import digest_path, write_digest

    out = args.out or digest_path(args.folder)
    record = write_digest(args.folder, out)
    print(f"{args.folder}: data digest {record['digest']} ({len(record['files'])} files) -> {out}")
    return 0


def _guard(func):
    def run(args: argparse.Namespace) -> int:
        from ..data.archive import ArchiveError
        from ..data.download import DownloadError

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
    """Add ``data`` with sub-commands ``fetch``, ``prepare``, ``extract`` and ``digest``."""
    p = subparsers.add_parser(
        "data",
        help="download and prepare data sets (the paper's synthetic sets, FEMNIST, Sent140)",
        description=plain_help(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="data_command", metavar="{fetch,prepare,extract,digest}")
    sub.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--resources", default="resources", help="folder of the archives (default: resources)")
        q.add_argument("--no-progress", action="store_true", help="no progress bars")

    f = sub.add_parser("fetch", help="download (or place) archives, verified by sha256")
    f.add_argument(
        "names",
        nargs="+",
        help="data sets (femnist, sent140, all = both; paper_synthetic, "
        "paper_synthetic_<set>, paper_femnist) or, with --source, source names",
    )
    common(f)
    f.add_argument(
        "--source",
        action="store_true",
        help="NAMES are archive sources only (sent140 = the tweets archive, without glove)",
    )
    f.add_argument("--cache", default=None, help="download cache for .part files (default: RESOURCES/.download-cache)")
    f.add_argument(
        "--from-archive",
        action="append",
        metavar="[NAME=]PATH",
        help="use an archive obtained elsewhere (offline machines); repeatable",
    )
    f.add_argument("--url", action="append", metavar="NAME=URL", help="mirror URL for a source; repeatable")
    f.add_argument("--sha256", action="append", metavar="NAME=HEX", help="known checksum for a source; repeatable")
    f.add_argument(
        "--from-mirror",
        metavar="DIR",
        help="the paper's files from a local copy of the authors' repository files "
        "(DIR/<repo>/<commit>/<path>, e.g. a copy of shared/upstream), checked like a download",
    )
    f.add_argument("--retries", type=int, default=5, help="attempts after the first (default 5)")
    f.add_argument("--backoff", type=float, default=1.0, help="seconds before the first retry, doubling (default 1)")
    f.add_argument("--timeout", type=float, default=60.0, help="seconds one read may wait (socket timeout; default 60)")
    f.add_argument(
        "--deadline",
        type=float,
        default=DEADLINE,
        help=f"seconds one file's download may take in all, retries included (default {DEADLINE:g})",
    )
    f.add_argument(
        "--max-bytes",
        type=int,
        default=MAX_BYTES,
        help=f"the most bytes of a download whose length the server does not announce (default {MAX_BYTES})",
    )
    f.set_defaults(func=_guard(cmd_fetch))

    listing = "\n".join(f"  {d.name:24s} {d.summary}" for d in DATASETS.values())
    pr = sub.add_parser(
        "prepare",
        help="build a data set as a LEAF folder (FEMNIST, Sent140, a paper set, a LEAF folder)",
        description=f"data sets:\n{listing}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pr.add_argument("dataset", choices=list(DATASETS), metavar="DATASET", help="one of: " + ", ".join(DATASETS))
    pr.add_argument("--out", required=True, help="output data set folder")
    common(pr)
    pr.add_argument(
        "--seed", type=int, default=None, help="femnist, sent140: data seed (the 'data' random stream; default 0)"
    )
    pr.add_argument(
        "--num-devices",
        type=int,
        default=None,
        help="femnist, sent140: devices of the prepared set (default: the data set's spec)",
    )
    pr.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="femnist, sent140: override a spec field (FemnistSpec / Sent140Spec), e.g. train_total=62",
    )
    pr.add_argument(
        "--sha256",
        action="append",
        metavar="NAME=HEX",
        help="paper sets, femnist's device index: checksum of a file instead of the pinned one (a mirror "
        "of other files); repeatable",
    )
    pr.add_argument(
        "--url",
        action="append",
        metavar="NAME=URL",
        help="paper sets: where the files were fetched from (paper=MIRROR), recorded in meta.json",
    )
    pr.add_argument(
        "--name",
        default=None,
        help="paper sets, leaf: the data set's name in meta.json (default: the set / the folder's name)",
    )
    pr.add_argument("--path", default=None, help="leaf: the LEAF-format folder to check and copy (train/, test/)")
    pr.set_defaults(func=_guard(cmd_prepare))

    e = sub.add_parser("extract", help="extract members of a zip safely (refuses escaping entries)")
    e.add_argument("archive")
    e.add_argument("target")
    e.add_argument("--member", action="append", help="name or glob of members to extract; repeatable")
    e.set_defaults(func=_guard(cmd_extract))

    d = sub.add_parser(
        "digest",
        help="hash a data set folder's files and write its digest beside it (FOLDER.digest.json): what a run's "
        "identity and the workflow's training jobs read",
    )
    d.add_argument("folder", help="the data set folder (train/, test/)")
    d.add_argument("--out", default=None, help="the digest file (default: FOLDER.digest.json)")
    d.set_defaults(func=_guard(cmd_digest))
    return p
