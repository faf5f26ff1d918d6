"""The algorithm names and what each name implies, without torch: one home for the workflow, the report, the
Flower app and the algorithm classes (:mod:`upfl.algorithms`), which read their keys, mu and privacy from here.

``upcycled`` is Upcycled FedProx (the paper's Upcycled-FL); ``upcycled_<base>`` upcycles any other base:
odd iterations train the base, even iterations apply Eq. (5) on the server.
"""

from __future__ import annotations

import dataclasses
import difflib

from .errors import AlgorithmPrivacyError, ConfigError

PREFIX = "upcycled"

DEFAULT_STEP = 0.7
"""The even-iteration coefficient c_1 of an upcycled run that gives neither ``algorithm.lam`` nor
``algorithm.step``: Table 1's four (mu, lambda) pairs all have mu/(mu+lambda) within 0.015 of 0.7 (0.699 to 0.714)."""

MODEL_NAMES = ("logreg", "binary_logreg", "mlp", "cnn", "lstm")
"""Every ``model.name`` (the builders of :mod:`upfl.models`; here so that ``upfl run --help`` needs no torch)."""
"""``upcycled`` is Upcycled FedProx (the paper's Upcycled-FL); ``upcycled_<base>`` upcycles any other base."""

ALGORITHM_KEYS: dict[str, tuple[str, ...]] = {
    "fedavg": (),
    "fedprox": (),
    "fedavgm": ("server_lr", "server_momentum", "nesterov"),
    "fednova": ("server_lr",),
    "scaffold": ("server_lr",),
    "fedadam": ("server_lr", "beta1", "beta2", "tau"),
    "fedyogi": ("server_lr", "beta1", "beta2", "tau"),
    "feddyn": ("alpha",),
    "pfedme": ("server_lr", "personal_lambda", "personal_steps", "personal_lr"),
}
"""Base algorithm -> the ``algorithm.*`` keys it reads besides ``name``, ``mu`` and the upcycling keys."""

BASE_ALGORITHMS: tuple[str, ...] = tuple(ALGORITHM_KEYS)
"""The base algorithms, in the registry's order."""

UPCYCLING_KEYS = ("lam", "step", "schedule")
"""The ``algorithm.*`` keys of an upcycled algorithm's even iterations (Eq. (5))."""

USES_MU = frozenset({"fedprox", "fedavgm", "fedadam", "fedyogi"})
"""Bases whose local objective has the proximal term mu/2 ||w - w_global||^2 with ``algorithm.mu``."""

PRIVACY_REFUSALS: dict[str, dict[str, str]] = {
    "fedavg": {"objective": "Theorem C.2 needs the FedProx objective with mu > 0; FedAvg has mu = 0"},
    "fednova": {
        "objective": "Theorem C.2 needs the FedProx objective with mu > 0; FedNova's clients run FedAvg's (mu = 0)"
    },
    "scaffold": {
        "output": "the device also releases its control-variate update c_i+ - c_i, which output "
        "perturbation does not cover",
        "objective": "the correction <c - c_i, w> changes the local objective; Theorem C.2 needs the FedProx objective",
    },
    "feddyn": {
        "objective": "the data-dependent term -<h_i, w> changes the local objective; Theorem C.2 needs "
        "the FedProx objective"
    },
    "pfedme": {
        "output": "the paper's analysis covers one local solve of the FedProx objective; pFedMe's bi-level "
        "local problem is not analysed",
        "objective": "Theorem C.2 needs the FedProx objective; pFedMe's local problem is a Moreau envelope",
    },
}
"""Base -> privacy mechanism -> why the paper's analysis does not apply (mechanisms absent here are admitted)."""

PRIVACY_MECHANISMS = ("output", "objective")


@dataclasses.dataclass(frozen=True)
class Accountant:
    """One epsilon a private run records (``summary.json["privacy"]["epsilon_bar"][name]``, runs.csv
    ``privacy_epsilon_bar_<name>``): its mechanism, its label in tables and, for those the trade-off figure draws,
    its short name in a legend (``None``: not drawn)."""

    mechanism: str
    label: str
    short: str | None = None


ACCOUNTANTS: dict[str, Accountant] = {
    "sound": Accountant("output", "sound, the guarantee (sensitivity 2τ, exact composition)", "sound"),
    "paper_formula": Accountant("output", "paper formula (Theorem C.1, sensitivity τ/|D|)", "paper-formula"),
    "paper_sensitivity": Accountant("output", "exact accountant at the paper's sensitivity τ/|D|"),
    "theorem_c2": Accountant("objective", "Theorem C.2 (pure, δ = 0)", "Thm C.2"),
    "theorem_c2_paper_sum": Accountant("objective", "Theorem C.2 with the printed M + 1 terms"),
}
"""Every accountant, per mechanism the guarantee first (output perturbation: the sound epsilon, Theorem C.1's
formula beside it; objective perturbation: Theorem C.2)."""


def accountants_of(mechanism: str, drawn: bool = False) -> tuple[str, ...]:
    """The accountants of ``mechanism`` (:data:`PRIVACY_MECHANISMS`), the guarantee first; ``drawn``: only those
    the trade-off figure draws."""
    return tuple(k for k, a in ACCOUNTANTS.items() if a.mechanism == mechanism and (a.short or not drawn))


def guarantee_accountant(mechanism: str) -> str:
    """The accountant whose epsilon is the mechanism's guarantee."""
    return accountants_of(mechanism)[0]


def is_upcycled(name: str) -> bool:
    """Whether an algorithm name is an upcycled one (``upcycled`` or ``upcycled_<base>``)."""
    return name == PREFIX or name.startswith(PREFIX + "_")


def base_name(name: str) -> str:
    """The base algorithm of an algorithm name: ``upcycled`` -> ``fedprox``, ``upcycled_fedavgm`` -> ``fedavgm``."""
    if name == PREFIX:
        return "fedprox"
    return name[len(PREFIX) + 1 :] if name.startswith(PREFIX + "_") else name


def upcycled_name(base: str) -> str:
    """The name of the upcycled ``base``: ``fedprox`` -> ``upcycled``, ``fedavgm`` -> ``upcycled_fedavgm``."""
    return PREFIX if base == "fedprox" else f"{PREFIX}_{base}"


def algorithm_names() -> list[str]:
    """Every valid ``algorithm.name``: the bases, ``upcycled`` and ``upcycled_<base>`` for every base but FedProx."""
    return list(BASE_ALGORITHMS) + [PREFIX] + [upcycled_name(b) for b in BASE_ALGORITHMS if b != "fedprox"]


def is_known(name: str) -> bool:
    """Whether ``name`` is a valid ``algorithm.name``."""
    return base_name(name) in ALGORITHM_KEYS and name != f"{PREFIX}_fedprox"


def check_known(name: str) -> str:
    """The base of a valid ``algorithm.name``; ConfigError naming the choices otherwise."""
    if not is_known(name):
        close = difflib.get_close_matches(str(name), algorithm_names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"algorithm.name: unknown algorithm {name!r}{hint} (one of {', '.join(algorithm_names())})")
    return base_name(name)


def is_training_iteration(algorithm: str, t: int) -> bool:
    """Algorithm 2: an upcycled algorithm trains at odd t only (even t is Eq. (5)); a base trains at every t."""
    return not is_upcycled(algorithm) or t % 2 == 1


def uses_mu(base: str) -> bool:
    """Whether ``algorithm.mu`` is the base's proximal coefficient (else it must be 0)."""
    return base in USES_MU


def extrapolation_mu(base: str, mu: float, alpha: float) -> float:
    """The mu of mu/(mu+lambda) when ``base`` is upcycled: its proximal mu (FedDyn's alpha; 0 without one)."""
    if base == "feddyn":
        return float(alpha)
    return float(mu) if uses_mu(base) else 0.0


def equivalent_lambda(base: str, mu: float, step: float) -> float | None:
    """The lambda whose mu / (mu + lambda) is ``step`` (Eq. (5)) for an upcycled ``base`` with proximal ``mu``:
    mu (1 - step) / step; None when there is none (a base without a proximal mu, FedDyn's alpha among them; mu or
    step not positive)."""
    if not uses_mu(base) or not mu > 0 or not step > 0:
        return None
    return float(mu) * (1.0 - float(step)) / float(step)


def even_step_coefficient(mu: float, lam: float | None, step: float | None = None) -> float:
    """c_1 of Eq. (5): ``step`` when given, else mu / (mu + lambda)."""
    if step is not None:
        return float(step)
    if lam is None:
        raise ValueError("even_step_coefficient: give lam or step")
    return mu / (mu + lam)


def privacy_refusals(base: str) -> dict[str, str | None]:
    """Per privacy mechanism: why the paper's analysis does not cover it for ``base``, None where it does."""
    return {m: PRIVACY_REFUSALS.get(base, {}).get(m) for m in PRIVACY_MECHANISMS}


def check_algorithm_config(cfg) -> None:
    """Cross-key rules of ``algorithm.*`` and the privacy mechanisms each algorithm admits
    (ConfigError naming the key)."""
    a = cfg.algorithm
    base = check_known(a.name)
    upcycled = is_upcycled(a.name)
    defaults = {f.name: f.default for f in dataclasses.fields(a)}
    for key in defaults:
        if key in ("name", "mu") or key in UPCYCLING_KEYS or key in ALGORITHM_KEYS[base]:
            continue
        if getattr(a, key) != defaults[key]:
            users = sorted(n for n, keys in ALGORITHM_KEYS.items() if key in keys)
            raise ConfigError(f"algorithm.{key}: not used by {a.name} (used by {', '.join(users) or 'no algorithm'})")
    if a.mu != 0 and not uses_mu(base):
        hint = "; use fedprox" if base == "fedavg" else ""
        raise ConfigError(f"algorithm.mu: {base} has no proximal term, got mu = {a.mu}{hint}")
    if upcycled:
        if a.lam is not None and a.step is not None:
            raise ConfigError("algorithm.step: give either algorithm.lam or algorithm.step, not both")
        if a.step is None and a.lam is not None and extrapolation_mu(base, a.mu, a.alpha) + a.lam == 0:
            raise ConfigError("algorithm.lam: mu + lambda must be > 0 (with mu = 0, give algorithm.step)")
    elif a.lam is not None or a.step is not None:
        raise ConfigError(
            f"algorithm.{'lam' if a.lam is not None else 'step'}: only used by upcycled algorithms "
            f"({PREFIX}, {PREFIX}_<base>)"
        )
    mechanism = cfg.privacy.mechanism
    if mechanism != "none":
        reason = privacy_refusals(base).get(mechanism)
        if reason is not None:
            raise AlgorithmPrivacyError(
                f"privacy.mechanism: {mechanism} perturbation is not supported for {a.name}: {reason}"
            )
