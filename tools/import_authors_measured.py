"""Make ``src/upfl/report/paper_values/authors_code.csv`` from the measured results of the authors' code.

Usage: python tools/import_authors_measured.py [MEASURED_CSV]
       (default: ../shared/notes/authors-code-measured.csv beside the repository)

The measured file (one row per implementation x variant x data set x metric: n seeds, FedProx and Upcycled-FL mean
and std, the paired gain and its 95% t interval, the seeds) lives outside the repository, where the authors' code
was run; its numbers are facts, not code. This tool copies every row into the packaged table the report reads
(provenance in ``paper_values/authors_code.md``), so that a clone without the notes builds the same protocol_gap
table. The file is written only when every row converts (a temporary file renamed into place).
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


class ImportError_(ValueError):
    """A row of the measured file cannot be converted; the message names its line."""


def variant_name(variant: str, step: float) -> str:
    name = VARIANTS[variant][0]
    return "tuning comment" + name[len("lr 5e-3") :] if name.startswith("lr 5e-3") and step == 0.9 else name


def convert(text: str, source: str) -> str:
    """The measured CSV's text (its first line a '#' comment) to the packaged table's text."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for number, row in enumerate(csv.DictReader(lines), start=2):
        try:
            if row["impl"] != "authors":
                continue
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
                for k in (
                    "fedprox_mean",
                    "fedprox_std",
                    "upcycled_mean",
                    "upcycled_std",
                    "gain_mean",
                    "gain_lo",
                    "gain_hi",
                )
            ]
        except (KeyError, ValueError) as e:
            raise ImportError_(f"{source}, line {number}: cannot convert ({type(e).__name__}: {e})") from None
        if split not in ("train", "test"):
            raise ImportError_(f"{source}, line {number}: metric {row['metric']!r} is not <choice>_train/test")
        writer.writerow(values)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    default = ROOT.parent / "shared" / "notes" / "authors-code-measured.csv"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measured", nargs="?", default=str(default), help=f"measured CSV (default: {default})")
    parser.add_argument("--out", default=str(OUT), help=f"table to write (default: {OUT})")
    args = parser.parse_args(argv)
    try:
        text = Path(args.measured).read_text(encoding="utf-8")
        table = convert(text, args.measured)
    except (OSError, ImportError_) as e:
        print(f"import_authors_measured: {e}", file=sys.stderr)
        return 1
    write_text(args.out, table)
    print(f"wrote {args.out} ({table.count(chr(10)) - 1} rows from {args.measured})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
