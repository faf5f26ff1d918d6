"""The checks of ``model.options`` shared by every model's builder (torch-free)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


def check_options(model: str, options: dict | None, defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` updated by ``options``; an unknown key is a :class:`ConfigError` naming it."""
    options = dict(options or {})
    for key in options:
        if key not in defaults:
            raise ConfigError(f"model.options.{key}: {model} has no option {key!r}; its options: {', '.join(defaults)}")
    return {**defaults, **options}


def positive_int(opts: dict, key: str) -> int:
    v = opts[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"model.options.{key}: expected a positive integer, got {v!r}")
    return v


def positive_ints(opts: dict, key: str) -> tuple[int, ...]:
    v = opts[key]
    if (
        not isinstance(v, (list, tuple))
        or not v
        or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in v)
    ):
        raise ConfigError(f"model.options.{key}: expected a non-empty list of positive integers, got {v!r}")
    return tuple(v)


def unit_rate(opts: dict, key: str) -> float:
    v = opts[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
        raise ConfigError(f"model.options.{key}: expected a number in [0, 1), got {v!r}")
    return float(v)


def choice(opts: dict, key: str, allowed: tuple[str, ...]) -> str:
    if opts[key] not in allowed:
        raise ConfigError(f"model.options.{key}: must be one of {', '.join(allowed)}; got {opts[key]!r}")
    return opts[key]


def flag(opts: dict, key: str) -> bool:
    if not isinstance(opts[key], bool):
        raise ConfigError(f"model.options.{key}: expected true or false, got {opts[key]!r}")
    return opts[key]


def flat_features(name: str, dataset) -> int:
    shape = tuple(dataset.feature_shape)
    if len(shape) != 1:
        raise ConfigError(f"model.name: {name} needs flat feature vectors; data set has x rows of shape {shape}")
    return int(shape[0])
