"""The ``algorithm.*`` keys each base algorithm reads, without importing the algorithms (which import torch).

The report's ``algorithm_options`` column lists a run's values of these keys; ``upfl report`` reads run
folders and must start without torch. The algorithm classes (``upfl.algorithms``, their ``keys``) are the
source: tests/test_report_startup.py checks that this table equals theirs.
"""

from __future__ import annotations

ALGORITHM_KEYS: dict[str, tuple[str, ...]] = {
    "fedavg": (),
    "fedprox": (),
    "fedavgm": ("server_lr", "server_momentum", "nesterov"),
    "fednova": ("server_lr",),
    "scaffold": ("server_lr",),
    "fedadam": ("server_lr", "beta1", "beta2", "tau"),
    "fedyogi": ("server_lr", "beta1", "beta2", "tau"),
    "feddyn": ("alpha",),
    "pfedme": ("server_lr", "personal_lambda", "personal_steps", "personal_lr"),
}
"""Base algorithm name -> the ``algorithm.*`` keys it reads besides ``name``, ``mu`` and the upcycling keys."""
