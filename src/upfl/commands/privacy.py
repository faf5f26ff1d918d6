"""``upfl privacy``: the per-device epsilons of a run config, without training.

    upfl privacy --config run.yaml [--set KEY=VALUE ...] [--json OUT] [--pld]

Reads the data set only for the devices and their |D_i|, builds the model only for its parameter
count d and its GLM constants, replays the engine's device draws to count each device's releases
M_i, and prints one row per device with the epsilons of :func:`upfl.privacy.privacy_report`
(docs/privacy.md explains them) and their average epsilon-bar.
"""

from __future__ import annotations

import argparse
from typing import Any


from .. import config as cfgmod

OUTPUT_COLUMNS = [("paper_formula", "eps paper C.1"), ("sound", "eps sound (2tau)"),
                  ("paper_sensitivity", "eps exact tau/|D|"), ("sound_rdp", "sound RDP"), ("sound_pld", "sound PLD")]
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


def _worst_row(rep: dict[str, Any], keys: list[str]) -> list[str]:
    """The worst device per column: its epsilon (and, for the first column, the device)."""
    worst = rep.get("worst_device", {})
    first = worst.get(keys[0]) if keys else None
    name = f"worst: {first['device']}" if first else "worst device"
    size = str(first["n_train"]) if first else ""
    releases = str(first["releases"]) if first else ""
    return [name, size, releases, ""] + [_eps(rep.get("epsilon_max", {}).get(k)) for k in keys]


def _meaningful_lines(rep: dict[str, Any], keys: list[str]) -> list[str]:
    from ..privacy.accounting import MEANINGFUL_EPSILON, guarantee_mark

    marked = [k for k in keys if guarantee_mark(rep.get("epsilon_max", {}).get(k))]
    lines = [f"* no meaningful guarantee: epsilon > {MEANINGFUL_EPSILON:g} (an adversary's odds on a record may grow "
             f"by more than e^{MEANINGFUL_EPSILON:g}; docs/privacy.md)"]
    bar = [k for k in keys if guarantee_mark(rep["epsilon_bar"].get(k))]
    if bar:
        lines.append("NO MEANINGFUL GUARANTEE: epsilon-bar above the rule for " + ", ".join(bar))
    elif marked:
        lines.append("NO MEANINGFUL GUARANTEE for the worst device under " + ", ".join(marked))
    return lines


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) if j else h.ljust(w) for j, (h, w) in enumerate(zip(header, widths)))]
    for r in rows:
        lines.append("  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def format_report(rep: dict[str, Any]) -> str:
    """The human-readable table of a :func:`upfl.privacy.privacy_report` dict."""
    head = (f"{rep['algorithm']}: {rep['iterations']} iterations, {rep['training_rounds']} training rounds "
            f"({rep['releases_rule']}); {rep['num_devices']} devices; d = {rep['num_params']} parameters")
    lines = [f"privacy: mechanism {rep['mechanism']}", head]
    if rep["mechanism"] == "none":
        lines.append(f"guarantee: {rep['guarantee']}")
        return "\n".join(lines) + "\n"
    devs = rep["devices"]
    if rep["mechanism"] == "output":
        cols = [(k, h) for k, h in OUTPUT_COLUMNS if devs and k in devs[0]]
        lines.append(f"output perturbation: tau = {rep['parameters']['tau']}, delta = {rep['delta']!r}; "
                     f"sensitivity sound 2*tau, paper tau/|D_i|")
        header = ["device", "|D_i|", "M_i", "sigma"] + [h for _, h in cols]
        rows = [[d["device"], str(d["n_train"]), str(d["releases"]), _fmt(d["sigma"])] + [_eps(d[k]) for k, _ in cols]
                for d in devs]
        rows.append(["epsilon-bar", "", "", ""] + [_eps(rep["epsilon_bar"].get(k)) for k, _ in cols])
        rows.append(_worst_row(rep, [k for k, _ in cols]))
        keys = [k for k, _ in cols]
    else:
        a = rep["assumptions"]
        lines.append(f"objective perturbation: {rep['guarantee']}; mu = {a['mu']}")
        if a["glm"]:
            lines.append(f"assumptions (Theorem C.2): GLM with |L'| <= u1 = {a['u1']}, L'' <= u2 = {a['u2']}; "
                         f"max feature norm {a['max_feature_norm']:.4g} (must be <= 1); {a['condition']}: "
                         f"{'holds for every device' if not a['failing_devices'] else 'fails for devices ' + str(a['failing_devices'])}")
        if not a["holds"]:
            lines.append(f"NO GUARANTEE: {a['reason']}")
        else:
            lines.append("epsilon: pure (epsilon, 0)-DP of Theorem C.2 for the exact minimiser of the perturbed "
                         "objective (the engine runs SGD: see the note)")
        header = ["device", "|D_i|", "M_i", "alpha"] + [h for _, h in OBJECTIVE_COLUMNS]
        rows = [[d["device"], str(d["n_train"]), str(d["releases"]), _fmt(d["alpha"])]
                + [_eps(d[k]) if d[k] is not None else d["status"] for k, _ in OBJECTIVE_COLUMNS]
                for d in devs]
        rows.append(["epsilon-bar", "", "", ""]
                    + [_eps(rep["epsilon_bar"][k]) if rep["epsilon_bar"][k] is not None else rep["guarantee"]
                       for k, _ in OBJECTIVE_COLUMNS])
        keys = [k for k, _ in OBJECTIVE_COLUMNS]
        if any(v is not None for v in rep.get("epsilon_max", {}).values()):
            rows.append(_worst_row(rep, keys))
    lines.append(_table(header, rows))
    lines += _meaningful_lines(rep, keys)
    lines += [f"note: {n}" for n in rep.get("notes", [])]
    return "\n".join(lines) + "\n"


def cmd_privacy(args: argparse.Namespace) -> int:
    from ..data.leaf import load_leaf
    from ..files import write_json
    from ..models import build_model
    from ..privacy.accounting import privacy_report

    cfg = load_config(args.config, args.set)
    dataset = load_leaf(cfg.data.path)
    model = build_model(cfg.model.name, dataset, cfg.model.options, cfg.model.softmax_before_loss)
    rep = privacy_report(cfg, dataset, model, cross_check=("rdp", "pld") if args.pld else ("rdp",))
    print(format_report(rep), end="")
    if args.json:
        write_json(args.json, rep)
        print(f"wrote {args.json}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``privacy``."""
    p = subparsers.add_parser("privacy", help="per-device epsilons of a run config (no training)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="run config YAML")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a run-config key, dotted (privacy.sigma=0.8); the value is read as YAML")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON")
    p.add_argument("--pld", action="store_true",
                   help="also cross-check the sound epsilon with dp-accounting's PLD accountant (seconds per "
                        "distinct sigma and M_i; skipped where its grid would not fit in about 1 GiB)")
    p.set_defaults(func=cmd_privacy)
    return p
