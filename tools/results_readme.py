"""Write results/README.md from config/config.yaml's plan (upfl.pipeline.results_readme.results_readme)."""

import sys
from pathlib import Path

import yaml

from upfl.files import write_text
from upfl.pipeline.results_readme import results_readme

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    write_text(ROOT / "results" / "README.md", results_readme(config))
    print(ROOT / "results" / "README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
