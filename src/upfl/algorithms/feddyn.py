"""FedDyn (Acar et al. 2021): a dynamic regulariser that aligns local and global stationary points.

Device i minimises F_i(w) - <h_i, w> + alpha/2 ||w - w^t||^2, h_i its lagged gradient: the solver's proximal
term with mu = alpha and the linear term -h_i.
"""

from __future__ import annotations

import torch

from .base import Algorithm
from .updates import average


class FedDyn(Algorithm):
    """Client: h_i <- h_i - alpha (w_i - w^t). Server: h <- h - alpha/N sum_{i in S} (w_i - w^t);
    w^{t+1} = sum_i p_i w_i - h / alpha. Upcycled, mu/(mu+lambda) reads alpha/(alpha+lambda)."""

    name = "feddyn"
    device_state = ("device_gradients",)

    def __init__(self, cfg, num_devices: int, num_params: int) -> None:
        super().__init__(cfg, num_devices, num_params)
        self.server_state: torch.Tensor | None = None
        self.device_gradients: torch.Tensor | None = None

    @property
    def proximal_mu(self) -> float:
        return float(self.cfg.alpha)

    def _ensure(self, w: torch.Tensor) -> None:
        if self.server_state is None:
            self.server_state = self.zeros(w)
            self.device_gradients = self.zeros(w, self.num_devices)

    def linear_term(self, w, rnd):
        self._ensure(w)
        return -self.device_gradients[rnd.chosen]

    def client_update(self, w, local, rnd):
        self.device_gradients[rnd.chosen] -= self.cfg.alpha * (local - w)

    def server_update(self, w, released, rnd):
        alpha = self.cfg.alpha
        self.server_state = self.server_state - alpha / self.num_devices * (released - w).sum(0)
        return average(released, rnd.weights) - self.server_state / alpha

    def _state(self):
        return {"server_state": self.server_state, "device_gradients": self.device_gradients}
