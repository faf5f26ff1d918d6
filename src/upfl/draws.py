"""The random draws of a federated run, shared by the simulation loop and the privacy accountant.

Iterations t = 1..T; training round k is the k-th iteration that trains (every t for a base algorithm, odd t
for Upcycled-FL and every upcycled base, ``upcycled_<base>``). Round k of every algorithm draws the same devices and stragglers for the same seed:
the streams are keyed by k, not by t.
"""

from __future__ import annotations

import math

import torch

from .rng import generator


def is_training_iteration(algorithm: str, t: int) -> bool:
    """Algorithm 2: Upcycled-FL (``upcycled``, ``upcycled_<base>``) trains at odd t only (even t is Eq. (5));
    every base algorithm trains at every t."""
    return not (algorithm == "upcycled" or algorithm.startswith("upcycled_")) or t % 2 == 1


def training_rounds_before(algorithm: str, t: int) -> int:
    """The number of training rounds among iterations 1..t."""
    return sum(1 for s in range(1, t + 1) if is_training_iteration(algorithm, s))


def sample_clients(seed: int, round_k: int, num_devices: int, frac: float) -> list[int]:
    """max(floor(frac N), 1) devices uniformly without replacement (training round k)."""
    m = max(int(math.floor(frac * num_devices + 1e-9)), 1)
    return torch.randperm(num_devices, generator=generator(seed, "sampling", round_k))[:m].tolist()


def draw_stragglers(seed: int, round_k: int, num_devices: int, prob: float, epochs: int) -> tuple[list[bool], list[int]]:
    """Per device: straggler flag (probability ``prob``) and its epochs, uniform in 1..E-1 for stragglers."""
    g = generator(seed, "stragglers", round_k)
    u = torch.rand(num_devices, generator=g)
    short = torch.randint(1, max(epochs, 2), (num_devices,), generator=g)
    flags = (u < prob).tolist()
    return flags, [int(short[i]) if flags[i] else epochs for i in range(num_devices)]


def round_participants(cfg, round_k: int, num_devices: int) -> tuple[list[int], list[int]]:
    """The devices that train in round k and every device's epochs, after the straggler policy.

    ``straggler_policy: drop`` removes the round's stragglers (they release nothing); ``partial`` keeps them
    with their fewer epochs.
    """
    c = cfg
    chosen = sample_clients(c.seed, round_k, num_devices, c.devices.frac)
    flags, epochs = draw_stragglers(c.seed, round_k, num_devices, c.devices.straggler, c.solver.epochs)
    if c.devices.straggler_policy == "drop":
        chosen = [i for i in chosen if not flags[i]]
    return chosen, epochs
