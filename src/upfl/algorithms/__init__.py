"""Federated algorithms: one small class per base algorithm over :class:`base.Algorithm`, upcycling as a wrapper
(:class:`upcycled.Upcycled`), and the registry that maps ``algorithm.name`` to them (docs/algorithms.md)."""

from ..errors import AlgorithmPrivacyError
from ..names import algorithm_names, base_name, check_algorithm_config, is_upcycled
from .base import Algorithm, ClientRound
from .registry import ALGORITHMS, algorithm_class, build_algorithm
from .upcycled import Upcycled
from .updates import upcycle_coefficient, upcycle_step, weighted_average

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "AlgorithmPrivacyError",
    "ClientRound",
    "Upcycled",
    "algorithm_class",
    "algorithm_names",
    "base_name",
    "build_algorithm",
    "check_algorithm_config",
    "is_upcycled",
    "upcycle_coefficient",
    "upcycle_step",
    "weighted_average",
]
