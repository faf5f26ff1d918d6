"""Data sets: LEAF-format federated data (any source), the FedProx synthetic generator, stats."""

from .leaf import DatasetError, FederatedDataset, load_leaf, write_leaf
from .stats import dataset_stats, format_stats
from .synthetic import SYNTHETIC_PRESETS, generate_synthetic

__all__ = [
    "DatasetError", "FederatedDataset", "load_leaf", "write_leaf",
    "dataset_stats", "format_stats", "SYNTHETIC_PRESETS", "generate_synthetic",
]
