"""The project's error types and exit statuses, in a leaf module that imports nothing (every other module may
raise them)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A run config is invalid; the message names the key."""


class AlgorithmPrivacyError(ConfigError):
    """A privacy mechanism was asked of an algorithm where the paper's analysis does not apply."""


class DatasetError(ValueError):
    """A data set is missing or malformed; the message names the file, user and field (``upfl.data.leaf``'s, here so
    that a command catching it imports no numpy)."""


EXIT_FAILED = 1
"""Exit status when the work itself failed (a download, an archive, a run of a bundle)."""
EXIT_INPUT = 2
"""Exit status for bad input: config, flags, data set, --out, an unusable checkpoint."""
EXIT_BUSY = 4
"""Exit status when another run holds this run's checkpoint (same config, data, code and --out)."""
EXIT_SERVER_LOST = 70
"""Exit status of a command forked by the workflow's fork server when the server went away while it ran
(``EX_SOFTWARE``): the command's own status is unknown (upfl.launch)."""
