"""FedYogi (Reddi et al. 2021, Algorithm 2): FedAdam with Yogi's additive second-moment update."""

from __future__ import annotations

import torch

from .fedadam import FedAdam


class FedYogi(FedAdam):
    """As FedAdam, with v = v - (1 - beta2) Delta^2 sign(v - Delta^2)."""

    name = "fedyogi"

    def second_moment_update(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return v - (1 - self.cfg.beta2) * delta_sq * torch.sign(v - delta_sq)
