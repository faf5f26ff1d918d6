"""The GitHub Actions workflow (.github/workflows/ci.yml) runs the project's CI script, .ci/run, and nothing in its
place: in a Debian image with a Python the package accepts, as root (the script installs Debian's SLURM and
chromium), with CI=true and the script's 90 minutes. A step the script needs that the workflow lacks, or one the
workflow adds beside it, fails here."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
SCRIPT = ROOT / ".ci" / "run"


def load_workflow() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as True
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def test_the_github_workflow_runs_ci_run_and_only_it():
    doc = load_workflow()
    assert {"push", "pull_request"} <= set(doc["on"])
    (job,) = doc["jobs"].values()
    runs = [step["run"].strip() for step in job["steps"] if "run" in step]
    uses = [step["uses"].split("@")[0] for step in job["steps"] if "uses" in step]
    assert runs == ["bash .ci/run"] and uses == ["actions/checkout"], (runs, uses)
    assert str(job.get("env", {}).get("CI")).lower() == "true"
    assert job["timeout-minutes"] == 90


def test_the_github_workflow_gives_ci_run_what_it_assumes():
    """.ci/run installs with apt-get (Debian's package names: chromium, slurmctld, munge) and as root; its `make
    install` needs a Python that pyproject.toml's requires-python accepts."""
    job = next(iter(load_workflow()["jobs"].values()))
    script = SCRIPT.read_text(encoding="utf-8")
    image = job["container"] if isinstance(job["container"], str) else job["container"]["image"]
    found = re.fullmatch(r"python:(\d+)\.(\d+)-(\w+)", image)
    assert found and found.group(3) == "bookworm", image  # Debian 12: the project's machines
    version = (int(found.group(1)), int(found.group(2)))
    required = re.search(r'^requires-python = ">=(\d+)\.(\d+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert required, "pyproject.toml: requires-python"
    low = (int(required.group(1)), int(required.group(2)))
    assert version >= low
    # a container job runs as root unless told otherwise: apt-get works without sudo
    container = job["container"]
    assert not (isinstance(container, dict) and "--user" in str(container.get("options", ""))), container
    assert "sudo" not in script and "apt-get install" in script
    for package in ("chromium", "slurmctld", "munge"):
        assert re.search(rf"apt-get install [^\n]*\b{package}\b", script), package
    assert SCRIPT.stat().st_mode & 0o111, ".ci/run is not executable"
