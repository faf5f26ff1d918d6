"""The one-line server updates shared by every algorithm: Eq. (5) of Upcycled-FL, its coefficient schedules, and
the size-weighted average of Algorithm 1 line 6."""

from __future__ import annotations

import math

import torch


def upcycle_step(w_prev: torch.Tensor, w_prev2: torch.Tensor, coefficient: float) -> torch.Tensor:
    """Eq. (5): w^{2m} = w^{2m-1} + mu/(mu+lambda_m) (w^{2m-1} - w^{2m-2}); touches no data. A float32 CPU vector is
    stepped in numpy: the same three float32 operations (the coefficient rounded to float32 as torch rounds it), at a
    third of torch's per-operation cost."""
    c = float(coefficient)
    if w_prev.device.type == "cpu" and w_prev.dtype == w_prev2.dtype == torch.float32:
        a, b = w_prev.numpy(), w_prev2.numpy()
        return torch.from_numpy(a + c * (a - b))
    return w_prev + c * (w_prev - w_prev2)


def upcycle_coefficient(c1: float, m: int, schedule: str, num_training_rounds: int) -> float:
    """c_m for even iteration 2m: ``const`` c_1; ``horizon`` c_1/sqrt(M) (Corollary 4.8); ``inv_sqrt`` c_1/sqrt(m)."""
    if schedule == "const":
        return c1
    if schedule == "horizon":
        return c1 / math.sqrt(num_training_rounds)
    if schedule == "inv_sqrt":
        return c1 / math.sqrt(m)
    raise ValueError(f"algorithm.schedule: unknown schedule {schedule!r}")


def size_weights(sizes: torch.Tensor) -> torch.Tensor:
    """p_i = |D_i| / sum_j |D_j| over the sampled devices (Algorithm 1 line 6), in the sizes' float type."""
    return sizes / sizes.sum()


def average(models: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_i p_i w_i of the (k, P) models with the weights p of :func:`size_weights`."""
    return weights.to(models.dtype) @ models


def weighted_average(models: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """Algorithm 1 line 6 over the sampled devices: sum_i p_i w_i, p_i = |D_i| / sum_j |D_j|."""
    return average(models, size_weights(sizes.to(models.dtype)))
