"""The algorithm registry: ``algorithm.name`` -> class. Adding an algorithm is one module, one entry here and its
names in :mod:`upfl.names`.

Every base may be upcycled: ``upcycled_<base>`` (and ``upcycled``, the paper's Upcycled-FL = Upcycled FedProx).
"""

from __future__ import annotations

from ..names import check_known, is_upcycled
from .base import Algorithm
from .fedadam import FedAdam
from .fedavg import FedAvg
from .fedavgm import FedAvgM
from .feddyn import FedDyn
from .fednova import FedNova
from .fedprox import FedProx
from .fedyogi import FedYogi
from .pfedme import PFedMe
from .scaffold import Scaffold
from .upcycled import Upcycled

ALGORITHMS: dict[str, type[Algorithm]] = {
    "fedavg": FedAvg,
    "fedprox": FedProx,
    "fedavgm": FedAvgM,
    "fednova": FedNova,
    "scaffold": Scaffold,
    "fedadam": FedAdam,
    "fedyogi": FedYogi,
    "feddyn": FedDyn,
    "pfedme": PFedMe,
}


def algorithm_class(name: str) -> type[Algorithm]:
    """The class of an algorithm name's base (ConfigError naming the choices for an unknown name)."""
    return ALGORITHMS[check_known(name)]


def build_algorithm(cfg, num_devices: int, num_params: int, num_training_rounds: int) -> Algorithm:
    """The algorithm object of a run config (a base, or a base wrapped in :class:`Upcycled`)."""
    a = cfg.algorithm
    base = algorithm_class(a.name)(a, num_devices, num_params)
    return Upcycled(base, num_training_rounds) if is_upcycled(a.name) else base
