"""The experiment grid of the workflow: named experiments of config/config.yaml expanded into runs.

An experiment has groups (data sets x run entries); an entry is one algorithm with scalar or list
values of ``mu``, ``lam`` and ``step`` (lists are zipped: ``mu: [0.1, 0.3], lam: [0.04, 0.12]`` is
two runs). Every run gets a readable id that is also its result folder under ``results/runs/``,
for example ``synthetic_1_1/logreg/upcycled/mu1_lam0.43/s0.9_f0.3/T160/seed0`` (``s0.9_f0.3_exact_drop``
under the non-default straggler switches; ``logreg_softmax_before_loss`` for the authors' loss). Two experiments
asking for the same run share it (one job); the same id with different settings is an error, but for
``evaluation.last``: the shared run evaluates what every experiment asking for it reads (:func:`shared_run_doc`).
A group's ``vary`` adds settings around its runs (:func:`vary_settings`): each setting is the group's runs again
with some values changed (the sensitivity experiment's grid).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any

from .. import config as cfgmod
from ..data.registry import check_dataset_entry
from ..data.sources import PAPER_SYNTHETIC_SETS
from ..draws.rounds import resolve_straggler_policy
from ..names import is_upcycled
from .config_errors import ExperimentError
from .outputs import OUTPUT_KINDS

PROTOCOLS = ("paper", "authors")
"""``experiments.<name>.protocol`` (or a group's ``protocol``): ``paper`` (the default: the paper's model and Eq. (5)'s
lambda) or ``authors`` (what the authors' released code runs: :data:`AUTHORS_SETTINGS` on every run, the even-iteration
coefficient as the scalar :data:`AUTHORS_STEP` on every upcycled run instead of its ``lam``; a run given a ``step``
keeps it)."""
AUTHORS_SETTINGS = {"model.softmax_before_loss": True}
AUTHORS_STEP = 0.7
"""The authors' code's even-iteration coefficient, a tuned scalar: mu / (mu + lambda) = 1 / 1.43 = 0.699 for
Table 1's mu 1, lambda 0.43, to 3 digits."""
JOB_DEFAULTS = {"gpus": 0, "threads": 1, "runtime": 60, "mem_mb": 4000, "runs_per_job": 1, "runs_per_gpu": 1}
"""The keys of ``job_defaults`` and of an experiment's or group's ``job`` (the schema and config/README.md are tested
against them), with the values a run gets when the config gives none."""
ENTRY_KEYS = {"algorithm", "rounds", "mu", "lam", "step", "schedule", "model", "set"}
VARY_ENTRY_KEYS = ("mu", "lam", "step", "round_scale")
"""Keys of a ``vary`` setting besides dotted run-config keys: ``mu`` (every run), ``lam`` and ``step`` (the
upcycled runs' even-iteration coefficient, one replacing the other), ``round_scale`` (every run's iterations
multiplied)."""
SOLVER_ID_KEYS = {"lr": "lr", "epochs": "E", "batch_size": "B", "momentum": "m"}
"""``solver.*`` keys named in a run id (as ``<short><value>``) where they differ from ``run_defaults``."""


def fmt_number(x: Any) -> str:
    """Shortest round-trip text of a number for paths: 1.0 -> '1', 0.43 -> '0.43', 1e-05 -> '1e-05'."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


@dataclass
class RunSpec:
    """One training run: its id (= result folder), data set, seed and run-config document. The document is read,
    never changed: the runs of one entry (its seeds) share its nested mappings."""

    run_id: str
    dataset: str
    seed: int
    doc: dict[str, Any]
    experiments: list[str] = field(default_factory=list)
    job: dict[str, Any] = field(default_factory=dict)

    def flags(self) -> list[str]:
        """``upfl run`` arguments (without ``--data`` and ``--out``) that reproduce :attr:`doc`."""
        return [f"--set={key}={json.dumps(value)}" for key, value in flatten(self.doc)]


@dataclass
class Plan:
    runs: dict[str, RunSpec]
    experiments: dict[str, list[str]]
    outputs: dict[str, dict[str, Any]]
    targets: dict[str, list[str]]
    datasets: list[str]


def flatten(doc: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Dotted (key, value) pairs of a nested mapping, in insertion order."""
    items = []
    for key, value in doc.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and key != "options":
            items.extend(flatten(value, dotted + "."))
        else:
            items.append((dotted, value))
    return items


SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""Names that become a path component and a shell word (data sets, experiments, outputs, targets): letters,
digits, ``_``, ``.``, ``-``, not starting with ``.`` or ``-`` (so never ``..``, a hidden file or an option)."""


def check_name(where: str, name: Any) -> None:
    """:class:`ExperimentError` unless ``name`` is one safe path component (:data:`SAFE_NAME`)."""
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise ExperimentError(
            f"{where}: {name!r} is not a safe name (letters, digits, '_', '.', '-', "
            "starting with a letter or digit; at most 128 characters)"
        )


def resolve_preset(config: dict[str, Any]) -> dict[str, Any]:
    """Apply ``presets[preset]`` (top-level keys replaced) unless ``preset`` is ``full``.

    A preset that sets ``seeds`` also replaces the experiments' and groups' own ``seeds``: the quick
    preset's two seeds hold for every experiment, the 10-seed privacy experiments included.
    """
    config = copy.deepcopy(config)
    name = config.get("preset", "full")
    if name == "full":
        return config
    presets = config.get("presets", {})
    if name not in presets:
        raise ExperimentError(f"preset: unknown preset {name!r}; defined: full, {', '.join(presets)}")
    config.update(copy.deepcopy(presets[name]))
    if "seeds" in presets[name]:
        for exp in config.get("experiments", {}).values():
            exp.pop("seeds", None)
            for group in exp.get("groups", []):
                group.pop("seeds", None)
    return config


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def expand_entry(entry: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """Zip the list-valued ``mu``/``lam``/``step`` of one run entry into single-valued entries."""
    unknown = set(entry) - ENTRY_KEYS
    if unknown:
        raise ExperimentError(f"{where}: unknown key {sorted(unknown)[0]!r}; known: {', '.join(sorted(ENTRY_KEYS))}")
    if "algorithm" not in entry or "rounds" not in entry:
        raise ExperimentError(f"{where}: a run entry needs 'algorithm' and 'rounds'")
    lists = {k: _as_list(entry[k]) for k in ("mu", "lam", "step") if k in entry}
    lengths = {len(v) for v in lists.values() if len(v) != 1}
    if len(lengths) > 1:
        raise ExperimentError(
            f"{where}: mu, lam and step lists must have the same length, got "
            + ", ".join(f"{k}: {len(v)}" for k, v in lists.items())
        )
    n = lengths.pop() if lengths else 1
    out = []
    for i in range(n):
        one = {k: v for k, v in entry.items() if k not in lists}
        one.update({k: (v[i] if len(v) > 1 else v[0]) for k, v in lists.items()})
        out.append(one)
    return out


def vary_settings(vary: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """The settings of a group's ``vary``: each item a mapping of keys (:data:`VARY_ENTRY_KEYS` or dotted run-config
    keys) to a value or a list of values; an item is every combination of its lists (one list: one factor at a
    time; several: a crossing). Duplicates are kept once, in order."""
    import itertools

    settings: list[dict[str, Any]] = []
    for i, item in enumerate(vary):
        if not isinstance(item, dict) or not item:
            raise ExperimentError(f"{where}[{i}]: a setting is a non-empty mapping of keys to values")
        for key in item:
            if key not in VARY_ENTRY_KEYS and "." not in key:
                raise ExperimentError(
                    f"{where}[{i}].{key}: unknown key; known: {', '.join(VARY_ENTRY_KEYS)} or a "
                    "dotted run-config key (solver.lr)"
                )
        if "lam" in item and "step" in item:
            raise ExperimentError(f"{where}[{i}]: lam and step both set (each gives the even-iteration coefficient)")
        keys = list(item)
        for values in itertools.product(*(_as_list(item[k]) for k in keys)):
            one = dict(zip(keys, values, strict=True))
            if one not in settings:
                settings.append(one)
    return settings


def varied_entry(entry: dict[str, Any], setting: dict[str, Any]) -> dict[str, Any]:
    """One expanded run entry under one ``vary`` setting (:func:`vary_settings`)."""
    out = {**entry, "set": {**(entry.get("set") or {})}}
    for key, value in setting.items():
        if key == "mu":
            out["mu"] = value
        elif key in ("lam", "step"):
            if is_upcycled(entry["algorithm"]):
                out.pop("lam" if key == "step" else "step", None)
                out[key] = value
        elif key == "round_scale":
            out["rounds"] = max(1, round(int(entry["rounds"]) * float(value)))
        else:
            out["set"][key] = value
    return out


def _privacy_part(p: dict[str, Any]) -> str | None:
    mech = p.get("mechanism", "none")
    if mech == "none":
        return None
    if mech == "output":
        return f"output_sigma{_list_text(p.get('sigma'))}_tau{fmt_number(p.get('tau'))}"
    return f"objective_alpha{_list_text(p.get('alpha'))}"


def _list_text(value: Any) -> str:
    return "-".join(fmt_number(v) for v in value) if isinstance(value, list) else fmt_number(value)


def run_id(dataset: str, doc: dict[str, Any], seed: int, solver_defaults: dict[str, Any] | None = None) -> str:
    """The readable result path of a run (relative to ``results/runs``); a ``solver`` value that differs from
    ``solver_defaults`` (the config's ``run_defaults.solver``) is named in it (``_lr0.005_E10``)."""
    return f"{run_id_stem(dataset, doc, solver_defaults)}/seed{seed}"


def run_id_stem(dataset: str, doc: dict[str, Any], solver_defaults: dict[str, Any] | None = None) -> str:
    """A run's id but its last part, ``seed<seed>``: what the runs of one entry share (:func:`run_id`)."""
    a, d = doc["algorithm"], doc["devices"]
    params = f"mu{fmt_number(a.get('mu', 0.0))}"
    if a.get("lam") is not None:
        params += f"_lam{fmt_number(a['lam'])}"
    if a.get("step") is not None:
        params += f"_step{fmt_number(a['step'])}"
    if a.get("schedule", "const") != "const":
        params += f"_{a['schedule']}"
    for key, value in a.items():
        if key not in ("name", "mu", "lam", "step", "schedule"):
            params += f"_{key}{fmt_number(value)}"
    solver, defaults = doc.get("solver") or {}, solver_defaults or {}
    for key, short in SOLVER_ID_KEYS.items():
        if key in solver and solver[key] != defaults.get(key, solver[key]):
            params += f"_{short}{fmt_number(solver[key])}"
    model = doc["model"]["name"] + ("_softmax_before_loss" if doc["model"].get("softmax_before_loss") else "")
    parts = [dataset, model, a["name"], params]
    private = _privacy_part(doc.get("privacy", {}))
    if private:
        parts.append(private)
    devices = f"s{fmt_number(d['straggler'])}_f{fmt_number(d['frac'])}"
    if d.get("straggler_draw", "bernoulli") != "bernoulli":
        devices += f"_{d['straggler_draw']}"
    if d.get("straggler_policy", "partial") != "partial":
        devices += f"_{d['straggler_policy']}"
    parts += [devices, f"T{doc['rounds']}"]
    return "/".join(parts)


def _merge(doc: dict[str, Any], settings: dict[str, Any] | None, where: str) -> None:
    for key, value in (settings or {}).items():
        try:
            cfgmod.set_key(doc, key, tree_copy(value))
        except cfgmod.ConfigError as e:
            raise ExperimentError(f"{where}.set.{key}: {e}") from None


def _run_doc(
    config: dict[str, Any],
    exp: dict[str, Any],
    entry: dict[str, Any],
    where: str,
    protocol: str = "paper",
    dataset_model: str | None = None,
) -> dict[str, Any]:
    """A run's config: ``run_defaults``, the data set's ``model``, the experiment's ``set``, the entry (each
    over the one before)."""
    doc = tree_copy(config.get("run_defaults", {}))
    if dataset_model:
        doc.setdefault("model", {})["name"] = dataset_model
    _merge(doc, exp.get("set"), where)
    doc.setdefault("model", {}).setdefault("name", "logreg")
    doc.setdefault("devices", {}).setdefault("straggler", 0.0)
    doc["devices"].setdefault("frac", cfgmod.DevicesConfig.frac)
    algorithm = doc.setdefault("algorithm", {})
    algorithm["name"] = entry["algorithm"]
    for key in ("mu", "lam", "step", "schedule"):
        if key in entry:
            algorithm[key] = entry[key]
    if "model" in entry:
        doc["model"]["name"] = entry["model"]
    apply_protocol(doc, algorithm, protocol, where)
    scale = float(config.get("round_scale", 1.0))
    doc["rounds"] = max(1, round(int(entry["rounds"]) * scale))
    _merge(doc, entry.get("set"), where)
    policy = doc["devices"].get("straggler_policy")
    if isinstance(policy, dict):
        try:
            doc["devices"]["straggler_policy"] = resolve_straggler_policy(policy, algorithm["name"])
        except ValueError as e:
            raise ExperimentError(f"{where}: {e}") from None
    return doc


def apply_protocol(doc: dict[str, Any], algorithm: dict[str, Any], protocol: str, where: str) -> None:
    """Set what :data:`PROTOCOLS` ``protocol`` implies on one run document (before the entry's own ``set``)."""
    if protocol not in PROTOCOLS:
        raise ExperimentError(f"{where.rsplit('.runs', 1)[0]}: protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    if protocol == "paper":
        return
    _merge(doc, AUTHORS_SETTINGS, where)
    if is_upcycled(algorithm["name"]) and "step" not in algorithm:
        algorithm.pop("lam", None)
        algorithm["step"] = AUTHORS_STEP


def tree_copy(value: Any) -> Any:
    """A copy of a YAML document's tree (mappings and lists copied, scalars shared): ``copy.deepcopy`` for the
    plain data a config holds, without its memo (a workflow copies thousands of run documents)."""
    if isinstance(value, dict):
        return {k: tree_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [tree_copy(v) for v in value]
    return value


def _check_run(doc: dict[str, Any], where: str, checked: set[str]) -> None:
    """:class:`ExperimentError` naming ``where`` unless ``doc`` is a valid run config. ``checked``: the documents
    (as canonical JSON) found valid before; a group's entry makes the same document on each of its data sets."""
    key = json.dumps(doc, sort_keys=True, default=repr)
    if key in checked:
        return
    probe = tree_copy(doc)
    probe.setdefault("data", {})["path"] = "<dataset>"
    try:
        cfgmod.from_dict(probe)
    except cfgmod.ConfigError as e:
        raise ExperimentError(f"{where}: {e}") from None
    checked.add(key)


def _evaluated_last(doc: dict[str, Any]) -> int | None:
    return (doc.get("evaluation") or {}).get("last")


def shared_run_doc(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """The document of a run that two experiments ask for as ``a`` and ``b``: the same document, or, where they
    differ only in ``evaluation.last``, the one that evaluates more (null, every iteration, before the larger
    K), so a figure's curve is never cut by a table's schedule; None when they differ otherwise."""

    def without_schedule(doc):
        return {**doc, "evaluation": {k: v for k, v in (doc.get("evaluation") or {}).items() if k != "last"}}

    if a == b:
        return a
    if without_schedule(a) != without_schedule(b):
        return None
    last_a, last_b = _evaluated_last(a), _evaluated_last(b)
    return a if last_a is None or (last_b is not None and last_a >= last_b) else b


def build_plan(config: dict[str, Any]) -> Plan:
    """Expand every experiment of a (validated) workflow config into runs, outputs and targets."""
    config = resolve_preset(config)
    datasets = config.get("datasets", {})
    for name, d in datasets.items():
        check_name("datasets", name)
        try:
            check_dataset_entry(name, d)
        except ValueError as e:
            raise ExperimentError(str(e)) from None
        if "setting" in d:
            check_name(f"datasets.{name}.setting", d["setting"])
        setting = d.get("setting", name)
        if d.get("source") in ("paper", "synthetic") and setting not in PAPER_SYNTHETIC_SETS:
            where = (
                f"datasets.{name}.setting"
                if "setting" in d
                else f"datasets.{name} (no setting: its name is the setting)"
            )
            raise ExperimentError(
                f"{where}: {setting!r} is not a synthetic set; known: {', '.join(PAPER_SYNTHETIC_SETS)}"
            )
    seeds = [int(s) for s in config.get("seeds", [0])]
    solver_defaults = (config.get("run_defaults") or {}).get("solver") or {}
    runs: dict[str, RunSpec] = {}
    experiments: dict[str, list[str]] = {}
    outputs: dict[str, dict[str, Any]] = {}
    targets: dict[str, list[str]] = {}
    checked: set[str] = set()
    excluded = set(config.get("exclude_sources", []))
    skipped = set(config.get("exclude_experiments", []))
    unknown = sorted(skipped - set(config.get("experiments", {})))
    if unknown:
        raise ExperimentError(
            f"exclude_experiments: {unknown[0]!r} is not an experiment ({', '.join(config.get('experiments', {}))})"
        )
    for name, exp in config.get("experiments", {}).items():
        check_name("experiments", name)
        if name in skipped:
            continue
        ids: dict[str, None] = {}
        exp_seeds = [int(s) for s in exp.get("seeds", seeds)]
        for gi, group in enumerate(exp.get("groups", [])):
            job = {**JOB_DEFAULTS, **config.get("job_defaults", {}), **exp.get("job", {}), **group.get("job", {})}
            group_seeds = [int(s) for s in group.get("seeds", exp_seeds)]
            settings = [{}, *vary_settings(group.get("vary", []), f"experiments.{name}.groups[{gi}].vary")]
            for ds in group["datasets"]:
                if ds not in datasets:
                    raise ExperimentError(
                        f"experiments.{name}.groups[{gi}].datasets: {ds!r} is not in datasets ({', '.join(datasets)})"
                    )
                if datasets[ds]["source"] in excluded:
                    continue
                for ei, raw in enumerate(group["runs"]):
                    where = f"experiments.{name}.groups[{gi}].runs[{ei}]"
                    entries = [varied_entry(e, v) for v in settings for e in expand_entry(raw, where)]
                    for entry in entries:
                        doc = _run_doc(
                            config,
                            exp,
                            entry,
                            where,
                            group.get("protocol", exp.get("protocol", "paper")),
                            datasets[ds].get("model"),
                        )
                        _check_run(doc, where, checked)
                        stem = run_id_stem(ds, doc, solver_defaults)
                        for seed in group_seeds:
                            rid = f"{stem}/seed{seed}"
                            # The seeds' documents share doc's nested mappings (a plan is only read).
                            spec = RunSpec(rid, ds, seed, {**doc, "seed": seed})
                            if rid in runs:
                                shared = shared_run_doc(runs[rid].doc, spec.doc)
                                if shared is None:
                                    raise ExperimentError(
                                        f"{where}: run {rid} is also requested by "
                                        f"{runs[rid].experiments} with other settings"
                                    )
                                spec = runs[rid]
                                spec.doc = shared
                            else:
                                runs[rid] = spec
                            if name not in spec.experiments:
                                spec.experiments.append(name)
                            spec.job = {k: max(spec.job.get(k, 0), job[k]) for k in JOB_DEFAULTS}
                            ids[rid] = None
        if not ids:
            continue
        experiments[name] = list(ids)
        for oi, out in enumerate(exp.get("outputs", [])):
            if out["kind"] not in OUTPUT_KINDS:
                raise ExperimentError(
                    f"experiments.{name}.outputs[{oi}].kind: {out['kind']!r}; known: {', '.join(OUTPUT_KINDS)}"
                )
            check_name(f"experiments.{name}.outputs[{oi}].name", out["name"])
            check_name(f"experiments.{name}.outputs[{oi}].target", out.get("target", out["name"]))
            if out["name"] in outputs:
                raise ExperimentError(f"experiments.{name}.outputs[{oi}].name: {out['name']!r} is used twice")
            outputs[out["name"]] = {**out, "experiment": name}
            targets.setdefault(out.get("target", out["name"]), []).append(out["name"])
    used = sorted({s.dataset for s in runs.values()})
    return Plan(runs, experiments, outputs, targets, used)


def names_regex(names: Any) -> str:
    """A regular expression that matches exactly the strings ``names`` (``^$`` for none): their common prefixes
    factored out (a trie), so that matching a path costs its length, not the number of names. A plain alternation
    of N run ids costs every match N comparisons, and Snakemake matches each file the DAG asks for against the
    rule's pattern: with thousands of single runs the DAG grew with the square of the runs."""
    unique = sorted(set(names))
    if not unique:
        return "^$"

    def emit(lo: int, hi: int, depth: int) -> str:
        # unique[lo:hi] share their first `depth` characters; sorted, so their common prefix is that of the ends
        first, last = unique[lo], unique[hi - 1]
        common = depth
        while common < len(first) and common < len(last) and first[common] == last[common]:
            common += 1
        text = re.escape(first[depth:common])
        optional = len(first) == common  # one name ends here (sorted first)
        start = lo + 1 if optional else lo
        branches = []
        while start < hi:
            ch, stop = unique[start][common], start + 1
            while stop < hi and unique[stop][common] == ch:
                stop += 1
            branches.append(emit(start, stop, common))
            start = stop
        if not branches:
            return text
        group = branches[0] if len(branches) == 1 and not optional else "(?:" + "|".join(branches) + ")"
        return text + (group + "?" if optional else group)

    return emit(0, len(unique), 0)
