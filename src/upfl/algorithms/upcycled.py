"""Upcycling as a wrapper over any base algorithm (Algorithm 2 of the paper, generalised).

Odd iterations run the base algorithm's training round; even iterations 2m apply Eq. (5) on the server,
touching no data: w^{2m} = w^{2m-1} + c_m (w^{2m-1} - w^{2m-2}), with c_1 = ``algorithm.step`` or
mu/(mu+lambda) where the base has a mu (FedProx's mu, FedDyn's alpha) and c_m from ``algorithm.schedule``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import names
from .base import Algorithm, ClientRound
from .updates import upcycle_coefficient, upcycle_step

if TYPE_CHECKING:
    import torch


class Upcycled(Algorithm):
    """Base algorithm ``base`` at odd iterations, Eq. (5) at even ones. Delegates every client and server hook."""

    def __init__(self, base: Algorithm, num_training_rounds: int) -> None:
        self.base = base
        self.cfg = base.cfg
        self.name = names.upcycled_name(base.name)
        self.extra_metrics = base.extra_metrics
        self.device_state = base.device_state
        self.num_training_rounds = num_training_rounds
        self.c1 = coefficient(base)
        self.runs_on_arrays = base.runs_on_arrays

    def extrapolate(self, w: torch.Tensor, w_prev: torch.Tensor, t: int) -> torch.Tensor:
        """Eq. (5) at even iteration t = 2m."""
        c = upcycle_coefficient(self.c1, t // 2, self.cfg.schedule, self.num_training_rounds)
        return upcycle_step(w, w_prev, c)

    @property
    def proximal_mu(self) -> float:
        return self.base.proximal_mu

    def linear_term(self, w: torch.Tensor, rnd: ClientRound) -> torch.Tensor | None:
        return self.base.linear_term(w, rnd)

    def local_solve(self, w, rnd, linear):
        return self.base.local_solve(w, rnd, linear)

    def client_update(self, w, local, rnd) -> None:
        self.base.client_update(w, local, rnd)

    def server_update(self, w, released, rnd) -> torch.Tensor:
        return self.base.server_update(w, released, rnd)

    def evaluate_extra(self, sim, w) -> dict[str, float]:
        return self.base.evaluate_extra(sim, w)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.base.state_dict()

    def split_state(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        return self.base.split_state()

    def load_state_dict(self, state, device) -> None:
        self.base.load_state_dict(state, device)


def coefficient(base: Algorithm) -> float:
    """c_1: ``algorithm.step``, else mu/(mu+lambda) with the base's mu (Eq. 5)."""
    return names.even_step_coefficient(base.extrapolation_mu, base.cfg.lam, base.cfg.step)
