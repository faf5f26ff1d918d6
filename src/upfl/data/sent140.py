"""Sent140 as LEAF builds it from Sentiment140, then the paper's 52 devices, with GloVe 300d ids.

LEAF steps (``data/sent140/preprocess``): read ``training.1600000.processed.noemoticon.csv``
(ISO-8859-1, no header; ``polarity, id, date, query, user, text``), group tweets by user, label
1 for polarity 4 and 0 otherwise. Rows with the wrong column count, a polarity other than 0 or
4, or bytes the encoding cannot decode are counted and reported by line number, not fatal.
LEAF/FedProx model input: ``re.findall(r"[\\w']+|[.,!?;]", text)``, the first 25 tokens, each
the id of its GloVe word or the unknown id ``len(vocab)``, padded with that same id.

The paper's set (Appendix H.1, Table 2): 52 devices, read as 32299 training + 8484 test tweets
(the same reading as the FEMNIST row, where the first number is the training count and the mean
per device is it divided by the devices: 32299 / 52 = 621). No Sentiment140 user has 621
tweets, so a device is a group of whole users; see ``docs/data.md`` and :func:`group_users`.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from .. import __version__
from ..draws.streams import derive_seed, numpy_generator
from .archive import find_member, open_zip
from .download import read_recorded_sha256
from .glove import GLOVE_DIM, GLOVE_MEMBER, embedding_matrix, glove_subset, save_npy, save_vocab
from .leaf import DatasetError
from .publish import write_dataset
from .shapes import normal_sizes, proportional_sizes
from .synthetic import dataset_key

CSV_MEMBER = "training.1600000.processed.noemoticon.csv"
TOKEN_RE = re.compile(r"[\w']+|[.,!?;]")
MAX_TOKENS = 25
REPORTED_LINES = 1000


def tokenize(text: str) -> list[str]:
    """LEAF's ``split_line``: words (with apostrophes) and the punctuation marks ``.,!?;``."""
    return TOKEN_RE.findall(text)


def encode(tokens: list[str], word_to_id: dict[str, int], unk_id: int, max_tokens: int = MAX_TOKENS) -> list[int]:
    """LEAF's ``line_to_indices``: first ``max_tokens`` tokens to ids, unknown and padding = ``unk_id``."""
    ids = [word_to_id.get(t, unk_id) for t in tokens[:max_tokens]]
    return ids + [unk_id] * (max_tokens - len(ids))


@dataclass(frozen=True)
class Malformed:
    """A CSV line that was skipped: its 1-based line number and why."""

    line: int
    reason: str


def parse_line(raw: bytes, line: int, encoding: str = "ISO-8859-1") -> tuple[str, int, str] | Malformed:
    """One CSV line -> ``(user, label, text)``, or :class:`Malformed` saying what is wrong."""
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as e:
        return Malformed(line, f"undecodable bytes at offset {e.start} for {encoding}")
    try:
        rows = list(csv.reader([text.rstrip("\r\n")]))
    except csv.Error as e:
        return Malformed(line, f"CSV error: {e}")
    row = rows[0] if rows else []
    if len(row) != 6:
        return Malformed(line, f"{len(row)} columns, expected 6")
    polarity = row[0].strip()
    if polarity not in ("0", "4"):
        return Malformed(line, f"unknown polarity {polarity!r} (expected 0 or 4)")
    return row[4], 1 if polarity == "4" else 0, row[5]


def read_tweets(
    lines: Iterable[bytes], encoding: str = "ISO-8859-1", progress: bool = False
) -> tuple[dict[str, list[tuple[int, str]]], list[Malformed], int]:
    """LEAF's grouping by user: ``{user: [(label, text), ...]}`` in file order, malformed lines, rows read."""
    by_user: dict[str, list[tuple[int, str]]] = {}
    bad: list[Malformed] = []
    n = 0
    for n, raw in enumerate(tqdm(lines, desc="sent140", unit="row", disable=not progress), start=1):
        parsed = parse_line(raw, n, encoding)
        if isinstance(parsed, Malformed):
            bad.append(parsed)
            continue
        user, label, text = parsed
        by_user.setdefault(user, []).append((label, text))
    return by_user, bad, n


@dataclass(frozen=True)
class Sent140Spec:
    """The paper's Sent140 set: 52 devices, 32299 train + 8484 test, train std 105 per device.

    Device train counts are normal quantiles (mean ``train_total / num_devices``, std
    ``train_std``) summing to ``train_total``; test counts split ``test_total`` in proportion.
    Only users with at least ``min_user_samples`` tweets are grouped into devices.
    """

    num_devices: int = 52
    train_total: int = 32299
    test_total: int = 8484
    train_std: float = 105.0
    min_user_samples: int = 10
    max_tokens: int = MAX_TOKENS
    encoding: str = "ISO-8859-1"


def device_sizes(spec: Sent140Spec) -> tuple[np.ndarray, np.ndarray]:
    """Sorted per-device ``(train, test)`` counts (deterministic)."""
    train = normal_sizes(spec.num_devices, spec.train_total, spec.train_std, minimum=1)
    return train, proportional_sizes(train, spec.test_total)


def group_users(
    by_user: dict[str, list[tuple[int, str]]], totals: np.ndarray, min_user_samples: int, rng: np.random.Generator
) -> list[list[tuple[str, int]]]:
    """Fill each device with whole users drawn in a seeded order: ``[[(user, tweets taken), ...], ...]``.

    Users with at least ``min_user_samples`` tweets are shuffled; devices take them in turn
    until full. The user that would overfill a device gives only its first tweets (file order)
    and the rest of that user is dropped, so no user is in two devices.
    """
    eligible = sorted(u for u, tw in by_user.items() if len(tw) >= min_user_samples)
    order = [eligible[i] for i in rng.permutation(len(eligible))]
    available = sum(len(by_user[u]) for u in eligible)
    if available < int(np.sum(totals)):
        raise DatasetError(
            f"the spec needs {int(np.sum(totals))} tweets but the {len(eligible)} users with at "
            f"least {min_user_samples} tweets have {available}"
        )
    devices: list[list[tuple[str, int]]] = []
    it = iter(order)
    for total in (int(t) for t in totals):
        members: list[tuple[str, int]] = []
        need = total
        while need > 0:
            user = next(it)
            take = min(need, len(by_user[user]))
            members.append((user, take))
            need -= take
        devices.append(members)
    return devices


def _malformed_report(bad: list[Malformed]) -> dict[str, Any]:
    reasons = Counter(re.sub(r"\d+ columns", "N columns", re.sub(r"'.*'", "'...'", m.reason)) for m in bad)
    return {
        "count": len(bad),
        "by_reason": dict(reasons),
        "lines": [[m.line, m.reason] for m in bad[:REPORTED_LINES]],
        "lines_truncated": len(bad) > REPORTED_LINES,
    }


def build_sent140(
    sentiment_zip: str | os.PathLike,
    glove_zip: str | os.PathLike,
    out: str | os.PathLike,
    seed: int = 0,
    spec: Sent140Spec = Sent140Spec(),
    progress: bool = True,
    name: str = "sent140",
    glove_member: str = GLOVE_MEMBER,
    glove_dim: int = GLOVE_DIM,
) -> Path:
    """LEAF's Sent140 steps, the paper's devices, token ids, and the restricted GloVe matrix.

    Writes ``train/``, ``test/``, ``meta.json`` (``x_dtype`` int64, spec, seed, malformed lines,
    devices), ``embeddings.npy`` (``(len(vocab) + 1, dim)`` float32, last row zero for the
    pad/unknown id), ``vocab.txt`` and ``users.json`` (the source users of each device).
    Seeded draws: device order (key 0), user order (key 1), per-device split (key 2, device).
    """
    sentiment_zip, glove_zip = Path(sentiment_zip), Path(glove_zip)
    with open_zip(sentiment_zip) as zf, zf.open(find_member(zf, CSV_MEMBER)) as raw:
        by_user, bad, rows = read_tweets(raw, spec.encoding, progress)
    key = dataset_key("sent140")
    train_sizes, test_sizes = device_sizes(spec)
    order = numpy_generator(seed, "data", key, 0).permutation(spec.num_devices)
    train_sizes, test_sizes = train_sizes[order], test_sizes[order]
    groups = group_users(
        by_user, train_sizes + test_sizes, spec.min_user_samples, numpy_generator(seed, "data", key, 1)
    )
    device_tweets: list[list[tuple[int, list[str]]]] = []
    for members in groups:
        device_tweets.append(
            [
                (label, tokenize(text)[: spec.max_tokens])
                for user, take in members
                for label, text in by_user[user][:take]
            ]
        )
    used = {t for tweets in device_tweets for _, toks in tweets for t in toks}
    vocab, vectors = glove_subset(glove_zip, used, glove_member, glove_dim, progress)
    word_to_id = {w: i for i, w in enumerate(vocab)}
    unk = len(vocab)
    users: list[str] = []
    train: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] = ({}, {})
    test: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] = ({}, {})
    devices: dict[str, dict[str, Any]] = {}
    sources: dict[str, list[list[Any]]] = {}
    tokens_total = tokens_unknown = 0
    for d, tweets in enumerate(device_tweets):
        user = f"f_{d:05d}"
        perm = numpy_generator(seed, "data", key, 2, d).permutation(len(tweets))
        n_train = int(train_sizes[d])
        for (xs, ys), idx in ((train, perm[:n_train]), (test, perm[n_train:])):
            xs[user] = np.array(
                [encode(tweets[i][1], word_to_id, unk, spec.max_tokens) for i in idx], dtype=np.int64
            ).reshape(len(idx), spec.max_tokens)
            ys[user] = np.array([tweets[i][0] for i in idx], dtype=np.int64)
        for _, toks in tweets:
            tokens_total += len(toks)
            tokens_unknown += sum(1 for t in toks if t not in word_to_id)
        users.append(user)
        devices[user] = {"users": len(groups[d]), "train": n_train, "test": len(tweets) - n_train}
        sources[user] = [[u, take] for u, take in groups[d]]
    meta = {
        "name": name,
        "table2_reading": "train",
        "generator": "leaf_sent140_paper_devices",
        "parameters": asdict(spec),
        "reading": "Table 2's 32299 (8484) read as 32299 train + 8484 test tweets",
        "data_seed": seed,
        "data_seed_derived": derive_seed(seed, "data", key),
        "num_classes": 2,
        "x_dtype": "int64",
        "rows_read": rows,
        "users_in_csv": len(by_user),
        "malformed": _malformed_report(bad),
        "embeddings": {
            "file": "embeddings.npy",
            "vocab_file": "vocab.txt",
            "dim": glove_dim,
            "vocab_size": len(vocab),
            "pad_id": unk,
            "unk_id": unk,
            "rows": len(vocab) + 1,
            "glove_member": glove_member,
            "tokens_total": tokens_total,
            "tokens_unknown": tokens_unknown,
            "distinct_tokens_used": len(used),
        },
        "devices": devices,
        "sources": {p.name: read_recorded_sha256(p) for p in (sentiment_zip, glove_zip)},
        "upfl_version": __version__,
    }
    extras = {
        "embeddings.npy": lambda p: save_npy(p, embedding_matrix(vectors)),
        "vocab.txt": lambda p: save_vocab(p, vocab),
        "users.json": lambda p: p.write_text(json.dumps(sources, separators=(",", ":")), encoding="utf-8"),
    }
    return write_dataset(out, users, train, test, meta, extras=extras)
