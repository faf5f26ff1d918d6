"""The README's quick-start block, run verbatim in a fresh copy of the repository, so the README cannot drift.

The block's `pip install` lines are skipped (the test runs in the installed environment). Scale is reduced
**in the copy's config, not in the commands**: the copy's `presets.quick` trains three short runs on
Synthetic(1,1) (FedAvg, FedProx, Upcycled-FL; one seed) instead of the 350 runs of the real quick preset (on its offline generator data sets), so the
commands run as written in a CI budget. After the block, the bare `snakemake --report` of the full config (the
command that failed for a newcomer after the quick preset) must work too and report what exists.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.workflow

MARKER = "<!-- quick-start"


def quick_start_commands(readme: str) -> list[str]:
    """The lines of the fenced block after the quick-start marker, without the install lines."""
    start = readme.index(MARKER)
    block = re.search(r"```\n(.*?)```", readme[start:], re.S)
    assert block, "README: no fenced block after the quick-start marker"
    lines = [line.strip() for line in block.group(1).splitlines() if line.strip()]
    return [line for line in lines if not line.startswith("pip install")]


def fresh_copy(dest: Path) -> Path:
    """The repository's tracked files (a fresh clone without .git), or the workflow files outside git."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    files = listed.stdout.split() if listed.returncode == 0 else []
    if not files:
        files = [str(p.relative_to(ROOT)) for folder in ("workflow", "config", "profiles", "results")
                 for p in (ROOT / folder).rglob("*") if p.is_file()] + ["Snakefile", "README.md"]
    for name in files:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def reduce_quick_preset(wd: Path) -> None:
    path = wd / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    table1 = config["experiments"]["table1"]
    quick = config["presets"]["quick"]
    config["presets"]["quick"] = {
        "datasets": quick["datasets"],  # the real quick preset's offline data (our generator, not the paper's files)
        "seeds": [0], "round_scale": 1, "exclude_sources": ["femnist", "sent140"],
        "run_defaults": {**config["run_defaults"], "solver": {**config["run_defaults"]["solver"], "epochs": 2}},
        "experiments": {"table1": {
            "description": table1["description"], "set": table1["set"],
            "groups": [{"datasets": ["synthetic_1_1"], "runs": [
                {"algorithm": "fedavg", "rounds": 4}, {"algorithm": "fedprox", "rounds": 4, "mu": 1},
                {"algorithm": "upcycled", "rounds": 8, "mu": 1, "lam": 0.43}]}],
            "outputs": [{"kind": "table1", "name": "table1"}, {"kind": "time", "name": "time"},
                        {"kind": "convergence", "name": "fig5"}]}},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def run_line(line: str, wd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", "-c", line], cwd=wd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"README command failed: {line}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def test_readme_quick_start_runs_verbatim_in_a_fresh_copy(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = quick_start_commands(readme)
    assert any(c.startswith("snakemake --cores all --configfile config/quick.yaml") for c in commands), commands
    assert any(c.startswith("snakemake --report") for c in commands), commands
    wd = fresh_copy(tmp_path / "clone")
    reduce_quick_preset(wd)
    for line in commands:
        run_line(line, wd)
    results = wd / "results"
    for name in ("tables/table1.md", "tables/time.md", "tables/table2.md", "figures/fig5.png", "runs.csv"):
        assert (results / name).stat().st_size > 0, name
    report = (results / "report.html").read_text(encoding="utf-8")
    assert "table1.csv" in report and "fig5.png" in report
    # The front page (workflow/report/workflow.rst) names the preset that was selected and how to get the paper.
    assert "config-preset-quick" in report and "The full paper" in report
    # ... the claims summary (one seed here: too few seeds for any verdict) and the headline figure.
    front = re.search(r"var workflow_desc = (\".*?\");\n", report).group(1)
    assert "too few seeds" in front and "Headline figure" in front and "<img" in front
    assert (results / "README.md").exists()
    # The newcomer's next command: the report of the full config after the quick preset reports what exists.
    run_line("snakemake --report results/report_full.html", wd)
    full = (results / "report_full.html").read_text(encoding="utf-8")
    assert "table1.csv" in full and "fig5.png" in full and "fig4.png" not in full
    assert "config-preset-full" in full
