"""Sub-commands of ``upfl`` beyond run, synth and stats: each module's ``register`` adds its parser."""

import re


def plain_help(docstring: str) -> str:
    """A module docstring as ``--help`` text: reStructuredText roles and literals as plain words."""
    text = re.sub(r":(?:func|mod|class|meth|attr|data|exc):`~?([^`]+)`", r"\1", docstring)
    return re.sub(r"``([^`]+)``", r"'\1'", text).strip()
