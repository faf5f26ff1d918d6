"""SCAFFOLD (Karimireddy et al. 2020) with option II control variates.

Every device corrects its local gradients by c - c_i (the server's and its own control variate), a constant
over the round, so it is the solver's linear term: the local objective is F_i(w) + <c - c_i, w>.
"""

from __future__ import annotations

import torch

from .base import Algorithm
from .updates import average


class Scaffold(Algorithm):
    """Local: g + c - c_i. Option II: c_i+ = c_i - c + (1 - rho)(w^t - w_i) / (tau_i eta) (rho the local momentum;
    the paper's formula at rho = 0). Server: w^{t+1} = w^t + eta_s (sum_i p_i w_i - w^t);
    c += sum_i (c_i+ - c_i) / N."""

    name = "scaffold"
    device_state = ("device_controls", "control")

    def __init__(self, cfg, num_devices: int, num_params: int) -> None:
        super().__init__(cfg, num_devices, num_params)
        self.control: torch.Tensor | None = None
        self.device_controls: torch.Tensor | None = None
        self._delta: torch.Tensor | None = None

    def _ensure(self, w: torch.Tensor) -> None:
        if self.control is None:
            self.control = self.zeros(w)
            self.device_controls = self.zeros(w, self.num_devices)

    def linear_term(self, w, rnd):
        self._ensure(w)
        return self.control - self.device_controls[rnd.chosen]

    def client_update(self, w, local, rnd):
        self._ensure(w)
        steps = torch.tensor(rnd.steps, dtype=w.dtype, device=w.device).unsqueeze(1)
        old = self.device_controls[rnd.chosen]
        new = old - self.control + (1 - rnd.momentum) * (w - local) / (steps * rnd.lr)
        self.device_controls[rnd.chosen] = new
        self._delta = (new - old).sum(0)

    def server_update(self, w, released, rnd):
        self.control = self.control + self._delta / self.num_devices
        return w + self.server_lr * (average(released, rnd.weights) - w)

    def _state(self):
        return {"control": self.control, "device_controls": self.device_controls}
