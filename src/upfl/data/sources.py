"""Where the real data sets come from: the archives LEAF downloads, as data.

Each :class:`Source` names one archive, the URL LEAF's scripts fetch it from (over https: every host
here serves it) and, where a checksum has been published for the fixed upstream file, its sha256:

- ``sent140`` (trainingandtestdata.zip, 81363704 bytes): the sha256 in TensorFlow Datasets' checksum
  file for Sentiment140 (``tensorflow_datasets/datasets/sentiment140/checksums.tsv``), so even the
  first download is verified.
- ``by_class``, ``by_write`` (NIST SD19) and ``glove`` (GloVe 6B): no checksum is published that we
  could cite, so ``sha256`` is ``None``: trust on first use, but only after every zip member passes its
  CRC-32 check; the computed sha256 is then recorded beside the file (``<file>.sha256``) and every
  later use checks it.

A config (or ``upfl data fetch --url NAME=URL``) can point any source at a mirror. A known checksum
belongs to the upstream URL: a mirror is checked against the sha256 given with it (``--sha256``,
``sources.NAME.sha256``), else trusted on first use after the CRC check (a mirror may hold another
build of the archive, as the test fixtures do).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Source:
    """One downloadable archive: ``filename`` is its name in the resources folder."""

    name: str
    filename: str
    url: str
    sha256: str | None = None
    members: tuple[str, ...] = ()
    description: str = ""


SOURCES: dict[str, Source] = {
    "by_class": Source(
        "by_class", "by_class.zip", "https://s3.amazonaws.com/nist-srd/SD19/by_class.zip",
        description="NIST SD19 images grouped by class (FEMNIST labels)"),
    "by_write": Source(
        "by_write", "by_write.zip", "https://s3.amazonaws.com/nist-srd/SD19/by_write.zip",
        description="NIST SD19 images grouped by writer (FEMNIST devices)"),
    "sent140": Source(
        "sent140", "trainingandtestdata.zip",
        "https://cs.stanford.edu/people/alecmgo/trainingandtestdata.zip",
        sha256="004a3772c8a7ff9bbfeb875880f47f0679d93fc63e5cf9cff72d54a8a6162e57",
        members=("training.1600000.processed.noemoticon.csv",),
        description="Sentiment140 tweets (1.6M training rows)"),
    "glove": Source(
        "glove", "glove.6B.zip", "https://nlp.stanford.edu/data/glove.6B.zip",
        members=("glove.6B.300d.txt",),
        description="GloVe 6B word vectors (only the 300d file is read)"),
}

DATASET_SOURCES: dict[str, tuple[str, ...]] = {
    "femnist": ("by_class", "by_write"),
    "sent140": ("sent140", "glove"),
}


def resolve_sources(names: list[str] | tuple[str, ...], urls: dict[str, str] | None = None,
                    checksums: dict[str, str] | None = None) -> list[Source]:
    """Expand data set names (``femnist``, ``sent140``, ``all``) into sources, applying overrides.

    ``urls`` and ``checksums`` map a source name to a mirror URL or a known sha256 (from a config).
    """
    urls, checksums = urls or {}, checksums or {}
    for key in list(urls) + list(checksums):
        if key not in SOURCES:
            raise KeyError(f"unknown source {key!r}; known sources: {', '.join(SOURCES)}")
    picked: list[str] = []
    for name in names:
        if name == "all":
            expanded = [s for group in DATASET_SOURCES.values() for s in group]
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
        if name in urls:
            src = replace(src, url=urls[name], sha256=None)
        if name in checksums:
            src = replace(src, sha256=checksums[name].lower())
        out.append(src)
    return out
