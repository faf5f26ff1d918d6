"""Writing tables: CSV, Markdown and LaTeX, each ending with a provenance line; number formatting."""

from __future__ import annotations

import datetime as dt
import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from .. import __version__
from ..files import git_commit, sha256_file, write_text

PROVENANCE_PREFIX = "# provenance: "
"""CSV tables end with one line starting with this; read them with ``pd.read_csv(path, comment="#")``."""


def as_number(value: Any) -> float:
    """``float(value)``, or NaN for a missing or non-numeric cell (runs.csv cells are text or numbers)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def report_date() -> str:
    """UTC date and time of the report, or of ``SOURCE_DATE_EPOCH`` when set (reproducible builds)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc) if epoch else dt.datetime.now(dt.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def config_preset(config_files: Sequence[str]) -> str:
    """The ``preset`` the workflow config files select (the last file that sets one wins; ``full`` when none)."""
    import yaml

    preset = "full"
    for config_file in config_files:
        try:
            doc = yaml.safe_load(Path(config_file).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(doc, dict) and doc.get("preset"):
            preset = str(doc["preset"])
    return preset


def runs_provenance(runs: pd.DataFrame) -> str:
    """'data: <origins>; seeds 0 1; 350 runs made at git <commits>': what the runs were trained on."""
    from .collect import origin_text

    columns = ["data_source", "data_setting", "data_seed", "data_commit"]
    origins = sorted({origin_text(*r) for r in runs.reindex(columns=columns).itertuples(index=False)}) \
        if len(runs) else []
    seeds = sorted({int(as_number(v)) for v in runs.get("seed", []) if not math.isnan(as_number(v))})
    commits = sorted({str(c) for c in runs["git_commit"].dropna()}) if "git_commit" in runs.columns else []
    return (f"data: {', '.join(origins) or 'none'}; seeds {' '.join(map(str, seeds)) or 'none'}; "
            f"{len(runs)} runs made at git {', '.join(commits) or 'unknown'}")


def provenance_line(config_files: str | Sequence[str] | None = None, runs: pd.DataFrame | None = None) -> str:
    """``upfl <version>; git <commit>; config <file> (sha256 ...); preset <name>; data: ...; seeds ...; <n> runs
    made at git ...; <date>``: the code, configuration, data, seeds and runs behind an output."""
    if isinstance(config_files, str):
        config_files = [config_files]
    parts = [f"upfl {__version__}", f"git {git_commit() or 'unknown'}"]
    for config_file in config_files or []:
        digest = sha256_file(config_file)[:12] if Path(config_file).is_file() else "file not found"
        parts.append(f"config {config_file} (sha256 {digest})")
    if config_files:
        parts.append(f"preset {config_preset(config_files)}")
    else:
        parts.append("config none given")
    if runs is not None:
        parts.append(runs_provenance(runs))
    parts.append(report_date())
    return "; ".join(parts)


def fmt(value, digits: int = 2, signed: bool = False) -> str:
    """A number with ``digits`` decimals ('' for missing), with an explicit sign when ``signed``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def fmt_mu(mu) -> str:
    """mu as printed in the paper (``0.1``, ``1``); '' when missing."""
    if mu is None or (isinstance(mu, float) and math.isnan(mu)):
        return ""
    return f"{float(mu):g}"


def mean_std(mean, std, digits: int = 2) -> str:
    """``mean ± std`` (only the mean when std is missing)."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return fmt(mean, digits)
    return f"{fmt(mean, digits)} ± {fmt(std, digits)}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table (pipes in cells escaped)."""
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    out = [line(header), "|" + "|".join("---" for _ in header) + "|"]
    out.extend(line(r) for r in rows)
    return "\n".join(out) + "\n"


TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
               "±": r"$\pm$", "μ": r"$\mu$", "λ": r"$\lambda$", "−": "-", "Δ": r"$\Delta$", "–": "--"}


def tex_escape(text: str) -> str:
    """Escape LaTeX specials and map the report's Unicode symbols to math mode."""
    return "".join(TEX_ESCAPES.get(ch, ch) for ch in str(text))


def latex_table(header: Sequence[str], rows: Iterable[Sequence[str]], caption: str, label: str,
                footer: str) -> str:
    """A ``table*`` with booktabs rules, scaled to the text width; ``footer`` below the rules."""
    cols = "l" * len(header)
    body = [" & ".join(tex_escape(c) for c in r) + r" \\" for r in rows]
    return "\n".join([
        r"% needs \usepackage{booktabs,graphicx}",
        r"\begin{table*}[t]", r"\centering", rf"\caption{{{tex_escape(caption)}}}", rf"\label{{{label}}}",
        r"\resizebox{\textwidth}{!}{%", rf"\begin{{tabular}}{{{cols}}}", r"\toprule",
        " & ".join(tex_escape(h) for h in header) + r" \\", r"\midrule", *body, r"\bottomrule",
        r"\end{tabular}}", "", rf"\footnotesize {tex_escape(footer)}", r"\end{table*}", "",
    ])


def write_csv(path: str | os.PathLike, df: pd.DataFrame, provenance: str | None = None) -> None:
    """Write ``df`` as CSV atomically, ending with the provenance comment line when given."""
    text = df.to_csv(index=False, lineterminator="\n")
    if provenance:
        text += PROVENANCE_PREFIX + provenance + "\n"
    write_text(path, text)


def write_markdown(path: str | os.PathLike, title: str, sections: Sequence[str], provenance: str) -> None:
    """A Markdown file: a title, the sections (tables and notes), and the provenance line last."""
    text = f"# {title}\n\n" + "\n".join(s.rstrip("\n") + "\n" for s in sections) + f"\nProvenance: {provenance}\n"
    write_text(path, text)
