"""Privacy accounting for private Upcycled-FL, FedProx and FedAvg (Section 5, Appendix C).

Everything here is a pure function of a run config (and, for :func:`privacy_report`, the data set
and model): nothing trains. ``docs/privacy.md`` explains the choices; in short:

* **Releases.** Device i's data is used only in training rounds in which it takes part, so its
  privacy loss composes over ``M_i`` noisy releases (:func:`release_counts`). Upcycled-FL trains
  at odd iterations only; its even iterations (Eq. 5) are post-processing of already-private
  aggregates and release nothing new (Lemma 5.1). FedProx/FedAvg train at every iteration.
* **Output perturbation** (clip the returned model to norm tau, add N(0, sigma^2 I)), three
  epsilons at the configured delta, side by side:

  1. ``paper_formula``: Theorem C.1 as printed, the zCDP/moments-accountant closed form
     ``eps = rho + 2 sqrt(rho log(1/delta))`` with ``rho = M tau^2 / (2 sigma^2 |D_i|^2)``, i.e.
     sensitivity tau/|D_i| (:func:`theorem_c1_epsilon`);
  2. ``sound``: the exact Gaussian accountant (``dp_accounting.get_epsilon_gaussian``) with
     sensitivity 2 tau, the L2 diameter of the clipping ball (:func:`gaussian_epsilon`);
  3. ``paper_sensitivity``: the same exact accountant at the paper's sensitivity tau/|D_i|, so
     the looseness of the closed form and the choice of sensitivity show separately.

* **Objective perturbation** (add <n, w>, density ~ exp(-alpha ||n||)): Theorem C.2's pure
  (epsilon, 0)-DP bound with ``M_i`` terms (:func:`theorem_c2_epsilon`), its assumptions checked
  (:func:`objective_assumptions`).

Every epsilon of objective perturbation assumes the *exact* minimiser of the perturbed objective;
the engine approximates it with SGD, so the number is the theorem's, not a certificate of the run
(:data:`SGD_CAVEAT`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from ..names import accountants_of, is_upcycled

SGD_CAVEAT = (
    "Theorem C.2 assumes the exact minimiser of the perturbed local objective; the engine "
    "approximates it with SGD, so this epsilon is the theorem's value for the exact minimiser, "
    "not a guarantee certified for the SGD iterates."
)
"""Printed with every objective-perturbation epsilon."""

OUTPUT_NOTE = (
    "Output perturbation: 'sound' is the exact Gaussian accountant with sensitivity 2*tau (two "
    "models clipped to norm tau differ by at most 2*tau); "
    "'paper_formula' is Theorem C.1 as printed (sensitivity tau/|D_i|, closed form); "
    "'paper_sensitivity' is the exact accountant at the paper's tau/|D_i|. Only 'sound' is a "
    "guarantee for the clipped model the engine releases."
)

OFF_BY_ONE_NOTE = (
    "Theorem C.2 sums m = 0..M (M + 1 terms) over 2M iterations, which hold M odd "
    "(training) iterations; we sum M_i terms, one per release. "
    "'theorem_c2_paper_sum' gives the printed M_i + 1 terms for comparison (0 for a device "
    "that never trained)."
)

NEIGHBOURING_RELATION = "replace-one record of one device, |D_i| public"
"""The neighbouring relation every epsilon here is for."""

NEIGHBOURING_NOTE = (
    "Neighbouring relation: two data sets differ in one record of one device, which replaces it "
    "(replace-one), and |D_i| is public: the aggregation weights, Flower's num-examples and "
    "FedNova's step counts release it, so no epsilon here covers adding or removing a record."
)

SHARED_NOISE_NOTE = (
    "Runs with the same seed share their noise draws on purpose (common random numbers make a "
    "comparison across sigma, alpha or algorithms sharper): each run's epsilon holds for that run "
    "alone; the runs of a sweep on one seed together have no guarantee (from two of them the "
    "noise cancels and the clipped models are recovered)."
)

SEED_KEYED_NOISE = (
    "seed-keyed: every noise draw comes from the run seed's stream keyed (seed, training round, "
    "device); runs of one seed share it, and whoever knows the seed can regenerate it"
)
OS_ENTROPY_NOISE = (
    "os-entropy: every noise draw comes from a generator seeded by the operating system's entropy (each Flower "
    "client's own); not reproducible, shared by no other run, and neither the server nor a reader of the run's "
    "files can regenerate it"
)
"""``privacy.noise_source`` of a private run: ``upfl run`` draws seed-keyed noise (``privacy.noise_source: os``: OS
entropy), a Flower client OS entropy (unless its run config names the seed-keyed stream)."""


def engine_noise_source(cfg) -> str:
    """The privacy block's ``noise_source`` of an engine run config (``privacy.noise_source``: ``seeded`` or
    ``os``)."""
    return OS_ENTROPY_NOISE if cfg.privacy.noise_source == "os" else SEED_KEYED_NOISE


def noise_is_seed_keyed(noise_source: str | None) -> bool:
    """Whether a run's ``privacy.noise_source`` is the seed-keyed stream, so that runs of one seed share their noise
    (:data:`SHARED_NOISE_NOTE` applies). A run recorded without one (an older summary.json) was made by ``upfl run``,
    whose noise has always been seed-keyed."""
    return noise_source is None or str(noise_source).startswith(SEED_KEYED_NOISE.split(":")[0])


TRAIN_METRICS_NOTE = (
    "Training loss and accuracy are computed on every device's private training data: a release "
    "that no epsilon covers (metrics.csv marks them 'outside_privacy_guarantee'; "
    "privacy.release_train_metrics: false leaves them out)."
)

MEANINGFUL_EPSILON = 10.0
"""Above this epsilon a guarantee is marked 'no meaningful guarantee' (docs/privacy.md, "Which epsilons mean
something"): at epsilon = 10 an adversary's odds on any record may grow by e^10 = 22,026 times, past the
single-digit values the DP literature treats as a guarantee that still constrains an adversary."""

NO_MEANINGFUL = f"no meaningful guarantee (ε > {MEANINGFUL_EPSILON:g})"

NO_GLM = "no guarantee (not a GLM)"
NO_GUARANTEE = "no guarantee"
PLD_MAX_COMPOSED_RHO = 100.0
"""PLD cross-check only when the composed zCDP parameter ``M / (2 z^2)`` is at most this: above it the
PLD grid grows past about 1 GiB and a minute (it exhausted 24 GiB at z = 0.05)."""


class PrivacyParameterError(ConfigError):
    """A privacy parameter is out of range (negative sigma, tau <= 0, delta outside (0, 1), ...)."""


class NoGuaranteeError(ConfigError):
    """Theorem C.2's conditions fail for this configuration and ``privacy.allow_no_guarantee`` is false."""


# ---------------------------------------------------------------------------------------------
# Parameter checks


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise PrivacyParameterError(f"{name}: must be a finite number > 0, got {value!r}")
    return float(value)


def _delta(delta: Any, allow_zero: bool = False) -> float:
    if (
        isinstance(delta, bool)
        or not isinstance(delta, (int, float))
        or not ((0 <= delta < 1) if allow_zero else (0 < delta < 1))
    ):
        raise PrivacyParameterError(f"privacy.delta: must be in (0, 1), got {delta!r}")
    return float(delta)


def _releases(m: Any) -> int:
    if isinstance(m, bool) or not isinstance(m, int) or m < 0:
        raise PrivacyParameterError(f"releases: must be an integer >= 0, got {m!r}")
    return m


def per_device(value: Any, num_devices: int, key: str) -> list[float]:
    """A number, or a list of one positive number per device (data-set order of the training users)."""
    if isinstance(value, (list, tuple)):
        if len(value) != num_devices:
            raise PrivacyParameterError(
                f"{key}: the list has {len(value)} values but the data set has {num_devices} devices (training users)"
            )
        return [_positive(f"{key}[{i}]", v) for i, v in enumerate(value)]
    return [_positive(key, value)] * num_devices


# ---------------------------------------------------------------------------------------------
# Releases


def training_rounds(cfg) -> int:
    """Training rounds of a run of ``cfg.rounds`` iterations: ceil(T/2) for Upcycled-FL (odd t), else T."""
    from ..draws.rounds import training_rounds_before

    return training_rounds_before(cfg.algorithm.name, cfg.rounds)


def participation(cfg, num_devices: int) -> list[list[int]]:
    """The devices that train (and so release a noisy model) in each training round k = 1..K.

    Exactly the engine's draws (:mod:`upfl.draws.rounds`): iterations t = 1..T, training round k is the
    k-th t with ``is_training_iteration`` (odd t for Upcycled-FL, every t otherwise);
    ``sample_clients(seed, k, N, frac)``; under ``straggler_policy: drop`` the stragglers of
    ``draw_stragglers(seed, k, N, p, E, straggler_draw, chosen)`` are removed (they release nothing); under ``partial``
    they train fewer epochs and do release.
    """
    from ..draws.rounds import round_participants

    return [round_participants(cfg, k, num_devices)[0] for k in range(1, training_rounds(cfg) + 1)]


def release_counts(cfg, num_devices: int) -> list[int]:
    """M_i: the number of noisy releases of device i over the run (Lemma 5.1: even Upcycled iterations add none).

    Counts the training rounds of :func:`participation` in which device i took part. With every device in
    every round this is M = ceil(T/2) for Upcycled-FL (so T = 2M and T = 2M - 1 give the same epsilon) and
    M = T for FedProx/FedAvg.
    """
    counts = [0] * num_devices
    for chosen in participation(cfg, num_devices):
        for i in chosen:
            counts[i] += 1
    return counts


# ---------------------------------------------------------------------------------------------
# Output perturbation


def theorem_c1_epsilon(releases: int, sigma: float, tau: float, n_train: int, delta: float) -> float:
    """Theorem C.1's closed form as printed: ``eps = 2 sqrt(rho log(1/delta)) + rho``,
    ``rho = M tau^2 / (2 sigma^2 |D|^2)``.

    The moments-accountant bound alpha(lambda) = M s^2 lambda (lambda + 1) / 2 (Appendix G) with
    s = tau / (sigma |D|), minimised over lambda: the zCDP-to-(eps, delta) conversion. Its sensitivity
    tau/|D| assumes the model is a mean of per-sample terms of norm <= tau (see docs/privacy.md).
    """
    m = _releases(releases)
    sigma, tau, n = _positive("privacy.sigma", sigma), _positive("privacy.tau", tau), _positive("|D_i|", n_train)
    delta = _delta(delta)
    rho = m * tau**2 / (2 * sigma**2 * n**2)
    return 2 * math.sqrt(rho * math.log(1 / delta)) + rho


@functools.lru_cache(maxsize=4096)
def gaussian_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """Exact epsilon at delta of ``releases`` adaptive Gaussian releases of noise multiplier z = sigma / sensitivity.

    The accountants here are pure functions of their arguments, kept per process (the devices of a run, and the
    runs of a bundle, mostly share z and M).

    M Gaussian mechanisms of multiplier z compose exactly (Gaussian DP, Dong, Roth and Su 2022) to one
    Gaussian mechanism of multiplier z / sqrt(M); ``dp_accounting.get_epsilon_gaussian`` gives its exact
    (analytic, Balle and Wang 2018) epsilon, computed here by :func:`analytic_gaussian_epsilon`. ``releases = 0``
    is 0.
    """
    z, m, delta = _positive("noise multiplier", noise_multiplier), _releases(releases), _delta(delta)
    if m == 0:
        return 0.0
    return float(analytic_gaussian_epsilon(z / math.sqrt(m), delta))


def _gaussian_log_delta(sigma: float, eps: float) -> float:
    """log delta(eps) of the Gaussian mechanism of multiplier ``sigma`` (Balle and Wang 2018, Eq. 6):
    dp-accounting's ``gaussian_mechanism._get_log_delta`` (Apache-2.0) with ``scipy.special.log_ndtr``, the
    function its ``scipy.stats.norm.logcdf`` evaluates (for a standard normal, every real or infinite argument, the
    same float) without the distribution's argument checks, which cost nine tenths of each call."""
    import numpy as np
    from scipy.special import log_ndtr

    t_star = eps * sigma + 1 / (2 * sigma)
    x = log_ndtr(1 / sigma - t_star)
    y = eps + log_ndtr(-t_star)
    return x + np.log1p(-np.exp(y - x)) if y <= x else -np.inf


def analytic_gaussian_epsilon(sigma: float, delta: float, tol: float = 1.0e-12) -> float:
    """``dp_accounting.get_epsilon_gaussian(sigma, delta, tol)``, step for step (the same bracket, the same
    ``scipy.optimize.brentq`` search, the same function values: the same float, which the tests check against
    dp-accounting) on :func:`_gaussian_log_delta`: a tenth of its CPU time. The epsilon of the Gaussian mechanism
    of noise multiplier ``sigma`` at ``delta``."""
    import numpy as np
    from scipy.optimize import brentq

    if sigma < 0:
        raise ValueError(f"sigma must be non-negative, got sigma={sigma}.")
    if not 0 <= delta <= 1:
        raise ValueError(f"delta must be in [0, 1], got delta={delta}.")
    if delta == 1:
        return 0
    if sigma == 0:
        return np.inf
    if sigma == np.inf:
        return 0
    if delta == 0:
        return np.inf
    log_delta = np.log(delta)
    if _gaussian_log_delta(sigma, 0) < log_delta:
        return 0
    eps_lo, eps_hi = 0.0, 1.0
    while _gaussian_log_delta(sigma, eps_hi) > log_delta:
        eps_lo, eps_hi = eps_hi, eps_hi * 10
    return brentq(lambda eps: _gaussian_log_delta(sigma, eps) - log_delta, eps_lo, eps_hi, xtol=tol)


@functools.lru_cache(maxsize=4096)
def rdp_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """Cross-check: dp-accounting's RDP accountant on ``SelfComposedDpEvent(GaussianDpEvent(z), M)``.

    Default neighbouring relation (add-or-remove), the sensitivity carried by z. An upper bound, slightly
    above the exact value (48.80 vs 46.21 at z = 1, M = 40, delta = 1e-5). Instant for any z.
    """
    from dp_accounting import dp_event, rdp

    z, m, delta = _positive("noise multiplier", noise_multiplier), _releases(releases), _delta(delta)
    if m == 0:
        return 0.0
    acc = rdp.RdpAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), m))
    return float(acc.get_epsilon(delta))


def pld_tractable(noise_multiplier: float, releases: int) -> bool:
    """Whether the PLD cross-check fits in about 1 GiB: composed rho = M / (2 z^2) <= :data:`PLD_MAX_COMPOSED_RHO`."""
    return releases / (2 * noise_multiplier**2) <= PLD_MAX_COMPOSED_RHO


@functools.lru_cache(maxsize=4096)
def pld_epsilon(noise_multiplier: float, releases: int, delta: float) -> float | None:
    """Cross-check: dp-accounting's PLD accountant (default add-or-remove relation); None where intractable.

    Seconds per call (about 4 s at z = 1, M = 40) and memory growing with M / z^2 (:func:`pld_tractable`).
    """
    from dp_accounting import dp_event, pld

    z, m, delta = _positive("noise multiplier", noise_multiplier), _releases(releases), _delta(delta)
    if m == 0:
        return 0.0
    if not pld_tractable(z, m):
        return None
    acc = pld.PLDAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), m))
    return float(acc.get_epsilon(delta))


def sound_sensitivity(tau: float) -> float:
    """L2 sensitivity of a released model clipped to norm tau: 2 tau (any two points of the tau-ball).

    Holds under replace-one and add-or-remove alike: the local model is an arbitrary function of the
    data, so clipping bounds only where it lands, not how much one record moves it.
    """
    return 2 * _positive("privacy.tau", tau)


def paper_sensitivity(tau: float, n_train: int) -> float:
    """Theorem C.1's sensitivity tau / |D_i| (Appendix G: the model as a mean of per-sample terms of norm <= tau)."""
    return _positive("privacy.tau", tau) / _positive("|D_i|", n_train)


def output_epsilons(
    releases: int, sigma: float, tau: float, n_train: int, delta: float, cross_check: Sequence[str] = ()
) -> dict[str, float | None]:
    """The three output-perturbation epsilons of one device, plus requested cross-checks (``rdp``, ``pld``).

    Keys: ``paper_formula`` (Theorem C.1 as printed), ``sound`` (exact, sensitivity 2 tau),
    ``paper_sensitivity`` (exact, sensitivity tau/|D_i|); ``sound_rdp``/``sound_pld`` when asked
    (``sound_pld`` is None where :func:`pld_tractable` is false). A sigma whose noise float32 rounds away
    (:func:`upfl.privacy.mechanisms.nominal_sigma_problem`) releases the clipped model itself: every epsilon of a
    device with a release is then infinite.
    """
    from .mechanisms import nominal_sigma_problem

    sigma = _positive("privacy.sigma", sigma)
    if releases and nominal_sigma_problem(sigma, tau):
        unknown = set(cross_check) - {"rdp", "pld"}
        if unknown:
            raise PrivacyParameterError(f"cross_check: unknown accountant(s) {sorted(unknown)}; known: rdp, pld")
        keys = ["paper_formula", "sound", "paper_sensitivity"] + [
            f"sound_{k}" for k in ("rdp", "pld") if k in cross_check
        ]
        return dict.fromkeys(keys, math.inf)
    z_sound = sigma / sound_sensitivity(tau)
    z_paper = sigma / paper_sensitivity(tau, n_train)
    out: dict[str, float | None] = {
        "paper_formula": theorem_c1_epsilon(releases, sigma, tau, n_train, delta),
        "sound": gaussian_epsilon(z_sound, releases, delta),
        "paper_sensitivity": gaussian_epsilon(z_paper, releases, delta),
    }
    unknown = set(cross_check) - {"rdp", "pld"}
    if unknown:
        raise PrivacyParameterError(f"cross_check: unknown accountant(s) {sorted(unknown)}; known: rdp, pld")
    if "rdp" in cross_check:
        out["sound_rdp"] = rdp_epsilon(z_sound, releases, delta)
    if "pld" in cross_check:
        out["sound_pld"] = pld_epsilon(z_sound, releases, delta)
    return out


# ---------------------------------------------------------------------------------------------
# Objective perturbation


def theorem_c2_condition(n_train: int, mu: float, u2: float) -> bool:
    """Theorem C.2's condition u2 <= 0.5 |D_i| mu (it bounds the Jacobian ratio, Eq. 18)."""
    return u2 <= 0.5 * n_train * mu


def theorem_c2_epsilon(releases: int, alpha: float, n_train: int, mu: float, u1: float, u2: float) -> float:
    """Theorem C.2's pure epsilon with one term per release: ``sum_{m=1}^{M} (2 alpha u1 mu + 2.8 u2) / (|D| mu)``.

    Each term bounds one release: the noise density ratio exp(2 alpha u1 / |D|) (Eq. 16) times the
    Jacobian ratio exp(2.8 u2 / (|D| mu)) (Eq. 18, from -ln(1 - x) < 1.4 x on [0, 0.5]). The paper
    sums m = 0..M (M + 1 terms) for 2M iterations; M terms is the count of odd iterations. Pass
    ``releases = M + 1`` to reproduce the printed sum. The condition is *not* checked here.
    """
    m = _releases(releases)
    alpha, n, mu = _positive("privacy.alpha", alpha), _positive("|D_i|", n_train), _positive("algorithm.mu", mu)
    u1, u2 = _positive("u1", u1), _positive("u2", u2)
    return m * (2 * alpha * u1 * mu + 2.8 * u2) / (n * mu)


def glm_constants(model) -> tuple[float, float] | None:
    """(u1, u2) of a generalized linear model (attribute ``glm_constants``), or None (not a GLM)."""
    consts = getattr(model, "glm_constants", None)
    if consts is None:
        return None
    if isinstance(consts, dict):
        consts = (consts["u1"], consts["u2"])
    u1, u2 = consts
    return float(u1), float(u2)


def max_feature_norm(cfg, dataset, model) -> float:
    """The largest L2 norm of a training feature vector as the model sees it.

    Applies the engine's ``data.feature_scaling`` (``unit_norm``: x / max(||x||, 1)) and the model's
    ``features`` map when it has one (binary_logreg folds its bias in as [x, 1] / sqrt(2)).
    """
    import numpy as np
    import torch

    top = 0.0
    for u in dataset.train_users:
        x = torch.as_tensor(np.asarray(dataset.train_x[u], dtype=np.float64)).flatten(1)
        if cfg.data.feature_scaling == "unit_norm":
            x = x / x.norm(dim=1, keepdim=True).clamp_min(1.0)
        if hasattr(model, "features"):
            x = model.features(x)
        if len(x):
            top = max(top, float(x.norm(dim=1).max()))
    return top


def objective_assumptions(cfg, dataset, model, n_train: Sequence[int], max_norm: float | None = None) -> dict[str, Any]:
    """Check Theorem C.2's assumptions; return them stated, with the devices where the condition fails.

    GLM with |L'| <= u1, L'' <= u2 (the model's ``glm_constants``); features of norm <= 1 (as the model
    sees them); mu > 0 and u2 <= 0.5 |D_i| mu per device.
    """
    consts = glm_constants(model)
    mu = 0.0 if cfg.algorithm.name == "fedavg" else float(cfg.algorithm.mu)
    out: dict[str, Any] = {
        "glm": consts is not None,
        "mu": mu,
        "condition": "u2 <= 0.5 |D_i| mu (Theorem C.2)",
        "exact_minimiser": SGD_CAVEAT,
    }
    if consts is None:
        out.update({"holds": False, "reason": f"model {cfg.model.name!r} is not a generalized linear model"})
        return out
    u1, u2 = consts
    norm = max_feature_norm(cfg, dataset, model) if max_norm is None else float(max_norm)
    failing = [i for i, n in enumerate(n_train) if mu <= 0 or not theorem_c2_condition(n, mu, u2)]
    out.update(
        {
            "u1": u1,
            "u2": u2,
            "max_feature_norm": norm,
            "features_bounded": norm <= 1 + 1e-6,
            "min_n_train_for_condition": (u2 / (0.5 * mu)) if mu > 0 else None,
            "failing_devices": failing,
        }
    )
    reasons = []
    if norm > 1 + 1e-6:
        reasons.append(f"features reach norm {norm:.4g} > 1 (set data.feature_scaling: unit_norm)")
    if mu <= 0:
        reasons.append("mu must be > 0")
    elif failing:
        reasons.append(
            f"u2 <= 0.5 |D_i| mu fails for {len(failing)} device(s) (u2 = {u2}, mu = {mu}, "
            f"smallest |D_i| = {min(n_train[i] for i in failing)}, needs |D_i| >= {u2 / (0.5 * mu):.4g})"
        )
    out["holds"] = not reasons
    if reasons:
        out["reason"] = "; ".join(reasons)
    return out


# ---------------------------------------------------------------------------------------------
# Report


def meaningful(epsilon: float | None) -> bool | None:
    """Whether an epsilon gives a meaningful guarantee: ``epsilon <= MEANINGFUL_EPSILON`` (None when missing)."""
    if epsilon is None or (isinstance(epsilon, float) and math.isnan(epsilon)):
        return None
    return epsilon <= MEANINGFUL_EPSILON


def guarantee_mark(epsilon: float | None) -> str:
    """:data:`NO_MEANINGFUL` for an epsilon above :data:`MEANINGFUL_EPSILON`, else ''."""
    return NO_MEANINGFUL if meaningful(epsilon) is False else ""


def _worst(rows: list[dict], key: str) -> dict[str, Any] | None:
    """The device with the largest epsilon ``key`` (its name, |D_i|, M_i, epsilon), or None."""
    have = [r for r in rows if r.get(key) is not None]
    if not have:
        return None
    r = max(have, key=lambda r: r[key])
    return {"device": r["device"], "n_train": r["n_train"], "releases": r["releases"], "epsilon": r[key]}


def _epsilon_summary(rows: list[dict], kinds: Sequence[str]) -> dict[str, Any]:
    """epsilon_max (the worst device's epsilon per accountant), worst_device, and the meaningful-guarantee rule."""
    worst = {k: _worst(rows, k) for k in kinds}
    return {
        "epsilon_max": {k: (w["epsilon"] if w else None) for k, w in worst.items()},
        "worst_device": worst,
        "meaningful_rule": f"epsilon <= {MEANINGFUL_EPSILON:g}; above it: '{NO_MEANINGFUL}'",
    }


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    if not values or len(known) != len(values):
        return None
    return float(sum(known) / len(known))


REPLAYED_RELEASES = (
    "replayed: the engine's device and straggler draws (upfl.draws.rounds) for the run config, the "
    "draws the simulation trains with"
)
"""``releases_source`` of :func:`privacy_report` when the counts come from :func:`release_counts`."""


def privacy_report(
    cfg,
    dataset,
    model,
    cross_check: Sequence[str] = ("rdp",),
    releases: Sequence[int] | None = None,
    releases_source: str = REPLAYED_RELEASES,
    noise_source: str = SEED_KEYED_NOISE,
    max_norm: float | None = None,
) -> dict[str, Any]:
    """Per-device epsilons and epsilon-bar of a run config, without training (JSON-serialisable).

    ``releases`` gives M_i per device where they were observed (a Flower server counts the replies it received;
    ``releases_source`` says so); by default they are :func:`release_counts` of the config. ``noise_source``
    (:data:`SEED_KEYED_NOISE`, :data:`OS_ENTROPY_NOISE`) is recorded, and decides whether the notes say that runs of
    one seed share their noise (:func:`noise_is_seed_keyed`). ``max_norm``: see :func:`objective_assumptions`.

    ``dataset`` gives the devices (its training users, the engine's order) and |D_i|; ``model`` the
    parameter count d (the noise dimension) and ``glm_constants``. Raises :class:`NoGuaranteeError` when
    objective perturbation's Theorem C.2 conditions fail on a GLM and ``privacy.allow_no_guarantee`` is
    false. ``cross_check`` adds ``rdp`` (instant) and/or ``pld`` (seconds per distinct (z, M)) values
    of the sound output-perturbation epsilon.
    """
    p, alg = cfg.privacy, cfg.algorithm.name
    users = list(dataset.train_users)
    sizes = [int(len(dataset.train_y[u])) for u in users]
    n = len(users)
    base: dict[str, Any] = {
        "mechanism": p.mechanism,
        "algorithm": alg,
        "iterations": cfg.rounds,
        "training_rounds": training_rounds(cfg),
        "num_devices": n,
        "num_params": int(getattr(model, "num_params", 0)) or None,
        "releases_rule": (
            "odd iterations only (Lemma 5.1: even iterations are post-processing)"
            if is_upcycled(alg)
            else "every iteration"
        ),
        "sampling": {
            "frac": cfg.devices.frac,
            "straggler": cfg.devices.straggler,
            "straggler_policy": cfg.devices.straggler_policy,
            "straggler_draw": cfg.devices.straggler_draw,
        },
        "releases_source": releases_source,
    }
    if p.mechanism == "none":
        base.update({"guarantee": "none (non-private run)", "devices": [], "epsilon_bar": {}})
        return base
    base.update(
        {
            "neighbouring_relation": NEIGHBOURING_RELATION,
            "train_metrics": ("outside_privacy_guarantee" if p.release_train_metrics else "not_computed"),
            "released_outside_the_guarantee": (["train_loss", "train_acc"] if p.release_train_metrics else []),
        }
    )
    base["noise_source"] = noise_source
    shared = (
        [NEIGHBOURING_NOTE]
        + ([SHARED_NOISE_NOTE] if noise_is_seed_keyed(noise_source) else [])
        + ([TRAIN_METRICS_NOTE] if p.release_train_metrics else [])
    )
    if releases is None:
        releases = release_counts(cfg, n)
    elif len(releases) != n:
        raise PrivacyParameterError(f"releases: {len(releases)} counts given for {n} devices")
    releases = [_releases(m) for m in releases]
    if p.mechanism == "output":
        delta, tau = _delta(p.delta), _positive("privacy.tau", p.tau)
        sigmas = per_device(p.sigma, n, "privacy.sigma")
        cache: dict[tuple, dict] = {}
        rows = []
        for u, size, m, s in zip(users, sizes, releases, sigmas, strict=True):
            key = (m, s, size)
            if key not in cache:
                cache[key] = output_epsilons(m, s, tau, size, delta, cross_check)
            rows.append({"device": u, "n_train": size, "releases": m, "sigma": s, **cache[key]})
        kinds = [k for k in rows[0] if k not in ("device", "n_train", "releases", "sigma")] if rows else []
        base.update(
            {
                "guarantee": (
                    f"(epsilon, delta)-DP per device, delta = {delta!r}: the 'sound' epsilon (Theorem C.1's "
                    "'paper_formula' beside it for comparison only)"
                ),
                "guarantee_epsilon": "sound",
                "delta": delta,
                "parameters": {"tau": tau, "sigma": p.sigma},
                "sensitivity": {"sound": "2*tau", "paper": "tau/|D_i|"},
                "accountant": "dp_accounting.get_epsilon_gaussian(z / sqrt(M_i), delta), z = sigma / sensitivity "
                "(exact composition of M_i Gaussian releases)",
                "devices": rows,
                "epsilon_bar": {k: _mean([r[k] for r in rows]) for k in kinds},
                **_epsilon_summary(rows, kinds),
                "notes": [OUTPUT_NOTE, *shared],
            }
        )
        return base
    # objective perturbation
    alphas = per_device(p.alpha, n, "privacy.alpha")
    assumptions = objective_assumptions(cfg, dataset, model, sizes, max_norm)
    rows = []
    if not assumptions["glm"]:
        rows = [
            {
                "device": u,
                "n_train": size,
                "releases": m,
                "alpha": a,
                "theorem_c2": None,
                "theorem_c2_paper_sum": None,
                "status": NO_GLM,
            }
            for u, size, m, a in zip(users, sizes, releases, alphas, strict=True)
        ]
    else:
        if not assumptions["holds"] and not p.allow_no_guarantee:
            raise NoGuaranteeError(
                f"privacy.allow_no_guarantee: Theorem C.2 gives no guarantee for this run: "
                f"{assumptions['reason']}; fix it or set privacy.allow_no_guarantee: true"
            )
        u1, u2, mu = assumptions["u1"], assumptions["u2"], assumptions["mu"]
        globally_ok = assumptions["features_bounded"] and mu > 0
        failing = set(assumptions["failing_devices"])
        for i, (u, size, m, a) in enumerate(zip(users, sizes, releases, alphas, strict=True)):
            if globally_ok and i not in failing:
                row = {
                    "theorem_c2": theorem_c2_epsilon(m, a, size, mu, u1, u2),
                    "theorem_c2_paper_sum": theorem_c2_epsilon(m + 1 if m else 0, a, size, mu, u1, u2),
                    "status": "pure (epsilon, 0)-DP, exact minimiser assumed",
                }
            else:
                row = {"theorem_c2": None, "theorem_c2_paper_sum": None, "status": NO_GUARANTEE}
            rows.append({"device": u, "n_train": size, "releases": m, "alpha": a, **row})
    base.update(
        {
            "guarantee": (
                "pure (epsilon, 0)-DP per device (Theorem C.2), delta = 0"
                if assumptions.get("holds")
                else (NO_GLM if not assumptions["glm"] else NO_GUARANTEE)
            ),
            "delta": 0.0,
            "parameters": {"alpha": p.alpha, "mu": assumptions["mu"]},
            "assumptions": assumptions,
            "devices": rows,
            "epsilon_bar": {k: _mean([r[k] for r in rows]) for k in accountants_of("objective")},
            **_epsilon_summary(rows, accountants_of("objective")),
            "notes": [SGD_CAVEAT, OFF_BY_ONE_NOTE, *shared],
        }
    )
    return base
