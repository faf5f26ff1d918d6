"""Snakemake's lint of the workflow (``make lint``): every lint but the one this project accepts fails.

The accepted lint, :data:`NO_SOFTWARE_ENV_LINT`: the workflow deploys with ``pip install -e .`` (README), not with
``--sdm conda`` or containers, which no test here could exercise (docs/library-choices.md).
Usage: ``python tools/workflow_lint.py [WORKFLOW_FOLDER]`` (default: the repository).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NO_SOFTWARE_ENV_LINT = "Specify a conda environment or container for each rule."


def lints(text: str) -> list[str]:
    """The lint titles in Snakemake's ``--lint`` text output (lines ``    * <title>:``)."""
    return [line.strip()[2:].rstrip(":") for line in text.splitlines() if line.startswith("    * ")]


def unaccepted(text: str) -> list[str]:
    """The lints of ``text`` other than :data:`NO_SOFTWARE_ENV_LINT`, each once."""
    return sorted(set(lints(text)) - {NO_SOFTWARE_ENV_LINT})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "--workflow-profile", "none"],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    text = proc.stdout + proc.stderr
    if "Congratulations" not in text and not lints(text):
        print(text[-3000:], file=sys.stderr)
        print("workflow lint: Snakemake's lint did not run", file=sys.stderr)
        return 1
    wrong = unaccepted(text)
    for title in wrong:
        print(f"workflow lint: {title}", file=sys.stderr)
    if not wrong:
        print(f"workflow lint: clean (accepted: {NO_SOFTWARE_ENV_LINT})")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
