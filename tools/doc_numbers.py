"""Write docs/numbers.md, docs/pipeline.md's experimental setup and tables and figures, and the README's
"Requirements and time" section from the plan and benchmarks/results/ (upfl.pipeline.doc_numbers,
upfl.pipeline.baselines)."""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from upfl.files import write_text  # noqa: E402
from upfl.pipeline.baselines import OUTPUTS_SECTION, SETUP_SECTION, outputs_section, setup_section  # noqa: E402
from upfl.pipeline.doc_numbers import (  # noqa: E402
    README_SECTION,
    TESTING_SECTION,
    numbers,
    numbers_page,
    readme_section,
    replace_section,
    testing_section,
)


def main() -> None:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    n = numbers(config, ROOT / "benchmarks" / "results")
    write_text(ROOT / "docs" / "numbers.md", numbers_page(n))
    pipeline = ROOT / "docs" / "pipeline.md"
    text = replace_section(pipeline.read_text(encoding="utf-8"), SETUP_SECTION, setup_section(config))
    write_text(pipeline, replace_section(text, OUTPUTS_SECTION, outputs_section(config)))
    readme = ROOT / "README.md"
    write_text(readme, replace_section(readme.read_text(encoding="utf-8"), README_SECTION, readme_section(n)))
    testing = ROOT / "docs" / "testing.md"
    write_text(testing, replace_section(testing.read_text(encoding="utf-8"), TESTING_SECTION, testing_section(n)))
    print(ROOT / "docs" / "numbers.md", pipeline, readme, testing)


if __name__ == "__main__":
    main()
