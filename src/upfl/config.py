"""The run configuration: a versioned, documented schema shared by the CLI and the workflow.

A run config is a YAML mapping with the sections below (``schema_version: 1``). Every key has a
type and a default; unknown keys and wrong types are errors naming the key (``algorithm.mu``).
Flags of ``upfl run`` override the file. Floats are written with ``repr`` (shortest round trip),
so ``0.43`` stays ``0.43`` in paths and hashes.

The config hash (:func:`config_hash`) covers everything that changes the numbers a run produces;
it leaves out where results go (``output``) and how often progress is printed.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import yaml

from .draws.rounds import resolve_straggler_policy
from .errors import ConfigError
from .names import DEFAULT_STEP, MODEL_NAMES, algorithm_names, check_algorithm_config, is_upcycled
from .privacy.mechanisms import float32_scale_problem, nominal_sigma_problem
from .yaml_safety import read_yaml

SCHEMA_VERSION = 1


@dataclass
class DataConfig:
    path: str = ""
    """Folder of a LEAF-format data set (train/ and test/ JSON files)."""
    feature_scaling: str = "none"
    """``none`` or ``unit_norm`` (scale every feature vector to L2 norm <= 1; needed by objective perturbation)."""


@dataclass
class ModelConfig:
    name: str = "logreg"
    """``logreg`` (multinomial logistic regression), ``binary_logreg`` (single logit, log loss), or a
    real-data model registered in :mod:`upfl.models` (``mlp``, ``cnn``, ``lstm``)."""
    options: dict = field(default_factory=dict)
    """Model-specific options (see the model's docstring)."""
    softmax_before_loss: bool = False
    """The authors' released loss: cross-entropy of the softmax of the logits (their ``forward`` ends in a softmax
    that ``nn.CrossEntropyLoss`` applies again), in training and evaluation; the multinomial models only. Off:
    the cross-entropy of the logits (the paper's model)."""


@dataclass
class AlgorithmConfig:
    name: str = "upcycled"
    """A base algorithm (``fedavg``, ``fedprox``, ``fedavgm``, ``fedadam``, ``fedyogi``, ``scaffold``, ``feddyn``,
    ``pfedme``, ``fednova``), ``upcycled`` (Algorithm 2 on FedProx: the paper's Upcycled-FL) or ``upcycled_<base>``
    (upcycling on any other base). See docs/algorithms.md and :mod:`upfl.algorithms.registry`."""
    mu: float = 0.0
    """Proximal coefficient of the local objective (bases with a proximal term; 0 for the others)."""
    lam: float | None = None
    """lambda of Eq. (5): the even-iteration coefficient is mu / (mu + lambda) (upcycled algorithms)."""
    step: float | None = None
    """The even-iteration coefficient c_1 directly (instead of ``lam``; upcycled algorithms). An upcycled run
    with neither takes step 0.7 (Table 1's mu/(mu+lambda); ``upfl.names.DEFAULT_STEP``)."""
    schedule: str = "const"
    """``const`` (c_m = c_1), ``horizon`` (c_m = c_1 / sqrt(M), M training rounds of the run; Corollary 4.8),
    ``inv_sqrt`` (c_m = c_1 / sqrt(m), an increasing lambda_m)."""
    server_lr: float | None = None
    """Server learning rate (fedavgm, fedadam, fedyogi, scaffold, fednova; pFedMe's beta). None: the algorithm's
    default (1 for all but fedadam and fedyogi, 0.03 for those)."""
    server_momentum: float = 0.3
    """fedavgm: momentum beta of the server SGD on the pseudo-gradient w - sum_i p_i w_i (the authors' 0.3)."""
    nesterov: bool = True
    """fedavgm: Nesterov momentum (the authors' choice) or plain heavy ball."""
    beta1: float = 0.9
    """fedadam, fedyogi: first-moment decay (Reddi et al. 2021)."""
    beta2: float = 0.99
    """fedadam, fedyogi: second-moment decay (Reddi et al. 2021)."""
    tau: float = 0.001
    """fedadam, fedyogi: adaptivity epsilon tau (Reddi et al. 2021); the second moment starts at tau^2."""
    alpha: float = 0.01
    """feddyn: the dynamic regulariser's alpha (Acar et al. 2021)."""
    personal_lambda: float = 15.0
    """pfedme: lambda of the Moreau envelope (T. Dinh et al. 2020)."""
    personal_steps: int = 5
    """pfedme: K, gradient steps on the personal problem per local step."""
    personal_lr: float = 0.01
    """pfedme: the personal problem's learning rate."""


@dataclass
class DevicesConfig:
    frac: float = 0.3
    """Fraction of devices sampled per training round: max(floor(frac * N), 1), uniformly without replacement."""
    straggler: float = 0.0
    """Probability that a sampled device is a straggler (runs a uniform number of epochs in 1..E-1)."""
    straggler_policy: Any = "partial"
    """``partial`` (aggregate stragglers' partial work, as the authors did) or ``drop`` (discard them); or a
    mapping algorithm -> policy with an optional ``default`` (``{fedavg: drop, default: partial}``: FedProx's
    experiments), resolved for the run's algorithm when the config is validated."""
    straggler_draw: str = "bernoulli"
    """``bernoulli`` (each sampled device is a straggler with probability ``straggler``, the authors' code) or
    ``exact`` (exactly round(K p), halves up, of the K sampled devices, FedProx's reference)."""


@dataclass
class SolverConfig:
    epochs: int = 20
    """Local epochs E per training round."""
    batch_size: int = 32
    """Local batch size B (a device with fewer samples takes them all as one batch)."""
    lr: float = 0.05
    """Local learning rate eta of momentum SGD."""
    momentum: float = 0.5
    """Local momentum rho (PyTorch's SGD convention: buf = rho * buf + g, w -= eta * buf)."""
    backend: str = "auto"
    """``auto``, ``torch`` (batched tensors; any model, CPU or CUDA) or ``numba`` (compiled CPU loop, logistic
    regression only). ``auto`` takes ``numba`` for logistic regression on the CPU when numba is installed."""


@dataclass
class EvaluationConfig:
    every: int = 1
    """Evaluate every k iterations (the final iteration is always evaluated)."""
    last: int | None = None
    """Evaluate only among the last K iterations T-K+1..T (and the initial model); null: among all of them. For
    runs whose outputs read the final iterations only (tables), not the curve (figures)."""
    batch_size: int = 8192
    """Samples per evaluation chunk (memory bound only; does not change results beyond float rounding)."""


@dataclass
class PrivacyConfig:
    mechanism: str = "none"
    """``none``, ``output`` (clip to tau, add N(0, sigma^2)) or ``objective`` (add <n, w>, density ~
    exp(-alpha||n||))."""
    sigma: Any = None
    """Output-perturbation noise std: a number or a list with one value per device (in data-set order)."""
    tau: float | None = None
    """Output-perturbation clipping norm."""
    alpha: Any = None
    """Objective-perturbation noise parameter: a number or a per-device list."""
    delta: float = 0.001
    """delta of the reported (epsilon, delta) for output perturbation."""
    allow_no_guarantee: bool = False
    """Run objective perturbation even where Theorem C.2's conditions fail (epsilon reported as 'no guarantee')."""
    release_train_metrics: bool = True
    """With privacy on: compute the training loss and accuracy on every device's private training data at each
    evaluated iteration (true; a release no epsilon covers, marked ``outside_privacy_guarantee`` in metrics.csv's
    ``train_metrics`` column) or leave them empty (false, ``not_computed``). No effect without privacy."""
    noise_source: str = "seeded"
    """``seeded``: the privacy noise comes from the stream keyed (seed, training round, device), reproducible, and
    whoever holds the seed (it is in the run's files) can regenerate it and remove it; ``os``: from generators seeded
    by the operating system's entropy, not reproducible and not recoverable from the run's files
    (docs/privacy.md, "What the run folder reveals")."""


@dataclass
class CheckpointConfig:
    seconds: float = 30.0
    """Write a checkpoint after the first training round that ends at least this many seconds after the run
    started (or resumed) or after the last checkpoint; 0: after every training round. A run shorter than this
    writes none."""
    every: int | None = None
    """Also write one every k training rounds (null: by time only); 0 turns checkpoints off."""
    dir: str | None = None
    """Checkpoint root; default ``OUT/.checkpoints`` (inside the run's own folder, removed when the run ends).
    Each run uses ``<dir>/<key>/`` keyed by config hash, data content, code and OUT (:mod:`upfl.engine.checkpoints`)."""


@dataclass
class RunConfig:
    schema_version: int = SCHEMA_VERSION
    """Version of this schema; a config of another version is refused."""
    seed: int = 0
    """Run seed: keys every random stream (init, sampling, stragglers, batches, dropout, noise)."""
    rounds: int = 160
    """Iterations T, even ones included (FedProx 80 = Upcycled 160 in Table 1)."""
    device: str = "auto"
    """``auto`` (CUDA when present), ``cpu`` or ``cuda``."""
    threads: int = 0
    """Torch CPU threads (0 keeps torch's default)."""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    devices: DevicesConfig = field(default_factory=DevicesConfig)
    solver: SolverConfig = field(default_factory=SolverConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


CHOICES = {
    "device": ("auto", "cpu", "cuda"),
    "model.name": MODEL_NAMES,
    "data.feature_scaling": ("none", "unit_norm"),
    "algorithm.schedule": ("const", "horizon", "inv_sqrt"),
    "devices.straggler_policy": ("partial", "drop"),
    "devices.straggler_draw": ("bernoulli", "exact"),
    "solver.backend": ("auto", "torch", "numba"),
    "privacy.mechanism": ("none", "output", "objective"),
}

HASH_EXCLUDED = {"checkpoint", "evaluation.batch_size", "threads"}

NOISE_SOURCES = ("seeded", "os")
"""``privacy.noise_source`` values."""

HASH_OMITTED_AT_DEFAULT = {
    "model.softmax_before_loss": False,
    "evaluation.last": None,
    "privacy.noise_source": "seeded",
}
"""Keys left out of the hash while they hold these values, so that configs written before the key existed keep
their hash (and their checkpoints)."""


def _coerce(value: Any, hint: Any, key: str) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if origin is not None and type(None) in args:
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)][0]
        return _coerce(value, inner, key)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    raise ConfigError(f"{key}: unsupported type {hint}")


@functools.cache
def _fields_of(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A config dataclass's resolved type hints and field names (resolved once per class: a workflow checks
    hundreds of run configs)."""
    return get_type_hints(cls), frozenset(f.name for f in dataclasses.fields(cls))


def _from_dict(cls: type, doc: Any, prefix: str) -> Any:
    if not isinstance(doc, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {doc!r}")
    hints, names = _fields_of(cls)
    unknown = [k for k in doc if k not in names]
    if unknown:
        where = f"{prefix}." if prefix else ""
        close = difflib.get_close_matches(str(unknown[0]), sorted(names), n=1)
        hint = f"; did you mean '{where}{close[0]}'?" if close else ""
        raise ConfigError(
            f"unknown config key '{where}{unknown[0]}'; known keys{' of ' + prefix if prefix else ''}: "
            f"{', '.join(sorted(names))}{hint}"
        )
    values = {}
    for name, value in doc.items():
        key = f"{prefix}.{name}" if prefix else name
        hint = hints[name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            values[name] = _from_dict(hint, value, key)
        else:
            values[name] = _coerce(value, hint, key)
    return cls(**values)


def _check_number_list(value: Any, key: str) -> None:
    """Positive numbers whose square and its inverse are finite, non-zero floats (the mechanisms use both)."""
    items = value if isinstance(value, list) else [value]
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ConfigError(f"{key}: must be a positive number or a list of positive numbers, got {value!r}")
        square = float(v) * float(v)
        if not (square > 0 and math.isfinite(square) and math.isfinite(1 / square)):
            raise ConfigError(f"{key}: {v!r} is too small or too large (its square must be a finite, non-zero float)")
        problem = float32_scale_problem(v)
        if problem:
            raise ConfigError(f"{key}: {problem}")


def validate(cfg: RunConfig) -> RunConfig:
    """Check values and cross-key rules; raise :class:`ConfigError` naming the key. Returns the config with its
    straggler policy resolved for its algorithm (a new object: ``cfg`` itself is not changed)."""
    if cfg.schema_version != SCHEMA_VERSION:
        raise ConfigError(f"schema_version: this upfl reads version {SCHEMA_VERSION}, got {cfg.schema_version}")
    policy = cfg.devices.straggler_policy
    if isinstance(policy, dict):
        known = (*algorithm_names(), "default")
        unknown = [k for k in policy if k not in known]
        if unknown:
            raise ConfigError(
                f"devices.straggler_policy.{unknown[0]}: not an algorithm; keys are algorithm names "
                f"or 'default' ({', '.join(known)})"
            )
    try:
        resolved = resolve_straggler_policy(cfg.devices.straggler_policy, cfg.algorithm.name)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    cfg = dataclasses.replace(cfg, devices=dataclasses.replace(cfg.devices, straggler_policy=resolved))
    for key, allowed in CHOICES.items():
        value = get_key(cfg, key)
        if value not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{key}: must be one of {', '.join(allowed)}; got {value!r}{hint}")
    a, d, s = cfg.algorithm, cfg.devices, cfg.solver
    checks = [
        ("rounds", cfg.rounds >= 1, "must be >= 1"),
        ("threads", cfg.threads >= 0, "must be >= 0"),
        ("algorithm.mu", a.mu >= 0, "must be >= 0"),
        ("algorithm.lam", a.lam is None or a.lam >= 0, "must be >= 0"),
        ("algorithm.step", a.step is None or a.step >= 0, "must be >= 0"),
        ("algorithm.server_lr", a.server_lr is None or a.server_lr > 0, "must be > 0"),
        ("algorithm.server_momentum", 0 <= a.server_momentum < 1, "must be in [0, 1)"),
        ("algorithm.beta1", 0 <= a.beta1 < 1, "must be in [0, 1)"),
        ("algorithm.beta2", 0 <= a.beta2 < 1, "must be in [0, 1)"),
        ("algorithm.tau", a.tau > 0, "must be > 0"),
        ("algorithm.alpha", a.alpha > 0, "must be > 0"),
        ("algorithm.personal_lambda", a.personal_lambda > 0, "must be > 0"),
        ("algorithm.personal_steps", a.personal_steps >= 1, "must be >= 1"),
        ("algorithm.personal_lr", a.personal_lr > 0, "must be > 0"),
        ("devices.frac", 0 < d.frac <= 1, "must be in (0, 1]"),
        ("devices.straggler", 0 <= d.straggler <= 1, "must be in [0, 1]"),
        ("solver.epochs", s.epochs >= 1, "must be >= 1"),
        ("solver.batch_size", s.batch_size >= 1, "must be >= 1"),
        ("solver.lr", s.lr > 0, "must be > 0"),
        ("solver.momentum", 0 <= s.momentum < 1, "must be in [0, 1)"),
        ("evaluation.every", cfg.evaluation.every >= 1, "must be >= 1"),
        ("evaluation.last", cfg.evaluation.last is None or cfg.evaluation.last >= 1, "must be >= 1 or null"),
        ("evaluation.batch_size", cfg.evaluation.batch_size >= 1, "must be >= 1"),
        ("checkpoint.seconds", cfg.checkpoint.seconds >= 0, "must be >= 0"),
        ("checkpoint.every", cfg.checkpoint.every is None or cfg.checkpoint.every >= 0, "must be >= 0 or null"),
    ]
    for key, ok, msg in checks:
        if not ok:
            raise ConfigError(f"{key}: {msg}, got {get_key(cfg, key)!r}")
    if not cfg.data.path:
        raise ConfigError("data.path: required (a LEAF-format data set folder)")
    if d.straggler > 0 and s.epochs < 2:
        raise ConfigError(
            f"devices.straggler: stragglers run 1..E-1 epochs, so they need solver.epochs >= 2 "
            f"(got epochs {s.epochs} with straggler probability {d.straggler})"
        )
    check_algorithm_config(cfg)
    if is_upcycled(a.name) and a.lam is None and a.step is None:
        cfg = dataclasses.replace(cfg, algorithm=dataclasses.replace(a, step=DEFAULT_STEP))
    p = cfg.privacy
    if not 0 < p.delta < 1:
        raise ConfigError(f"privacy.delta: must be in (0, 1), got {p.delta!r}")
    if p.noise_source not in NOISE_SOURCES:
        raise ConfigError(f"privacy.noise_source: must be one of {', '.join(NOISE_SOURCES)}, got {p.noise_source!r}")
    for key, value in (("privacy.sigma", p.sigma), ("privacy.alpha", p.alpha)):
        if value is not None:  # checked whether or not the mechanism uses it
            _check_number_list(value, key)
    if p.tau is not None and (
        isinstance(p.tau, bool) or not isinstance(p.tau, (int, float)) or not 0 < p.tau < math.inf
    ):
        raise ConfigError(f"privacy.tau: must be a positive number, got {p.tau!r}")
    if p.mechanism == "output":
        if p.tau is None:
            raise ConfigError(f"privacy.tau: output perturbation needs a clipping norm tau > 0, got {p.tau!r}")
        _check_number_list(p.sigma, "privacy.sigma")
        for sigma in p.sigma if isinstance(p.sigma, list) else [p.sigma]:
            problem = nominal_sigma_problem(sigma, p.tau)
            if problem:
                raise ConfigError(f"privacy.sigma: {problem}")
    elif p.mechanism == "objective":
        _check_number_list(p.alpha, "privacy.alpha")
        if a.mu <= 0:
            raise ConfigError("algorithm.mu: objective perturbation (Theorem C.2) needs mu > 0")
    return cfg


def from_dict(doc: dict[str, Any] | None) -> RunConfig:
    return validate(_from_dict(RunConfig, doc or {}, ""))


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        doc = read_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a folder, not a config file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 (byte {e.start})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a run config must be a mapping of sections")
    return doc


def set_key(doc: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``section.key`` in a nested dict (creating sections)."""
    parts = dotted.split(".")
    node = doc
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{part}: expected a mapping")
    node[parts[-1]] = value


def apply_settings(doc: dict[str, Any], items: list[str] | None) -> dict[str, Any]:
    """Apply ``--set KEY=VALUE`` items to a config document in place (values read as YAML); returns ``doc``."""
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. privacy.sigma=0.8")
        try:
            value = read_yaml(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {key}: value {text!r} is not valid YAML: {e}") from None
        set_key(doc, key, value)
    return doc


def get_key(cfg: RunConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    """``dataclasses.asdict(cfg)``: the same nested dict, made without its deep copy of every number and string
    (a run hashes its config several times)."""
    return _plain(cfg)


_ATOMS = (str, int, float, bool, type(None))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _plain(value: Any) -> Any:
    """What :func:`dataclasses.asdict` makes of ``value``: dataclasses as dicts of their fields, lists, tuples and
    dicts rebuilt, anything else deep-copied (numbers and strings are their own copies)."""
    if type(value) in _ATOMS:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_plain(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    return copy.deepcopy(value)


def dump_yaml(cfg: RunConfig) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def hashed_document(cfg: RunConfig) -> dict[str, Any]:
    """The part of the config that :func:`config_hash` covers: all but :data:`HASH_EXCLUDED`, and the keys of
    :data:`HASH_OMITTED_AT_DEFAULT` while at their default, and ``privacy.release_train_metrics`` without privacy."""
    doc = to_dict(cfg)
    for dotted in HASH_EXCLUDED:
        parts = dotted.split(".")
        node = doc
        for part in parts[:-1]:
            node = node[part]
        node.pop(parts[-1], None)
    if doc["privacy"]["mechanism"] == "none":
        doc["privacy"].pop("release_train_metrics")  # no effect without privacy: non-private hashes stay as they were
    for dotted, default in HASH_OMITTED_AT_DEFAULT.items():
        section, _, key = dotted.rpartition(".")
        if doc[section].get(key) == default:
            doc[section].pop(key)
    return doc


def config_hash(cfg: RunConfig) -> str:
    """SHA-256 (16 hex digits) of the result-determining part of the config (:func:`hashed_document`)."""
    text = json.dumps(hashed_document(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
