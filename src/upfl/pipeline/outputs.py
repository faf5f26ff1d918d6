"""The kinds of report output (``experiments.<name>.outputs[].kind``): one table read by the plan, ``upfl report``,
the workflow's report jobs, the config schema and config/README.md (the last two tested against it).

A new kind is one entry here and its writer under ``upfl.report``; ``upfl report`` makes a sub-command for it (or a
choice of a shared one), the plan its files, and the workflow declares those files as outputs of the report job of
the output's experiment, which runs that sub-command. Torch-free and pandas-free: the workflow's
parse reads it.
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TABLE = ("csv", "md", "html")
TABLE_TEX = (*TABLE, "tex")
FIGURE = ("png", "pdf", "csv", "rst")


@dataclass(frozen=True)
class OutputKind:
    """How one kind of output is made and what it writes.

    ``command`` is the ``upfl report`` sub-command; kinds that share one (``figure``, ``ablation-table``) are its
    first argument. ``writer`` is ``module:function`` under ``upfl.report``, called as
    ``function(runs, out_prefix, provenance)``, with ``figure_prefix`` before ``provenance`` for a kind writing both
    a table and a figure, and for a ``figure`` kind with the options it accepts (``metrics``, ``x``, ``panels``,
    ``title``) as keywords. ``tables``/``figures``: the extensions written under results/tables/ and
    results/figures/. ``caption``: workflow/report/<caption>.rst. The workflow makes every output of an experiment
    in that experiment's report job (workflow/rules/report.smk), with the command :func:`report_command` gives.
    """

    command: str
    writer: str
    tables: tuple[str, ...] = ()
    figures: tuple[str, ...] = ()
    caption: str = "figure"
    reference: bool = False
    describe: str = ""

    def files(self, name: str) -> list[str]:
        """The files one output of this kind named ``name`` writes (relative to the workflow root)."""
        return [f"results/tables/{name}.{ext}" for ext in self.tables] + [
            f"results/figures/{name}.{ext}" for ext in self.figures
        ]

    @property
    def shared(self) -> bool:
        """Whether the kind is a choice of a sub-command that several kinds share."""
        return sum(k.command == self.command for k in OUTPUT_KINDS.values()) > 1

    def load_writer(self) -> Callable[..., Any]:
        module, function = self.writer.split(":")
        return getattr(importlib.import_module(f"upfl.report.{module}"), function)


OUTPUT_KINDS: dict[str, OutputKind] = {
    "table1": OutputKind(
        "table1",
        "tables:write_table1",
        TABLE_TEX,
        caption="table1",
        describe="final train (test) accuracy per data set x mu x algorithm, paper beside",
    ),
    "time": OutputKind(
        "time",
        "timing:write_time",
        TABLE,
        caption="time",
        describe="training time per algorithm and data set, Upcycled-FL / FedProx ratios",
    ),
    "convergence": OutputKind(
        "figure",
        "figures:convergence_figure",
        figures=FIGURE,
        describe="loss and accuracy against iterations, rounds or time",
    ),
    "lambda_sweep": OutputKind(
        "figure",
        "figures:lambda_sweep_figure",
        figures=FIGURE,
        describe="accuracy against the even-iteration coefficient",
    ),
    "privacy_table": OutputKind(
        "privacy-table",
        "privacy_table:write_privacy_table",
        TABLE_TEX,
        caption="privacy",
        describe="private FedProx vs private Upcycled-FL: accuracy and epsilon-bar per "
        "mechanism (equal noise, equal epsilon), the paper's claims beside",
    ),
    "privacy_tradeoff": OutputKind(
        "figure",
        "privacy_tradeoff:privacy_tradeoff_figure",
        figures=FIGURE,
        describe="final accuracy against epsilon-bar",
    ),
    "momentum_table": OutputKind(
        "ablation-table",
        "ablations:write_momentum_table",
        TABLE,
        caption="ablation",
        describe="upcycling or server momentum, paired intervals",
    ),
    "bases_table": OutputKind(
        "ablation-table",
        "ablations:write_bases_table",
        TABLE,
        caption="ablation",
        describe="upcycling on every base, paired intervals",
    ),
    "momentum_curves": OutputKind(
        "figure", "ablations:momentum_figure", figures=FIGURE, describe="the momentum ablation's curves"
    ),
    "schedule_figure": OutputKind(
        "figure", "ablations:schedule_figure", figures=FIGURE, describe="the coefficient schedules"
    ),
    "draws": OutputKind(
        "draws",
        "fresh_data_sets:write_draws",
        TABLE,
        FIGURE,
        caption="draws",
        reference=True,
        describe="the Upcycled-FL minus FedProx gain on the paper's draw and on "
        "fresh generator draws (table and figure)",
    ),
    "sensitivity": OutputKind(
        "sensitivity",
        "sensitivity:write_sensitivity",
        TABLE,
        caption="sensitivity",
        describe="the Upcycled-FL gain under each straggler draw x straggler policy",
    ),
    "protocol_gap": OutputKind(
        "protocol-gap",
        "protocol_gap:write_protocol_gap",
        TABLE,
        caption="protocol_gap",
        describe="the Upcycled-FL gain of upfl faithful, upfl under the authors' protocol "
        "and the authors' code, under each reporting choice",
    ),
    "gain_grid": OutputKind(
        "gain-grid",
        "gain_grid:write_gain_grid",
        TABLE,
        FIGURE,
        caption="gain_grid",
        reference=True,
        describe="the Upcycled-FL gain over a grid of lr, even-iteration "
        "coefficient, epochs, batch size, iterations and mu, both "
        "protocols, each data set's best setting on the held-out seeds of its reference experiment (table and figure)",
    ),
}
"""Every output kind, in the order config/README.md lists them."""


def output_kind(kind: str) -> OutputKind:
    """The entry of ``kind``; ``KeyError`` naming the known kinds."""
    try:
        return OUTPUT_KINDS[kind]
    except KeyError:
        raise KeyError(f"unknown output kind {kind!r}; known: {', '.join(OUTPUT_KINDS)}") from None


def output_files(kind: str, name: str) -> list[str]:
    """The files one report output writes (relative to the workflow root)."""
    return output_kind(kind).files(name)


def kinds_of_command(command: str) -> list[str]:
    """The kinds ``upfl report <command>`` makes."""
    return [k for k, v in OUTPUT_KINDS.items() if v.command == command]


def report_command(kind: str, name: str) -> str:
    """The ``upfl report`` words and prefixes for output ``name`` of ``kind`` (the workflow adds the run selection,
    the reference runs and the config files)."""
    entry = output_kind(kind)
    words = [entry.command, *([kind] if entry.shared else [])]
    if entry.tables:
        words += ["--out-prefix", f"results/tables/{name}"]
        if entry.figures:
            words += ["--figure-prefix", f"results/figures/{name}"]
    else:
        words += ["--out-prefix", f"results/figures/{name}"]
    return " ".join(shlex.quote(w) for w in words)
