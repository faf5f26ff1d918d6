"""Where the real data sets come from: the archives LEAF downloads and the paper's own files, as data.

Each :class:`Source` names one file, the URL it is fetched from (over https: every host here serves
it) and, where a checksum has been published for the fixed upstream file, its sha256:

- ``sent140`` (trainingandtestdata.zip, 81363704 bytes): the sha256 in TensorFlow Datasets' checksum
  file for Sentiment140 (``tensorflow_datasets/datasets/sentiment140/checksums.tsv``), so even the
  first download is verified.
- ``by_class`` (NIST SD19) and ``glove`` (GloVe 6B): no checksum is published that we
  could cite, so ``sha256`` is ``None``: trust on first use, but only after every zip member passes its
  CRC-32 check; the computed sha256 is then recorded beside the file (``<file>.sha256``) and every
  later use checks it.
- the paper's released files (its four synthetic sets and its FEMNIST device index), from the authors'
  repository at a pinned commit: their sha256 are pinned here (``PAPER_SHA256``).

A config (or ``upfl data fetch --url NAME=URL``) can point any source at a mirror. A known checksum
belongs to the upstream URL: a mirror is checked against the sha256 given with it (``--sha256``,
``sources.NAME.sha256``), else trusted on first use after the CRC check (a mirror may hold another
build of the archive, as the test fixtures do). ``--url paper=BASE`` is different: it points every paper
file at ``BASE/<repo>/<commit>/<path>`` (the layout of raw.githubusercontent.com), a mirror of the same
files, so their pinned sha256 still apply.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

MAX_BYTES = 4 << 30
"""The most bytes a download may hold when the server does not announce its length (``--max-bytes``): the
largest source (FEMNIST's by_class.zip) is under 1.5 GB."""
DEADLINE = 3600.0
"""Seconds one file's download may take in all, attempts and waits included (``--deadline``)."""


@dataclass(frozen=True)
class Source:
    """One downloadable archive: ``filename`` is its name in the resources folder."""

    name: str
    filename: str
    url: str
    sha256: str | None = None
    members: tuple[str, ...] = ()
    description: str = ""
    mirror: str = ""
    path: str = ""


SOURCES: dict[str, Source] = {
    "by_class": Source(
        "by_class",
        "by_class.zip",
        "https://s3.amazonaws.com/nist-srd/SD19/by_class.zip",
        description="NIST SD19 images grouped by class (FEMNIST labels)",
    ),
    "sent140": Source(
        "sent140",
        "trainingandtestdata.zip",
        "https://cs.stanford.edu/people/alecmgo/trainingandtestdata.zip",
        sha256="004a3772c8a7ff9bbfeb875880f47f0679d93fc63e5cf9cff72d54a8a6162e57",
        members=("training.1600000.processed.noemoticon.csv",),
        description="Sentiment140 tweets (1.6M training rows)",
    ),
    "glove": Source(
        "glove",
        "glove.6B.zip",
        "https://nlp.stanford.edu/data/glove.6B.zip",
        members=("glove.6B.300d.txt",),
        description="GloVe 6B word vectors (only the 300d file is read)",
    ),
}

# The paper's released files: github.com/osu-srml/Upcycled-FL at this commit (GPL-2.0; data only).
PAPER_REPO = "osu-srml/Upcycled-FL"
PAPER_COMMIT = "4dd74006fb42a6d39fb1a997943e63b3372383a6"
PAPER_BASE_URL = "https://raw.githubusercontent.com/"
PAPER_MIRROR = "paper"
PAPER_SYNTHETIC_SETS = ("synthetic_iid", "synthetic_0_0", "synthetic_0.5_0.5", "synthetic_1_1")

DATA_FOLDERS = {"paper": "paper", "synthetic": "generated", "femnist": "leaf", "sent140": "leaf", "leaf": "leaf"}
"""The folder under ``<resources>/data/`` of each data source: the authors' released draws (``paper``), our
generator's draws (``generated``) and LEAF's sets (``leaf``) never share a path."""


def dataset_folder(resources: str | os.PathLike, source: str, name: str) -> str:
    """``<resources>/data/<paper|generated|leaf>/<name>``: where the data set ``name`` of ``source`` lives."""
    if source not in DATA_FOLDERS:
        raise ValueError(f"unknown data source {source!r}; known: {', '.join(DATA_FOLDERS)}")
    return f"{resources}/data/{DATA_FOLDERS[source]}/{name}"


# sha256 of each released file at PAPER_COMMIT, per data set: path under data/<set>/data/ -> digest.
PAPER_SET_SHA256: dict[str, dict[str, str]] = {
    "synthetic_iid": {
        "train/mytrain.pt": "faf5186d8c95fa3a0dae6755102d8f20eab8464a6b689f82e925c634fe11f534",
        "train/user_groups.json": "f9299819ed0cf0219810654b0afd63c940aa91886a895d3ca9c8b81972851549",
        "test/mytest.pt": "b9eb59fe338955fed9cd0f27aa1049ca1f7f504f0a36a6931afc3f34be623be5",
        "test/user_groups.json": "1028ba93a84e27d59764dbf7f30498221e3d45c7edcabe27df0c3eb32c1b8e02",
    },
    "synthetic_0_0": {
        "train/mytrain.pt": "4bb5f32bc04e722f4b8fbb1ed839394a438488e9bcd7a0874c108203026f372c",
        "train/user_groups.json": "2a9b66c80c1d9d3fbb96ed13eb9b436b0c38072d4d6c70059367690ee7c0b449",
        "test/mytest.pt": "12dfcafab0aaa70b60f59f98413c118a2999c7d9032844351ee6cc7fc22398fa",
        "test/user_groups.json": "619072dc0413f20e8ee34a5302fb89a2da0fc4a8fee7d299cc1cf3064284f9db",
    },
    "synthetic_0.5_0.5": {
        "train/mytrain.pt": "8c6dbfa976f301414620c2ec2592dd1fd2341beb63df98dafeac05053d3c4329",
        "train/user_groups.json": "4c4ec6e3526d718ee5d1879208117e3aaefc9f83ed18d725fc6eeb67461e2d4d",
        "test/mytest.pt": "3ae5f3ad59d9c4f621d632ad0431adeb6edd5ca22f0e08534dda4e39177d6bce",
        "test/user_groups.json": "7ee4536af74bed335165667995eb5c24bc0fcc48c0aebfea2f50c44270392a4f",
    },
    "synthetic_1_1": {
        "train/mytrain.pt": "948d6dc570bcf4f3a06d9f27af68ce64ac56f8046f628377509bd60d7dc53179",
        "train/user_groups.json": "1205071a7a72039b6c68727bd13a9b28261b05ee027e5ff70d8db2162ce9d602",
        "test/mytest.pt": "4069d3d6684a0d7e38011f517b12fb1d9165f0d405f38ef3f06feb7234e6d559",
        "test/user_groups.json": "33a06dcadbbe67d33394e1c933079551c734e4dfc97837b747d0823a7eff9aeb",
    },
    "femnist": {
        "train/user_groups.json": "255023a19f5b456696de2e25e574e01362e895626adc10385f5ca6a030d78f14",
        "test/user_groups.json": "b702b148862474391c643a9e3b7ba1c244dfbd1ea3f6b6dc19177e3261bf2681",
    },
}
PAPER_SHA256: dict[str, str] = {
    f"data/{dataset}/data/{file}": digest
    for dataset, files in PAPER_SET_SHA256.items()
    for file, digest in files.items()
}
"""sha256 of each released file: its path in the repository -> digest."""


def paper_file_name(dataset: str, split: str, groups: bool) -> str:
    """The source name of one released file: ``paper_<set>_<split>`` (tensors) or ``..._groups`` (index)."""
    return f"paper_{dataset}_{split}" + ("_groups" if groups else "")


def paper_file_path(dataset: str, split: str, groups: bool) -> str:
    """The file's path in the authors' repository."""
    leaf = "user_groups.json" if groups else f"my{split}.pt"
    return f"data/{dataset}/data/{split}/{leaf}"


def paper_file_filename(dataset: str, split: str, groups: bool) -> str:
    """Where ``upfl data fetch`` puts the file under the resources folder: ``upstream/<repo>/<commit>/<path>``
    (``dataset`` may be a pattern, ``{setting}``: the workflow's rule fetch_paper_set)."""
    return f"upstream/{PAPER_REPO}/{PAPER_COMMIT}/{paper_file_path(dataset, split, groups)}"


def _paper_source(dataset: str, split: str, groups: bool) -> Source:
    path = paper_file_path(dataset, split, groups)
    what = "device -> row index" if groups else "TensorDataset (x, y)"
    return Source(
        paper_file_name(dataset, split, groups),
        paper_file_filename(dataset, split, groups),
        f"{PAPER_BASE_URL}{PAPER_REPO}/{PAPER_COMMIT}/{path}",
        sha256=PAPER_SHA256[path],
        description=f"the paper's {dataset} {split} {what}",
        mirror=PAPER_MIRROR,
        path=path,
    )


for _set in PAPER_SYNTHETIC_SETS:
    for _split in ("train", "test"):
        for _groups in (False, True):
            _src = _paper_source(_set, _split, _groups)
            SOURCES[_src.name] = _src
for _split in ("train", "test"):
    _src = _paper_source("femnist", _split, True)
    SOURCES[_src.name] = _src

PAPER_SET_SOURCES: dict[str, tuple[str, ...]] = {
    f"paper_{s}": tuple(paper_file_name(s, split, g) for split in ("train", "test") for g in (False, True))
    for s in PAPER_SYNTHETIC_SETS
}

PAPER_FEMNIST_SOURCES = (paper_file_name("femnist", "train", True), paper_file_name("femnist", "test", True))

# What `upfl data fetch NAME` fetches. FEMNIST's device counts are the authors' (their device index).
DATASET_SOURCES: dict[str, tuple[str, ...]] = {
    "femnist": ("by_class", *PAPER_FEMNIST_SOURCES),
    "sent140": ("sent140", "glove"),
    "paper_synthetic": tuple(n for names in PAPER_SET_SOURCES.values() for n in names),
    **PAPER_SET_SOURCES,
    "paper_femnist": PAPER_FEMNIST_SOURCES,
}


MIRRORS = (PAPER_MIRROR,)


def mirror_url(base: str, source: Source) -> str:
    """The URL of ``source`` on a mirror of the authors' repository (same layout as raw.githubusercontent.com)."""
    return f"{base.rstrip('/')}/{PAPER_REPO}/{PAPER_COMMIT}/{source.path}"


def resolve_sources(
    names: list[str] | tuple[str, ...],
    urls: dict[str, str] | None = None,
    checksums: dict[str, str] | None = None,
    sources_only: bool = False,
) -> list[Source]:
    """Expand data set names (``femnist``, ``sent140``, ``paper_synthetic``, ``all``) into sources, applying overrides.

    ``urls`` and ``checksums`` map a source name to a mirror URL or a known sha256 (from a config);
    ``urls["paper"]`` is the base URL of a mirror of the authors' repository (every paper file is
    then fetched from ``<base>/<repo>/<commit>/<path>``; a file's own URL wins). With
    ``sources_only`` the names are source names (``sent140`` is the tweets archive alone).
    ``all`` is every LEAF archive (the paper's files are named by ``paper_synthetic``, ``paper_femnist``).
    """
    urls, checksums = urls or {}, checksums or {}
    for key in checksums:
        if key in MIRRORS:
            raise KeyError(
                f"{key!r} is a mirror (a base URL), not a file: give each file's checksum "
                f"(e.g. {paper_file_name('synthetic_1_1', 'train', False)}=HEX)"
            )
    for key in list(urls) + list(checksums):
        if key not in SOURCES and key not in MIRRORS:
            raise KeyError(f"unknown source {key!r}; known sources: {', '.join([*MIRRORS, *SOURCES])}")
    picked: list[str] = []
    for name in names:
        if sources_only:
            if name not in SOURCES:
                raise KeyError(f"unknown source {name!r}; known sources: {', '.join(SOURCES)}")
            expanded = [name]
        elif name == "all":
            expanded = [s for group in ("femnist", "sent140") for s in DATASET_SOURCES[group]]
        elif name in DATASET_SOURCES:
            expanded = list(DATASET_SOURCES[name])
        elif name in SOURCES:
            expanded = [name]
        else:
            known = ", ".join(["all", *DATASET_SOURCES, *SOURCES])
            raise KeyError(f"unknown data set or source {name!r}; known: {known}")
        picked += [s for s in expanded if s not in picked]
    out = []
    for name in picked:
        src = SOURCES[name]
        if src.mirror and src.mirror in urls:
            src = replace(src, url=mirror_url(urls[src.mirror], src))
        if name in urls:
            src = replace(src, url=urls[name], sha256=None)
        if name in checksums:
            src = replace(src, sha256=checksums[name].lower())
        out.append(src)
    return out
