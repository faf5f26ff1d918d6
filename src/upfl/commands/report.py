"""``upfl report``: run folders to results/runs.csv, and the paper's tables and figures from it.

    upfl report runs   --out results/runs.csv [--list FILE] EXPERIMENT:RUN_DIR ...
    upfl report table1 --runs results/runs.csv --experiment table1 --out-prefix results/tables/table1 [--config-file F ...]
    upfl report table2 --out-prefix results/tables/table2 [--config-file F ...] DATA_DIR ...
    upfl report time   --runs results/runs.csv --experiment table1 --out-prefix results/tables/time [--config-file F ...]
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
    upfl report figure convergence|lambda_sweep|privacy_tradeoff|momentum_curves|schedule_figure --runs results/runs.csv --experiment EXP
                       --out-prefix results/figures/NAME [--where KEY=VALUE[,VALUE...] ...] [--metrics train_loss,test_acc]
                       [--x iteration|round|time (convergence), step|lam (lambda_sweep)] [--panels curves,final] [--title T]

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

    specs = list(args.specs)
    for path in args.list or []:
        specs += read_spec_file(path)
    df = collect_runs(parse_run_specs(specs), store=None if args.no_store else args.store, verify=args.verify,
                      echo=print)
    write_csv(args.out, df)
    print(f"wrote {args.out} ({len(df)} runs)")
    return 0


def _runs_table(args: argparse.Namespace, write, suffixes: str) -> tuple:
    """Select the runs, call ``write(runs, out_prefix, provenance)``, say what was written."""
    from ..report.render import provenance_line

    runs = _runs(args)
    result = write(runs, args.out_prefix, provenance_line(args.config_file, runs, args.preset))
    print(f"wrote {args.out_prefix}{suffixes} ({len(runs)} runs)")
    return runs, result


def cmd_table1(args: argparse.Namespace) -> int:
    from ..report.tables import write_table1

    _runs_table(args, write_table1, ".csv, .md, .tex")
    return 0


def cmd_table2(args: argparse.Namespace) -> int:
    from ..report.render import provenance_line
    from ..report.tables import write_table2

    write_table2(args.data_dirs, args.out_prefix, provenance_line(args.config_file, preset=args.preset))
    print(f"wrote {args.out_prefix}.csv, .md ({len(args.data_dirs)} data sets)")
    return 0


def cmd_time(args: argparse.Namespace) -> int:
    from ..report.timing import write_time

    _runs_table(args, write_time, ".csv, .md")
    return 0


def cmd_privacy_table(args: argparse.Namespace) -> int:
    from ..report.privacy_tradeoff import write_privacy_table

    _, (frame, claims) = _runs_table(args, write_privacy_table, ".csv, .md, .tex")
    print(f"{len(frame)} variant rows, {len(claims)} claim rows")
    return 0


def cmd_ablation_table(args: argparse.Namespace) -> int:
    from ..report.ablations import write_bases_table, write_momentum_table

    write = write_momentum_table if args.kind == "momentum_table" else write_bases_table
    _runs_table(args, write, ".csv, .md")
    return 0


def cmd_claims(args: argparse.Namespace) -> int:
    from ..report.claims import parse_roles, summary_text, write_claims
    from ..report.collect import read_runs
    from ..report.render import provenance_line

    runs = read_runs(args.runs)
    excluded = [d for item in args.excluded or [] for d in item.split(",") if d]
    frame = write_claims(runs, args.out_prefix, provenance_line(args.config_file, runs, args.preset),
                         parse_roles(args.experiment_for), excluded)
    print(f"wrote {args.out_prefix}.csv, .md ({len(frame)} claims: {summary_text(frame)})")
    return 0


def cmd_draws(args: argparse.Namespace) -> int:
    from ..report.collect import read_runs, select_experiment
    from ..report.fresh_data_sets import write_draws
    from ..report.render import provenance_line

    runs = _runs(args)
    reference = None
    if args.reference_runs:
        reference = select_experiment(read_runs(args.reference_runs), args.reference_experiment)
    prov = provenance_line(args.config_file, runs, args.preset)
    frame = write_draws(runs, reference, args.out_prefix, args.figure_prefix, prov)
    print(f"wrote {args.out_prefix}.csv, .md and {args.figure_prefix}.png, .pdf, .csv ({len(runs)} runs, "
          f"{len(frame)} rows)")
    return 0


def cmd_sensitivity(args: argparse.Namespace) -> int:
    from ..report.sensitivity import write_sensitivity

    _runs_table(args, write_sensitivity, ".csv, .md")
    return 0


def cmd_protocol_gap(args: argparse.Namespace) -> int:
    from ..report.protocol_gap import write_protocol_gap

    _runs_table(args, write_protocol_gap, ".csv, .md")
    return 0


def cmd_gain_grid(args: argparse.Namespace) -> int:
    from ..report.gain_grid import write_gain_grid
    from ..report.render import provenance_line

    runs = _runs(args)
    frame = write_gain_grid(runs, args.out_prefix, args.figure_prefix,
                            provenance_line(args.config_file, runs, args.preset))
    print(f"wrote {args.out_prefix}.csv, .md and {args.figure_prefix}.png, .pdf, .csv ({len(runs)} runs, "
          f"{len(frame)} settings)")
    return 0


def cmd_figure(args: argparse.Namespace) -> int:
    from ..report.figures import convergence_figure, lambda_sweep_figure, parse_metrics
    from ..report.render import provenance_line

    from pathlib import Path

    from ..report.figures import figure_title

    runs = _runs(args)
    prov = provenance_line(args.config_file, runs, args.preset)
    args.title = args.title or figure_title(Path(args.out_prefix).name)
    if args.kind in ("momentum_curves", "schedule_figure"):
        from ..report.ablations import momentum_figure, schedule_figure

        (momentum_figure if args.kind == "momentum_curves" else schedule_figure)(runs, args.out_prefix, prov)
        print(f"wrote {args.out_prefix}.png, .pdf, .csv ({len(runs)} runs)")
        return 0
    if args.kind == "privacy_tradeoff":
        from ..report.privacy_tradeoff import FIGURE_METRICS, privacy_tradeoff_figure

        metrics = parse_metrics(args.metrics or ",".join(FIGURE_METRICS))
        privacy_tradeoff_figure(runs, args.out_prefix, metrics, title=args.title, provenance=prov)
        print(f"wrote {args.out_prefix}.png, .pdf, .csv ({len(runs)} runs)")
        return 0
    metrics = parse_metrics(args.metrics)
    if args.kind == "convergence":
        convergence_figure(runs, args.out_prefix, metrics, x=args.x or "iteration", title=args.title, provenance=prov)
    else:
        panels = [p.strip() for p in args.panels.split(",") if p.strip()]
        lambda_sweep_figure(runs, args.out_prefix, metrics, x=args.x or "step", panels=panels, title=args.title,
                            provenance=prov)
    print(f"wrote {args.out_prefix}.png, .pdf, .csv ({len(runs)} runs)")
    return 0


def _guard(func):
    """Report errors (missing files, unknown experiments, inconsistent cells) as one line, exit status 2."""
    def run(args: argparse.Namespace) -> int:
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
    q.add_argument("--where", action="append", metavar="KEY=VALUE[,VALUE...]",
                   help="keep runs whose runs.csv column KEY equals a VALUE; repeatable")


def _config_file(q: argparse.ArgumentParser) -> None:
    q.add_argument("--config-file", action="append", default=None, metavar="FILE",
                   help="workflow config file, named with its sha256 in the provenance line; repeatable")
    q.add_argument("--preset", default=None, metavar="NAME",
                   help="the config preset the outputs were made with (default: the last config file's 'preset', "
                        "else full)")


def _table_parser(sub: argparse._SubParsersAction, name: str, help_text: str, writes: str, func,
                  selection: bool = True) -> argparse.ArgumentParser:
    """A table sub-command: run selection (unless ``selection`` is false), ``--out-prefix``, ``--config-file``."""
    q = sub.add_parser(name, help=help_text)
    if selection:
        _selection(q)
    suffixes = ", ".join(f"PREFIX.{ext.strip()}" for ext in writes.split(","))
    q.add_argument("--out-prefix", required=True, help=f"writes {suffixes}")
    _config_file(q)
    q.set_defaults(func=_guard(func))
    return q


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``report`` with sub-commands ``runs``, ``table1``, ``table2``, ``time``, ``privacy-table``, ``claims``,
    ``draws``, ``sensitivity``, ``protocol-gap``, ``gain-grid`` and ``figure``."""
    p = subparsers.add_parser("report", help="runs table, the paper's tables and figures",
                              description=plain_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="report_command",
                           metavar="{runs,table1,table2,time,privacy-table,ablation-table,claims,draws,sensitivity,"
                                   "protocol-gap,gain-grid,figure}")
    sub.required = True

    r = sub.add_parser("runs", help="one row per run folder: config, final and best metrics, times, epsilons")
    r.add_argument("specs", nargs="*", metavar="EXPERIMENT:RUN_DIR")
    r.add_argument("--list", action="append", metavar="FILE", help="file of EXPERIMENT:RUN_DIR lines; repeatable")
    r.add_argument("--out", required=True, help="CSV to write (e.g. results/runs.csv)")
    r.add_argument("--verify", action="store_true",
                   help="every run must match the checksums recorded when it was trained (checksums.json); a run "
                        "that does not is restored from --store, or moved aside to be retrained, and named "
                        "(the workflow's mode; without it only runs with a record are checked)")
    r.add_argument("--store", default="results/finished",
                   help="finished-run store to restore damaged runs from (default: %(default)s)")
    r.add_argument("--no-store", action="store_true", help="restore nothing; a damaged run is only named")
    r.set_defaults(func=_guard(cmd_runs))

    _table_parser(sub, "table1", "final train (test) accuracy per data set x mu x algorithm, paper beside",
                  "csv, md, tex", cmd_table1)
    t2 = _table_parser(sub, "table2", "data set statistics computed from the data folders, paper beside",
                       "csv, md", cmd_table2, selection=False)
    t2.add_argument("data_dirs", nargs="+", metavar="DATA_DIR")
    _table_parser(sub, "time", "training time per algorithm and data set, Upcycled-FL / FedProx ratios",
                  "csv, md", cmd_time)
    _table_parser(sub, "privacy-table", "private FedProx vs private Upcycled-FL: accuracy and epsilon-bar per "
                  "mechanism (equal noise, equal epsilon), the paper's claims beside", "csv, md, tex",
                  cmd_privacy_table)

    a = _table_parser(sub, "ablation-table", "the ablations: upcycling or server momentum (momentum_table), "
                      "upcycling on every base (bases_table), paired intervals", "csv, md", cmd_ablation_table)
    a.add_argument("kind", choices=("momentum_table", "bases_table"))

    c = _table_parser(sub, "claims", "every quantitative claim of the paper, ours beside it, and a verdict",
                      "csv, md", cmd_claims, selection=False)
    c.add_argument("--runs", required=True, help="the runs table of all experiments (results/runs.csv)")
    c.add_argument("--experiment-for", action="append", metavar="ROLE=EXPERIMENT[,EXPERIMENT]",
                   help="the experiment(s) a group of claims reads (roles: table1, time, lambda_sweep, privacy, "
                        "privacy_real, cnn, draws); repeatable; defaults in upfl.report.claims.DEFAULT_ROLES")
    c.add_argument("--excluded", action="append", metavar="DATASET[,DATASET]",
                   help="data sets left out of this pipeline run (named as the reason for 'not measured here')")

    d = _table_parser(sub, "draws", "the Upcycled-FL minus FedProx gain on the paper's draw and on fresh generator "
                      "draws (table and figure)", "csv, md", cmd_draws)
    d.add_argument("--figure-prefix", required=True, help="writes PREFIX.png, PREFIX.pdf, PREFIX.csv")
    d.add_argument("--reference-runs", help="runs table with the runs on the paper's draw (e.g. experiment table1)")
    d.add_argument("--reference-experiment", default=None, help="experiment of --reference-runs (default: all)")
    _table_parser(sub, "sensitivity", "the Upcycled-FL gain under each straggler draw x straggler policy",
                  "csv, md", cmd_sensitivity)
    _table_parser(sub, "protocol-gap", "the Upcycled-FL gain of upfl faithful, upfl under the authors' protocol and "
                  "the authors' code, under each reporting choice", "csv, md", cmd_protocol_gap)
    g = _table_parser(sub, "gain-grid", "the Upcycled-FL gain over a grid of lr, even-iteration coefficient, "
                      "epochs, batch size, iterations and mu, both protocols (table and figure)", "csv, md",
                      cmd_gain_grid)
    g.add_argument("--figure-prefix", required=True, help="writes PREFIX.png, PREFIX.pdf, PREFIX.csv")

    f = sub.add_parser("figure", help="convergence curves, the lambda sweep, the privacy-accuracy trade-off, the "
                       "momentum ablation's curves or the coefficient schedules (PNG, PDF and CSV)")
    f.add_argument("kind", choices=("convergence", "lambda_sweep", "privacy_tradeoff", "momentum_curves",
                                    "schedule_figure"))
    _selection(f)
    f.add_argument("--out-prefix", required=True, help="writes PREFIX.png, PREFIX.pdf, PREFIX.csv")
    f.add_argument("--metrics", default=None, help="comma-separated: train_loss, train_acc, "
                   "test_loss, test_acc (one row of panels each; default train_loss,test_acc, "
                   "test_acc,train_acc for privacy_tradeoff)")
    f.add_argument("--x", default=None, help="x axis: iteration (default), round or time for convergence; "
                   "step (default, mu/(mu+lambda)) or lam for lambda_sweep")
    f.add_argument("--panels", default="curves,final", help="lambda_sweep panels: curves (metric against "
                   "iterations per lambda, the paper's Figure 2 right) and/or final (final value against x); default curves,final")
    f.add_argument("--title", default=None, help="figure title (default: none)")
    _config_file(f)
    f.set_defaults(func=_guard(cmd_figure))
    return p
