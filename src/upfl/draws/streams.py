"""Keyed random streams.

Every random draw of a run comes from its own ``torch.Generator`` whose seed is derived
from ``(seed, stream, *keys)`` (for example ``(0, "batches", 12, 7)`` for training round 12,
device 7). Streams are independent of each other and of the order in which they are used:
adding a stream (``noise``) never changes the draws of another (``sampling``), and a resumed
run re-creates exactly the generators an uninterrupted run would have used.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch

STREAMS = ("init", "sampling", "stragglers", "batches", "dropout", "noise", "data")


def check_stream(stream: str) -> None:
    """Raise ValueError naming ``stream`` unless it is one of :data:`STREAMS`."""
    if stream not in STREAMS:
        raise ValueError(f"unknown random stream {stream!r}; known streams: {', '.join(STREAMS)}")


def derive_seed(seed: int, stream: str, *keys: int) -> int:
    """A 63-bit seed from ``(seed, stream, *keys)`` via SHA-256 (stable across platforms)."""
    check_stream(stream)
    text = "/".join([str(int(seed)), stream, *(str(int(k)) for k in keys)])
    digest = hashlib.sha256(text.encode("ascii")).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def derive_seeds(seed: int, stream: str, keys) -> np.ndarray:
    """:func:`derive_seed` ``(seed, stream, *row)`` of every row of ``keys`` (a sequence of equally long integer
    tuples, at least one key each), as uint64: compiled, in one call (:func:`upfl.draws.compiled.keyed_seeds`), or
    one by one where numba does not import."""
    import numpy as np

    check_stream(stream)
    try:
        from .compiled import keyed_seeds
    except ImportError:
        return np.array([derive_seed(seed, stream, *row) for row in keys], dtype=np.uint64)
    rows = np.asarray(keys, dtype=np.int64)
    return keyed_seeds(f"{int(seed)}/{stream}/", rows.reshape(len(rows), -1) if len(rows) else rows.reshape(0, 1))


def generator(seed: int, stream: str, *keys: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` for one stream and key tuple (torch is imported here, not with the module)."""
    return seeded_generator(derive_seed(seed, stream, *keys), device)


def seeded_generator(derived: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded with a seed :func:`derive_seed` made (torch is imported here)."""
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(derived)
    return g


def entropy_generator(device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded with 63 bits of the operating system's entropy (:mod:`secrets`): draws nobody
    can regenerate from a run's config or files, and no run repeats."""
    import secrets

    return seeded_generator(secrets.randbits(63), device)


def numpy_generator(seed: int, stream: str, *keys: int) -> np.random.Generator:
    """A NumPy generator for one stream and key tuple (data generation, preprocessing; numpy is imported here)."""
    import numpy as np

    return np.random.default_rng(derive_seed(seed, stream, *keys))
