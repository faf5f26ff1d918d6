"""The random draws of a federated run, shared by the simulation loop and the privacy accountant.

Iterations t = 1..T; training round k is the k-th iteration that trains (every t for a base algorithm, odd t
for Upcycled-FL and every upcycled base, ``upcycled_<base>``). Round k of every algorithm draws the same devices and
stragglers for the same seed: the streams are keyed by k, not by t.

Where the paper is silent, two switches (``devices.straggler_draw``, ``devices.straggler_policy``) follow the
authors' code by default:

- ``straggler_draw: bernoulli`` (the authors): each sampled device is a straggler with probability p, so
  with 9 sampled devices at p = 0.9, 0.9^9 = 39% of rounds have no device that runs all E epochs;
  ``exact`` (FedProx's reference): exactly round(K p) (half up) of the K sampled devices are stragglers.
- ``straggler_policy``: ``partial`` (aggregate the stragglers' fewer epochs, the authors) or ``drop``
  (discard them), either for every algorithm or per algorithm as a mapping, e.g.
  ``{fedavg: drop, default: partial}``: FedProx's own experiments, where FedAvg drops stragglers and
  FedProx keeps their partial work.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from ..names import is_training_iteration
from .streams import derive_seeds, generator

STRAGGLER_DRAWS = ("bernoulli", "exact")
STRAGGLER_POLICIES = ("partial", "drop")
FEDPROX_REFERENCE_POLICY = {"fedavg": "drop", "default": "partial"}
"""FedProx's experiments: FedAvg drops stragglers, FedProx (and here Upcycled-FL) keeps their partial work."""


def training_rounds_before(algorithm: str, t: int) -> int:
    """The number of training rounds among iterations 1..t (:func:`upfl.names.is_training_iteration`: the odd t of
    an upcycled algorithm, every t of a base)."""
    return (t + 1) // 2 if not is_training_iteration(algorithm, 2) else t


def sampled_count(num_devices: int, frac: float) -> int:
    """max(floor(frac N), 1): the devices a training round samples."""
    return max(int(math.floor(frac * num_devices + 1e-9)), 1)


def sample_clients(seed: int, round_k: int, num_devices: int, frac: float) -> list[int]:
    """:func:`sampled_count` devices uniformly without replacement (training round k)."""
    import torch

    m = sampled_count(num_devices, frac)
    return torch.randperm(num_devices, generator=generator(seed, "sampling", round_k))[:m].tolist()


def exact_straggler_count(num_sampled: int, prob: float) -> int:
    """round(K p), halves rounded up: the number of stragglers among K sampled devices under ``exact``."""
    return min(num_sampled, int(math.floor(num_sampled * prob + 0.5 + 1e-9)))


def draw_stragglers(
    seed: int,
    round_k: int,
    num_devices: int,
    prob: float,
    epochs: int,
    draw: str = "bernoulli",
    chosen: list[int] | None = None,
) -> tuple[list[bool], list[int]]:
    """Per device: straggler flag and its epochs, uniform in 1..E-1 for stragglers, E otherwise.

    ``bernoulli``: every device is a straggler with probability ``prob`` (independently).
    ``exact``: exactly :func:`exact_straggler_count` of the ``chosen`` devices, uniformly without
    replacement; devices outside ``chosen`` are never stragglers. Both read the ``stragglers`` stream
    keyed by the round only, so every algorithm gets the same draws for the same seed.
    """
    import torch

    if draw not in STRAGGLER_DRAWS:
        raise ValueError(f"devices.straggler_draw: must be one of {', '.join(STRAGGLER_DRAWS)}; got {draw!r}")
    g = generator(seed, "stragglers", round_k)
    u = torch.rand(num_devices, generator=g)
    short = torch.randint(1, max(epochs, 2), (num_devices,), generator=g)
    if draw == "bernoulli":
        flags = (u < prob).tolist()
    else:
        if chosen is None:
            raise ValueError("draw_stragglers: straggler_draw 'exact' needs the round's sampled devices (chosen)")
        order = torch.argsort(u[torch.as_tensor(chosen, dtype=torch.long)], stable=True).tolist()
        picked = {chosen[j] for j in order[: exact_straggler_count(len(chosen), prob)]}
        flags = [i in picked for i in range(num_devices)]
    shortened = short.tolist()
    return flags, [shortened[i] if flags[i] else epochs for i in range(num_devices)]


def resolve_straggler_policy(policy: Any, algorithm: str) -> str:
    """The policy of ``algorithm``: ``policy`` itself, or its entry in a per-algorithm mapping (``default`` else).

    Raises ValueError naming the problem (an unknown policy, a mapping without an entry for the algorithm).
    """
    if isinstance(policy, dict):
        for key, value in policy.items():
            if value not in STRAGGLER_POLICIES:
                raise ValueError(
                    f"devices.straggler_policy.{key}: must be one of {', '.join(STRAGGLER_POLICIES)}; got {value!r}"
                )
        if algorithm in policy:
            return policy[algorithm]
        if "default" in policy:
            return policy["default"]
        raise ValueError(
            f"devices.straggler_policy: the mapping has no entry for {algorithm!r} and no 'default' "
            f"(keys: {', '.join(map(str, policy))})"
        )
    if policy not in STRAGGLER_POLICIES:
        raise ValueError(
            f"devices.straggler_policy: must be one of {', '.join(STRAGGLER_POLICIES)} or a mapping "
            f"algorithm -> policy; got {policy!r}"
        )
    return policy


def round_stragglers(cfg, round_k: int, num_devices: int) -> tuple[list[int], list[bool], list[int]]:
    """Round k's sampled devices, every device's straggler flag and epochs (before the straggler policy)."""
    c = cfg
    chosen, flags, epochs = _round_draws(
        c.seed,
        round_k,
        num_devices,
        c.devices.frac,
        c.devices.straggler,
        c.solver.epochs,
        getattr(c.devices, "straggler_draw", "bernoulli"),
    )
    return list(chosen), list(flags), list(epochs)


DRAW_BLOCK_ROUNDS = 16
"""Training rounds whose device and straggler draws are made together (:func:`block_draws`)."""


def _compiled_round_draws() -> tuple[Callable[..., None], int] | None:
    """The compiled round draws (:func:`upfl.draws.compiled.round_draws`) and the device count from which torch's
    randperm draws differently (``RANDPERM_SWAP_LIMIT``), or None where they cannot be imported."""
    try:
        from .compiled import RANDPERM_SWAP_LIMIT, round_draws
    except ImportError:
        return None
    return round_draws, RANDPERM_SWAP_LIMIT


@functools.lru_cache(maxsize=8192)
def _round_draws(
    seed: int, round_k: int, num_devices: int, frac: float, prob: float, epochs: int, draw: str
) -> tuple[tuple[int, ...], tuple[bool, ...], tuple[int, ...]]:
    """The draws of :func:`round_stragglers`, kept per process: they depend on these values only, so the runs
    of a bundle that share a seed (other algorithms, other mu) and the end-of-run summary draw them once."""
    first = (round_k - 1) // DRAW_BLOCK_ROUNDS * DRAW_BLOCK_ROUNDS + 1
    return block_draws(seed, first, num_devices, frac, prob, epochs, draw)[round_k - first]


@functools.lru_cache(maxsize=512)
def block_draws(
    seed: int, first: int, num_devices: int, frac: float, prob: float, epochs: int, draw: str
) -> tuple[tuple[tuple[int, ...], tuple[bool, ...], tuple[int, ...]], ...]:
    """(chosen, flags, epochs) of training rounds first .. first + :data:`DRAW_BLOCK_ROUNDS` - 1: the numbers of
    :func:`sample_clients` and :func:`draw_stragglers`, made in one compiled call
    (:func:`upfl.draws.compiled.round_draws`, seeds by :func:`upfl.draws.streams.derive_seeds`), or round by round with
    torch where numba does not import."""
    import numpy as np

    if draw not in STRAGGLER_DRAWS:
        raise ValueError(f"devices.straggler_draw: must be one of {', '.join(STRAGGLER_DRAWS)}; got {draw!r}")
    rounds = range(first, first + DRAW_BLOCK_ROUNDS)
    compiled = _compiled_round_draws()
    if compiled is None or num_devices >= compiled[1]:
        out = []
        for k in rounds:
            chosen = sample_clients(seed, k, num_devices, frac)
            flags, per_device = draw_stragglers(seed, k, num_devices, prob, epochs, draw=draw, chosen=chosen)
            out.append((tuple(chosen), tuple(flags), tuple(per_device)))
        return tuple(out)
    keys = np.arange(first, first + DRAW_BLOCK_ROUNDS, dtype=np.int64).reshape(-1, 1)
    chosen_rows = np.empty((len(keys), min(sampled_count(num_devices, frac), num_devices)), dtype=np.int64)
    uniform = np.empty((len(keys), num_devices), dtype=np.float32)
    short = np.empty((len(keys), num_devices), dtype=np.int64)
    compiled[0](
        derive_seeds(seed, "sampling", keys),
        derive_seeds(seed, "stragglers", keys),
        max(epochs, 2),
        chosen_rows,
        uniform,
        short,
    )
    if draw == "bernoulli":
        flag_rows = uniform < np.float32(prob)  # torch compares a float32 tensor with a float in float32
    else:
        flag_rows = np.zeros_like(uniform, dtype=bool)
        count = exact_straggler_count(chosen_rows.shape[1], prob)
        for r, devices in enumerate(chosen_rows):
            flag_rows[r, devices[np.argsort(uniform[r, devices], kind="stable")[:count]]] = True
    epoch_rows = np.where(flag_rows, short, epochs)
    return tuple(
        (tuple(c), tuple(f), tuple(e))
        for c, f, e in zip(chosen_rows.tolist(), flag_rows.tolist(), epoch_rows.tolist(), strict=True)
    )


def round_participants(cfg, round_k: int, num_devices: int) -> tuple[list[int], list[int]]:
    """The devices that train in round k and every device's epochs, after the straggler policy.

    ``straggler_policy: drop`` removes the round's stragglers (they release nothing); ``partial`` keeps them
    with their fewer epochs. A per-algorithm mapping is resolved for ``cfg.algorithm.name``.
    """
    chosen, flags, epochs = round_stragglers(cfg, round_k, num_devices)
    if resolve_straggler_policy(cfg.devices.straggler_policy, cfg.algorithm.name) == "drop":
        chosen = [i for i in chosen if not flags[i]]
    return chosen, epochs


def straggler_summary(cfg, num_devices: int) -> dict[str, Any]:
    """What the straggler switches did over a run (recorded in summary.json): per training round, the sampled
    devices, the stragglers among them, and the rounds in which no sampled device ran all E epochs."""
    k_total = training_rounds_before(cfg.algorithm.name, cfg.rounds)
    c = cfg
    draw = getattr(c.devices, "straggler_draw", "bernoulli")
    sampled, stragglers = [], []
    for first in range(1, k_total + 1, DRAW_BLOCK_ROUNDS):  # the blocks the run's training drew (kept per process)
        block = block_draws(c.seed, first, num_devices, c.devices.frac, c.devices.straggler, c.solver.epochs, draw)
        for chosen, flags, _ in block[: k_total + 1 - first]:
            sampled.append(len(chosen))
            stragglers.append(sum(map(flags.__getitem__, chosen)))
    no_full = sum(s == n for s, n in zip(stragglers, sampled, strict=True))
    return {
        "draw": getattr(cfg.devices, "straggler_draw", "bernoulli"),
        "policy": resolve_straggler_policy(cfg.devices.straggler_policy, cfg.algorithm.name),
        "probability": cfg.devices.straggler,
        "training_rounds": k_total,
        "sampled_per_round": sampled[0] if sampled else 0,
        "stragglers_per_round_mean": sum(stragglers) / k_total if k_total else 0.0,
        "stragglers_per_round_min": min(stragglers, default=0),
        "stragglers_per_round_max": max(stragglers, default=0),
        "rounds_without_full_device": no_full,
    }
