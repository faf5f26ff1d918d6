"""Writing tables: CSV, Markdown and LaTeX, each ending with a provenance line; number formatting."""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

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


def runs_origins_and_seeds(runs: pd.DataFrame) -> tuple[list[str], list[int]]:
    """What the runs were trained on (each data origin in words) and their seeds."""
    from .collect import ORIGIN_COLUMNS, origin_text

    origins = (
        sorted({origin_text(*r) for r in runs.reindex(columns=list(ORIGIN_COLUMNS)).itertuples(index=False)})
        if len(runs)
        else []
    )
    return origins, sorted({int(as_number(v)) for v in runs.get("seed", []) if not math.isnan(as_number(v))})


def data_and_seeds_title(runs: pd.DataFrame) -> str:
    """A title's tail naming the data and seeds: 'our generator's draws, 2 seeds' ('' without runs)."""
    origins, seeds = runs_origins_and_seeds(runs)
    if not origins:
        return ""
    generated = [o for o in origins if o.startswith("our generator")]
    data = (
        "our generator's draws"
        if len(generated) == len(origins)
        else "the authors' released draws"
        if all(o.startswith("the authors'") for o in origins)
        else "; ".join(origins)
        if len(origins) <= 2
        else f"{len(origins)} data origins (provenance line)"
    )
    return f" ({data}; {len(seeds)} seed{'s' if len(seeds) != 1 else ''})"


def runs_provenance(runs: pd.DataFrame) -> str:
    """'data: <origins>; data digests <data set> <digest>, ...; seeds 0 1; 350 runs made at git <commits>': what
    the runs were trained on. A data set whose runs read two versions of it (two digests) is a
    :class:`~upfl.report.collect.ReportError` naming the runs (:func:`data_digests`)."""
    origins, seeds = runs_origins_and_seeds(runs)
    commits = sorted({str(c) for c in runs["git_commit"].dropna()}) if "git_commit" in runs.columns else []
    digests = data_digests(runs)
    named = f"; data digests {', '.join(f'{d} {v}' for d, v in digests.items())}" if digests else ""
    differ = environments_differing(runs)
    return (
        f"data: {', '.join(origins) or 'none'}{named}; seeds {' '.join(map(str, seeds)) or 'none'}; "
        f"{len(runs)} runs made at git {', '.join(commits) or 'unknown'}"
        + (f"; environments differ between runs: {differ}" if differ else "")
    )


def environments_differing(runs: pd.DataFrame) -> str:
    """'numpy_version 2.3.1 (3 runs), 2.4.6 (5 runs); ...' for each environment column (library versions, the
    kernels' instruction set: :data:`upfl.files.ENVIRONMENT_KEYS`) whose recorded values differ between the runs;
    '' when they agree."""
    from ..files import ENVIRONMENT_KEYS

    parts = []
    for key in ENVIRONMENT_KEYS:
        if key not in runs.columns:
            continue
        counts = runs[key].dropna().astype(str).value_counts()
        if len(counts) > 1:
            parts.append(f"{key} " + ", ".join(f"{v} ({n} runs)" for v, n in sorted(counts.items())))
    return "; ".join(parts)


def data_digests(runs: pd.DataFrame) -> dict[str, str]:
    """Each data set's digest (runs.csv ``data_digest``, what its runs read), by data set name; runs that recorded
    none are left out. One data set read in two versions by the runs of one output is an error that names them."""
    from .collect import ReportError

    if "data_digest" not in runs.columns or "dataset" not in runs.columns:
        return {}
    recorded = runs[runs["data_digest"].notna()]
    out: dict[str, str] = {}
    for dataset, group in recorded.groupby("dataset", sort=True):
        versions = sorted({str(v) for v in group["data_digest"]})
        if len(versions) > 1:
            where = "run_dir" if "run_dir" in group.columns else "dataset"
            listed = "; ".join(
                f"{v}: {', '.join(str(r) for r in group.loc[group['data_digest'].astype(str) == v, where])}"
                for v in versions
            )
            raise ReportError(
                f"data set {dataset}: its runs read {len(versions)} versions of the data ({listed}); retrain the "
                "runs of the old version (snakemake retrains them once the data's digest is made again) before "
                "building a table from them"
            )
        out[str(dataset)] = versions[0]
    return out


def relative_to_workdir(path: str | os.PathLike) -> str:
    """A path as a provenance line names it: relative to the folder the workflow runs in (never the building
    machine's absolute path)."""
    return os.path.relpath(path) if os.path.isabs(path) else str(path)


def provenance_line(
    config_files: str | Sequence[str] | None = None, runs: pd.DataFrame | None = None, preset: str | None = None
) -> str:
    """``upfl <version>; git <commit>; config <file> (sha256 ...); preset <name>; data: ...; seeds ...; <n> runs
    made at git ...; <date>``: the code, configuration, data, seeds and runs behind an output."""
    if isinstance(config_files, str):
        config_files = [config_files]
    parts = [f"upfl {__version__}", f"git {git_commit() or 'unknown'}"]
    for config_file in config_files or []:
        digest = sha256_file(config_file)[:12] if Path(config_file).is_file() else "file not found"
        parts.append(f"config {relative_to_workdir(config_file)} (sha256 {digest})")
    if config_files or preset:
        parts.append(f"preset {preset or config_preset(config_files or [])}")
    else:
        parts.append("config none given")
    if runs is not None:
        parts.append(runs_provenance(runs))
    parts.append(report_date())
    return "; ".join(parts)


def seeds_text(seeds) -> str:
    """'seeds 0-4' for consecutive seeds, else 'seeds 0 2 5'."""
    seeds = sorted(int(s) for s in seeds)
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + " ".join(map(str, seeds))


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


TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "μ": r"$\mu$",
    "λ": r"$\lambda$",
    "−": "-",
    "Δ": r"$\Delta$",
    "–": "--",
}


def tex_escape(text: str) -> str:
    """Escape LaTeX specials and map the report's Unicode symbols to math mode."""
    return "".join(TEX_ESCAPES.get(ch, ch) for ch in str(text))


def tex_cell(text: str) -> str:
    """A table cell: escaped; a cell with ``<br>`` line breaks as a one-column tabular of its lines."""
    lines = str(text).split("<br>")
    if len(lines) == 1:
        return tex_escape(text)
    return r"\begin{tabular}[t]{@{}l@{}}" + r" \\ ".join(tex_escape(x) for x in lines) + r"\end{tabular}"


def latex_table(header: Sequence[str], rows: Iterable[Sequence[str]], caption: str, label: str, footer: str) -> str:
    """A ``table*`` with booktabs rules, scaled to the text width; ``footer`` below the rules."""
    cols = "l" * len(header)
    body = [" & ".join(tex_cell(c) for c in r) + r" \\" for r in rows]
    return "\n".join(
        [
            r"% needs \usepackage{booktabs,graphicx}",
            r"\begin{table*}[t]",
            r"\centering",
            rf"\caption{{{tex_escape(caption)}}}",
            rf"\label{{{label}}}",
            r"\resizebox{\textwidth}{!}{%",
            rf"\begin{{tabular}}{{{cols}}}",
            r"\toprule",
            " & ".join(tex_cell(h) for h in header) + r" \\",
            r"\midrule",
            *body,
            r"\bottomrule",
            r"\end{tabular}}",
            "",
            rf"\footnotesize {tex_escape(footer)}",
            r"\end{table*}",
            "",
        ]
    )


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""Text that a spreadsheet reads as a formula when a cell starts with it (OWASP's CSV injection list)."""


def spreadsheet_text(value: Any) -> Any:
    """A text cell a spreadsheet shows as text: one starting with :data:`FORMULA_STARTS` gets a leading ``'`` (a
    data set's metadata, a user's name: never a formula such as ``=HYPERLINK(...)``); numbers stay numbers."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def write_csv(path: str | os.PathLike, df: pd.DataFrame, provenance: str | None = None) -> None:
    """Write ``df`` as CSV atomically (text cells through :func:`spreadsheet_text`), ending with the provenance
    comment line when given."""
    df = df.copy()
    df.columns = [spreadsheet_text(str(c)) for c in df.columns]
    for i, dtype in enumerate(df.dtypes):
        if not pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
            # pandas takes a column of values here; pandas-stubs type the value as one scalar
            df.isetitem(i, df.iloc[:, i].map(spreadsheet_text))  # type: ignore[arg-type]
    text = df.to_csv(index=False, lineterminator="\n")
    if provenance:
        text += PROVENANCE_PREFIX + provenance + "\n"
    write_text(path, text)


def write_markdown(path: str | os.PathLike, title: str, sections: Sequence[str], provenance: str) -> None:
    """A Markdown file: a title, the sections (tables and notes), and the provenance line last; the same page as
    formatted HTML beside it (``.html``, the reading copy the Snakemake report shows)."""
    text = f"# {title}\n\n" + "\n".join(s.rstrip("\n") + "\n" for s in sections) + f"\nProvenance: {provenance}\n"
    write_text(path, text)
    write_text(Path(path).with_suffix(".html"), markdown_html(text, title))


HTML_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;max-width:100%;color:#222}"
    "table{border-collapse:collapse;margin:0.8em 0;font-size:0.85em;max-width:100%}"
    "ul{margin:0.4em 0;padding-left:1.4em}li{margin:0.15em 0}"
    "th,td{border:1px solid #bbb;padding:0.25em 0.5em;vertical-align:top;text-align:left}"
    "th{background:#eee}tr:nth-child(even) td{background:#fafafa}"
    "p.provenance{color:#666;font-size:0.8em}"
)


def _inline_html(text: str) -> str:
    """Escape ``text`` and render the Markdown the report writes inline: ``**bold**``, ```code``` and ``<br>``."""
    import html

    out = html.escape(text.replace("\\|", "|"), quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    out = out.replace("&lt;br&gt;", "<br>")  # a line break inside a table cell, as GitHub's Markdown writes it
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def _table_cells(line: str) -> list[str]:
    """The cells of a Markdown table line (pipes escaped as ``\\|`` stay in their cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def markdown_html(text: str, title: str) -> str:
    """A standalone HTML page of the Markdown the report writes (headings, tables, lists, paragraphs)."""
    import html

    body: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(_table_cells(lines[i]))
                i += 1
            head = "".join(f"<th>{_inline_html(c)}</th>" for c in block[0])
            rows = "".join("<tr>" + "".join(f"<td>{_inline_html(c)}</td>" for c in r) + "</tr>" for r in block[2:])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            continue
        if line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline_html(lines[i][2:].strip())}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
            continue
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 6)
            body.append(f"<h{level}>{_inline_html(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            para = [line]
            while i + 1 < len(lines) and lines[i + 1].strip() and not lines[i + 1].startswith(("|", "#", "- ")):
                i += 1
                para.append(lines[i])
            joined = " ".join(p.strip() for p in para)
            cls = ' class="provenance"' if joined.startswith("Provenance:") else ""
            body.append(f"<p{cls}>{_inline_html(joined)}</p>")
        i += 1
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{HTML_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
