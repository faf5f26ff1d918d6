"""The project's error types, in a leaf module that imports nothing (every other module may raise them)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A run config is invalid; the message names the key."""


class AlgorithmPrivacyError(ConfigError):
    """A privacy mechanism was asked of an algorithm where the paper's analysis does not apply."""
