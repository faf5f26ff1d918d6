"""Write docs/run-config.md from upfl.config_reference (upfl.config_reference.reference_markdown)."""

import sys
from pathlib import Path

from upfl.config_reference import reference_markdown
from upfl.files import write_text

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    write_text(ROOT / "docs" / "run-config.md", reference_markdown())
    print(ROOT / "docs" / "run-config.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
