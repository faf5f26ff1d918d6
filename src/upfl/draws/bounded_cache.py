"""A bounded least-recently-used cache of arrays and tensors (the solvers' draw and array caches build on it).

Torch-free: it only reads the ``nbytes`` of what it keeps.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import TypeVar

Value = TypeVar("Value")


def nbytes(value) -> int:
    """Bytes held by the arrays and tensors in ``value`` (nested tuples and lists; other objects count 0)."""
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))


class BoundedCache:
    """Values kept by key, least recently used dropped first once they hold more than ``max_bytes`` (:func:`nbytes`)
    or number more than ``max_entries``; a value larger than ``max_bytes`` is made and not kept."""

    def __init__(self, max_bytes: int, max_entries: int | None = None):
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.bytes = 0
        self.entries: collections.OrderedDict[tuple, tuple[object, int]] = collections.OrderedDict()

    def get(self, key: tuple, make: Callable[[], Value]) -> Value:
        """The value of ``key``, made with ``make()`` (and kept, within the bounds) when it is not kept."""
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
            return entry[0]  # type: ignore[return-value]  # kept by make() of this key: its type
        value = make()
        self.put(key, value, nbytes(value))
        return value

    def put(self, key: tuple, value: object, size: int) -> None:
        """Keep ``value`` (of ``size`` bytes, :func:`nbytes`) for ``key``, a key not kept, within the bounds."""
        if size <= self.max_bytes:
            self.entries[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes or (
                self.max_entries is not None and len(self.entries) > self.max_entries
            ):
                _, (_, old) = self.entries.popitem(last=False)
                self.bytes -= old
