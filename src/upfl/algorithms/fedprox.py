"""FedProx (Li et al. 2020): local SGD on F_i(w) + mu/2 ||w - w^t||^2, then the size-weighted average."""

from __future__ import annotations

from .base import Algorithm


class FedProx(Algorithm):
    """Algorithm 1: w_i^{t+1} ~ argmin F_i(w) + mu/2 ||w - w^t||^2; w^{t+1} = sum_i p_i w_i^{t+1}."""

    name = "fedprox"
    runs_on_arrays = True
