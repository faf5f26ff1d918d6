"""``upfl targets [--configfile FILE ...]``: every target of the workflow (``snakemake --cores all TARGET``), its place
in the paper and how many training runs it needs, for the config files given (default ``config/config.yaml``, then
each file given, as Snakemake merges them; ``--configfile config/quick.yaml`` for the quick preset)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = "config/config.yaml"


def merged_config(files: list[str]) -> dict[str, Any]:
    """The workflow config of ``files`` as Snakemake merges them (a later file's keys update the earlier's, nested
    mappings key by key)."""
    import yaml

    def update(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        for key, value in new.items():
            base[key] = (
                update(dict(base[key]), value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
            )
        return base

    config: dict[str, Any] = {}
    for path in files:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: not a mapping of config keys")
        config = update(config, doc)
    return config


def place_in_paper(outputs: list[str], kinds: list[str]) -> str:
    """Where a target's outputs are in the paper: 'Table 1', 'Figure 2 (left)', or 'no numbered table or figure:
    <what it shows>'."""
    from ..paper_order import paper_figure, table_menu_label
    from ..pipeline.outputs import output_kind

    places = []
    for name, kind in zip(outputs, kinds, strict=True):
        figure = paper_figure(name)
        label = table_menu_label(name)
        if figure:
            places.append(f"Figure {figure[0]}" + (f" ({figure[1]})" if figure[1] else ""))
        elif label.startswith("Table "):
            places.append(label)
        else:
            places.append(f"no numbered table or figure: {output_kind(kind).describe}")
    return "; ".join(dict.fromkeys(places))


def target_rows(config: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(target, place in the paper, runs it needs) for each target of the plan, in the config's order, then the
    targets every config has (claims, table2, runs, all)."""
    from ..pipeline.plan import build_plan

    plan = build_plan(config)
    rows = []
    for target, names in plan.targets.items():
        runs = {r for n in names for r in plan.experiments[plan.outputs[n]["experiment"]]}
        kinds = [plan.outputs[n]["kind"] for n in names]
        rows.append((target, place_in_paper(names, kinds), len(runs)))
    every = len(plan.runs)
    rows += [
        ("claims", "the claims page: each claim of the paper judged", every),
        ("table2", "Table 2 (the data sets; no training)", 0),
        ("runs", "every training run, no table", every),
        ("all", "everything above (the default target)", every),
    ]
    return rows


def cmd_targets(args: argparse.Namespace) -> int:
    from ..pipeline.config_errors import ExperimentError, check_workflow_config

    files = [DEFAULT_CONFIG, *(args.configfile or [])]
    try:
        config = merged_config(files)
        check_workflow_config(config, str(Path(args.workflow) / "schemas" / "config.schema.yaml"))
        rows = target_rows(config)
    except (OSError, ValueError, ExperimentError) as e:
        print(f"upfl targets: error: {e}", file=sys.stderr)
        return 2
    preset = config.get("preset", "full")
    flags = "".join(f" --configfile {f}" for f in args.configfile or [])
    print(f"Targets of preset {preset} ({', '.join(files)}): snakemake --cores all TARGET{flags}")
    width = max(len(t) for t, _, _ in rows)
    print(f"{'target':<{width}}  {'runs':>5}  place in the paper")
    for target, place, runs in rows:
        print(f"{target:<{width}}  {runs:>5}  {place}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("targets", help="list the workflow's targets, their place in the paper and their run counts")
    p.add_argument(
        "--configfile",
        action="append",
        metavar="FILE",
        help=f"a config file merged over {DEFAULT_CONFIG}, as snakemake's --configfile; repeatable",
    )
    p.add_argument("--workflow", default="workflow", help="the workflow folder (its schemas/; default workflow)")
    p.set_defaults(func=cmd_targets)
