"""The algorithm registry: ``algorithm.name`` -> class. Adding an algorithm is one module and one entry here.

Every base may be upcycled: ``upcycled_<base>`` (and ``upcycled``, the paper's Upcycled-FL = Upcycled FedProx).
"""

from __future__ import annotations

import dataclasses

from ..config import AlgorithmConfig, ConfigError
from .base import Algorithm
from .fedavg import FedAvg
from .fedadam import FedAdam
from .fedavgm import FedAvgM
from .feddyn import FedDyn
from .fednova import FedNova
from .fedprox import FedProx
from .fedyogi import FedYogi
from .pfedme import PFedMe
from .scaffold import Scaffold
from .upcycled import PREFIX, Upcycled, base_name, is_upcycled

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

UPCYCLING_KEYS = ("lam", "step", "schedule")


class AlgorithmPrivacyError(ConfigError):
    """A privacy mechanism was asked of an algorithm where the paper's analysis does not apply."""


def algorithm_names() -> list[str]:
    """Every valid ``algorithm.name``: the bases, ``upcycled`` and ``upcycled_<base>`` for every base but FedProx."""
    return list(ALGORITHMS) + [PREFIX] + [f"{PREFIX}_{b}" for b in ALGORITHMS if b != "fedprox"]


def algorithm_class(name: str) -> type[Algorithm]:
    base = base_name(name)
    if base not in ALGORITHMS or name == f"{PREFIX}_fedprox":
        raise ConfigError(f"algorithm.name: unknown algorithm {name!r}; choose one of {', '.join(algorithm_names())}")
    return ALGORITHMS[base]


def build_algorithm(cfg, num_devices: int, num_params: int, num_training_rounds: int) -> Algorithm:
    """The algorithm object of a run config (a base, or a base wrapped in :class:`Upcycled`)."""
    a = cfg.algorithm
    base = algorithm_class(a.name)(a, num_devices, num_params)
    return Upcycled(base, num_training_rounds) if is_upcycled(a.name) else base


def check_algorithm_config(cfg) -> None:
    """Cross-key rules of ``algorithm.*`` and the privacy mechanisms each algorithm admits (ConfigError naming the key)."""
    a = cfg.algorithm
    cls = algorithm_class(a.name)
    upcycled = is_upcycled(a.name)
    defaults = {f.name: f.default for f in dataclasses.fields(AlgorithmConfig)}
    for key in defaults:
        if key in ("name", "mu") or key in UPCYCLING_KEYS or key in cls.keys:
            continue
        if getattr(a, key) != defaults[key]:
            users = sorted(n for n, c in ALGORITHMS.items() if key in c.keys)
            raise ConfigError(f"algorithm.{key}: not used by {a.name} (used by {', '.join(users) or 'no algorithm'})")
    if a.mu != 0 and not cls.uses_mu:
        hint = "; use fedprox" if cls.name == "fedavg" else ""
        raise ConfigError(f"algorithm.mu: {cls.name} has no proximal term, got mu = {a.mu}{hint}")
    if upcycled:
        if a.lam is not None and a.step is not None:
            raise ConfigError("algorithm.step: give either algorithm.lam or algorithm.step, not both")
        if a.step is None:
            if a.lam is None:
                raise ConfigError(f"algorithm.lam: {a.name} needs algorithm.lam (or algorithm.step)")
            mu = cls(a, 1, 1).extrapolation_mu
            if mu + a.lam == 0:
                raise ConfigError("algorithm.lam: mu + lambda must be > 0 (with mu = 0, give algorithm.step)")
    elif a.lam is not None or a.step is not None:
        raise ConfigError(f"algorithm.{'lam' if a.lam is not None else 'step'}: only used by upcycled algorithms "
                          f"({PREFIX}, {PREFIX}_<base>)")
    mechanism = cfg.privacy.mechanism
    if mechanism != "none":
        reason = cls.privacy.get(mechanism)
        if reason is not None:
            raise AlgorithmPrivacyError(f"privacy.mechanism: {mechanism} perturbation is not supported for "
                                        f"{a.name}: {reason}")
