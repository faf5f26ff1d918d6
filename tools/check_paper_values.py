"""Check the typed-in paper values (src/upfl/report/paper_values/) against the paper's text.

Table 1 (table1.csv) cell by cell; the quoted sentences of privacy.csv and time.csv verbatim, with their
numbers; figures.csv's accuracies as the "train%(test%)" pairs of the quoted caption.

Usage: python tools/check_paper_values.py [PATH_TO_PAPER_MD]   (default ../shared/paper/upcycled-fl.md)
The paper is not part of the repository, so this is a maintainer's check, not a test.
"""

import re
import sys
from pathlib import Path

import numpy as np

from upfl.report.paper_numbers import paper_values


def main(path: str) -> int:
    text = Path(path).read_text(encoding="utf-8")
    body = text[text.index("Dataset\tProximal term\tAccuracy(%)") : text.index("Convergence and Heterogeneity.")]
    cells = re.findall(r"(\d+\.\d\d)%\((\d+\.\d\d)%\)", body)
    pv = paper_values("table1")
    order = []
    for dataset in pv["dataset"].drop_duplicates():
        d = pv[pv["dataset"] == dataset]
        for i, mu in enumerate((0.1, 0.3, 0.5, 1.0)):
            if i == 0:
                order.append(d[d["algorithm"] == "fedavg"].iloc[0])
            for alg in ("fedprox", "upcycled"):
                order.append(d[(d["algorithm"] == alg) & np.isclose(d["mu"], mu)].iloc[0])
    bad = [
        (row["dataset"], row["algorithm"], row["mu"], cell)
        for cell, row in zip(cells, order, strict=True)
        if (float(cell[0]), float(cell[1])) != (row["train_acc"], row["test_acc"])
    ]
    print(f"{len(cells)} cells in the paper, {len(order)} typed; {len(bad)} differ")
    for b in bad:
        print("  differs:", b)
    quoted = check_quotes(text)
    return 0 if len(cells) == len(order) and not bad and not quoted else 1


def check_quotes(text: str) -> list[str]:
    """Quoted sentences that are not in the paper, or whose typed number is not in the quote."""
    flat = " ".join(text.split())
    problems = []
    for name, value_col in (("privacy", "paper_value"), ("time", None), ("figures", None)):
        for r in paper_values(name).to_dict("records"):
            quote = " ".join(str(r["paper_text"]).split())
            if quote not in flat:
                problems.append(f"{name}.csv: quote not in the paper: {quote!r}")
            if value_col and f"{r[value_col]:g}" not in quote.replace(".0%", "%"):
                problems.append(f"{name}.csv: {r[value_col]:g} not in its quote {quote!r}")
            if name == "figures" and f"{r['train_acc']:.2f}%({r['test_acc']:.2f}%)" not in quote:
                problems.append(
                    f"figures.csv: {r['figure']} {r['dataset']} {r['mechanism']} {r['algorithm']}: "
                    f"{r['train_acc']:.2f}%({r['test_acc']:.2f}%) not in its quote"
                )
    print(f"quoted values: {len(problems)} problems")
    for p in problems:
        print("  ", p)
    return problems


if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1]
            if len(sys.argv) > 1
            else str(Path(__file__).resolve().parents[2] / "shared/paper/upcycled-fl.md")
        )
    )
