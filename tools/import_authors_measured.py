"""Make ``src/upfl/report/paper_values/authors_code.csv`` from the measured results of the authors' code.

Usage: python tools/import_authors_measured.py [MEASURED_CSV ...]
       (default: ../shared/notes/authors-code-measured.csv and authors-code-measured-more-seeds.csv beside the
       repository)

A measured file (one row per implementation x variant x data set x metric: n seeds, FedProx and Upcycled-FL mean
and std, the paired gain and its 95% t interval, the seeds) lives outside the repository, where the authors' code
was run; its numbers are facts, not code. This tool copies the rows into the packaged table the report reads
(provenance in ``paper_values/authors_code.md``), so that a clone without the notes builds the same protocol_gap
table. Where several rows measure one setting (the same impl, variant, coefficient c, data set and metric: later
seeds run on a setting measured before), the row with the most seeds supersedes the others (:func:`supersede`); two
rows with as many seeds that disagree are an error. The file is written only when every row converts (a temporary
file renamed into place).
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from upfl.files import write_text  # noqa: E402

OUT = ROOT / "src" / "upfl" / "report" / "paper_values" / "authors_code.csv"
REPORTING = {"final": "final", "best": "max", "last10": "last10"}
"""The measured file's metric prefix -> upfl's reporting choice (upfl.report.collect.REPORTING_CHOICES)."""
VARIANTS = {
    "paper": ("as released", 0.05, 20),
    "lr5e-3": ("lr 5e-3", 0.005, 20),
    "lr5e-3_E10": ("lr 5e-3, E 10", 0.005, 10),
}
"""The measured file's variant -> (name in upfl's table, lr, local epochs E); the step is the row's ``c``."""
COLUMNS = [
    "dataset",
    "variant",
    "lr",
    "step",
    "epochs",
    "reporting",
    "split",
    "seeds",
    "seed_list",
    "fedprox",
    "fedprox_std",
    "upcycled",
    "upcycled_std",
    "gain",
    "gain_ci_low",
    "gain_ci_high",
]
DIGITS = 4
DEFAULT_FILES = ("authors-code-measured.csv", "authors-code-measured-more-seeds.csv")
"""The measured files in the shared notes, read in this order."""


class ImportError_(ValueError):
    """A row of the measured file cannot be converted; the message names its line."""


def variant_name(variant: str, step: float) -> str:
    name = VARIANTS[variant][0]
    return "tuning comment" + name[len("lr 5e-3") :] if name.startswith("lr 5e-3") and step == 0.9 else name


SETTING = ("impl", "variant", "c", "dataset", "metric")
"""The columns that name what a measured row measured; rows alike in all of them measure one setting."""


def measured_rows(text: str, source: str) -> list[tuple[str, int, dict[str, str]]]:
    """The rows of one measured CSV's text (its first line a '#' comment) as (source, line number, row)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return [(source, number, row) for number, row in enumerate(csv.DictReader(lines), start=2)]


def _seeds(source: str, number: int, row: dict[str, str]) -> int:
    try:
        return int(row["n"])
    except (KeyError, ValueError) as e:
        raise ImportError_(f"{source}, line {number}: cannot convert ({type(e).__name__}: {e})") from None


def supersede(rows: list[tuple[str, int, dict[str, str]]]) -> list[tuple[str, int, dict[str, str]]]:
    """Of the rows that measure one setting (:data:`SETTING`), the one with the most seeds, in the place of the
    first of them; the others are dropped. Two rows of one setting with as many seeds must be the same
    measurement (every column equal), else which to keep is unknown: an error naming both."""
    kept: dict[tuple[str, ...], tuple[str, int, dict[str, str]]] = {}
    order: list[tuple[str, ...]] = []
    for source, number, row in rows:
        try:
            key = tuple(str(float(row[k])) if k == "c" else row[k] for k in SETTING)
        except (KeyError, ValueError) as e:
            raise ImportError_(f"{source}, line {number}: cannot convert ({type(e).__name__}: {e})") from None
        if key not in kept:
            kept[key] = (source, number, row)
            order.append(key)
            continue
        old_source, old_number, old = kept[key]
        seeds, old_seeds = _seeds(source, number, row), _seeds(old_source, old_number, old)
        if seeds == old_seeds and row != old:
            raise ImportError_(
                f"{source}, line {number} and {old_source}, line {old_number}: two different measurements of "
                f"{', '.join(f'{k} {v}' for k, v in zip(SETTING, key, strict=True))} on {seeds} seeds each"
            )
        if seeds > old_seeds:
            kept[key] = (source, number, row)
    return [kept[key] for key in order]


def convert(text: str, source: str) -> str:
    """The measured CSV's text (its first line a '#' comment) to the packaged table's text."""
    return convert_rows(measured_rows(text, source))


def convert_row(source: str, number: int, row: dict[str, str]) -> list | None:
    """One measured row as a row of the packaged table (None for another implementation's row); an error naming
    its line when it cannot convert."""
    try:
        if row["impl"] != "authors":
            return None
        prefix, split = row["metric"].rsplit("_", 1)
        step = float(row["c"])
        _, lr, epochs = VARIANTS[row["variant"]]
        values = [
            row["dataset"],
            variant_name(row["variant"], step),
            lr,
            step,
            epochs,
            REPORTING[prefix],
            split,
            int(row["n"]),
            row["seeds"],
        ]
        values += [
            round(float(row[k]), DIGITS)
            for k in ("fedprox_mean", "fedprox_std", "upcycled_mean", "upcycled_std", "gain_mean", "gain_lo", "gain_hi")
        ]
    except (KeyError, ValueError) as e:
        raise ImportError_(f"{source}, line {number}: cannot convert ({type(e).__name__}: {e})") from None
    if split not in ("train", "test"):
        raise ImportError_(f"{source}, line {number}: metric {row['metric']!r} is not <choice>_train/test")
    return values


def convert_rows(rows: list[tuple[str, int, dict[str, str]]]) -> str:
    """Measured rows (:func:`measured_rows` of one or more files) to the packaged table's text: every row must
    convert (:func:`convert_row`), then the rows of one setting are superseded (:func:`supersede`)."""
    for source, number, row in rows:
        convert_row(source, number, row)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for source, number, row in supersede(rows):
        values = convert_row(source, number, row)
        if values is not None:
            writer.writerow(values)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    notes = ROOT.parent / "shared" / "notes"
    default = [str(notes / name) for name in DEFAULT_FILES]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measured", nargs="*", default=default, help=f"measured CSVs (default: {' '.join(default)})")
    parser.add_argument("--out", default=str(OUT), help=f"table to write (default: {OUT})")
    args = parser.parse_args(argv)
    try:
        rows = [r for path in args.measured for r in measured_rows(Path(path).read_text(encoding="utf-8"), path)]
        table = convert_rows(rows)
    except (OSError, ImportError_) as e:
        print(f"import_authors_measured: {e}", file=sys.stderr)
        return 1
    write_text(args.out, table)
    print(f"wrote {args.out} ({table.count(chr(10)) - 1} rows from {', '.join(args.measured)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
