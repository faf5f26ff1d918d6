"""FedNova (Wang et al. 2020): each device's update normalised by its amount of local work.

Stragglers run fewer local steps; FedAvg's plain average then drifts towards the devices that ran longest.
FedNova divides device i's update by ||a_i||_1, the sum of the weights its local optimiser gave to its
gradients, and rescales the normalised average by tau_eff = sum_i p_i ||a_i||_1.
"""

from __future__ import annotations

import torch

from .base import Algorithm


def momentum_work(steps: int, rho: float) -> float:
    """||a_i||_1 for tau_i = ``steps`` heavy-ball steps with momentum rho (Wang et al. 2020, Sec. 4, momentum
    correction): [tau - rho (1 - rho^tau) / (1 - rho)] / (1 - rho); tau for plain SGD."""
    if rho == 0:
        return float(steps)
    return (steps - rho * (1 - rho**steps) / (1 - rho)) / (1 - rho)


class FedNova(Algorithm):
    """d_i = (w^t - w_i^{t+1}) / ||a_i||_1; w^{t+1} = w^t - eta_s tau_eff sum_i p_i d_i, tau_eff = sum_i p_i ||a_i||_1.
    With equal work on every device this is FedAvg's average."""

    name = "fednova"

    def server_update(self, w, released, rnd):
        p = rnd.weights
        work = torch.tensor([momentum_work(s, rnd.momentum) for s in rnd.steps], dtype=w.dtype, device=w.device)
        normalised = (w - released) / work.unsqueeze(1)
        tau_eff = p @ work
        return w - self.server_lr * tau_eff * (p @ normalised)
