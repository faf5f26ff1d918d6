"""Every Snakemake command line that the README, docs/, config/, results/README.md and the report's pages print
works as printed: parsed by Snakemake's own argument parser (a target after `--config` or `--configfile` would be
taken as a config entry, which Snakemake reports with a traceback before any workflow code runs), then run in a
fresh copy of the repository, as a dry run where the command builds something."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_workflow import fresh_copy

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    "README.md",
    "config/README.md",
    "results/README.md",
    "docs/*.md",
    "workflow/report/*.rst",
    "config/*.yaml",
    "examples/*/README.md",
]
PLACEHOLDERS = {"TARGET": "table1"}


def printed_commands(text: str) -> list[str]:
    """`snakemake ...` in inline code, and lines of code blocks (or YAML comments) that start with it."""
    found = re.findall(r"``?(snakemake(?: [^`\n]*)?)``?", text)
    found += re.findall(r"^\s*(?:#\s*(?:Use:\s*)?)?(snakemake .*?)\s*(?:#.*)?$", text, re.M)
    return [c.strip().rstrip(".;,") for c in found]


def documented_commands() -> dict[str, list[str]]:
    """Each distinct command line and the files that print it."""
    where: dict[str, list[str]] = {}
    for pattern in DOCS:
        for path in sorted(ROOT.glob(pattern)):
            for command in printed_commands(path.read_text(encoding="utf-8")):
                where.setdefault(command, []).append(str(path.relative_to(ROOT)))
    return where


def misparsed(command: str) -> list[str]:
    """What Snakemake's parser would take wrongly in ``command``: a `--config` word that is not KEY=VALUE, a
    `--configfile` that is not a file of the repository (a target written after either option)."""
    from snakemake.cli import get_argument_parser

    args = get_argument_parser().parse_args(shlex.split(command)[1:])
    wrong = [f"--config {w}" for w in args.config or [] if "=" not in w]
    wrong += [f"--configfile {f}" for f in args.configfile or [] if not (ROOT / f).is_file()]
    return wrong


def test_the_docs_print_snakemake_commands():
    commands = documented_commands()
    assert any(c.startswith("snakemake --cores all TARGET --config preset=quick") for c in commands), commands
    assert any("--report" in c for c in commands) and len(commands) >= 10, commands


def test_a_target_after_config_or_configfile_is_caught():
    """The two forms of issue 34 that end in a Snakemake traceback: the check names the swallowed target."""
    assert misparsed("snakemake --cores all --config preset=quick fig5") == ["--config fig5"]
    assert misparsed("snakemake --cores all --configfile config/quick.yaml fig55") == ["--configfile fig55"]
    assert misparsed("snakemake --cores all fig5 --config preset=quick") == []
    assert misparsed("snakemake --cores all --configfile config/quick.yaml -- fig5") == []


def test_the_docs_print_both_orders_that_work():
    """Target first, and target after `--` (docs/running.md), as Snakemake's grammar allows."""
    commands = documented_commands()
    assert "snakemake --cores all fig5 --configfile config/quick.yaml" in commands, commands
    assert "snakemake --cores all --configfile config/quick.yaml -- fig5" in commands, commands


def test_every_printed_command_parses_as_meant():
    problems = {c: (misparsed(c), files) for c, files in documented_commands().items() if misparsed(c)}
    assert not problems, problems


def runnable(command: str) -> list[str]:
    """The command's words with placeholders filled and `-n` added where it would build."""
    words = [PLACEHOLDERS.get(w, w) for w in shlex.split(command)]
    if not {"--report", "--unlock", "-n", "--dry-run"} & set(words):
        words.insert(1, "-n")
    return words


def grouped_by_options(commands: dict[str, list[str]]) -> dict[tuple[str, ...], list[str]]:
    """The commands' words without their targets -> the targets printed with those words (a dry run with all of
    them at once checks each target as one per command would, at the cost of one Snakemake start)."""
    from snakemake.cli import get_argument_parser

    groups: dict[tuple[str, ...], list[str]] = {}
    for command in commands:
        words = runnable(command)
        targets = set(get_argument_parser().parse_args(words[1:]).targets or [])
        options = tuple(w for w in words if w not in targets and w != "--")  # targets go first when run
        default = [] if {"--report", "--unlock"} & set(words) or targets else ["all"]  # the default target
        groups.setdefault(options, [])
        groups[options] += [
            t for t in [*dict.fromkeys(words), *default] if (t in targets or t in default) and t not in groups[options]
        ]
    return groups


@pytest.mark.workflow
def test_every_printed_command_runs_in_a_fresh_copy(tmp_path):
    wd = fresh_copy(tmp_path / "clone")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    failed = {}
    for options, targets in grouped_by_options(documented_commands()).items():
        words = [*options[:1], *targets, *options[1:]]
        proc = subprocess.run(words, cwd=wd, env=env, capture_output=True, text=True, timeout=600)
        out = proc.stdout + proc.stderr
        if proc.returncode != 0 or "Traceback" in out:
            failed[" ".join(words)] = out[-1500:]
    assert not failed, failed


@pytest.mark.workflow
def test_a_misspelt_target_gets_did_you_mean_before_or_after_the_configfile(tmp_path):
    """Target first, `--configfile` last: the Snakefile names the closest target. Option first: the parser takes
    `fig55` as a config file; Snakemake says the file is missing, and the docs never print that order."""
    wd = fresh_copy(tmp_path / "clone")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        ["snakemake", "-n", "--cores", "all", "fig55", "--configfile", "config/quick.yaml"],
        cwd=wd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # the suggestion is the last line the reader sees, and the run stops there (exit status 1)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last == "Target fig55: not a target of this config; did you mean fig5?", proc.stderr
