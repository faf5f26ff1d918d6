"""FedAdam (Reddi et al. 2021, Algorithm 2): an Adam step on the server with the averaged update as gradient."""

from __future__ import annotations

import torch

from .base import Algorithm
from .updates import average


class FedAdam(Algorithm):
    """Delta = sum_i p_i w_i - w^t; m = beta1 m + (1 - beta1) Delta; v = beta2 v + (1 - beta2) Delta^2;
    w^{t+1} = w^t + eta_s m / (sqrt(v) + tau). m starts at 0, v at tau^2; no bias correction (as the paper)."""

    name = "fedadam"
    server_lr_default = 0.03

    def __init__(self, cfg, num_devices: int, num_params: int) -> None:
        super().__init__(cfg, num_devices, num_params)
        self.first_moment: torch.Tensor | None = None
        self.second_moment: torch.Tensor | None = None

    def second_moment_update(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        """Adam: v = beta2 v + (1 - beta2) Delta^2."""
        return self.cfg.beta2 * v + (1 - self.cfg.beta2) * delta_sq

    def server_update(self, w, released, rnd):
        a = self.cfg
        if self.first_moment is None:
            self.first_moment = self.zeros(w)
            self.second_moment = torch.full_like(w, a.tau**2)
        delta = average(released, rnd.weights) - w
        self.first_moment = a.beta1 * self.first_moment + (1 - a.beta1) * delta
        self.second_moment = self.second_moment_update(self.second_moment, delta * delta)
        return w + self.server_lr * self.first_moment / (self.second_moment.sqrt() + a.tau)

    def _state(self):
        return {"first_moment": self.first_moment, "second_moment": self.second_moment}
