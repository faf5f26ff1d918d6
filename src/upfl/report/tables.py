"""Table 1 (final accuracies with the paper's values and the paired claim test) and Table 2 (data sets)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..files import write_text
from .cells import check_one_config, dataset_mus, iter_cells, missing, paired
from .claim_rules import MIN_PAIRS, TOO_FEW, table1_verdict
from .collect import CONFIG_COLUMNS, ReportError, converged, diverged_note
from .paper_numbers import algorithm_label, dataset_label, paper_values, table1_value
from .render import data_and_seeds_title, fmt, fmt_mu, latex_table, markdown_table, mean_std, write_csv, write_markdown
from .stats import LEVEL, mean_interval

ACC = ("train_acc", "test_acc")


def _pct(series: pd.Series) -> pd.Series:
    return series.astype(float) * 100.0


def table1_cell(dataset: str, alg: str, mu: float, cell: pd.DataFrame) -> dict[str, Any]:
    """Mean and sample std (ddof 1) over seeds of the final accuracies (%), with the paper's value."""
    what = f"table1 cell {dataset} / {algorithm_label(alg)}" + ("" if math.isnan(mu) else f" / mu {mu:g}")
    check_one_config(cell, what)
    if cell["seed"].duplicated().any():
        raise ReportError(f"{what}: several runs with the same seed ({sorted(cell['seed'])})")
    ok = converged(cell)
    row: dict[str, Any] = {
        "dataset": dataset,
        "label": dataset_label(dataset),
        "algorithm": alg,
        "mu": mu,
        "lam": cell["lam"].iloc[0],
        "rounds": int(cell["rounds"].iloc[0]),
        "n_seeds": len(ok),
        "seeds": " ".join(str(int(s)) for s in sorted(ok["seed"])),
        "n_diverged": len(cell) - len(ok),
        "diverged": diverged_note(cell),
    }
    paper = table1_value(dataset, alg, None if math.isnan(mu) else mu)
    for i, key in enumerate(ACC):
        values = _pct(ok[f"final_{key}"])
        row[f"{key}_mean"] = float(values.mean())
        row[f"{key}_std"] = float(values.std(ddof=1)) if len(values) > 1 else math.nan
        row[f"paper_{key}"] = paper[i] if paper else math.nan
        row[f"diff_{key}"] = row[f"{key}_mean"] - row[f"paper_{key}"]
        for choice in ("max", "last10"):
            column = f"{choice}_{key}"
            row[f"{column}_mean"] = float(_pct(ok[column]).mean()) if column in ok.columns else math.nan
    return row


def claim_columns(up: pd.DataFrame, prox: pd.DataFrame, paper_up: dict, paper_prox: dict) -> dict[str, Any]:
    """Upcycled-FL minus FedProx per seed (percentage points), its mean and 95% t interval."""
    out: dict[str, Any] = {}
    for key in ACC:
        pairs = paired(up, prox, f"final_{key}")
        ci = mean_interval(_pct(pairs["a"]) - _pct(pairs["b"]), LEVEL)
        out["n_pairs"] = ci.n
        out.update(
            {
                f"{key}_gain_mean": ci.mean,
                f"{key}_gain_ci_low": ci.low,
                f"{key}_gain_ci_high": ci.high,
                f"paper_{key}_gain": paper_up.get(f"paper_{key}", math.nan) - paper_prox.get(f"paper_{key}", math.nan),
            }
        )
        out[f"verdict_{key}"] = table1_verdict(out[f"paper_{key}_gain"], ci.low, ci.high, ci.n)[0]
    return out


TABLE1_COLUMNS = (
    *CONFIG_COLUMNS,
    "diverged",
    *(f"{choice}_{key}" for choice in ("final", "max", "last10") for key in ACC),
)
"""The runs table's columns a Table 1 cell reads: the config with the seed (every cell is checked to hold one
config), whether a run diverged and the accuracies."""


def table1_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per data set x algorithm x mu (FedAvg once per data set); claim columns on Upcycled-FL rows.

    The cells are cut from :data:`TABLE1_COLUMNS` alone (a cut of the full runs table copies each of its 140
    columns)."""
    runs = runs[[c for c in TABLE1_COLUMNS if c in runs.columns]]
    cells = list(iter_cells(runs))
    if not cells:
        raise ReportError("table1: no runs")
    rows = [table1_cell(*c) for c in cells]
    index = {(r["dataset"], r["algorithm"], r["mu"]): (r, converged(c[3])) for r, c in zip(rows, cells, strict=True)}
    for (dataset, alg, mu), (row, cell) in index.items():
        if alg != "upcycled" or (dataset, "fedprox", mu) not in index:
            continue
        prox_row, prox_cell = index[(dataset, "fedprox", mu)]
        row.update(claim_columns(cell, prox_cell, row, prox_row))
    return pd.DataFrame(rows)


def _ours(row: dict) -> str:
    """Mean ± std (train, test) over the converged seeds, with 'diverged k/n seeds' where any diverged."""
    note = row.get("diverged") or ""
    if not row["n_seeds"]:
        return note
    test = mean_std(row["test_acc_mean"], row["test_acc_std"])
    text = f"{mean_std(row['train_acc_mean'], row['train_acc_std'])} ({test})"
    return f"{text}; {note}" if note else text


def _pair_text(a, b, signed: bool = False) -> str:
    if isinstance(a, float) and math.isnan(a):
        return "–"
    return f"{fmt(a, signed=signed)} ({fmt(b, signed=signed)})"


def _ci_text(row: dict, key: str) -> str:
    mean = row.get(f"{key}_gain_mean", math.nan)
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    low, high = row[f"{key}_gain_ci_low"], row[f"{key}_gain_ci_high"]
    if isinstance(low, float) and math.isnan(low):
        return f"{fmt(mean, signed=True)} [n/a, {row['n_pairs']} pair]"
    return f"{fmt(mean, signed=True)} [{fmt(low, signed=True)}, {fmt(high, signed=True)}]"


def verdict_cell(row: dict) -> str:
    """The claims page's verdicts on the row's train and test gains, in its words ('too few seeds (2)'): one when
    both agree, else 'train: ...; test: ...' ('' on a row without a FedProx pair)."""
    verdicts = [row.get(f"verdict_{key}") for key in ACC]
    if any(v is None or missing(v) for v in verdicts):
        return ""
    words = [f"{v} ({int(row['n_pairs'])})" if v == TOO_FEW else str(v) for v in verdicts]
    return words[0] if words[0] == words[1] else f"train: {words[0]}; test: {words[1]}"


TABLE1_HEADER = [
    "Dataset",
    "μ",
    "FedAvg<br>paper; Δ",
    "FedProx<br>paper; Δ",
    "Upcycled-FL<br>paper; Δ",
    "Upcycled − FedProx [95% CI]<br>train; test",
    "verdict (claims page)",
    "paper: Upcycled − FedProx",
]


def table1_rows(frame: pd.DataFrame) -> list[list[str]]:
    """The paper's layout: one line per data set x mu, FedAvg on the data set's first line only."""
    records = frame.to_dict("records")
    lines = []
    for dataset in dict.fromkeys(frame["dataset"]):
        mus = dataset_mus(frame, dataset) or [math.nan]
        for i, mu in enumerate(mus):
            line = [dataset_label(dataset) if i == 0 else "", "" if math.isnan(mu) else fmt_mu(mu)]
            up: dict = {}
            for alg in ("fedavg", "fedprox", "upcycled"):
                want = math.nan if alg == "fedavg" else mu
                hit = [
                    r
                    for r in records
                    if r["dataset"] == dataset
                    and r["algorithm"] == alg
                    and (missing(r["mu"]) if missing(want) else (not missing(r["mu"]) and abs(r["mu"] - want) < 1e-12))
                ]
                if not hit or (alg == "fedavg" and i > 0):
                    line.append("")
                    continue
                r = hit[0]
                up = r if alg == "upcycled" else up
                line.append(
                    f"{_ours(r)}<br>{_pair_text(r['paper_train_acc'], r['paper_test_acc'])}; "
                    f"{_pair_text(r['diff_train_acc'], r['diff_test_acc'], signed=True)}"
                )
            gains = [_ci_text(up, "train_acc"), _ci_text(up, "test_acc")]
            line += [
                "<br>".join(g for g in gains if g),
                verdict_cell(up),
                _pair_text(
                    up.get("paper_train_acc_gain", math.nan), up.get("paper_test_acc_gain", math.nan), signed=True
                ),
            ]
            lines.append(line)
    return lines


def settings_text(runs: pd.DataFrame) -> str:
    """The experiment's shared settings (stragglers, fraction, iterations per algorithm, epochs)."""
    parts = []
    for col, name in (
        ("straggler", "stragglers"),
        ("frac", "fraction"),
        ("epochs", "epochs E"),
        ("policy", "straggler policy"),
        ("straggler_draw", "straggler draw"),
    ):
        if col in runs.columns:
            parts.append(f"{name} {', '.join(sorted({fmt_mu(v) if not isinstance(v, str) else v for v in runs[col]}))}")
    iters = [
        f"{algorithm_label(str(a))} {', '.join(str(int(r)) for r in sorted(set(g['rounds'])))}"
        for a, g in runs.groupby("algorithm", sort=False)
    ]
    return "; ".join(parts + ["iterations: " + ", ".join(iters)])


def paper_notes(frame: pd.DataFrame) -> list[str]:
    """Notes typed beside the paper's values for the cells in the table."""
    pv = paper_values("table1")
    notes = []
    for r in pv[pv["note"].notna()].to_dict("records"):
        if r["dataset"] in set(frame["dataset"]):
            notes.append(
                f"- {r['label']}, {algorithm_label(r['algorithm'])}"
                f"{'' if missing(r['mu']) else ', μ = ' + fmt_mu(r['mu'])}: {r['note']}"
            )
    return notes


TABLE1_CAPTION = (
    "Training (testing) accuracy in % at the final iteration: mean ± sample std over seeds; paper: "
    "the paper's Table 1 value; Δ: ours − paper (percentage points). Upcycled − FedProx: the "
    "difference per seed (same seed, same device draws), its mean and 95% t interval; the verdict "
    f"is the claims page's (its rule: at least {MIN_PAIRS} paired seeds, the interval above 0 and reaching the "
    "paper's difference). The CSV adds the other reporting choices (max_*: the best "
    "value over iterations, last10_*: the mean of the last 10), which no verdict uses. A run whose "
    "weights or losses stopped being finite ('diverged k/n seeds') is left out of means, intervals "
    "and pairs."
)


def write_table1(runs: pd.DataFrame, out_prefix: str, provenance: str) -> pd.DataFrame:
    """Write ``<prefix>.csv``, ``.md`` and ``.tex`` for Table 1; return the CSV's frame."""
    frame = table1_frame(runs)
    rows = table1_rows(frame)
    settings = settings_text(runs)
    write_csv(f"{out_prefix}.csv", frame, provenance)
    sections = [TABLE1_CAPTION + f"\n\nSettings: {settings}.", markdown_table(TABLE1_HEADER, rows)]
    notes = paper_notes(frame)
    if notes:
        sections.append("Notes on the paper's values:\n\n" + "\n".join(notes))
    write_markdown(
        f"{out_prefix}.md",
        "Table 1: training (testing) accuracy of FedAvg, FedProx and Upcycled-FL" + data_and_seeds_title(runs),
        sections,
        provenance,
    )
    tex = latex_table(
        TABLE1_HEADER, rows, TABLE1_CAPTION + f" Settings: {settings}.", "tab:table1", "Provenance: " + provenance
    )
    write_text(f"{out_prefix}.tex", tex)
    return frame


def table2_row(data_dir: str) -> dict[str, Any]:
    """Our Table 2 row for a LEAF folder, the paper's row beside it (compared in the paper's reading)."""
    from ..data import DatasetError, dataset_stats, load_leaf

    try:
        stats = dataset_stats(load_leaf(data_dir))
    except (DatasetError, FileNotFoundError) as e:
        raise ReportError(f"table2: data set {data_dir}: {e}") from None
    name = os.path.basename(os.path.normpath(data_dir))
    pv = paper_values("table2")
    hit = pv[pv["dataset"] == name]
    paper = hit.iloc[0].to_dict() if not hit.empty else {}
    reading = paper.get("reading", "total")
    samples = stats["samples_total"] if reading == "total" else stats["samples_train"]
    from .collect import data_origin, origin_text

    origin = data_origin(data_dir)
    row = {
        "dataset": name,
        "label": dataset_label(name),
        "data_dir": data_dir,
        **origin,
        "data_origin": origin_text(*origin.values()),
        **{k: v for k, v in stats.items() if k != "dataset"},
        "reading": reading,
        "samples": samples,
        "mean": stats[f"per_device_{reading}_mean"],
        "std": stats[f"per_device_{reading}_std"],
    }
    for key in ("samples", "test", "devices", "mean", "std"):
        row[f"paper_{key}"] = paper.get(key, math.nan)
    ours = {
        "samples": samples,
        "test": stats["samples_test"],
        "devices": stats["devices"],
        "mean": row["mean"],
        "std": row["std"],
    }
    for key, value in ours.items():
        row[f"diff_{key}"] = value - row[f"paper_{key}"]
    return row


TABLE2_HEADER = [
    "Dataset",
    "Data",
    "Total",
    "Train",
    "Test",
    "Devices",
    "Mean per device",
    "Std per device",
    "paper: samples (test)",
    "paper: devices",
    "paper: mean",
    "paper: std",
    "paper's samples count",
]


def table2_rows(frame: pd.DataFrame) -> list[list[str]]:
    """Markdown rows of Table 2: the data's origin, our counts, then the paper's."""
    from .collect import is_generated

    lines = []
    for r in frame.to_dict("records"):
        paper = "" if missing(r["paper_samples"]) else f"{int(r['paper_samples'])} ({int(r['paper_test'])})"
        data = r["data_origin"] + (" — preview, not the paper's data" if is_generated(r["data_source"]) else "")
        lines.append(
            [
                r["label"],
                data,
                str(r["samples_total"]),
                str(r["samples_train"]),
                str(r["samples_test"]),
                str(r["devices"]),
                fmt(r["mean"], 1),
                fmt(r["std"], 1),
                paper,
                "" if missing(r["paper_devices"]) else str(int(r["paper_devices"])),
                fmt(r["paper_mean"], 0),
                fmt(r["paper_std"], 0),
                "" if not paper else ("train + test" if r["reading"] == "total" else "train"),
            ]
        )
    return lines


TABLE2_CAPTION = (
    "Data sets as used (computed from the data folders). Mean and std (population, ddof 0) of "
    "samples per device, counted as the paper's row counts them: train + test for the synthetic "
    "sets, training samples for FEMNIST and Sent140 (last column). Data: the authors' released draw, "
    "or our generator's draw (its setting and data_seed), whose counts need not match the paper's."
)


def write_table2(data_dirs: Sequence[str], out_prefix: str, provenance: str) -> pd.DataFrame:
    """Write ``<prefix>.csv`` and ``.md`` for Table 2; return the frame."""
    if not data_dirs:
        raise ReportError("table2: no data set folders given")
    for d in data_dirs:
        if not Path(d).is_dir():
            raise ReportError(f"table2: data set folder {d}: not found")
    frame = pd.DataFrame([table2_row(d) for d in data_dirs])
    write_csv(f"{out_prefix}.csv", frame, provenance)
    write_markdown(
        f"{out_prefix}.md",
        "Table 2: details of the data sets",
        [TABLE2_CAPTION, markdown_table(TABLE2_HEADER, table2_rows(frame))],
        provenance,
    )
    return frame
