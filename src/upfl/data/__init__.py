"""Data sets: LEAF-format federated data (any source), the FedProx synthetic generator, stats.

Names are imported on first use, so commands that need no torch (``upfl report``, ``upfl data``)
do not pay for importing it.
"""

import importlib

_EXPORTS = {
    "DatasetError": "leaf",
    "FederatedDataset": "leaf",
    "load_leaf": "leaf",
    "write_leaf": "leaf",
    "dataset_stats": "stats",
    "format_stats": "stats",
    "SYNTHETIC_PRESETS": "synthetic",
    "generate_synthetic": "synthetic",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'upfl.data' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
