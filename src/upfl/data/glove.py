"""GloVe 300d vectors restricted to a vocabulary, streamed from the txt inside ``glove.6B.zip``.

LEAF/FedProx load all 400,000 vectors (about 1 GB) into memory and give every other token the
id ``len(vocab)``. Here the file is read line by line from the zip and only the vectors of
words the data set uses are kept, in GloVe's own (frequency) order.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..files import atomic_path
from .archive import open_text_member, open_zip
from .leaf import DatasetError

GLOVE_MEMBER = "glove.6B.300d.txt"
GLOVE_DIM = 300


def parse_vector(rest: str, dim: int, where: str) -> np.ndarray:
    """The ``dim`` floats after a word on a GloVe line; :class:`DatasetError` names the line."""
    values = rest.split()
    if len(values) != dim:
        raise DatasetError(f"{where}: {len(values)} values after the word, expected {dim}")
    try:
        return np.array(values, dtype=np.float32)
    except ValueError:
        raise DatasetError(f"{where}: holds a value that is not a number") from None


def glove_subset(
    path: str | os.PathLike, words: set[str], member: str = GLOVE_MEMBER, dim: int = GLOVE_DIM, progress: bool = False
) -> tuple[list[str], np.ndarray]:
    """Vectors of the ``words`` GloVe has: ``(vocab, matrix (len(vocab), dim))``, in file order.

    A word listed twice keeps its first vector. Only the kept lines are parsed; the first line
    is always checked so a file of the wrong dimension fails at once.
    """
    vocab: list[str] = []
    rows: list[np.ndarray] = []
    seen: set[str] = set()
    with open_zip(path) as zf, open_text_member(zf, member, encoding="utf-8") as lines:
        for n, line in enumerate(tqdm(lines, desc="glove", unit="line", disable=not progress), start=1):
            word, _, rest = line.rstrip("\r\n").partition(" ")
            if n == 1 or (word in words and word not in seen):
                vec = parse_vector(rest, dim, f"{path}:{member} line {n}")
                if word in words and word not in seen:
                    seen.add(word)
                    vocab.append(word)
                    rows.append(vec)
    matrix = np.stack(rows) if rows else np.zeros((0, dim), dtype=np.float32)
    return vocab, matrix


def embedding_matrix(vectors: np.ndarray) -> np.ndarray:
    """The model's embedding table: the GloVe rows plus one zero row for the pad/unknown id."""
    return np.concatenate([vectors.astype(np.float32), np.zeros((1, vectors.shape[1]), dtype=np.float32)])


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)


def save_vocab(path: str | os.PathLike, vocab: list[str]) -> None:
    """One word a line; a word's id is its line number counted from 0."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text("".join(w + "\n" for w in vocab), encoding="utf-8")


def load_embeddings(folder: str | os.PathLike, meta: dict) -> tuple[list[str], np.ndarray]:
    """The vocabulary and embedding matrix recorded in a Sent140 folder's ``meta.json``."""
    folder = Path(folder)
    info = meta.get("embeddings")
    if not info:
        raise DatasetError(f"{folder / 'meta.json'}: no 'embeddings' entry (not a Sent140 folder?)")
    vocab = (folder / info["vocab_file"]).read_text(encoding="utf-8").splitlines()
    matrix = np.load(folder / info["file"], allow_pickle=False)
    if matrix.shape != (len(vocab) + 1, info["dim"]):
        raise DatasetError(f"{folder / info['file']}: shape {matrix.shape}, expected {(len(vocab) + 1, info['dim'])}")
    return vocab, matrix
