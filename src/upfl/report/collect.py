"""Run folders to ``runs.csv``: one row per run with its flattened config and results.

Every table and figure of the report is computed from this one table (and, for per-iteration
curves, from the ``metrics.csv`` of the run folders it names).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import names
from ..files import ENVIRONMENT_KEYS


class ReportError(ValueError):
    """A report input is missing or inconsistent; the message names the file, run or key."""


CONFIG_COLUMNS = [
    "dataset",
    "algorithm",
    "base",
    "algorithm_options",
    "mu",
    "lam",
    "step",
    "coef",
    "schedule",
    "straggler",
    "frac",
    "policy",
    "straggler_draw",
    "seed",
    "rounds",
    "training_rounds",
    "model",
    "model_options",
    "softmax_before_loss",
    "epochs",
    "batch_size",
    "lr",
    "momentum",
    "eval_every",
    "feature_scaling",
    "mechanism",
    "sigma",
    "tau",
    "alpha",
    "delta",
]
"""Columns of ``runs.csv`` that describe a run's configuration (``seed`` included)."""

DIVERGED_COLUMNS = ("diverged", "diverged_iteration", "diverged_what")
"""``runs.csv`` columns of a diverged run (``summary.json``'s ``diverged``): flag, first bad iteration, what."""

TEXT_COLUMNS = (
    "diverged_what",
    "experiments",
    "dataset",
    "algorithm",
    "base",
    "algorithm_options",
    "schedule",
    "policy",
    "straggler_draw",
    "model",
    "mechanism",
    "run_dir",
    "data_path",
    "data_source",
    "data_setting",
    "data_commit",
    "config_hash",
    "data_digest",
    "git_commit",
    "upfl_version",
    "torch_version",
    "python_version",
    "numpy_version",
    "numba_version",
    "scipy_version",
    "dp_accounting_version",
    "kernel_isa",
    "device",
)
"""Columns of ``runs.csv`` read as text whatever they look like (a data set called ``2`` stays ``'2'``)."""

RESULT_KEYS = ("iteration", "train_loss", "train_acc", "test_loss", "test_acc")
TIME_KEYS = ("train_s", "upcycle_s", "eval_s", "draw_s", "total_s")
METRIC_NAMES = ("train_loss", "train_acc", "test_loss", "test_acc")

REPORTING_CHOICES = {
    "final": "at the last iteration",
    "max": "the highest over iterations",
    "last10": "the mean of the last 10 evaluated iterations",
}
"""How one accuracy is read off a run's curve (``runs.csv`` columns ``<choice>_train_acc``, ``<choice>_test_acc``).
Verdicts use ``final`` only: ``max`` picks the iteration on the very numbers it reports (an optimistic selection,
more so the noisier the curve), and ``last10`` is a smoothing the paper does not describe."""
LAST_ITERATIONS = 10
REPORTING_NOTE = (
    "Reporting choice. Every verdict uses the accuracy at the final iteration. The best value over "
    "iterations selects the iteration on the very numbers it reports (an optimistic pick, larger the "
    "noisier the curve), and the mean of the last 10 iterations is a smoothing the paper does not "
    "describe; both are shown beside the final value in runs.csv, Table 1's CSV and the protocol_gap "
    "table, never judged."
)


def parse_run_specs(specs: Iterable[str]) -> list[tuple[str, str]]:
    """``EXPERIMENT:RUN_DIR`` strings to ``(experiment, run_dir)`` pairs (split at the first colon)."""
    pairs = []
    for spec in specs:
        exp, sep, run_dir = spec.partition(":")
        if not sep or not exp or not run_dir:
            raise ReportError(f"expected EXPERIMENT:RUN_DIR, got {spec!r}")
        pairs.append((exp, run_dir))
    return pairs


def read_spec_file(path: str | os.PathLike) -> list[str]:
    """Lines of a file of ``EXPERIMENT:RUN_DIR`` entries (blank lines and ``#`` comments skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ReportError(f"{path}: run list file not found") from None
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def load_summary(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The ``summary.json`` of a run folder; a missing or unreadable file is an error naming the folder."""
    path = Path(run_dir) / "summary.json"
    if not Path(run_dir).is_dir():
        raise ReportError(f"run folder {run_dir}: not found")
    if not path.is_file():
        raise ReportError(f"run folder {run_dir}: no summary.json (the run has not finished, or the path is wrong)")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON: {e}") from None
    for key in ("config", "final"):
        if key not in summary:
            raise ReportError(f"{path}: no '{key}' entry; not a upfl run summary")
    return summary


def _cell(value: Any) -> Any:
    """A config value as a CSV cell: lists and mappings as JSON text, None as missing."""
    if value is None:
        return np.nan
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True) if value else np.nan
    return value


def _numbers(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    )


def flatten_privacy(doc: Any, prefix: str = "privacy") -> dict[str, Any]:
    """``summary.json``'s ``privacy`` entry (epsilons) as flat columns ``privacy_<path>``.

    Lists of numbers (per-device epsilons) become ``_mean``, ``_min`` and ``_max`` columns; other
    lists become JSON text; nested mappings are joined with ``_``.
    """
    out: dict[str, Any] = {}
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.update(flatten_privacy(value, f"{prefix}_{key}"))
    elif _numbers(doc):
        arr = np.asarray(doc, dtype=float)
        out.update(
            {f"{prefix}_mean": float(arr.mean()), f"{prefix}_min": float(arr.min()), f"{prefix}_max": float(arr.max())}
        )
    else:
        out[prefix] = _cell(doc)
    return out


ALGORITHM_KEYS = ("name", "mu", "lam", "step", "schedule")
"""Run-config ``algorithm.*`` keys with their own runs.csv column; the others go to ``algorithm_options``."""


def algorithm_options(alg: dict[str, Any]) -> str:
    """The hyper-parameters the run's base algorithm reads besides mu/lam/step/schedule (its registry ``keys``),
    ``key=value;...`` ('' for FedAvg, FedProx, Upcycled-FL and for unknown algorithms)."""
    keys = names.ALGORITHM_KEYS.get(base_algorithm(alg.get("name")), ())
    return ";".join(f"{k}={alg[k]}" for k in keys if alg.get(k) is not None)


def base_algorithm(name: Any) -> Any:
    """The base of an upcycled algorithm (``upcycled`` -> ``fedprox``, ``upcycled_scaffold`` -> ``scaffold``)."""
    return names.base_name(name) if isinstance(name, str) else name


def effective_coefficient(alg: dict[str, Any]) -> float:
    """The even-iteration coefficient c_1 of Eq. (5): ``step``, or mu / (mu + lambda) (FedDyn: alpha / (alpha +
    lambda)); NaN off the upcycled algorithms."""
    name = alg.get("name")
    if not isinstance(name, str) or not names.is_upcycled(name):
        return math.nan
    step = alg.get("step")
    if step is not None:
        return float(step)
    mu = names.extrapolation_mu(names.base_name(name), alg.get("mu", 0.0), alg.get("alpha", 0.0))
    return names.even_step_coefficient(mu, float(alg["lam"]))


def config_columns(summary: dict[str, Any]) -> dict[str, Any]:
    """The config part of a ``runs.csv`` row (see :data:`CONFIG_COLUMNS`)."""
    cfg = summary["config"]
    alg, dev, sol = cfg.get("algorithm", {}), cfg.get("devices", {}), cfg.get("solver", {})
    priv, data, model = cfg.get("privacy", {}), cfg.get("data", {}), cfg.get("model", {})
    path = str(data.get("path", ""))
    return {
        "dataset": os.path.basename(os.path.normpath(path)) if path else "",
        "algorithm": alg.get("name"),
        "base": base_algorithm(alg.get("name")),
        "algorithm_options": algorithm_options(alg),
        "mu": alg.get("mu"),
        "lam": _cell(alg.get("lam")),
        "step": _cell(alg.get("step")),
        "coef": effective_coefficient(alg),
        "schedule": alg.get("schedule"),
        "straggler": dev.get("straggler"),
        "frac": dev.get("frac"),
        "policy": dev.get("straggler_policy"),
        "straggler_draw": dev.get("straggler_draw", "bernoulli"),
        "seed": summary.get("seed", cfg.get("seed")),
        "rounds": cfg.get("rounds"),
        "training_rounds": _cell(summary.get("training_rounds")),
        "model": model.get("name"),
        "model_options": _cell(model.get("options")),
        "softmax_before_loss": bool(model.get("softmax_before_loss", False)),
        "epochs": sol.get("epochs"),
        "batch_size": sol.get("batch_size"),
        "lr": sol.get("lr"),
        "momentum": sol.get("momentum"),
        "eval_every": cfg.get("evaluation", {}).get("every"),
        "feature_scaling": data.get("feature_scaling"),
        "mechanism": priv.get("mechanism", "none"),
        "sigma": _cell(priv.get("sigma")),
        "tau": _cell(priv.get("tau")),
        "alpha": _cell(priv.get("alpha")),
        "delta": _cell(priv.get("delta")),
    }


def run_row(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One ``runs.csv`` row (without ``experiments``) from a run folder's summary."""
    row = config_columns(summary)
    diverged = summary.get("diverged") or {}
    row["diverged"] = bool(diverged)
    row["diverged_iteration"] = diverged.get("iteration", np.nan) if diverged else np.nan
    row["diverged_what"] = diverged.get("what", np.nan) if diverged else np.nan
    for part in ("final", "best"):
        values = summary.get(part) or {}
        for key in RESULT_KEYS:
            value = values.get(key)
            row[f"{part}_{key}"] = np.nan if value is None else value
    row.update(curve_columns(run_dir))
    if "personal_test_acc" in (summary.get("final") or {}):
        row["final_personal_test_acc"] = summary["final"]["personal_test_acc"]
    for key in TIME_KEYS:
        row[f"time_{key}"] = summary.get("time", {}).get(key, np.nan)
    if "privacy" in summary:
        row.update(flatten_privacy(summary["privacy"]))
    for key in ("config_hash", "data_digest", "upfl_version", "git_commit", *ENVIRONMENT_KEYS, "device"):
        row[key] = summary.get(key)
    row["data_path"] = summary["config"].get("data", {}).get("path")
    row.update(data_origin(row["data_path"]))
    row["run_dir"] = run_dir
    return row


def curve_columns(run_dir: str | os.PathLike) -> dict[str, float]:
    """``max_<acc>`` and ``last10_<acc>`` (:data:`REPORTING_CHOICES`) of the train and test accuracy over the
    evaluated iterations after the initial model, from the run's ``metrics.csv`` (NaN when it has none)."""
    path = Path(run_dir) / "metrics.csv"
    keys = ("train_acc", "test_acc")
    if not path.is_file():
        return {f"{c}_{k}": np.nan for c in ("max", "last10") for k in keys}
    curves = _accuracy_curves(path, keys)
    out = {}
    for key in keys:  # numpy on the parsed columns: the same floats as pandas' max and mean
        values = curves[key]
        values = values[~np.isnan(values)]
        out[f"max_{key}"] = float(values.max()) if len(values) else np.nan
        out[f"last10_{key}"] = float(values[-LAST_ITERATIONS:].mean()) if len(values) else np.nan
    return out


def _accuracy_curves(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The columns ``keys`` of a metrics.csv over its rows after the initial model (``kind`` other than ``init``),
    as floats. Read with the csv module and Python's float (a fifth of pandas' cost per run, and the same numbers:
    the file holds Python's shortest round-trip reprs and ``nan``); a file with any other cell (quoted, a named
    missing value) is read by pandas as before."""
    import csv

    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.reader(f)
        header = next(rows, [])
        if "kind" in header and all(k in header for k in keys):
            columns = [header.index(k) for k in keys]
            kind = header.index("kind")
            try:
                values = [[float(r[i]) for i in columns] for r in rows if r[kind] != "init"]
            except (ValueError, IndexError):
                values = None
            if values is not None:
                table = np.array(values, dtype=float).reshape(len(values), len(keys))
                return {k: table[:, j] for j, k in enumerate(keys)}
    metrics = pd.read_csv(path)
    after_init = metrics["kind"].to_numpy() != "init"
    return {k: metrics[k].to_numpy(dtype=float)[after_init] for k in keys}


ORIGIN_COLUMNS = ("data_source", "data_setting", "data_seed", "data_commit")
"""``runs.csv`` columns naming a run's data: its source (``paper``: the authors' released draw; ``synthetic``: our
generator; ``femnist``, ``sent140``: LEAF; ``leaf``: a LEAF-format folder named by config), the generator setting,
``data_seed`` and the authors' commit."""


def data_origin(data_path: str | None) -> dict[str, Any]:
    """The :data:`ORIGIN_COLUMNS` of a data set folder, read from its ``meta.json`` (empty when it has none)."""
    return dict(_data_origin(data_path))


@functools.lru_cache(maxsize=1024)
def _data_origin(data_path: str | None) -> dict[str, Any]:
    """:func:`data_origin`, read once per folder in a process (the runs of a runs table share a few data sets)."""
    out: dict[str, Any] = dict.fromkeys(ORIGIN_COLUMNS, np.nan)
    meta_path = Path(str(data_path or "")) / "meta.json"
    if not data_path or not meta_path.is_file():
        return out
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return out
    for column, key in zip(ORIGIN_COLUMNS, ("source", "setting", "data_seed", "commit"), strict=True):
        if meta.get(key) is not None:
            out[column] = meta[key]
    return out


def origin_text(source: Any, setting: Any = None, data_seed: Any = None, commit: Any = None) -> str:
    """What a figure was computed on, in words: the authors' released draw at its commit, or our generator's
    setting and ``data_seed`` ('data of unknown origin' when the runs table does not say)."""

    def given(v: Any) -> bool:
        return v is not None and not (isinstance(v, float) and math.isnan(v)) and str(v) != ""

    if not given(source):
        return "data of unknown origin"
    if source == "paper":
        return "the authors' released draw" + (f" at commit {str(commit)[:7]}" if given(commit) else "")
    if source == "synthetic":
        seed = f", data_seed {int(float(data_seed))}" if given(data_seed) else ""
        return f"our generator's draw ({setting}{seed})" if given(setting) else f"our generator's draw{seed}"
    if source == "leaf":
        return "a LEAF-format folder named by config"
    return f"LEAF {source}" + (f" (split seed {int(float(data_seed))})" if given(data_seed) else "")


def is_generated(source: Any) -> bool:
    """True for data drawn by our generator (a preview, not the paper's data)."""
    return str(source) == "synthetic"


def checked_runs(run_dirs: Iterable[str], store: str | os.PathLike | None, verify: bool) -> dict[str, str]:
    """Each run folder's files checked against the checksums recorded when it was trained (:mod:`upfl.integrity`)
    before its numbers are read. ``verify`` (the workflow): every run must match its record, or is restored from
    ``store``, or adopted there when it has no record (:func:`upfl.engine.store.check_published`); a run that is
    none of these is moved aside (with a store; without one, ``--no-store``, it is only named). Otherwise a run
    with a record must match it; one without is read as it is.
    Returns run folder -> status; :class:`ReportError` names every run that fails."""
    from ..integrity import IntegrityError, mismatches, read_record

    statuses, failures = {}, []
    for run_dir in run_dirs:
        if not (Path(run_dir) / "summary.json").is_file():
            continue  # load_summary names it
        try:
            if verify:
                from ..engine.store import check_published

                statuses[run_dir] = check_published(run_dir, store, move_aside=store is not None)
                continue
            record = read_record(run_dir)
            problems = mismatches(run_dir, record) if record is not None else []
            if problems:
                raise IntegrityError("; ".join(problems))
            statuses[run_dir] = "verified" if record is not None else "unrecorded"
        except IntegrityError as e:
            failures.append(str(e))
    if failures:
        raise ReportError(f"{len(failures)} run(s) not published: " + " | ".join(failures))
    return statuses


def collect_runs(
    pairs: Iterable[tuple[str, str]],
    store: str | os.PathLike | None = None,
    verify: bool = False,
    echo: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """The runs table: one row per distinct run folder, its experiments joined with ``;``; each run's files are
    checked first (:func:`checked_runs`).

    Folders are the same run when their real paths are equal; the first spelling given is kept.
    """
    order: list[str] = []
    spelled: dict[str, str] = {}
    experiments: dict[str, set[str]] = {}
    for exp, run_dir in pairs:
        key = os.path.realpath(run_dir)
        if key not in spelled:
            order.append(key)
            spelled[key] = os.path.normpath(run_dir)
            experiments[key] = set()
        experiments[key].add(exp)
    if not order:
        raise ReportError("no runs given")
    statuses = checked_runs([spelled[key] for key in order], store, verify)
    for run_dir, status in statuses.items():
        if echo and status in ("restored", "adopted"):
            echo(
                f"{run_dir}: {status} from the store ("
                + (
                    "its files did not match the checksums recorded when it was trained)"
                    if status == "restored"
                    else "no checksum record: the store entry holding exactly these files gave it)"
                )
            )
    rows = []
    for key in order:
        row = {"experiments": ";".join(sorted(experiments[key]))}
        row.update(run_row(spelled[key], load_summary(spelled[key])))
        rows.append(row)
    return pd.DataFrame(rows)


WORST_DEVICE_COLUMN = re.compile(r"privacy_worst_device_\w+_device")
"""``runs.csv``'s column of each accountant's worst device: a device's name, text even when it looks like a number
(the synthetic sets' devices are ``'0'``, ``'14'``...)."""


def text_columns(columns: Iterable[str]) -> list[str]:
    """The columns of a runs table read as text: :data:`TEXT_COLUMNS` and the worst-device names."""
    return [c for c in columns if c in TEXT_COLUMNS or WORST_DEVICE_COLUMN.fullmatch(c)]


def read_runs(path: str | os.PathLike) -> pd.DataFrame:
    """Read ``runs.csv``; a missing file or missing columns are errors naming the file."""
    import csv

    try:
        with open(path, encoding="utf-8", newline="") as f:
            header = next(csv.reader(f), [])
        df = pd.read_csv(path, dtype=dict.fromkeys(text_columns(header), str))
    except FileNotFoundError:
        raise ReportError(f"{path}: runs table not found (make it with 'upfl report runs')") from None
    missing = [c for c in ("experiments", "run_dir", "dataset", "algorithm", "mu", "seed") if c not in df.columns]
    if missing:
        raise ReportError(f"{path}: not a runs table (missing columns {', '.join(missing)})")
    return df


def is_diverged(runs: pd.DataFrame) -> pd.Series:
    """Rows whose run diverged (column ``diverged``; a runs table without it has none)."""
    if "diverged" not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs["diverged"].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))


def converged(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that did not diverge: the only ones that enter means, intervals and curves."""
    return runs[~is_diverged(runs)]


def diverged_note(cell: pd.DataFrame) -> str:
    """``'diverged 2/3 seeds'`` for a cell with diverged runs, else ``''``."""
    n = int(is_diverged(cell).sum())
    return f"diverged {n}/{len(cell)} seeds" if n else ""


def require_converged(runs: pd.DataFrame, what: str) -> pd.DataFrame:
    """``converged(runs)``; a selection where every run diverged is an error naming ``what``."""
    ok = converged(runs)
    if ok.empty and not runs.empty:
        raise ReportError(f"{what}: every selected run diverged ({len(runs)} runs; see diverged_what in runs.csv)")
    return ok


def experiment_names(runs: pd.DataFrame) -> list[str]:
    """All experiment names in a runs table."""
    names: set[str] = set()
    for cell in runs["experiments"].dropna():
        names.update(str(cell).split(";"))
    return sorted(names)


def select_experiment(runs: pd.DataFrame, experiment: str | None) -> pd.DataFrame:
    """The runs that belong to ``experiment`` (all runs when None); an unknown name is an error."""
    if experiment is None:
        return runs.copy()
    mask = runs["experiments"].fillna("").map(lambda cell: experiment in str(cell).split(";"))
    if not mask.any():
        raise ReportError(
            f"experiment {experiment!r}: no runs in the runs table; known experiments: "
            f"{', '.join(experiment_names(runs)) or 'none'}"
        )
    return runs[mask].copy()


def _matches(column: pd.Series, wanted: list[str]) -> pd.Series:
    """Rows of ``column`` equal to one of ``wanted`` (numbers compared as numbers, 'nan' matches missing)."""
    mask = pd.Series(False, index=column.index)
    numeric = pd.api.types.is_numeric_dtype(column)
    for value in wanted:
        if value.lower() in ("nan", "none", ""):
            mask |= column.isna()
            if not numeric and value:  # a text value spelled like that (mechanism=none) matches too
                mask |= column.astype(str) == value
            continue
        if numeric:
            try:
                number = float(value)
            except ValueError:
                raise ReportError(f"--where {column.name}={value}: {column.name} holds numbers") from None
            mask |= np.isclose(column.astype(float), number, rtol=1e-9, atol=1e-12)
        else:
            mask |= column.astype(str) == value
    return mask


def apply_where(runs: pd.DataFrame, conditions: Iterable[str] | None) -> pd.DataFrame:
    """Keep rows matching every ``KEY=VALUE[,VALUE...]`` condition; unknown keys and empty results are errors."""
    for cond in conditions or []:
        key, sep, values = cond.partition("=")
        if not sep or not key:
            raise ReportError(f"--where expects KEY=VALUE[,VALUE...], got {cond!r}")
        if key not in runs.columns:
            raise ReportError(f"--where {key}: no such column in the runs table; columns: {', '.join(runs.columns)}")
        runs = runs[_matches(runs[key], values.split(","))]
        if runs.empty:
            raise ReportError(f"--where {cond}: no runs left")
    return runs


def load_metrics(run_dir: str | os.PathLike) -> pd.DataFrame:
    """A run's ``metrics.csv`` (NaN where evaluation was skipped); a missing file names the folder, one that does not
    match the checksum recorded when the run was trained names the file. Read and checked once per process while the
    file and its run's checksum record stay as they were (the same size, modification time and inode; a report job's
    table and figures read the same runs): a copy of that frame each call."""
    from ..integrity import RECORD

    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        raise ReportError(f"run folder {run_dir}: no metrics.csv")
    return _checked_metrics(
        str(run_dir), os.path.realpath(path), _file_state(path), _file_state(Path(run_dir) / RECORD)
    ).copy()


METRICS_KEPT = 4096
"""At most this many runs' metrics are kept by :func:`load_metrics` (a figure of the full config reads hundreds)."""


@functools.lru_cache(maxsize=METRICS_KEPT)
def _checked_metrics(run_dir: str, _real_path: str, _state: Any, _record_state: Any) -> pd.DataFrame:
    """:func:`load_metrics`' frame, checked against the run's checksum record: read once per state of the file and
    of its record (the key's last three parts)."""
    from ..integrity import IntegrityError, check_file

    try:
        check_file(run_dir, "metrics.csv")
    except IntegrityError as e:
        raise ReportError(str(e)) from None
    path = Path(run_dir) / "metrics.csv"
    df = pd.read_csv(path)
    missing = [c for c in ("iteration", "kind", "cum_wall_s", *METRIC_NAMES) if c not in df.columns]
    if missing:
        raise ReportError(f"{path}: missing columns {', '.join(missing)}")
    return df


def _file_state(path: Path) -> tuple[int, int, int] | None:
    """(size, modification time in ns, inode) of a file, None when there is none."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def cumulative_rounds(metrics: pd.DataFrame) -> pd.Series:
    """Training rounds completed by each row (count of ``train`` rows so far)."""
    return (metrics["kind"] == "train").cumsum()


def implementation(runs: pd.DataFrame) -> pd.Series:
    """Per run: whether it ran the authors' loss (``softmax_before_loss``; a runs table without it has none)."""
    if "softmax_before_loss" not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs["softmax_before_loss"].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))
