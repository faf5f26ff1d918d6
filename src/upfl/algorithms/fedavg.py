"""FedAvg (McMahan et al. 2017): local SGD on F_i, the server takes the size-weighted average."""

from __future__ import annotations

from .base import Algorithm


class FedAvg(Algorithm):
    """w^{t+1} = sum_i p_i w_i^{t+1}, w_i^{t+1} = local SGD on F_i from w^t (Algorithm 1 with mu = 0)."""

    name = "fedavg"
    runs_on_arrays = True
