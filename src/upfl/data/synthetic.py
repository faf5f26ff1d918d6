"""The FedProx synthetic generator: Synthetic(alpha, beta) and Synthetic(iid).

Follows the generator of Li et al. (FedProx) as the paper's Appendix H.1 describes it, with a seed.
For device k: u_k ~ N(0, alpha); W_k ~ N(u_k, 1) of shape (d, C); b_k ~ N(u_k, 1) of shape (C,);
B_k ~ N(0, beta); v_k ~ N(B_k, 1) per coordinate; x ~ N(v_k, Sigma), Sigma = diag(j^-1.2);
y = argmax(softmax(x W_k + b_k)). The second argument of N is a standard deviation, except Sigma,
a covariance. Synthetic(iid): one global W, b ~ N(0, 1) and x ~ N(0, Sigma) on every device.
Samples per device: int(lognormal(4, 2)) + 50; each device is shuffled and split 90/10.

Default d = 20 with **2 classes**: the authors' released data is binary with d = 20 and matches the
paper's Table 2 counts, although the text says W in R^{10x20}. ``num_classes=10`` gives the text's reading.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..draws.streams import derive_seed, numpy_generator
from .leaf import write_leaf

SYNTHETIC_PRESETS: dict[str, dict[str, Any]] = {
    "synthetic_iid": {"iid": True, "alpha": 0.0, "beta": 0.0},
    "synthetic_0_0": {"iid": False, "alpha": 0.0, "beta": 0.0},
    "synthetic_0.5_0.5": {"iid": False, "alpha": 0.5, "beta": 0.5},
    "synthetic_1_1": {"iid": False, "alpha": 1.0, "beta": 1.0},
}


def dataset_key(name: str) -> int:
    """A stable integer key for a data set name (CRC-32), used to key the ``data`` stream."""
    return zlib.crc32(name.encode("utf-8"))


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def generate_synthetic_arrays(
    alpha: float,
    beta: float,
    iid: bool,
    num_devices: int = 30,
    dim: int = 20,
    num_classes: int = 2,
    data_seed: int = 0,
    train_fraction: float = 0.9,
    key: int = 0,
):
    """Generate per-device ``(x, y)`` and split them; returns ``users, train, test``.

    The draws come from the ``data`` stream keyed by ``(data_seed, key)``; ``key`` separates
    the named sets so that, as in the paper, they differ in their device sizes too.
    """
    if num_devices < 1 or dim < 1 or num_classes < 2:
        raise ValueError("num_devices and dim must be >= 1 and num_classes >= 2")
    rng = numpy_generator(data_seed, "data", key)
    sizes = rng.lognormal(4, 2, num_devices).astype(int) + 50
    mean_w = rng.normal(0, alpha, num_devices)
    mean_b = mean_w
    big_b = rng.normal(0, beta, num_devices)
    cov_diag = np.power(np.arange(1, dim + 1, dtype=np.float64), -1.2)
    mean_x = np.zeros((num_devices, dim))
    if not iid:
        for k in range(num_devices):
            mean_x[k] = rng.normal(big_b[k], 1, dim)
    w_global = rng.normal(0, 1, (dim, num_classes))
    b_global = rng.normal(0, 1, num_classes)
    users = [f"f_{k:05d}" for k in range(num_devices)]
    train_x, train_y, test_x, test_y = {}, {}, {}, {}
    for k, user in enumerate(users):
        if iid:
            w, b = w_global, b_global
        else:
            w = rng.normal(mean_w[k], 1, (dim, num_classes))
            b = rng.normal(mean_b[k], 1, num_classes)
        x = mean_x[k] + rng.standard_normal((sizes[k], dim)) * np.sqrt(cov_diag)
        y = np.argmax(_softmax(x @ w + b), axis=1)
        order = rng.permutation(sizes[k])
        x, y = x[order], y[order]
        n_train = int(train_fraction * sizes[k])
        train_x[user], train_y[user] = x[:n_train], y[:n_train]
        test_x[user], test_y[user] = x[n_train:], y[n_train:]
    return users, (train_x, train_y), (test_x, test_y)


def generate_synthetic(
    name: str,
    out: str | Path,
    data_seed: int = 0,
    num_devices: int = 30,
    dim: int = 20,
    num_classes: int = 2,
    alpha: float | None = None,
    beta: float | None = None,
    iid: bool | None = None,
    setting: str | None = None,
) -> Path:
    """Generate a synthetic set into ``out``: the generator setting ``setting`` (default ``name``; one of
    :data:`SYNTHETIC_PRESETS`, or any name with custom alpha/beta) drawn with ``data_seed``.

    The draw depends on the setting and ``data_seed`` only, not on ``name`` (the data set's name in
    ``meta.json``): ``synthetic_1_1_draw3`` with setting ``synthetic_1_1`` and seed 3 is that draw.
    """
    setting = setting or name
    params = dict(SYNTHETIC_PRESETS.get(setting, {}))
    if not params and (alpha is None or beta is None):
        raise ValueError(
            f"unknown synthetic setting {setting!r}; known: {', '.join(SYNTHETIC_PRESETS)} (or give alpha and beta)"
        )
    if alpha is not None:
        params["alpha"] = float(alpha)
    if beta is not None:
        params["beta"] = float(beta)
    if iid is not None:
        params["iid"] = bool(iid)
    params.setdefault("iid", False)
    users, train, test = generate_synthetic_arrays(
        params["alpha"],
        params["beta"],
        params["iid"],
        num_devices,
        dim,
        num_classes,
        data_seed,
        key=dataset_key(setting),
    )
    meta = {
        "name": name,
        "setting": setting,
        "source": "synthetic",
        "generator": "fedprox_synthetic",
        "parameters": {
            **params,
            "num_devices": num_devices,
            "dim": dim,
            "num_classes": num_classes,
            "train_fraction": 0.9,
        },
        "data_seed": data_seed,
        "data_seed_derived": derive_seed(data_seed, "data", dataset_key(setting)),
        "num_classes": num_classes,
        "x_dtype": "float32",
        "upfl_version": __version__,
    }
    return write_leaf(out, users, train, test, meta)
