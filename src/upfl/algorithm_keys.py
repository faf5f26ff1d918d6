"""The ``algorithm.*`` keys each base algorithm reads: re-exported from :mod:`upfl.names`, their home."""

from .names import ALGORITHM_KEYS

__all__ = ["ALGORITHM_KEYS"]
