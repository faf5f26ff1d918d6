"""``upfl privacy``: the per-device epsilons of a run config, without training.

    upfl privacy --config run.yaml [--set KEY=VALUE ...] [--json OUT] [--pld]

Reads the data set only for the devices and their |D_i|, builds the model only for its parameter
count d and its GLM constants, replays the engine's device draws to count each device's releases
M_i, and prints one row per device with the epsilons of :func:`upfl.privacy.privacy_report`
(docs/privacy.md explains them), their average epsilon-bar, and one ``worst`` row per accountant column
naming that column's own worst device. The sound epsilon (the guarantee) is the first column, the paper's
formula beside it; every value above the meaningful-guarantee rule carries ``*``.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import config as cfgmod
from . import plain_help

OUTPUT_COLUMNS = [
    ("sound", "eps sound (2tau) [guarantee]"),
    ("paper_formula", "eps paper C.1"),
    ("paper_sensitivity", "eps exact tau/|D|"),
    ("sound_rdp", "sound RDP"),
    ("sound_pld", "sound PLD"),
]
"""Output perturbation's columns: the sound epsilon, the guarantee, first; Theorem C.1 as printed beside it."""
OBJECTIVE_COLUMNS = [("theorem_c2", "eps C.2 (M_i terms)"), ("theorem_c2_paper_sum", "eps C.2 printed (M_i+1)")]


def load_config(path: str, settings: list[str] | None) -> cfgmod.RunConfig:
    """The run config at ``path`` with ``--set KEY=VALUE`` overrides (values read as YAML)."""
    doc = cfgmod.apply_settings(cfgmod.load_yaml(path), settings)
    return cfgmod.from_dict(doc)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _eps(v: Any) -> str:
    """An epsilon, with ``*`` when it gives no meaningful guarantee (above MEANINGFUL_EPSILON)."""
    from ..privacy.accounting import guarantee_mark

    return _fmt(v) + ("*" if isinstance(v, (int, float)) and guarantee_mark(float(v)) else "")


def worst_rows(rep: dict[str, Any], cols: list[tuple[str, str]]) -> list[list[str]]:
    """One row per accountant column: that column's worst device (name, |D_i|, M_i) and its epsilon in that column
    only; the devices of different columns may differ. A column without any epsilon has no row."""
    worst = rep.get("worst_device", {})
    rows = []
    for j, (key, header) in enumerate(cols):
        w = worst.get(key)
        if not w:
            continue
        cells = [""] * len(cols)
        cells[j] = _eps(w["epsilon"])
        rows.append([f"worst {header}: {w['device']}", str(w["n_train"]), str(w["releases"]), ""] + cells)
    return rows


def _meaningful_lines(rep: dict[str, Any], cols: list[tuple[str, str]]) -> list[str]:
    """The rule, then every column whose epsilon-bar and every column whose worst device is above it."""
    from ..privacy.accounting import MEANINGFUL_EPSILON, guarantee_mark

    lines = [
        f"* no meaningful guarantee: epsilon > {MEANINGFUL_EPSILON:g} (an adversary's odds on a record may grow "
        f"by more than e^{MEANINGFUL_EPSILON:g}; docs/privacy.md)"
    ]
    bar = [h for k, h in cols if guarantee_mark(rep["epsilon_bar"].get(k))]
    if bar:
        lines.append("NO MEANINGFUL GUARANTEE: epsilon-bar above the rule under " + ", ".join(bar))
    worst = rep.get("worst_device", {})
    marked = [f"{h} ({worst[k]['device']})" for k, h in cols if worst.get(k) and guarantee_mark(worst[k]["epsilon"])]
    if marked:
        lines.append("NO MEANINGFUL GUARANTEE for the worst device under " + ", ".join(marked))
    return lines


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) if j else h.ljust(w) for j, (h, w) in enumerate(zip(header, widths, strict=True)))]
    for r in rows:
        lines.append("  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def format_report(rep: dict[str, Any]) -> str:
    """The human-readable table of a :func:`upfl.privacy.privacy_report` dict."""
    head = (
        f"{rep['algorithm']}: {rep['iterations']} iterations, {rep['training_rounds']} training rounds "
        f"({rep['releases_rule']}); {rep['num_devices']} devices; d = {rep['num_params']} parameters"
    )
    lines = [f"privacy: mechanism {rep['mechanism']}", head]
    if rep["mechanism"] == "none":
        lines.append(f"guarantee: {rep['guarantee']}")
        return "\n".join(lines) + "\n"
    lines.append(f"neighbouring relation: {rep['neighbouring_relation']}; releases M_i {rep['releases_source']}")
    devs = rep["devices"]
    if rep["mechanism"] == "output":
        cols = [(k, h) for k, h in OUTPUT_COLUMNS if devs and k in devs[0]]
        lines.append(
            f"output perturbation: tau = {rep['parameters']['tau']}, delta = {rep['delta']!r}; "
            f"sensitivity sound 2*tau, paper tau/|D_i|"
        )
        lines.append(
            "guarantee: 'eps sound' (exact Gaussian accountant, sensitivity 2*tau); 'eps paper C.1' is "
            "Theorem C.1 as printed, for comparison only"
        )
        header = ["device", "|D_i|", "M_i", "sigma"] + [h for _, h in cols]
        rows = [
            [d["device"], str(d["n_train"]), str(d["releases"]), _fmt(d["sigma"])] + [_eps(d[k]) for k, _ in cols]
            for d in devs
        ]
        rows.append(["epsilon-bar", "", "", ""] + [_eps(rep["epsilon_bar"].get(k)) for k, _ in cols])
        rows += worst_rows(rep, cols)
    else:
        a = rep["assumptions"]
        lines.append(f"objective perturbation: {rep['guarantee']}; mu = {a['mu']}")
        if a["glm"]:
            failing = a["failing_devices"]
            verdict = f"fails for devices {failing}" if failing else "holds for every device"
            lines.append(
                f"assumptions (Theorem C.2): GLM with |L'| <= u1 = {a['u1']}, L'' <= u2 = {a['u2']}; "
                f"max feature norm {a['max_feature_norm']:.4g} (must be <= 1); {a['condition']}: {verdict}"
            )
        if not a["holds"]:
            lines.append(f"NO GUARANTEE: {a['reason']}")
        else:
            lines.append(
                "epsilon: pure (epsilon, 0)-DP of Theorem C.2 for the exact minimiser of the perturbed "
                "objective (the engine runs SGD: see the note)"
            )
        header = ["device", "|D_i|", "M_i", "alpha"] + [h for _, h in OBJECTIVE_COLUMNS]
        rows = [
            [d["device"], str(d["n_train"]), str(d["releases"]), _fmt(d["alpha"])]
            + [_eps(d[k]) if d[k] is not None else d["status"] for k, _ in OBJECTIVE_COLUMNS]
            for d in devs
        ]
        rows.append(
            ["epsilon-bar", "", "", ""]
            + [
                _eps(rep["epsilon_bar"][k]) if rep["epsilon_bar"][k] is not None else rep["guarantee"]
                for k, _ in OBJECTIVE_COLUMNS
            ]
        )
        cols = OBJECTIVE_COLUMNS
        rows += worst_rows(rep, cols)
    lines.append(_table(header, rows))
    lines += _meaningful_lines(rep, cols)
    lines += [f"note: {n}" for n in rep.get("notes", [])]
    return "\n".join(lines) + "\n"


def cmd_privacy(args: argparse.Namespace) -> int:
    from ..data.leaf import load_leaf
    from ..files import write_json
    from ..models import build_model
    from ..privacy.accounting import engine_noise_source, privacy_report

    cfg = load_config(args.config, args.set)
    dataset = load_leaf(cfg.data.path)
    model = build_model(cfg.model.name, dataset, cfg.model.options, cfg.model.softmax_before_loss)
    rep = privacy_report(
        cfg,
        dataset,
        model,
        cross_check=("rdp", "pld") if args.pld else ("rdp",),
        noise_source=engine_noise_source(cfg),
    )
    print(format_report(rep), end="")
    if args.json:
        write_json(args.json, rep)
        print(f"wrote {args.json}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``privacy``."""
    p = subparsers.add_parser(
        "privacy",
        help="per-device epsilons of a run config (no training)",
        description=plain_help(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help="run config YAML")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a run-config key, dotted (privacy.sigma=0.8); the value is read as YAML",
    )
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON")
    p.add_argument(
        "--pld",
        action="store_true",
        help="also cross-check the sound epsilon with dp-accounting's PLD accountant (seconds per "
        "distinct sigma and M_i; skipped where its grid would not fit in about 1 GiB)",
    )
    p.set_defaults(func=cmd_privacy)
    return p
