"""Private FedProx against private Upcycled-FL (Section 6 "Privacy-Accuracy Tradeoff", Appendix C).

The privacy table (:func:`write_privacy_table`): per data set and mechanism, final accuracies and
epsilon-bar of private FedProx, private Upcycled-FL at equal noise and at (about) equal epsilon-bar, and the
non-private references; then the paper's claims (``paper_values/privacy.csv``) beside ours. The trade-off figure
drawn from the same settings is :mod:`upfl.report.privacy_tradeoff`.

**Variants.** A *setting* is the runs (seeds) of one data set x mechanism x algorithm x noise level
(sigma and tau for output perturbation, alpha for objective perturbation). Within a data set and
mechanism every noise level of private FedProx is a *reference*; the private Upcycled-FL setting at
the same noise level is the *equal-noise* variant, and of the other Upcycled-FL noise levels the one
whose epsilon-bar (sound accountant for output perturbation, Theorem C.2 for objective perturbation)
is closest to the reference's is the *equal-epsilon* variant (its epsilon-bar ratio to FedProx's is
printed, so the reader sees how equal it is). Nothing depends on the experiment's names or on the
particular noise values of the config.

**Epsilon-bar** is the average over devices of the per-device epsilon (``summary.json["privacy"]``,
computed by :mod:`upfl.privacy.accounting` without training), averaged over seeds when the device
draws make it differ between seeds (not with every device in every round).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ..files import write_text
from ..names import ACCOUNTANTS as NAMED_ACCOUNTANTS
from ..names import PRIVACY_MECHANISMS, accountants_of, guarantee_accountant
from ..privacy.accounting import (
    MEANINGFUL_EPSILON,
    NEIGHBOURING_NOTE,
    NO_GLM,
    NO_MEANINGFUL,
    OFF_BY_ONE_NOTE,
    OUTPUT_NOTE,
    SGD_CAVEAT,
    SHARED_NOISE_NOTE,
    TRAIN_METRICS_NOTE,
    meaningful,
)
from .cells import check_one_config, missing, paired, records
from .collect import ReportError, converged, diverged_note
from .paper_numbers import algorithm_label, dataset_label, dataset_order, paper_values
from .render import as_number, fmt, latex_table, markdown_table, write_csv, write_markdown
from .stats import LEVEL, mean_interval

ACC = ("train_acc", "test_acc")
MECHANISMS = ("objective", "output")
"""In the paper's order (Figure 3: (a)(b) objective, (c)(d) output perturbation)."""

ACCOUNTANTS = {mech: accountants_of(mech) for mech in PRIVACY_MECHANISMS}
"""The ``epsilon_bar`` entries of ``summary.json["privacy"]`` per mechanism (upfl.names.ACCOUNTANTS), the guarantee
first."""
PRIMARY = {mech: guarantee_accountant(mech) for mech in PRIVACY_MECHANISMS}
"""The accountant that picks the equal-epsilon variant."""
ACCOUNTANT_LABELS = {name: a.label for name, a in NAMED_ACCOUNTANTS.items()}
MARK_NOTE = (
    f"ε̄ [worst device]: the mean over devices and, in brackets, the largest device ε (max over seeds) "
    "and that device, each accountant's own; "
    f"† {NO_MEANINGFUL}: the mean or the worst device is above {MEANINGFUL_EPSILON:g} (docs/privacy.md, "
    "'Which epsilons mean something')."
)
MECHANISM_LABELS = {"output": "Output perturbation", "objective": "Objective perturbation"}

VARIANTS = (
    "fedprox_private",
    "upcycled_equal_noise",
    "upcycled_equal_epsilon",
    "fedprox_nonprivate",
    "upcycled_nonprivate",
)
VARIANT_LABELS = {
    "fedprox_private": "FedProx, private",
    "upcycled_equal_noise": "Upcycled-FL, private, equal noise",
    "upcycled_equal_epsilon": "Upcycled-FL, private, equal ε̄",
    "fedprox_nonprivate": "FedProx, non-private",
    "upcycled_nonprivate": "Upcycled-FL, non-private",
}
PROTOCOL_VARIANT = {"equal noise": "upcycled_equal_noise", "equal epsilon": "upcycled_equal_epsilon"}


def _text(value: Any) -> str:
    """A noise parameter as printed: ``1``, ``0.7071``; a per-device list (JSON text) as given."""
    number = as_number(value)
    if not math.isnan(number):
        return f"{number:g}"
    return "" if missing(value) else str(value)


def noise_text(mechanism: str, row: dict) -> str:
    """``σ = 1, τ = 10`` (output), ``α = 10`` (objective), ``non-private``."""
    if mechanism == "output":
        return f"σ = {_text(row.get('sigma'))}, τ = {_text(row.get('tau'))}"
    if mechanism == "objective":
        return f"α = {_text(row.get('alpha'))}"
    return "non-private"


def noise_value(mechanism: str, row: dict) -> float:
    """The number that orders noise levels: sigma (output), alpha (objective; more alpha is less noise)."""
    return as_number(row.get("sigma" if mechanism == "output" else "alpha"))


def eps_column(accountant: str) -> str:
    return f"privacy_epsilon_bar_{accountant}"


# ---------------------------------------------------------------------------------------------
# Settings: the seeds of one data set x mechanism x algorithm x noise level


def _mechanisms(runs: pd.DataFrame) -> pd.Series:
    return (
        runs["mechanism"].fillna("none").astype(str)
        if "mechanism" in runs.columns
        else pd.Series("none", index=runs.index)
    )


def iter_settings(runs: pd.DataFrame):
    """(dataset, mechanism, algorithm, noise text, runs) per setting, in the paper's data set order. The mechanism
    and noise text are grouping keys beside the table (not columns added to a copy of it and dropped from each
    group: a copy of the 140-column runs table per setting)."""
    mechs = _mechanisms(runs)
    noise = pd.Series(
        [noise_text(m, r) for m, r in zip(mechs, records(runs, ["sigma", "tau", "alpha"]), strict=True)],
        index=runs.index,
        dtype=object,
    )
    for dataset in dataset_order(runs["dataset"]):
        mask = (runs["dataset"] == dataset).to_numpy()
        sub = runs[mask]
        for (mech, alg, text), grp in sub.groupby([mechs[mask], sub["algorithm"], noise[mask]], sort=True):
            yield dataset, mech, alg, text, grp


def setting_row(dataset: str, mech: str, alg: str, noise: str, cell: pd.DataFrame) -> dict[str, Any]:
    """Final accuracies (%, mean, min and max over seeds), times and epsilon-bar (mean over seeds) of a setting."""
    what = f"privacy setting {dataset} / {mech} / {algorithm_label(alg)} / {noise}"
    check_one_config(cell, what)
    if cell["seed"].duplicated().any():
        raise ReportError(f"{what}: several runs with the same seed ({sorted(cell['seed'])})")
    first = cell.iloc[0].to_dict()
    note, cell = diverged_note(cell), converged(cell)
    row: dict[str, Any] = {
        "dataset": dataset,
        "label": dataset_label(dataset),
        "mechanism": mech,
        "algorithm": alg,
        "noise": noise,
        "noise_value": noise_value(mech, first),
        "sigma": first.get("sigma"),
        "tau": first.get("tau"),
        "alpha": first.get("alpha"),
        "delta": first.get("delta"),
        "mu": first.get("mu"),
        "lam": first.get("lam"),
        "model": first.get("model"),
        "rounds": int(first["rounds"]),
        "training_rounds": as_number(first.get("training_rounds")),
        "n_seeds": len(cell),
        "seeds": " ".join(str(int(s)) for s in sorted(cell["seed"])),
        "diverged": note,
    }
    for key in ACC:
        values = cell[f"final_{key}"].astype(float) * 100.0
        row.update(
            {f"{key}_mean": float(values.mean()), f"{key}_min": float(values.min()), f"{key}_max": float(values.max())}
        )
    if {"time_train_s", "time_upcycle_s"} <= set(cell.columns):
        row["training_s_mean"] = float(
            (cell["time_train_s"].astype(float) + cell["time_upcycle_s"].astype(float)).mean()
        )
    for acc in ACCOUNTANTS.get(mech, ()):
        col, worst = eps_column(acc), f"privacy_epsilon_max_{acc}"
        row[f"eps_{acc}"] = float(cell[col].astype(float).mean()) if col in cell.columns else math.nan
        row[f"epsmax_{acc}"] = float(cell[worst].astype(float).max()) if worst in cell.columns else math.nan
        row[f"worstdev_{acc}"] = worst_device(cell, acc)
        top = max((v for v in (row[f"eps_{acc}"], row[f"epsmax_{acc}"]) if not math.isnan(v)), default=math.nan)
        row[f"meaningful_{acc}"] = meaningful(top)
    if "privacy_guarantee" in cell.columns:
        row["guarantee"] = "; ".join(sorted({str(g) for g in cell["privacy_guarantee"].dropna()}))
    if (
        mech == "objective"
        and "privacy_assumptions_glm" in cell.columns
        and any(str(v).lower() == "false" for v in cell["privacy_assumptions_glm"])
    ):
        row["guarantee"] = NO_GLM
    row["_cell"] = cell
    return row


def worst_device(cell: pd.DataFrame, accountant: str) -> str | None:
    """The device with the largest ``accountant`` epsilon over the seeds of a setting (runs.csv
    ``privacy_worst_device_<accountant>_device`` of the seed whose worst epsilon is largest), or None."""
    eps, name = f"privacy_worst_device_{accountant}_epsilon", f"privacy_worst_device_{accountant}_device"
    if eps not in cell.columns or name not in cell.columns or cell[eps].astype(float).isna().all():
        return None
    worst_seed = cell[eps].astype(float).idxmax()
    return str(cell.at[worst_seed, name])


def _primary_eps(row: dict) -> float:
    return as_number(row.get(f"eps_{PRIMARY[row['mechanism']]}")) if row["mechanism"] in PRIMARY else math.nan


def blocks(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """One block per data set x mechanism x private FedProx noise level, with its variants' setting rows."""
    settings = [setting_row(*s) for s in iter_settings(runs)]
    if not settings:
        raise ReportError("privacy: no runs")
    out = []
    for dataset in dataset_order([s["dataset"] for s in settings]):
        mine = [s for s in settings if s["dataset"] == dataset]
        plain = {s["algorithm"]: s for s in mine if s["mechanism"] == "none"}
        for mech in MECHANISMS:
            prox = sorted(
                [s for s in mine if s["mechanism"] == mech and s["algorithm"] == "fedprox"],
                key=lambda s: (s["noise_value"], s["noise"]),
            )
            ups = [s for s in mine if s["mechanism"] == mech and s["algorithm"] == "upcycled"]
            for ref in prox:
                same = [s for s in ups if s["noise"] == ref["noise"]]
                others = [s for s in ups if s["noise"] != ref["noise"] and not math.isnan(_primary_eps(s))]
                target = _primary_eps(ref)
                eq_eps = (
                    min(others, key=lambda s: abs(_primary_eps(s) - target))
                    if others and not math.isnan(target)
                    else None
                )
                variants = {
                    "fedprox_private": ref,
                    "upcycled_equal_noise": same[0] if same else None,
                    "upcycled_equal_epsilon": eq_eps,
                    "fedprox_nonprivate": plain.get("fedprox"),
                    "upcycled_nonprivate": plain.get("upcycled"),
                }
                out.append(
                    {
                        "dataset": dataset,
                        "mechanism": mech,
                        "reference": ref["noise"],
                        "variants": {k: v for k, v in variants.items() if v is not None},
                    }
                )
    if not out:
        raise ReportError(
            "privacy: no private FedProx runs (mechanism output or objective) among the selected runs; "
            "the table compares private Upcycled-FL with private FedProx"
        )
    return out


def privacy_frame(runs: pd.DataFrame, settings: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """The table's rows: one per block x variant (``settings``: the :func:`blocks` of ``runs`` where the caller
    has them; they are read, not changed)."""
    rows = []
    for b in blocks(runs) if settings is None else settings:
        ref_eps = _primary_eps(b["variants"]["fedprox_private"])
        for variant in VARIANTS:
            s = b["variants"].get(variant)
            if s is None:
                continue
            row = {k: v for k, v in s.items() if k != "_cell"}
            row.update(
                {
                    "block_mechanism": b["mechanism"],
                    "reference_noise": b["reference"],
                    "variant": variant,
                    "variant_label": VARIANT_LABELS[variant],
                }
            )
            if s["mechanism"] == b["mechanism"] and not math.isnan(ref_eps) and ref_eps > 0:
                row["eps_ratio_to_fedprox"] = _primary_eps(s) / ref_eps
            rows.append(row)
    frame = pd.DataFrame(rows)
    lead = ["dataset", "label", "block_mechanism", "reference_noise", "variant", "variant_label"]
    return frame[lead + [c for c in frame.columns if c not in lead]]


# ---------------------------------------------------------------------------------------------
# The paper's claims


def _holds_text(holds: Any) -> str:
    if holds is None or missing(holds):
        return "n/a (under 2 paired seeds)"
    return "holds" if holds else "does not hold"


def _claim_base(claim: dict, dataset: str, block: dict | None, up: dict | None) -> dict[str, Any]:
    return {
        "mechanism": claim["mechanism"],
        "claim": claim["claim"],
        "protocol": claim["protocol"],
        "dataset": dataset,
        "label": dataset_label(dataset) if dataset != "all" else "all (pooled)",
        "reference_noise": block["reference"] if block else "",
        "upcycled_noise": up["noise"] if up else "",
        "paper_value": claim["paper_value"],
        "paper_direction": claim["direction"],
        "paper_text": claim["paper_text"],
        "source": claim["source"],
    }


def _privacy_loss(claim: dict, block: dict, up: dict, prox: dict) -> list[dict[str, Any]]:
    rows = []
    for acc in ACCOUNTANTS[claim["mechanism"]]:
        if acc == "theorem_c2_paper_sum":
            continue
        a, b = as_number(up.get(f"eps_{acc}")), as_number(prox.get(f"eps_{acc}"))
        value = (b - a) / b * 100.0 if b > 0 else math.nan
        holds = None if math.isnan(value) else bool(value > 0)
        rows.append(
            {
                **_claim_base(claim, block["dataset"], block, up),
                "accountant": acc,
                "unit": "% less ε̄",
                "ours": value,
                "ci_low": math.nan,
                "ci_high": math.nan,
                "n_pairs": min(prox["n_seeds"], up["n_seeds"]),
                "eps_fedprox": b,
                "eps_upcycled": a,
                "holds": holds,
                "holds_text": _holds_text(holds),
            }
        )
    return rows


def _pairs(claim: str, up: pd.DataFrame, prox: pd.DataFrame) -> pd.Series:
    """Per seed: accuracy gain (percentage points) or training-time reduction (%), Upcycled-FL vs FedProx."""
    if claim in ACC:
        p = paired(up, prox, f"final_{claim}")
        return (p["a"].astype(float) - p["b"].astype(float)) * 100.0
    times = {}
    for name, cell in (("up", up), ("prox", prox)):
        c = cell.copy()
        c["_t"] = c["time_train_s"].astype(float) + c["time_upcycle_s"].astype(float)
        times[name] = c
    p = paired(times["up"], times["prox"], "_t")
    return (1.0 - p["a"] / p["b"]) * 100.0


def _interval_row(
    claim: dict, dataset: str, block: dict | None, up: dict | None, values: pd.Series, **extra
) -> dict[str, Any]:
    ci = mean_interval(values, LEVEL)
    holds = None if ci.above_zero is None else bool(ci.above_zero)
    unit = "% less training time" if claim["claim"] == "time" else "percentage points"
    return {
        **_claim_base(claim, dataset, block, up),
        "accountant": "",
        "unit": unit,
        "ours": ci.mean,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "n_pairs": ci.n,
        "holds": holds,
        "holds_text": _holds_text(holds),
        **extra,
    }


def privacy_claims_frame(
    runs: pd.DataFrame, paper: pd.DataFrame | None = None, settings: list[dict[str, Any]] | None = None
) -> pd.DataFrame:
    """Our value of every claim of ``paper_values/privacy.csv`` per block, and pooled over the paper's data sets.

    privacy_loss: (eps_FedProx - eps_Upcycled) / eps_FedProx x 100 in the claim's protocol, per accountant
    (deterministic: holds when > 0). train_acc / test_acc: Upcycled-FL minus FedProx per seed in percentage
    points; time: 1 - Upcycled / FedProx training time per seed in %; mean and 95% t interval, holds when
    the interval lies above 0. The pooled rows join the per-seed values (mean the per-data-set values for
    privacy_loss) of the data sets the paper names, or of every data set when none of them is present.
    ``settings``: the :func:`blocks` of ``runs`` where the caller has them.
    """
    paper = paper_values("privacy") if paper is None else paper
    bl = blocks(runs) if settings is None else settings
    rows = []
    pooled: dict[tuple, dict[str, Any]] = {}
    for claim in paper.to_dict("records"):
        mech = claim["mechanism"]
        named = set(str(claim["paper_datasets"]).split(";"))
        mine = [b for b in bl if b["mechanism"] == mech]
        chosen = [b for b in mine if b["dataset"] in named] or mine
        for b in mine:
            prox = b["variants"]["fedprox_private"]
            up = b["variants"].get(PROTOCOL_VARIANT[claim["protocol"]])
            if up is None:
                continue
            if claim["claim"] == "privacy_loss":
                new = _privacy_loss(claim, b, up, prox)
            else:
                values = _pairs(claim["claim"], up["_cell"], prox["_cell"])
                new = [_interval_row(claim, b["dataset"], b, up, values)]
                if b in chosen:
                    pooled.setdefault(
                        (mech, claim["claim"], b["reference"]),
                        {"claim": claim, "block": b, "values": [], "datasets": []},
                    )
                    entry = pooled[(mech, claim["claim"], b["reference"])]
                    entry["values"].append(values)
                    entry["datasets"].append(b["dataset"])
            for r in new:
                r["paper_dataset"] = b["dataset"] in named
                if claim["claim"] == "privacy_loss" and b in chosen:
                    key = (mech, "privacy_loss", b["reference"], r["accountant"])
                    pooled.setdefault(key, {"claim": claim, "block": b, "rows": [], "datasets": []})
                    pooled[key]["rows"].append(r)
                    pooled[key]["datasets"].append(b["dataset"])
            rows += new
    for key, entry in pooled.items():
        if len(entry["datasets"]) < 2:
            continue
        claim, b = entry["claim"], entry["block"]
        if "rows" in entry:
            gains = [r["ours"] for r in entry["rows"]]
            mean = sum(gains) / len(gains)
            holds = all(v > 0 for v in gains)
            rows.append(
                {
                    **_claim_base(claim, "all", b, None),
                    "accountant": key[3],
                    "unit": "% less ε̄",
                    "ours": mean,
                    "ci_low": math.nan,
                    "ci_high": math.nan,
                    "n_pairs": math.nan,
                    "holds": holds,
                    "holds_text": _holds_text(holds),
                    "paper_dataset": True,
                    "pooled_datasets": ";".join(entry["datasets"]),
                }
            )
        else:
            rows.append(
                _interval_row(
                    claim,
                    "all",
                    b,
                    None,
                    pd.concat(entry["values"], ignore_index=True),
                    paper_dataset=True,
                    pooled_datasets=";".join(entry["datasets"]),
                )
            )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    order = {m: i for i, m in enumerate(MECHANISMS)}
    claim_order = {c: i for i, c in enumerate(("privacy_loss", "train_acc", "test_acc", "time"))}
    frame["_o"] = [
        (order.get(m, 9), claim_order.get(c, 9), d == "all")
        for m, c, d in zip(frame["mechanism"], frame["claim"], frame["dataset"], strict=True)
    ]
    return frame.sort_values("_o", kind="stable").drop(columns="_o").reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Writing the table


def _acc_text(row: dict, key: str) -> str:
    note = row.get("diverged") or ""
    mean = row.get(f"{key}_mean")
    if missing(mean):
        return note if isinstance(note, str) else ""
    text = fmt(mean) if row["n_seeds"] < 2 else f"{fmt(mean)} [{fmt(row[f'{key}_min'])}, {fmt(row[f'{key}_max'])}]"
    return f"{text}; {note}" if isinstance(note, str) and note else text


def _eps_text(row: dict, acc: str) -> str:
    if row["mechanism"] == "none":
        return "∞ (no noise)"
    value = row.get(f"eps_{acc}")
    if missing(value):
        return row.get("guarantee") or "no guarantee"
    worst, device = row.get(f"epsmax_{acc}"), row.get(f"worstdev_{acc}")
    at = "" if missing(device) else f", device {device}"
    text = fmt(value, 3) + ("" if missing(worst) else f" [{fmt(worst, 3)}{at}]")
    return text + (" †" if row.get(f"meaningful_{acc}") is False else "")


def _iterations_text(row: dict) -> str:
    tr = row.get("training_rounds")
    return f"{row['rounds']} ({'' if tr is None or missing(tr) else int(tr)})"


def _ratio_text(row: dict) -> str:
    if row["variant"] == "fedprox_private" or missing(row.get("eps_ratio_to_fedprox")):
        return ""
    return fmt(row["eps_ratio_to_fedprox"], 3)


def table_header(mech: str) -> list[str]:
    eps = (
        [f"ε̄ [worst device] {ACCOUNTANT_LABELS[a]}" for a in ACCOUNTANTS["output"]]
        if mech == "output"
        else [f"ε̄ [worst device] {ACCOUNTANT_LABELS[PRIMARY['objective']]}"]
    )
    return (
        [
            "Dataset",
            "Variant",
            "Noise",
            "Iterations (training rounds)",
            "Seeds",
            "Train acc % mean [min, max] (outside the privacy guarantee)",
            "Test acc % mean [min, max]",
        ]
        + eps
        + [f"ε̄ / FedProx's ({PRIMARY[mech]})"]
    )


def table_rows(frame: pd.DataFrame, mech: str) -> list[list[str]]:
    lines = []
    sub = frame[frame["block_mechanism"] == mech]
    last = None
    accs = ACCOUNTANTS["output"] if mech == "output" else (PRIMARY["objective"],)
    for r in sub.to_dict("records"):
        block = (r["dataset"], r["reference_noise"])
        first = block != last
        last = block
        lines.append(
            [
                r["label"] if first else "",
                r["variant_label"],
                r["noise"],
                _iterations_text(r),
                str(int(r["n_seeds"])),
                _acc_text(r, "train_acc"),
                _acc_text(r, "test_acc"),
                *[_eps_text(r, a) for a in accs],
                _ratio_text(r),
            ]
        )
    return lines


CLAIMS_HEADER = [
    "Mechanism",
    "Claim",
    "Protocol",
    "Dataset",
    "Upcycled-FL vs FedProx",
    "Accountant",
    "Ours",
    "95% CI",
    "Pairs",
    "Claim holds",
    "Paper",
]
CLAIM_NAMES = {
    "privacy_loss": "less privacy loss ε̄",
    "train_acc": "higher training accuracy",
    "test_acc": "higher test accuracy",
    "time": "less training time",
}


def privacy_claims_rows(claims: pd.DataFrame) -> list[list[str]]:
    lines = []
    for r in claims.to_dict("records"):
        unit = {"% less ε̄": "%", "percentage points": " pp", "% less training time": "%"}[r["unit"]]
        ours = "" if missing(r["ours"]) else f"{fmt(r['ours'], 1, signed=r['unit'] == 'percentage points')}{unit}"
        ci = (
            "" if missing(r["ci_low"]) else f"[{fmt(r['ci_low'], 1, signed=True)}, {fmt(r['ci_high'], 1, signed=True)}]"
        )
        versus = (
            f"{r['upcycled_noise']} vs {r['reference_noise']}"
            if r["upcycled_noise"]
            else f"FedProx {r['reference_noise']}"
        )
        if r["dataset"] == "all":
            versus += f" (pooled: {', '.join(dataset_label(d) for d in str(r['pooled_datasets']).split(';'))})"
        paper = f"{r['paper_value']:g}% {r['paper_direction']}" + (" (read as pp here)" if r["claim"] in ACC else "")
        lines.append(
            [
                MECHANISM_LABELS[r["mechanism"]].split()[0],
                CLAIM_NAMES[r["claim"]],
                r["protocol"],
                r["label"] + ("" if r.get("paper_dataset", True) else " (not in the paper)"),
                versus,
                ACCOUNTANT_LABELS.get(r["accountant"], "") if r["accountant"] else "",
                ours,
                ci,
                "" if missing(r["n_pairs"]) else str(int(r["n_pairs"])),
                r["holds_text"],
                paper,
            ]
        )
    return lines


CAPTION = (
    "Private FedProx and private Upcycled-FL (Section 6, Appendix C). Accuracy: final iteration, % "
    "mean [min, max] over seeds (the paper's convention: mean and range of its repeated runs). ε̄: the "
    "average over devices of each device's ε (per seed, averaged over seeds). Iterations T and, in "
    "brackets, training rounds: each training round is one noisy release per participating device; "
    "Upcycled-FL's even iterations release nothing new (Lemma 5.1). Variants: within a data set and "
    "mechanism, private FedProx's noise level is the reference; Upcycled-FL at the same noise is 'equal "
    "noise'; of its other noise levels the one with ε̄ closest to FedProx's is 'equal ε̄' (last column: "
    "its ε̄ over FedProx's)."
)

CLAIMS_NOTE = (
    "Claims (paper_values/privacy.csv, Section 6): privacy loss: (ε̄_FedProx − ε̄_Upcycled) / "
    "ε̄_FedProx in the equal-noise protocol, under each accountant (a property of the configuration, "
    "not of the training: holds when above 0). Accuracy: Upcycled-FL (equal-ε̄ variant) minus private "
    "FedProx per seed (same seed, same device draws), in percentage points, mean and 95% t interval; "
    "holds when the interval lies above 0. The paper writes '11.0% higher' without saying whether it "
    "means points or a relative gain; its magnitude is printed beside ours. Time: 1 − Upcycled / "
    "FedProx training time (train_s + upcycle_s of summary.json, evaluation and the rounds' draws excluded) "
    "per seed, at "
    "equal iterations. Pooled rows join the data sets the paper names."
)


def write_privacy_table(runs: pd.DataFrame, out_prefix: str, provenance: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write ``<prefix>.csv`` (variant rows, then claim rows), ``.md`` and ``.tex``; return both frames."""
    from .figures import seed_keyed_runs
    from .tables import settings_text

    settings = blocks(runs)  # once for both frames: a setting's row is a tenth of a second of pandas in a table
    frame = privacy_frame(runs, settings)
    claims = privacy_claims_frame(runs, settings=settings)
    both = pd.concat([frame.assign(section="variants"), claims.assign(section="claims")], ignore_index=True, sort=False)
    both = both[["section"] + [c for c in both.columns if c != "section"]]
    write_csv(f"{out_prefix}.csv", both, provenance)
    mechs = [m for m in MECHANISMS if m in set(frame["block_mechanism"])]
    deltas = sorted({as_number(d) for d in frame.loc[frame["mechanism"] == "output", "delta"]} - {math.nan})
    sections = [CAPTION + f"\n\nSettings: {settings_text(runs)}."]
    tex = []
    for mech in mechs:
        title = MECHANISM_LABELS[mech] + (
            f" (δ = {', '.join(f'{d:g}' for d in deltas)})"
            if mech == "output" and deltas
            else " (pure ε-DP, δ = 0)"
            if mech == "objective"
            else ""
        )
        notes = (
            [MARK_NOTE]
            + ([SHARED_NOISE_NOTE] if seed_keyed_runs(runs, mech) else [])
            + [TRAIN_METRICS_NOTE, NEIGHBOURING_NOTE]
        )
        notes += (
            [OUTPUT_NOTE]
            if mech == "output"
            else [
                "Epsilons assume the exact minimiser: " + SGD_CAVEAT,
                OFF_BY_ONE_NOTE,
                f"'{NO_GLM}': the model is not a generalized linear model, Theorem C.2 does not apply.",
            ]
        )
        header, rows = table_header(mech), table_rows(frame, mech)
        sections += [f"## {title}\n", markdown_table(header, rows), "\n".join(f"- {n}" for n in notes)]
        tex.append(
            latex_table(header, rows, f"{title}. " + CAPTION, f"tab:privacy_{mech}", "Provenance: " + provenance)
        )
    if not claims.empty:
        rows = privacy_claims_rows(claims)
        sections += ["## The paper's claims beside ours\n", CLAIMS_NOTE + "\n", markdown_table(CLAIMS_HEADER, rows)]
        tex.append(
            latex_table(
                CLAIMS_HEADER,
                rows,
                "The paper's privacy claims beside ours. " + CLAIMS_NOTE,
                "tab:privacy_claims",
                "Provenance: " + provenance,
            )
        )
    write_markdown(f"{out_prefix}.md", "Privacy: private FedProx and private Upcycled-FL", sections, provenance)
    write_text(f"{out_prefix}.tex", "\n".join(tex))
    return frame, claims


__all__ = ["privacy_frame", "privacy_claims_frame", "write_privacy_table", "blocks", "iter_settings"]
