"""Server momentum (FedAvgM, Hsu et al. 2019): the averaged update fed to a server SGD with momentum.

On FedAvg clients (``mu: 0``) this is FedAvgM; with ``mu > 0`` the clients run FedProx's objective
(FedProx with server momentum, the momentum ablation).
"""

from __future__ import annotations

import torch

from .base import Algorithm
from .updates import average


class FedAvgM(Algorithm):
    """g = w^t - sum_i p_i w_i^{t+1}; v = beta v + g; w^{t+1} = w^t - eta_s v (plain) or
    w^t - eta_s (g + beta v) (Nesterov, torch.optim.SGD's form). beta = 0, eta_s = 1 is the base algorithm."""

    name = "fedavgm"

    def __init__(self, cfg, num_devices: int, num_params: int) -> None:
        super().__init__(cfg, num_devices, num_params)
        self.velocity: torch.Tensor | None = None

    def server_update(self, w, released, rnd):
        beta = self.cfg.server_momentum
        g = w - average(released, rnd.weights)
        self.velocity = g.clone() if self.velocity is None else self.velocity.mul_(beta).add_(g)
        step = g + beta * self.velocity if self.cfg.nesterov else self.velocity
        return w - self.server_lr * step

    def _state(self):
        return {"velocity": self.velocity}
