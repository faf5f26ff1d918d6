"""Noise mechanisms on flat parameter matrices (k devices x P parameters); every draw from a passed generator.

torch is imported by the functions, not with the module: ``upfl.privacy`` (and the report, which reads its
accounting) loads without torch.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch


FLOAT32_TINY = 2.0**-126
"""The smallest normal float32."""


def float32_scale_problem(value: float) -> str | None:
    """Why a noise scale (sigma, or alpha) cannot be used, or None: the mechanisms draw and scale the noise in
    float32, so a positive value that rounds to 0 (or below float32's smallest normal number, where the noise
    vanishes beside any weight) or overflows to inf in float32 would release a model with no noise (sigma 0,
    alpha inf) or with infinite noise (alpha 0)."""
    try:
        rounded = struct.unpack("f", struct.pack("f", float(value)))[0]
    except OverflowError:
        rounded = math.inf
    if math.isinf(rounded):
        return f"{value!r} overflows float32 (the noise is drawn in float32)"
    if rounded < FLOAT32_TINY:
        return (
            f"{value!r} rounds to {'0' if rounded == 0.0 else 'a subnormal number'} in float32 (the noise is "
            "drawn in float32, so no noise would be added)"
        )
    return None


FLOAT32_EPSILON = 2.0**-23
"""The spacing of float32 numbers in [1, 2): a float32 x is followed by x + |x| 2^-23 at most."""


def smallest_meaningful_sigma(tau: float) -> float:
    """The smallest output-perturbation sigma whose noise changes the released float32 model: tau 2^-23.

    The released model is clipped to L2 norm tau, so its coordinates are at most tau in magnitude, and float32 numbers
    near tau lie tau 2^-23 apart (at most); a smaller sigma adds noise that the largest coordinates round away, and
    at sigma 1e-12 (tau 1) only the coordinates within about 1e-5 of 0 change: a release that is the clipped model
    but for rounding, with a nominal epsilon."""
    return float(tau) * FLOAT32_EPSILON


def nominal_sigma_problem(sigma: float, tau: float) -> str | None:
    """Why output perturbation with ``sigma`` and clipping norm ``tau`` adds no noise to the released float32
    values, naming the smallest meaningful sigma (:func:`smallest_meaningful_sigma`); None where it does."""
    smallest = smallest_meaningful_sigma(tau)
    if float(sigma) >= smallest:
        return None
    return (
        f"{sigma!r} is below the smallest sigma whose noise changes the released float32 model, "
        f"{smallest:.6g} (tau 2^-23 with tau {tau!r}: the clipped model's coordinates are at most tau, and float32 "
        "rounds a smaller noise away); a release without noise has no privacy"
    )


def _positive(name: str, value) -> torch.Tensor:
    """``value`` (a number, sequence or tensor) as a float32 tensor, every entry finite and > 0 (a CPU tensor is
    checked in numpy, one call per round instead of several torch reductions)."""
    import torch

    if isinstance(value, torch.Tensor) and value.device.type != "cpu":
        t = value.to(torch.float32)
        if not (bool(torch.isfinite(t).all()) and not bool((t <= 0).any())):
            raise ValueError(f"{name} must be > 0, got {value!r}")
        return t
    return torch.from_numpy(_positive_array(name, value))


def _positive_array(name: str, value) -> np.ndarray:
    """:func:`_positive` on the CPU, as a float32 numpy array (a number as a 0-d array)."""
    import numpy as np

    if isinstance(value, (int, float)):  # one number: checked as a Python float, no array reductions
        if not 0 < value < math.inf:  # False for NaN
            raise ValueError(f"{name} must be > 0, got {value!r}")
        return np.asarray(value, dtype=np.float32)
    a = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value, dtype=np.float32)
    if not np.all((a > 0) & (a < np.inf)):  # False for NaN
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return a


def _numpy_view_ok(t: torch.Tensor) -> bool:
    """Whether the mechanisms may compute on ``t`` in numpy: a float32 or float64 CPU tensor outside autograd."""
    import torch

    return t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and not t.requires_grad


def clip_to_norm(W: torch.Tensor, tau: float) -> torch.Tensor:
    """Scale each row of W to L2 norm <= tau (all parameters together); rows inside are unchanged.

    Clipped rows are scaled to tau (1 - 1e-6), so float rounding never leaves a norm above tau. A CPU matrix is
    scaled in numpy with torch's roundings (``c / norms`` as torch computes it, ``c * (1 / norms)``): the same bits
    in a few microseconds instead of five torch calls.
    """
    import numpy as np
    import torch

    _positive_array("tau", tau)
    norms = torch.linalg.vector_norm(W, dim=1, keepdim=True)
    if _numpy_view_ok(W):
        n = norms.numpy()
        one = n.dtype.type(1)
        with np.errstate(divide="ignore"):  # a zero row: its 1 / 0 is not selected
            scale = np.where(n > tau, one / n * n.dtype.type(tau * (1 - 1e-6)), one)
        return torch.from_numpy(W.numpy() * scale)
    return W * torch.where(norms > tau, (tau * (1 - 1e-6)) / norms, 1.0)


def standard_normal_rows(
    shape: tuple[int, ...], generators: Sequence[torch.Generator], dtype=None, device=None
) -> torch.Tensor:
    """(len(generators), *shape) standard normal draws, row i from ``generators[i]``."""
    import torch

    return torch.cat([torch.randn((1,) + tuple(shape), generator=g, dtype=dtype, device=device) for g in generators])


def gaussian_output_noise(
    W: torch.Tensor,
    sigma,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """W + N(0, sigma^2 I) with standard deviation sigma (scalar or one value per row).

    ``generator`` is one generator for the whole matrix or one per row (row i drawn from generator i,
    exactly as ``gaussian_output_noise(W[i:i+1], sigma_i, generator[i])``); or ``noise`` gives the standard
    normal draws already made (:func:`standard_normal_rows`, e.g. kept by a bundle's draw cache).
    """
    import torch

    if noise is not None and noise.shape != W.shape:
        raise ValueError(f"noise: shape {tuple(noise.shape)} given for a {tuple(W.shape)} release")
    if noise is not None and _numpy_view_ok(W) and _numpy_view_ok(noise):
        s_rows = _positive_array("sigma", sigma)
        s_rows = s_rows.reshape(-1, 1) if s_rows.ndim else s_rows
        return torch.from_numpy(W.numpy() + s_rows.astype(W.numpy().dtype, copy=False) * noise.numpy())
    s = _positive("sigma", sigma).to(W.device)
    s = s.view(-1, 1) if s.dim() else s
    if noise is None:
        if isinstance(generator, torch.Generator):
            noise = torch.randn(W.shape, generator=generator, dtype=W.dtype, device=W.device)
        elif generator is None:
            raise ValueError("gaussian_output_noise: give a generator (or one per row) or the noise")
        else:
            if len(generator) != W.shape[0]:
                raise ValueError(f"generator: one per row needed, got {len(generator)} for {W.shape[0]} rows")
            noise = standard_normal_rows(W.shape[1:], generator, W.dtype, W.device)
    return W + s * noise


def output_perturbation(
    W: torch.Tensor,
    tau: float,
    sigma,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
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
