"""What a private run's folder reveals, per ``privacy.noise_source``; the modes of what it writes under umask 000.

The seed attack: a reader of an interrupted run's folder has its checkpoint (``state.npz``, the global model after
the last training round) and its seed (``summary``/config files record it). With one device sampled per round the
global model is that device's release, clip(w_i) + sigma z; regenerating z from the run seed's ``noise`` stream
and subtracting it gives back the device's clipped, un-noised model (``seeded``), or leaves noise of norm
sigma sqrt(2P) (``os``).
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import torch

from fixtures_runs import cfg_for, interrupted
from upfl.data import generate_synthetic
from upfl.draws.rounds import sample_clients
from upfl.draws.streams import generator
from upfl.engine.checkpoints import read_archive
from upfl.engine.simulation import InjectedStop, run
from upfl.privacy.mechanisms import clip_to_norm, standard_normal_rows

NUM_DEVICES = 5
SIGMA, TAU, SEED = 0.01, 1.0, 3
PRIVATE = {
    "algorithm.name": "fedavg",
    "algorithm.mu": 0.0,
    "devices.frac": 0.2,
    "privacy.mechanism": "output",
    "privacy.tau": TAU,
    "privacy.sigma": SIGMA,
    "checkpoint.seconds": 0,
    "seed": SEED,
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return generate_synthetic(
        "synthetic_1_1", tmp_path_factory.mktemp("noise") / "d", data_seed=2, num_devices=NUM_DEVICES
    )


def seed_attack(data, tmp_path, source):
    """The attack on an interrupted run's folder (after training round 1): the L2 distance between the recovered
    model and the device's clipped local model (the same run without privacy, clipped), and sigma sqrt(P)."""
    out = tmp_path / source
    ckpt = interrupted(data, out, after=1, **PRIVATE, **{"privacy.noise_source": source})
    assert out in ckpt.file.parents  # the checkpoint is in the run folder a user shares
    released = torch.as_tensor(np.asarray(read_archive(ckpt.file)["w"])).reshape(-1)
    (device,) = sample_clients(SEED, 1, NUM_DEVICES, 0.2)
    noise = standard_normal_rows(released.shape, [generator(SEED, "noise", 1, device)])[0]
    recovered = released - SIGMA * noise
    plain = tmp_path / f"{source}-plain"
    with pytest.raises(InjectedStop):
        run(cfg_for(data, **{**PRIVATE, "privacy.mechanism": "none"}), plain, log=lambda m: None, stop_after=1)
    truth = torch.as_tensor(np.asarray(read_archive(next(plain.rglob("state.npz")))["w"])).reshape(1, -1)
    clipped = clip_to_norm(truth, TAU)[0]
    return float((recovered - clipped).norm()), SIGMA * float(np.sqrt(released.numel()))


def test_seed_attack_recovers_the_clipped_model_under_seeded_noise_only(data, tmp_path):
    seeded, _ = seed_attack(data, tmp_path, "seeded")
    from_os, scale = seed_attack(data, tmp_path, "os")
    print(f"seed attack ||recovered - clipped||: seeded {seeded:.3g}, os {from_os:.3g} (sigma sqrt(P) {scale:.3g})")
    assert seeded < 1e-6
    assert 0.5 * np.sqrt(2) * scale < from_os < 1.5 * np.sqrt(2) * scale


def test_os_noise_differs_between_runs_and_is_recorded(data, tmp_path):
    """Two runs of one config with ``os`` noise release different models; with ``seeded`` the same; the privacy
    block names the source; ``seeded`` at its default keeps the config hash of a config without the key."""
    import json

    from upfl import config as cfgmod

    finals = {}
    for source in ("seeded", "os"):
        for k in (0, 1):
            out = tmp_path / f"{source}{k}"
            run(cfg_for(data, **{**PRIVATE, "rounds": 2, "privacy.noise_source": source}), out, log=lambda m: None)
            summary = json.loads((out / "summary.json").read_text())
            finals[source, k] = summary["final"]["test_loss"]
            assert summary["privacy"]["noise_source"].startswith("seed-keyed" if source == "seeded" else "os-entropy")
    assert finals["seeded", 0] == finals["seeded", 1]
    assert finals["os", 0] != finals["os", 1]
    assert cfgmod.config_hash(cfg_for(data, **PRIVATE)) == cfgmod.config_hash(
        cfg_for(data, **PRIVATE, **{"privacy.noise_source": "seeded"})
    )
    assert cfgmod.config_hash(cfg_for(data, **PRIVATE)) != cfgmod.config_hash(
        cfg_for(data, **PRIVATE, **{"privacy.noise_source": "os"})
    )
    with pytest.raises(cfgmod.ConfigError, match="privacy.noise_source: must be one of seeded, os, got 'urandom'"):
        cfg_for(data, **PRIVATE, **{"privacy.noise_source": "urandom"})


def test_an_interrupted_private_runs_files_have_explicit_modes_under_umask_000(data, tmp_path):
    old = os.umask(0)
    try:
        ckpt = interrupted(data, tmp_path / "run", after=1, **PRIVATE)
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert oct(mode(ckpt.file)) == oct(0o600)
    assert oct(mode(ckpt.dir)) == oct(0o700)
    assert oct(mode(ckpt.dir / "lock")) == oct(0o600)
    assert oct(mode(tmp_path / "run")) == oct(0o755)
    assert oct(mode(ckpt.root)) == oct(0o755)
