"""The one-line server updates shared by every algorithm: Eq. (5) of Upcycled-FL, its coefficient schedules, and
the size-weighted average of Algorithm 1 line 6. Each takes float32 arrays or torch tensors and returns the same
kind; importing this module imports no torch."""

from __future__ import annotations

import math

import numpy as np


def upcycle_step(w_prev, w_prev2, coefficient: float):
    """Eq. (5): w^{2m} = w^{2m-1} + mu/(mu+lambda_m) (w^{2m-1} - w^{2m-2}); touches no data. A float32 CPU vector is
    stepped in numpy: the same three float32 operations (the coefficient rounded to float32 as torch rounds it), at a
    third of torch's per-operation cost."""
    c = float(coefficient)
    if isinstance(w_prev, np.ndarray):
        return w_prev + c * (w_prev - w_prev2)
    import torch

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


def size_weights(sizes):
    """p_i = |D_i| / sum_j |D_j| over the sampled devices (Algorithm 1 line 6), in the sizes' float type."""
    return sizes / sizes.sum()


def weighted_sum(models: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """sum_i p_i w_i of float32 (k, P) models: each product and the running sum in float64, in device order, rounded
    once to float32. The order is this code's, so the result is the same on every machine (a BLAS matrix-vector
    product sums in an order of its own, which differs between its x86 kernels)."""
    p = np.asarray(weights, dtype=np.float32).astype(np.float64)
    total = p[0] * models[0].astype(np.float64)
    for i in range(1, len(p)):
        total += p[i] * models[i]
    return total.astype(np.float32)


def average(models, weights):
    """sum_i p_i w_i of the (k, P) models with the weights p of :func:`size_weights` (float32 as the models take
    them): :func:`weighted_sum` for float32 models on the CPU, torch's matrix-vector product elsewhere."""
    if isinstance(models, np.ndarray):
        return weighted_sum(models, weights)
    import torch

    if models.device.type == "cpu" and models.dtype == torch.float32 and len(models):
        return torch.from_numpy(weighted_sum(models.numpy(), weights.to(models.dtype).cpu().numpy()))
    return weights.to(models.dtype) @ models


def weighted_average(models, sizes):
    """Algorithm 1 line 6 over the sampled devices: sum_i p_i w_i, p_i = |D_i| / sum_j |D_j|."""
    if isinstance(models, np.ndarray):
        return average(models, size_weights(np.asarray(sizes, dtype=models.dtype)))
    return average(models, size_weights(sizes.to(models.dtype)))
