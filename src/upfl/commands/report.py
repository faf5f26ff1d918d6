"""``upfl report``: run folders to results/runs.csv, and the paper's tables and figures from it.

    upfl report runs   --out results/runs.csv [--list FILE] [--then 'COMMAND ...' ...] EXPERIMENT:RUN_DIR ...
    upfl report table1 --runs results/runs.csv --experiment table1 --out-prefix results/tables/table1
                       [--config-file F ...]
    upfl report table2 --out-prefix results/tables/table2 [--config-file F ...] DATA_DIR ...
    upfl report time   --runs results/runs.csv --experiment table1 --out-prefix results/tables/time
                       [--config-file F ...]
    upfl report privacy-table --runs results/runs.csv --experiment privacy_output --out-prefix results/tables/NAME
                       [--where KEY=VALUE[,VALUE...] ...] [--config-file F ...]
    upfl report claims --runs results/runs.csv --out-prefix results/tables/claims [--experiment-for ROLE=EXP ...]
                       [--excluded DATASET ...] [--config-file F ...]
    upfl report ablation-table momentum_table|bases_table --runs results/runs.csv --experiment EXP
                       --out-prefix results/tables/NAME [--where ...] [--config-file F ...]
    upfl report draws  --runs results/experiments/table1_draws/runs.csv --experiment table1_draws
                       [--reference-runs results/experiments/table1/runs.csv --reference-experiment table1]
                       --out-prefix results/tables/NAME --figure-prefix results/figures/NAME
    upfl report sensitivity --runs results/runs.csv --experiment straggler_sensitivity --out-prefix results/tables/NAME
    upfl report protocol-gap --runs results/runs.csv --experiment protocol_gap --out-prefix results/tables/NAME
    upfl report gain-grid --runs results/runs.csv --experiment sensitivity --out-prefix results/tables/NAME
                       --figure-prefix results/figures/NAME
    upfl report figure convergence|lambda_sweep|privacy_tradeoff|momentum_curves|schedule_figure
                       --runs results/runs.csv --experiment EXP --out-prefix results/figures/NAME
                       [--where KEY=VALUE[,VALUE...] ...] [--metrics train_loss,test_acc]
                       [--x iteration|round|time (convergence), step|lam (lambda_sweep)]
                       [--panels curves,final] [--title T]

Tables: CSV (ending with a '# provenance:' line; read with pandas' comment="#"), Markdown, and LaTeX
for Table 1 and the privacy table. Figures: NAME.png, NAME.pdf and NAME.csv (the plotted numbers).
"""

from __future__ import annotations

import argparse
import sys

from . import plain_help


def _runs(args: argparse.Namespace):
    """The runs table, restricted to ``--experiment`` and ``--where``."""
    from ..report.collect import apply_where, read_runs, select_experiment

    return apply_where(select_experiment(read_runs(args.runs), args.experiment), args.where)


def cmd_runs(args: argparse.Namespace) -> int:
    from ..report.collect import collect_runs, parse_run_specs, read_spec_file
    from ..report.render import write_csv

    then = parse_then(args.then or [], args.command_line)
    specs = list(args.specs)
    for path in args.list or []:
        specs += read_spec_file(path)
    df = collect_runs(
        parse_run_specs(specs), store=None if args.no_store else args.store, verify=args.verify, echo=print
    )
    write_csv(args.out, df)
    print(f"wrote {args.out} ({len(df)} runs)")
    return run_then(then, args.command_line)


def parse_then(lines: list[str], command_line) -> list[argparse.Namespace]:
    """Each ``--then`` line (an ``upfl report`` command line without ``upfl report``) parsed by ``command_line``
    (:class:`upfl.cli.CommandLine`), before any work: a malformed one stops the command with argparse's usage
    error, nothing written."""
    import shlex

    from ..report.collect import ReportError

    commands = []
    for line in lines:
        words = shlex.split(line)
        if words[:1] == ["runs"]:
            raise ReportError("--then takes table and figure commands, not 'runs'")
        commands.append(command_line.parse(["report", *words]))
    return commands


def run_then(commands: list[argparse.Namespace], command_line) -> int:
    """Run the parsed ``--then`` commands in this process through ``command_line``, in order; stop at the first
    that fails and return its status. The workflow's report job of an experiment writes its runs table and then
    every table and figure of the experiment this way: one process pays for Python, pandas and matplotlib once
    instead of once per output."""
    for command in commands:
        status = command_line.run(command)
        if status:
            return status
    return 0


def _kind_of(args: argparse.Namespace):
    """The output kind a sub-command makes (its ``kind`` argument where several kinds share it) and its entry."""
    from ..pipeline.outputs import OUTPUT_KINDS, kinds_of_command

    kind = getattr(args, "kind", None) or kinds_of_command(args.report_command)[0]
    return kind, OUTPUT_KINDS[kind]


def _written(prefix: str, extensions: tuple[str, ...]) -> str:
    return f"{prefix}." + ", .".join(extensions)


def write_figure_caption(args: argparse.Namespace, kind: str, prefix: str, runs, provenance: str) -> None:
    """``PREFIX.rst``: the figure's caption in the report (:func:`upfl.pipeline.captions.figure_caption`)."""
    from pathlib import Path

    from ..files import write_text
    from ..pipeline.captions import experiment_description, figure_caption
    from ..report.render import runs_origins_and_seeds

    origins, seeds = runs_origins_and_seeds(runs)
    description = experiment_description(args.config_file or [], args.experiment)
    text = figure_caption(Path(prefix).name, kind, description, origins, seeds, args.where or [], provenance)
    write_text(f"{prefix}.rst", text)


def cmd_output(args: argparse.Namespace) -> int:
    """Any output kind of :data:`upfl.pipeline.outputs.OUTPUT_KINDS` from the selected runs, by its writer."""
    import inspect

    from ..report.collect import read_runs, select_experiment
    from ..report.render import provenance_line, runs_provenance

    kind, entry = _kind_of(args)
    write = entry.load_writer()
    runs = _runs(args)
    prov = provenance_line(args.config_file, runs, args.preset)
    if entry.reference:
        reference = None
        if args.reference_runs:
            reference = select_experiment(read_runs(args.reference_runs), args.reference_experiment)
            prov += f"; reference runs (experiment {args.reference_experiment}): {runs_provenance(reference)}"
        write(runs, reference, args.out_prefix, args.figure_prefix, prov)
    elif entry.tables and entry.figures:
        write(runs, args.out_prefix, args.figure_prefix, prov)
    elif entry.tables:
        write(runs, args.out_prefix, prov)
    else:
        from pathlib import Path

        from ..report.figures import figure_title, parse_metrics

        accepted = inspect.signature(write).parameters
        options = {"title": args.title or figure_title(Path(args.out_prefix).name)}
        if args.metrics is not None:
            options["metrics"] = parse_metrics(args.metrics)
        elif "metrics" in accepted and accepted["metrics"].default is inspect.Parameter.empty:
            options["metrics"] = parse_metrics(None)
        if args.x is not None:
            options["x"] = args.x
        options["panels"] = [p.strip() for p in args.panels.split(",") if p.strip()]
        write(runs, args.out_prefix, provenance=prov, **{k: v for k, v in options.items() if k in accepted})
    written = [_written(args.out_prefix, entry.tables)] if entry.tables else []
    if entry.figures:
        figure_prefix = args.figure_prefix if entry.tables else args.out_prefix
        write_figure_caption(args, kind, figure_prefix, runs, prov)
        written.append(_written(figure_prefix, entry.figures))
    print(f"wrote {' and '.join(written)} ({len(runs)} runs)")
    return 0


def cmd_table2(args: argparse.Namespace) -> int:
    from ..report.render import provenance_line
    from ..report.tables import write_table2

    write_table2(args.data_dirs, args.out_prefix, provenance_line(args.config_file, preset=args.preset))
    print(f"wrote {args.out_prefix}.csv, .md ({len(args.data_dirs)} data sets)")
    return 0


def cmd_claims(args: argparse.Namespace) -> int:
    from ..report.claims import parse_roles, summary_text, write_claims
    from ..report.collect import read_runs
    from ..report.render import provenance_line

    runs = read_runs(args.runs)
    excluded = [d for item in args.excluded or [] for d in item.split(",") if d]
    frame = write_claims(
        runs,
        args.out_prefix,
        provenance_line(args.config_file, runs, args.preset),
        parse_roles(args.experiment_for),
        excluded,
    )
    print(f"wrote {args.out_prefix}.csv, .md ({len(frame)} claims: {summary_text(frame)})")
    return 0


COMMAND_MODULES = {"runs": "collect", "table2": "tables", "claims": "claims"}
"""The ``upfl.report`` module each sub-command outside the output kinds table runs on."""


def load_modules(args: argparse.Namespace) -> None:
    """Import the modules the sub-command runs on (pandas, numpy and the report module: the writer of its output
    kind, :data:`COMMAND_MODULES` for the others) with the cyclic garbage collector paused
    (:func:`upfl.startup.paused_gc`): their objects all live on, and the collections their import triggers would
    free nothing."""
    import importlib

    from ..startup import paused_gc

    with paused_gc(freeze=True):
        module = COMMAND_MODULES.get(args.report_command)
        if module is None:
            _kind_of(args)[1].load_writer()
        else:
            importlib.import_module(f"upfl.report.{module}")


def _guard(func):
    """Report errors (missing files, unknown experiments, inconsistent cells) as one line, exit status 2."""

    def run(args: argparse.Namespace) -> int:
        load_modules(args)
        if hasattr(args, "config_file") and not args.config_file:
            from ..pipeline.specs import config_files_from_env

            args.config_file = config_files_from_env() or None
        from ..report.collect import ReportError

        try:
            return func(args)
        except (ReportError, OSError) as e:
            print(f"upfl report {args.report_command}: error: {e}", file=sys.stderr)
            return 2

    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def _selection(q: argparse.ArgumentParser, experiment_required: bool = True) -> None:
    q.add_argument("--runs", required=True, help="the runs table written by 'upfl report runs'")
    q.add_argument("--experiment", required=experiment_required, help="experiment name (runs.csv 'experiments')")
    q.add_argument(
        "--where",
        action="append",
        metavar="KEY=VALUE[,VALUE...]",
        help="keep runs whose runs.csv column KEY equals a VALUE; repeatable",
    )


def _config_file(q: argparse.ArgumentParser) -> None:
    q.add_argument(
        "--config-file",
        action="append",
        default=None,
        metavar="FILE",
        help="workflow config file, named with its sha256 in the provenance line; repeatable (default: those the "
        "workflow names in $UPFL_WORKFLOW_CONFIG_FILES)",
    )
    q.add_argument(
        "--preset",
        default=None,
        metavar="NAME",
        help="the config preset the outputs were made with (default: the last config file's 'preset', else full)",
    )


def _output_parser(sub: argparse._SubParsersAction, command: str) -> argparse.ArgumentParser:
    """The sub-command ``command`` of the output kinds table (upfl.pipeline.outputs): run selection,
    ``--out-prefix`` (and ``--figure-prefix``, ``--reference-runs`` where its kind writes or reads them), the
    kind as first argument where several kinds share the command, ``--config-file``."""
    from ..pipeline.outputs import OUTPUT_KINDS, kinds_of_command

    kinds = kinds_of_command(command)
    entry = OUTPUT_KINDS[kinds[0]]
    help_text = entry.describe if len(kinds) == 1 else "; ".join(f"{k}: {OUTPUT_KINDS[k].describe}" for k in kinds)
    q = sub.add_parser(command, help=help_text)
    if len(kinds) > 1:
        q.add_argument("kind", choices=kinds)
    _selection(q)
    first = entry.tables or entry.figures
    q.add_argument("--out-prefix", required=True, help="writes " + ", ".join(f"PREFIX.{e}" for e in first))
    if entry.tables and entry.figures:
        q.add_argument(
            "--figure-prefix", required=True, help="writes " + ", ".join(f"PREFIX.{e}" for e in entry.figures)
        )
    if entry.reference:
        q.add_argument(
            "--reference-runs",
            help="runs table with the reference runs: draws, the runs on the paper's draw (experiment table1); "
            "gain_grid, the grid on held-out seeds (experiment sensitivity_held_out)",
        )
        q.add_argument("--reference-experiment", default=None, help="experiment of --reference-runs (default: all)")
    _config_file(q)
    q.set_defaults(func=_guard(cmd_output))
    return q


def _commands() -> list[str]:
    """``upfl report`` sub-commands: runs, table2, claims and one per command of the output kinds table."""
    from ..pipeline.outputs import OUTPUT_KINDS

    return ["runs", "table2", *dict.fromkeys(k.command for k in OUTPUT_KINDS.values()), "claims"]


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``report`` with sub-commands ``runs``, ``table2``, ``claims`` and one per command of the output kinds
    table (upfl.pipeline.outputs.OUTPUT_KINDS)."""
    from ..pipeline.outputs import OUTPUT_KINDS

    p = subparsers.add_parser(
        "report",
        help="runs table, the paper's tables and figures",
        description=plain_help(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="report_command", metavar="{" + ",".join(_commands()) + "}")
    sub.required = True

    r = sub.add_parser("runs", help="one row per run folder: config, final and best metrics, times, epsilons")
    r.add_argument("specs", nargs="*", metavar="EXPERIMENT:RUN_DIR")
    r.add_argument("--list", action="append", metavar="FILE", help="file of EXPERIMENT:RUN_DIR lines; repeatable")
    r.add_argument("--out", required=True, help="CSV to write (e.g. results/runs.csv)")
    r.add_argument(
        "--verify",
        action="store_true",
        help="every run must match the checksums recorded when it was trained (checksums.json); a run "
        "that does not is restored from --store, or moved aside to be retrained, and named "
        "(the workflow's mode; without it only runs with a record are checked)",
    )
    r.add_argument(
        "--store",
        default="results/finished",
        help="finished-run store to restore damaged runs from (default: %(default)s)",
    )
    r.add_argument("--no-store", action="store_true", help="restore nothing; a damaged run is only named")
    r.add_argument(
        "--then",
        action="append",
        metavar="'COMMAND ...'",
        help="once the runs table is written, run this 'upfl report' command line (without 'upfl report', e.g. "
        "'figure convergence --runs OUT ...') in the same process; repeatable, run in order, the first that fails "
        "ends the command with its status",
    )
    r.set_defaults(func=_guard(cmd_runs))

    t2 = sub.add_parser("table2", help="data set statistics computed from the data folders, paper beside")
    t2.add_argument("data_dirs", nargs="+", metavar="DATA_DIR")
    t2.add_argument("--out-prefix", required=True, help="writes PREFIX.csv, PREFIX.md")
    _config_file(t2)
    t2.set_defaults(func=_guard(cmd_table2))

    for command in dict.fromkeys(k.command for k in OUTPUT_KINDS.values()):
        q = _output_parser(sub, command)
        if command == "figure":
            q.add_argument(
                "--metrics",
                default=None,
                help="comma-separated: train_loss, train_acc, "
                "test_loss, test_acc (one row of panels each; default train_loss,test_acc, "
                "test_acc,train_acc for privacy_tradeoff)",
            )
            q.add_argument(
                "--x",
                default=None,
                help="x axis: iteration (default), round or time for convergence; "
                "step (default, mu/(mu+lambda)) or lam for lambda_sweep",
            )
            q.add_argument(
                "--panels",
                default="curves,final",
                help="lambda_sweep panels: curves (metric against "
                "iterations per lambda, the paper's Figure 2 right) and/or final (final value against x); "
                "default curves,final",
            )
            q.add_argument("--title", default=None, help="figure title (default: from the output's name)")

    c = sub.add_parser("claims", help="every quantitative claim of the paper, ours beside it, and a verdict")
    c.add_argument("--runs", required=True, help="the runs table of all experiments (results/runs.csv)")
    c.add_argument("--out-prefix", required=True, help="writes PREFIX.csv, PREFIX.md")
    c.add_argument(
        "--experiment-for",
        action="append",
        metavar="ROLE=EXPERIMENT[,EXPERIMENT]",
        help="the experiment(s) a group of claims reads (roles: table1, time, lambda_sweep, privacy, "
        "privacy_real, cnn, draws); repeatable; defaults in upfl.report.claim_rules.DEFAULT_ROLES",
    )
    c.add_argument(
        "--excluded",
        action="append",
        metavar="DATASET[,DATASET]",
        help="data sets left out of this pipeline run (named as the reason for 'not measured here')",
    )
    _config_file(c)
    c.set_defaults(func=_guard(cmd_claims))
    return p
