"""The algorithm registry: ``algorithm.name`` -> class. Adding an algorithm is one module, one entry here and its
names in :mod:`upfl.names`.

Every base may be upcycled: ``upcycled_<base>`` (and ``upcycled``, the paper's Upcycled-FL = Upcycled FedProx).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module

from ..names import check_known, is_upcycled
from .base import Algorithm
from .upcycled import Upcycled

MODULES: dict[str, tuple[str, str]] = {
    "fedavg": ("fedavg", "FedAvg"),
    "fedprox": ("fedprox", "FedProx"),
    "fedavgm": ("fedavgm", "FedAvgM"),
    "fednova": ("fednova", "FedNova"),
    "scaffold": ("scaffold", "Scaffold"),
    "fedadam": ("fedadam", "FedAdam"),
    "fedyogi": ("fedyogi", "FedYogi"),
    "feddyn": ("feddyn", "FedDyn"),
    "pfedme": ("pfedme", "PFedMe"),
}
"""Base algorithm name -> (module of this package, class): a module is imported when its class is first asked for
(most import torch; FedAvg's and FedProx's do not, so a run of theirs on the compiled solver never does)."""


class Registry(Mapping[str, type[Algorithm]]):
    """``algorithm.name`` of a base -> its class, importing its module on first use (:data:`MODULES`)."""

    def __getitem__(self, name: str) -> type[Algorithm]:
        module, cls = MODULES[name]
        return getattr(import_module(f".{module}", __package__), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(MODULES)

    def __len__(self) -> int:
        return len(MODULES)


ALGORITHMS = Registry()


def algorithm_class(name: str) -> type[Algorithm]:
    """The class of an algorithm name's base (ConfigError naming the choices for an unknown name)."""
    return ALGORITHMS[check_known(name)]


def build_algorithm(cfg, num_devices: int, num_params: int, num_training_rounds: int) -> Algorithm:
    """The algorithm object of a run config (a base, or a base wrapped in :class:`Upcycled`)."""
    a = cfg.algorithm
    base = algorithm_class(a.name)(a, num_devices, num_params)
    return Upcycled(base, num_training_rounds) if is_upcycled(a.name) else base
