"""The README's quick start, run verbatim in a fresh copy of the repository, so the README cannot drift.

Its two set-up commands are `make install` and `make quick`, its test command `make test`. Scale is reduced **in
the copy's config, not in the commands**: the copy's `presets.quick` trains three short runs on Synthetic(1,1)
(FedAvg, FedProx, Upcycled-FL; one seed) instead of the real quick preset's runs, so the commands run as written
in a CI budget. `test_readme_quick_start_runs_verbatim_in_a_fresh_copy` runs `make quick` with this test's Python
environment (`VENV` from the environment; the Makefile's default is `.venv`); `test_readme_set_up_and_test_
commands_in_a_fresh_copy` (marker `install`) runs all three, `make install` making its own `.venv` (pip takes
torch and the packages from its configured sources and cache) and `make test` running a few tests of the copy
(`PYTEST_ADDOPTS`). After the block, the report command without `--configfile` must report what exists.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fixtures_workflow import ROOT, fresh_copy

pytestmark = pytest.mark.workflow

HEADING = "## Quick start"


def quick_start_commands(readme: str) -> list[str]:
    """The commands of the fenced block under the quick-start heading (comments dropped)."""
    start = readme.index(HEADING)
    block = re.search(r"```\n(.*?)```", readme[start:], re.S)
    assert block, "README: no fenced block under the quick-start heading"
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


def readme_test_command(readme: str) -> str:
    """The README's test command: the code after 'Tests:' in the quick-start section."""
    found = re.search(r"Tests: `([^`]+)`", readme[readme.index(HEADING) :])
    assert found, "README: no 'Tests: `COMMAND`' in the quick-start section"
    return found.group(1)


def reduce_quick_preset(wd: Path) -> None:
    path = wd / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    table1 = config["experiments"]["table1"]
    quick = config["presets"]["quick"]
    config["presets"]["quick"] = {
        "datasets": quick["datasets"],  # the real quick preset's offline data (our generator, not the paper's files)
        "seeds": [0],
        "round_scale": 1,
        "exclude_sources": ["femnist", "sent140"],
        "run_defaults": {**config["run_defaults"], "solver": {**config["run_defaults"]["solver"], "epochs": 2}},
        "experiments": {
            "table1": {
                "description": table1["description"],
                "set": table1["set"],
                "groups": [
                    {
                        "datasets": ["synthetic_1_1"],
                        "runs": [
                            {"algorithm": "fedavg", "rounds": 4},
                            {"algorithm": "fedprox", "rounds": 4, "mu": 1},
                            {"algorithm": "upcycled", "rounds": 8, "mu": 1, "lam": 0.43},
                        ],
                    }
                ],
                "outputs": [
                    {"kind": "table1", "name": "table1"},
                    {"kind": "time", "name": "time"},
                    {"kind": "convergence", "name": "fig5"},
                ],
            }
        },
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def run_line(line: str, wd: Path, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    env = env or {
        **os.environ,
        "VENV": sys.prefix,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    proc = subprocess.run(["bash", "-c", line], cwd=wd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"README command failed: {line}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def provenance_with_absolute_paths(results: Path) -> list[str]:
    """Provenance lines (Markdown 'Provenance: ...', CSV '# provenance: ...', HTML pages) naming an absolute path."""
    bad = []
    for path in results.rglob("*"):
        if path.suffix not in (".md", ".csv", ".html", ".tex") or not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if re.search(r"provenance", line, re.I) and re.search(r"(?:^|[\s(='\"])/[\w.-]+/", line):
                bad.append(f"{path.relative_to(results)}: {line[:200]}")
    return bad


def check_quick_results(wd: Path) -> None:
    results = wd / "results"
    assert not provenance_with_absolute_paths(results), provenance_with_absolute_paths(results)
    for name in ("tables/table1.md", "tables/time.md", "tables/table2.md", "figures/fig5.png", "runs.csv"):
        assert (results / name).stat().st_size > 0, name
    report = (results / "report.html").read_text(encoding="utf-8")
    assert "table1.csv" in report and "fig5.png" in report
    # The front page (workflow/report/workflow.rst) names the preset that was built and how to get the paper.
    assert "config-preset-quick" in report and "The full paper" in report
    # ... the claims summary (one seed here: too few seeds for any verdict) and the headline figure.
    front = re.search(r"var workflow_desc = (\".*?\");\n", report).group(1)
    assert "too few seeds" in front and "Headline figure" in front and "<img" in front
    assert (results / "README.md").exists()


def test_readme_quick_start_runs_verbatim_in_a_fresh_copy(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = quick_start_commands(readme)
    assert commands == ["make install", "make quick"], commands
    wd = fresh_copy(tmp_path / "clone")
    reduce_quick_preset(wd)
    run_line("make quick", wd)
    check_quick_results(wd)
    # The newcomer's next command: the report without --configfile after the quick preset reports what exists
    # and is titled for it (the outputs' provenance says preset quick), saying which preset the command selected.
    run_line("snakemake --report results/report_full.html", wd)
    full = (wd / "results" / "report_full.html").read_text(encoding="utf-8")
    assert "table1.csv" in full and "fig5.png" in full and "fig4.png" not in full
    assert "config-preset-quick" in full and "config-preset-full" not in full
    front = re.search(r"var workflow_desc = (\".*?\");\n", full).group(1)
    assert "this report command selected preset" in front


@pytest.mark.install
def test_readme_set_up_and_test_commands_in_a_fresh_copy(tmp_path):
    """`make install` (a fresh .venv), `make quick`, `make test`, as printed, in a fresh copy."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = quick_start_commands(readme)
    wd = fresh_copy(tmp_path / "clone")
    reduce_quick_preset(wd)
    # MAKEFLAGS and MAKELEVEL: under `make test VENV=...` the outer make's command-line variables would reach the
    # copy's make and install into the outer environment instead of the copy's own .venv.
    outer = ("VIRTUAL_ENV", "PYTHONPATH", "VENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
    env = {k: v for k, v in os.environ.items() if k not in outer}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix))
    run_line(commands[0], wd, env, timeout=2400)
    assert (wd / ".venv" / "bin" / "snakemake").exists()
    run_line(commands[1], wd, env)
    check_quick_results(wd)
    proc = run_line(
        readme_test_command(readme), wd, {**env, "PYTEST_ADDOPTS": "tests/cli/test_cli.py -k help -p no:cacheprovider"}
    )
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-2000:]
