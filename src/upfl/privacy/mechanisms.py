"""Noise mechanisms on flat parameter matrices (k devices x P parameters); every draw from a passed generator.

torch is imported by the functions, not with the module: ``upfl.privacy`` (and the report, which reads its
accounting) loads without torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch


def _positive(name: str, value) -> torch.Tensor:
    """``value`` (a number, sequence or tensor) as a float32 tensor, every entry finite and > 0 (a CPU tensor is
    checked in numpy, one call per round instead of several torch reductions)."""
    import numpy as np
    import torch

    t = torch.as_tensor(value, dtype=torch.float32)
    if isinstance(value, (int, float)):  # one device's parameter: checked as a Python float, no tensor reductions
        ok = 0 < t.item() < math.inf  # False for NaN
    elif t.device.type == "cpu":
        entries = t.numpy()
        ok = bool(np.all((entries > 0) & (entries < np.inf)))  # False for NaN
    else:
        ok = bool(torch.isfinite(t).all()) and not bool((t <= 0).any())
    if not ok:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return t


def clip_to_norm(W: torch.Tensor, tau: float) -> torch.Tensor:
    """Scale each row of W to L2 norm <= tau (all parameters together); rows inside are unchanged.

    Clipped rows are scaled to tau (1 - 1e-6), so float rounding never leaves a norm above tau.
    """
    import torch

    _positive("tau", tau)
    norms = W.norm(dim=1, keepdim=True)
    return W * torch.where(norms > tau, (tau * (1 - 1e-6)) / norms, 1.0)


def standard_normal_rows(shape: tuple[int, ...], generators: Sequence[torch.Generator], dtype=None,
                         device=None) -> torch.Tensor:
    """(len(generators), *shape) standard normal draws, row i from ``generators[i]``."""
    import torch

    return torch.cat([torch.randn((1,) + tuple(shape), generator=g, dtype=dtype, device=device) for g in generators])


def gaussian_output_noise(W: torch.Tensor, sigma, generator: torch.Generator | Sequence[torch.Generator] | None = None,
                          noise: torch.Tensor | None = None) -> torch.Tensor:
    """W + N(0, sigma^2 I) with standard deviation sigma (scalar or one value per row).

    ``generator`` is one generator for the whole matrix or one per row (row i drawn from generator i,
    exactly as ``gaussian_output_noise(W[i:i+1], sigma_i, generator[i])``); or ``noise`` gives the standard
    normal draws already made (:func:`standard_normal_rows`, e.g. kept by a bundle's draw cache).
    """
    import torch

    s = _positive("sigma", sigma).to(W.device)
    s = s.view(-1, 1) if s.dim() else s
    if noise is None:
        if isinstance(generator, torch.Generator):
            noise = torch.randn(W.shape, generator=generator, dtype=W.dtype, device=W.device)
        else:
            if len(generator) != W.shape[0]:
                raise ValueError(f"generator: one per row needed, got {len(generator)} for {W.shape[0]} rows")
            noise = standard_normal_rows(W.shape[1:], generator, W.dtype, W.device)
    elif noise.shape != W.shape:
        raise ValueError(f"noise: shape {tuple(noise.shape)} given for a {tuple(W.shape)} release")
    return W + s * noise


def output_perturbation(W: torch.Tensor, tau: float, sigma,
                        generator: torch.Generator | Sequence[torch.Generator] | None = None,
                        noise: torch.Tensor | None = None) -> torch.Tensor:
    """Section 5 output perturbation of the odd-iteration release: clip to tau, then add N(0, sigma^2 I)
    (drawn from ``generator``, or ``noise`` times sigma: see :func:`gaussian_output_noise`)."""
    return gaussian_output_noise(clip_to_norm(W, tau), sigma, generator, noise)


def sample_objective_noise(k: int, P: int, alpha, generator: torch.Generator) -> torch.Tensor:
    """k vectors with density proportional to exp(-alpha ||n||) in P dimensions (Theorem C.2).

    ||n|| ~ Gamma(shape P, scale 1/alpha), drawn as a sum of P Exp(alpha) variables; the direction is a
    normalised standard Gaussian (uniform on the sphere). The draws do not depend on alpha
    (:func:`objective_noise_draws`); alpha only scales the radius (:func:`scale_objective_noise`).
    """
    return scale_objective_noise(*objective_noise_draws(k, P, generator), alpha)


def objective_noise_draws(k: int, P: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The alpha-free part of :func:`sample_objective_noise`: ((k, 1) Gamma(P, 1) radii, (k, P) unit directions),
    float64."""
    import torch

    u = torch.rand((k, P), generator=generator, dtype=torch.float64).clamp_min(torch.finfo(torch.float64).tiny)
    gamma = (-torch.log(u)).sum(1, keepdim=True)
    direction = torch.randn((k, P), generator=generator, dtype=torch.float64)
    return gamma, direction / direction.norm(dim=1, keepdim=True)


def scale_objective_noise(gamma: torch.Tensor, direction: torch.Tensor, alpha) -> torch.Tensor:
    """float32 noise of radius gamma / alpha along ``direction`` (alpha a scalar or one value per row)."""
    a = _positive("alpha", alpha)
    a = a.view(-1, 1) if a.dim() else a
    return (gamma / a.double() * direction).float()
