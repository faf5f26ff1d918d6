"""The ``upfl`` command: ``synth``, ``stats``, ``run`` here; more sub-commands from ``upfl/commands/``."""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import math
import os
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import __version__
from . import config as cfgmod
from .errors import EXIT_BUSY, EXIT_INPUT, DatasetError
from .names import DEFAULT_STEP

RUN_FLAGS = {
    "data": ("data.path", str),
    "algorithm": ("algorithm.name", str),
    "mu": ("algorithm.mu", float),
    "lam": ("algorithm.lam", float),
    "step": ("algorithm.step", float),
    "schedule": ("algorithm.schedule", str),
    "rounds": ("rounds", int),
    "frac": ("devices.frac", float),
    "straggler": ("devices.straggler", float),
    "straggler_policy": ("devices.straggler_policy", str),
    "straggler_draw": ("devices.straggler_draw", str),
    "epochs": ("solver.epochs", int),
    "batch_size": ("solver.batch_size", int),
    "lr": ("solver.lr", float),
    "momentum": ("solver.momentum", float),
    "seed": ("seed", int),
    "eval_every": ("evaluation.every", int),
    "eval_last": ("evaluation.last", int),
    "device": ("device", str),
    "model": ("model.name", str),
    "threads": ("threads", int),
    "checkpoint_seconds": ("checkpoint.seconds", float),
    "checkpoint_every": ("checkpoint.every", int),
    "checkpoint_dir": ("checkpoint.dir", str),
}


RUN_FLAG_HELP = {
    "data": "data set folder (LEAF layout, e.g. resources/data/paper/synthetic_1_1)",
    "algorithm": "algorithm (upcycled_<base> upcycles any base)",
    "mu": "proximal coefficient μ (Eq. 3)",
    "lam": "Upcycled-FL's λ: the even step is μ/(μ+λ) (Eq. 5)",
    "step": f"even-iteration step, instead of μ/(μ+λ); with neither, {DEFAULT_STEP} (Table 1's μ/(μ+λ))",
    "schedule": "step schedule over the iterations",
    "rounds": "iterations T, even (upcycling) ones included: FedProx 80 = Upcycled-FL 160",
    "frac": "fraction of devices sampled per iteration (0..1]",
    "straggler": "fraction of sampled devices that straggle [0..1]",
    "straggler_policy": "what a straggler does",
    "straggler_draw": "how stragglers are drawn",
    "epochs": "local epochs per training iteration",
    "batch_size": "local mini-batch size in samples",
    "lr": "local learning rate",
    "momentum": "local SGD momentum",
    "seed": "run seed (every random stream)",
    "eval_every": "evaluate every N iterations",
    "eval_last": "evaluate only among the last N iterations",
    "device": "torch device",
    "model": "model name",
    "threads": "torch CPU threads (0: torch's default)",
    "checkpoint_seconds": "checkpoint once N seconds have passed since the last one (0: every training round)",
    "checkpoint_every": "also checkpoint every N training rounds (0: never checkpoint)",
    "checkpoint_dir": "checkpoint root folder (default: OUT/.checkpoints)",
}
"""What each ``upfl run`` flag sets, with its unit; the help adds the config key, default and choices."""


def run_flag_help(flag: str, key: str) -> str:
    """'<meaning> (<config key>; default <value>; one of a, b)' for ``upfl run --help``."""
    from .names import ALGORITHM_KEYS

    default = cfgmod.get_key(cfgmod.RunConfig(), key)
    algorithms = (*ALGORITHM_KEYS, "upcycled", "upcycled_<base>")
    choices = cfgmod.CHOICES.get(key) or (algorithms if key == "algorithm.name" else None)
    parts = (
        [key]
        + ([f"default {default}"] if default not in (None, "") else [])
        + ([f"one of {', '.join(choices)}"] if choices else [])
    )
    return f"{RUN_FLAG_HELP[flag]} ({'; '.join(parts)})".replace("%", "%%")


def check_data_first(doc: dict) -> None:
    """A missing data folder is the first thing to fix: report it before any algorithm key (a ``data`` that is not
    a mapping, ``--set data=5``, is named by the config's own check)."""
    data = doc.get("data")
    path = data.get("path") if isinstance(data, dict) else None
    if path and not os.path.isdir(str(path)):
        raise cfgmod.ConfigError(
            f"data.path: data set folder {path} not found (make it with 'upfl synth' or 'upfl data fetch')"
        )


def resolve_run_config(args: argparse.Namespace) -> cfgmod.RunConfig:
    doc = cfgmod.load_yaml(args.config) if args.config else {}
    for flag, (key, _) in RUN_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            cfgmod.set_key(doc, key, value)
    cfgmod.apply_settings(doc, args.set)
    check_data_first(doc)
    return cfgmod.from_dict(doc)


def _acc(value) -> str:
    return "null" if value is None else f"{value:.4f}"


def cmd_run(args: argparse.Namespace) -> int:
    from .startup import paused_gc

    with paused_gc():
        from .engine.checkpoints import CheckpointBusy
        from .engine.divergence import EXIT_DIVERGED
        from .engine.simulation import run

    cfg = resolve_run_config(args)
    try:
        summary = run(cfg, args.out, force=args.force)
    except CheckpointBusy as e:
        print(f"upfl run: error: {e}", file=sys.stderr)
        return EXIT_BUSY
    f = summary["final"]
    if summary["diverged"]:
        d = summary["diverged"]
        print(
            f"upfl run: diverged at iteration {d['iteration']} ({d['kind']}): {d['what']}; "
            f"summary.json records it -> {args.out}",
            file=sys.stderr,
        )
        return EXIT_DIVERGED
    print(
        f"final iteration {f['iteration']}: train_acc {_acc(f['train_acc'])} test_acc {_acc(f['test_acc'])} "
        f"-> {args.out}"
    )
    return 0


SYNTH_LIMITS = {"devices": (1, 10_000), "dim": (1, 10_000), "classes": (2, 1_000)}
"""``upfl synth`` flags' ranges (both ends allowed); :data:`SYNTH_CELLS` bounds devices x dim as well."""
SYNTH_CELLS = 1_000_000
"""The largest --devices x --dim: a device holds about 400 samples on average (sizes ~ lognormal(4, 2) + 50), so
this bounds the draw's memory to a few GiB."""


def check_synth_flags(args: argparse.Namespace) -> None:
    """:class:`ValueError` naming the first ``upfl synth`` flag out of range: --alpha and --beta finite and >= 0,
    --devices, --dim, --classes within :data:`SYNTH_LIMITS`, --devices x --dim at most :data:`SYNTH_CELLS`,
    --data-seed >= 0; checked before anything is drawn."""
    for flag in ("alpha", "beta"):
        value = getattr(args, flag)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"--{flag} {value}: must be a finite number >= 0")
    for flag, (low, high) in SYNTH_LIMITS.items():
        value = getattr(args, flag)
        if not low <= value <= high:
            raise ValueError(f"--{flag} {value}: must be between {low} and {high}")
    if args.devices * args.dim > SYNTH_CELLS:
        raise ValueError(f"--devices {args.devices} x --dim {args.dim}: at most {SYNTH_CELLS} (the draw's memory)")
    if args.data_seed is not None and args.data_seed < 0:
        raise ValueError(f"--data-seed {args.data_seed}: must be >= 0")


def synth_draws(args: argparse.Namespace) -> list[tuple[str, int]]:
    """``(name, data seed)`` of each data set ``upfl synth`` writes: ``--name`` with ``--data-seed``, or every
    ``--draw NAME=SEED`` (``ValueError`` naming a malformed or repeated one, or a flag that only one set takes)."""
    if (args.name is None) == (not args.draw):
        raise ValueError("give --name (one data set) or --draw NAME=SEED (one or more), not both")
    if args.name is not None:
        return [(args.name, args.data_seed or 0)]
    if args.out is not None or args.data_seed is not None:
        raise ValueError("--out and --data-seed name one data set: with --draw, each goes to RESOURCES/data/generated")
    draws: dict[str, int] = {}
    for item in args.draw:
        name, sep, seed = item.rpartition("=")
        if not sep or not name or not (seed.isascii() and seed.isdigit()):
            raise ValueError(f"--draw {item!r}: expected NAME=SEED with SEED a whole number >= 0")
        if name in draws:
            raise ValueError(f"--draw {item!r}: data set {name!r} given twice")
        draws[name] = int(seed)
    return list(draws.items())


def cmd_synth(args: argparse.Namespace) -> int:
    from .data import generate_synthetic
    from .data.sources import dataset_folder

    check_synth_flags(args)
    draws = synth_draws(args)
    for name, data_seed in draws:
        out = args.out or dataset_folder(args.resources, "synthetic", name)
        path = generate_synthetic(
            name,
            out,
            data_seed=data_seed,
            num_devices=args.devices,
            dim=args.dim,
            num_classes=args.classes,
            alpha=args.alpha,
            beta=args.beta,
            setting=args.setting,
        )
        print(f"wrote {path}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from .data import dataset_stats, format_stats, load_leaf

    print(format_stats(dataset_stats(load_leaf(args.dir))))
    return 0


BUILT_IN_COMMANDS = ("run", "synth", "stats")
"""The sub-commands defined here; the others register themselves from ``upfl/commands/``."""


def build_parser(commands: bool = True) -> argparse.ArgumentParser:
    """The ``upfl`` parser; ``commands=False`` leaves out the sub-commands of ``upfl/commands/`` (not imported: a
    command line naming a built-in one does not pay for them)."""
    p = argparse.ArgumentParser(
        prog="upfl",
        description="Upcycled-FL federated simulation",
        epilog="exit status of 'upfl run': 0 done, 2 bad input (config, flags, data, --out, "
        "checkpoint), 3 diverged (summary.json written, see docs/faults.md), 4 another run "
        "holds this run's checkpoint",
    )
    p.add_argument("--version", action="version", version=f"upfl {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train one configuration")
    r.add_argument("--config", help="run config YAML (flags override it)")
    r.add_argument("--out", required=True, help="result folder (metrics.csv, summary.json)")
    for flag, (key, typ) in RUN_FLAGS.items():
        r.add_argument(
            "--" + flag.replace("_", "-"),
            dest=flag,
            type=typ,
            default=None,
            metavar=typ.__name__.upper(),
            help=run_flag_help(flag, key),
        )
    r.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any run-config key, dotted (privacy.sigma=0.8); the value is read as YAML; repeatable",
    )
    r.add_argument("--force", action="store_true", help="overwrite an OUT that holds another config's results")
    r.set_defaults(func=cmd_run)
    s = sub.add_parser("synth", help="generate a FedProx synthetic data set (or several draws of one setting)")
    s.add_argument("--name", help="the data set's name (meta.json)")
    s.add_argument(
        "--draw",
        action="append",
        metavar="NAME=SEED",
        help="instead of --name and --data-seed: the data set NAME drawn with seed SEED, into "
        "RESOURCES/data/generated/NAME; repeatable (the draws of one setting in one process)",
    )
    s.add_argument(
        "--setting",
        default=None,
        help="generator setting (synthetic_iid, synthetic_0_0, synthetic_0.5_0.5, synthetic_1_1); "
        "default: the data set's name. The draw depends on the setting and its seed only",
    )
    s.add_argument(
        "--out",
        default=None,
        help="output data set folder (default: RESOURCES/data/generated/NAME, apart from the paper's "
        "released draws under RESOURCES/data/paper/)",
    )
    s.add_argument(
        "--resources", default="resources", help="resources folder for the default --out (default: %(default)s)"
    )
    s.add_argument("--data-seed", type=int, default=None, help="seed of the draw (default: 0)")
    s.add_argument("--devices", type=int, default=30, help="number of devices (default: %(default)s)")
    s.add_argument("--dim", type=int, default=20, help="feature dimension (default: %(default)s)")
    s.add_argument("--classes", type=int, default=2, help="number of classes (default: %(default)s)")
    s.add_argument("--alpha", type=float, help="model heterogeneity α (default: the setting's)")
    s.add_argument("--beta", type=float, help="data heterogeneity β (default: the setting's)")
    s.set_defaults(func=cmd_synth)
    st = sub.add_parser("stats", help="print the Table 2 row of a data set")
    st.add_argument("dir")
    st.set_defaults(func=cmd_stats)
    if not commands:
        return p
    from . import commands as command_modules

    for mod in pkgutil.iter_modules(command_modules.__path__):
        module = importlib.import_module(f"upfl.commands.{mod.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return p


def suggestion(word: str, known: list[str]) -> str:
    """'; did you mean X?' for the closest of ``known`` to a misspelt ``word`` ('' when none is close)."""
    close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; an unknown flag is reported by the sub-command it was given to, with the closest flag."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = parser
        for action in parser._subparsers._group_actions if parser._subparsers else []:
            if isinstance(action.choices, dict):  # a sub-parsers action: command name -> parser
                sub = action.choices.get(args.command, parser)
            while hasattr(sub, "_subparsers") and sub._subparsers:
                nested = sub._subparsers._group_actions[0]
                commands = nested.choices if isinstance(nested.choices, dict) else {}
                name = next((v for v in vars(args).values() if isinstance(v, str) and v in commands), None)
                if name is None:
                    break
                sub = commands[name]
        flags = [o for a in sub._actions for o in a.option_strings]
        sub.error(f"unrecognized arguments: {' '.join(extra)}{suggestion(extra[0], flags)}")
    return args


def names_built_in_command(argv: list[str]) -> bool:
    """Whether ``argv``'s first word that is not an option is one of :data:`BUILT_IN_COMMANDS` (``--help`` and
    ``--version`` before it name none: they describe every command)."""
    for word in argv:
        if word in ("-h", "--help", "--version"):
            return False
        if not word.startswith("-"):
            return word in BUILT_IN_COMMANDS
    return False


FAST_EXIT_COMMANDS = ("run", "report")
"""The sub-commands whose process, started as ``upfl`` (``main()`` with no arguments), ends without the
interpreter's teardown once they return (:func:`upfl.startup.exit_now`): each writes its files whole before (a
report job's teardown, freeing pandas' and matplotlib's modules, is a tenth of its CPU time)."""


def main(argv: list[str] | None = None) -> int:
    command_line = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(build_parser(commands=not names_built_in_command(argv)), argv)
    one_command = command_line and args.command in FAST_EXIT_COMMANDS
    if one_command:
        from .startup import ONE_COMMAND

        ONE_COMMAND["process"] = True
    status = run_command(args)
    if one_command:
        from .startup import exit_now

        exit_now(status)
    return status


def run_command(args: argparse.Namespace) -> int:
    """The parsed command's exit status; bad input and file-system errors are named on standard error. The command
    finds the command line it runs under in ``args.command_line`` (:data:`COMMAND_LINE`)."""
    args.command_line = COMMAND_LINE
    try:
        return args.func(args)
    except (cfgmod.ConfigError, DatasetError, ValueError) as e:
        print(f"upfl {args.command}: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as e:  # a folder given as a file, a read-only or full file system: named, nothing half-written
        where = f"{e.filename}: " if e.filename else ""
        print(f"upfl {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return EXIT_INPUT


@dataclass(frozen=True)
class CommandLine:
    """What a command that runs others (``upfl report runs --then``) needs of the command line, handed to every
    command as ``args.command_line`` so that ``upfl/commands/`` never imports this module: ``parse`` an upfl word
    list (usage errors as on the command line), ``run`` a parsed command (errors named as by :func:`run_command`)."""

    parse: Callable[[list[str]], argparse.Namespace]
    run: Callable[[argparse.Namespace], int]


@functools.cache
def full_parser() -> argparse.ArgumentParser:
    """:func:`build_parser` with every sub-command, built once per process."""
    return build_parser()


def parse_words(words: list[str]) -> argparse.Namespace:
    return parse(full_parser(), words)


COMMAND_LINE = CommandLine(parse=parse_words, run=run_command)


if __name__ == "__main__":
    sys.exit(main())
