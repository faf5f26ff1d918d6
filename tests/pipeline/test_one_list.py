"""One list per idea: the output kinds (upfl.pipeline.outputs), the algorithm names (upfl.names) and the job keys
(upfl.pipeline.plan.JOB_DEFAULTS) are written once; the schema, config/README.md, ``upfl report`` and the workflow
read them or are checked here against them."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from upfl.names import algorithm_names
from upfl.pipeline.outputs import OUTPUT_KINDS, kinds_of_command, report_command
from upfl.pipeline.plan import JOB_DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text(encoding="utf-8"))
README = (ROOT / "config" / "README.md").read_text(encoding="utf-8")


def readme_row(key: str) -> str:
    row = next((line for line in README.splitlines() if line.startswith(f"| `{key}` |")), None)
    assert row is not None, f"config/README.md has no row for {key}"
    return row


def test_schema_algorithm_enum_is_the_names_list():
    assert SCHEMA["definitions"]["run_entry"]["properties"]["algorithm"]["enum"] == algorithm_names()


def test_schema_output_kind_enum_is_the_kinds_table():
    assert SCHEMA["definitions"]["output"]["properties"]["kind"]["enum"] == list(OUTPUT_KINDS)


def test_readme_lists_every_output_kind_and_no_other():
    row = readme_row("experiments.<name>.outputs[].kind")
    description = row.split("|")[4]
    assert re.findall(r"`([a-z0-9_]+)`", description) == list(OUTPUT_KINDS)


def test_job_keys_of_schema_and_readme_are_the_plans():
    job = next(
        d
        for d in SCHEMA["definitions"].values()
        if isinstance(d, dict) and set(d.get("properties", {})) >= {"gpus", "threads"}
    )
    assert list(job["properties"]) == list(JOB_DEFAULTS)
    for key, default in JOB_DEFAULTS.items():
        cells = [c.strip() for c in readme_row(f"job_defaults.{key}").split("|")]
        assert cells[3] == str(default), f"config/README.md job_defaults.{key}: default {cells[3]}, plan {default}"


@pytest.mark.parametrize("kind", list(OUTPUT_KINDS))
def test_every_kind_has_a_writer_a_caption_and_files(kind):
    entry = OUTPUT_KINDS[kind]
    assert callable(entry.load_writer())
    assert (ROOT / "workflow" / "report" / f"{entry.caption}.rst").is_file()
    files = entry.files("x")
    assert files and all(f.startswith(("results/tables/x.", "results/figures/x.")) for f in files)


def test_upfl_report_offers_every_kind():
    from upfl.commands.report import register

    parser = argparse.ArgumentParser()
    report = register(parser.add_subparsers())
    sub = next(a for a in report._actions if isinstance(a, argparse._SubParsersAction))
    for kind, entry in OUTPUT_KINDS.items():
        assert entry.command in sub.choices, kind
        words = report_command(kind, "x").split()
        args = sub.choices[entry.command].parse_args([*words[1:], "--runs", "r.csv", "--experiment", "e"])
        assert getattr(args, "kind", kind) == kind
        assert args.out_prefix.endswith("/x")
    assert kinds_of_command("figure") == [k for k, e in OUTPUT_KINDS.items() if not e.tables]


def test_report_rules_name_no_kind_by_hand():
    """The workflow's report rules come from the table: no output kind is spelt in report.smk."""
    text = (ROOT / "workflow" / "rules" / "report.smk").read_text(encoding="utf-8")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    spelt = [k for k in OUTPUT_KINDS if re.search(rf"[\"']{k}[\"']", code)]
    assert not spelt, f"report.smk names output kinds by hand: {spelt}"


def test_accountants_are_the_ones_the_privacy_record_holds():
    from upfl.names import ACCOUNTANTS, PRIVACY_MECHANISMS, accountants_of
    from upfl.privacy.accounting import output_epsilons

    assert {a.mechanism for a in ACCOUNTANTS.values()} == set(PRIVACY_MECHANISMS)
    recorded = output_epsilons(releases=10, sigma=1.0, tau=1.0, n_train=100, delta=1e-5)
    assert set(recorded) == set(accountants_of("output"))


def test_report_reads_the_accountants_from_names():
    from upfl.names import ACCOUNTANTS
    from upfl.report import privacy_table as tradeoff
    from upfl.report import privacy_tradeoff as figure

    assert [a for accs in tradeoff.ACCOUNTANTS.values() for a in accs] == list(ACCOUNTANTS)
    assert all(ACCOUNTANTS[a].short for accs in figure.FIGURE_ACCOUNTANTS.values() for a in accs)
    text = Path(tradeoff.__file__).read_text(encoding="utf-8") + Path(figure.__file__).read_text(encoding="utf-8")
    assert not re.search(r"\{\s*\"(sound|paper_formula|theorem_c2)\":", text), "an accountant table spelt by hand"
