"""tools/workflow_lint.py: Snakemake's lint text read rule by rule; every lint but the accepted one is named."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("workflow_lint", ROOT / "tools" / "workflow_lint.py")
workflow_lint = importlib.util.module_from_spec(spec)
spec.loader.exec_module(workflow_lint)

TEXT = """Lints for rule train (line 15, workflow/rules/train.smk):
    * Specify a conda environment or container for each rule.:
      This way, the used software for each specific step is documented.
Lints for rule report (line 3, workflow/rules/report.smk):
    * Specify a conda environment or container for each rule.:
      This way, the used software for each specific step is documented.
    * Param out is a prefix of input or output file but hardcoded:
      If this is meant to represent a file path prefix, ...
"""


def test_only_the_accepted_lint_passes():
    assert workflow_lint.lints(TEXT).count(workflow_lint.NO_SOFTWARE_ENV_LINT) == 2
    assert workflow_lint.unaccepted(TEXT) == ["Param out is a prefix of input or output file but hardcoded"]
    accepted_only = "\n".join(TEXT.splitlines()[:6])
    assert workflow_lint.unaccepted(accepted_only) == []
