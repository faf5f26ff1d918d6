"""Bundle specs made at job time, named by their content: the workflow's parse writes no file.

A bundle's spec (what ``upfl run-many --spec`` trains: per run its id, data, result folder, log and config) is a
file ``results/bundles/<bundle>-<16 hex digits of its SHA-256>.json``. The parse only computes the specs and their
digests; the job ``upfl bundle-specs FILE ...`` (rule ``bundle_specs``) writes the files a build needs, computed
again from the workflow config that the parse hands its jobs in the environment variable :data:`CONFIG_ENV`
(:func:`encode_config`). A file's name says what it holds, so two configs never share a spec file, and a bundle
job reruns when its spec's digest (a Snakemake ``params`` entry) changes, whatever the files' modification times.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zlib
from typing import Any

from ..data.sources import dataset_folder
from ..files import write_text
from ..integrity import RESULT_FILES
from .bundles import SpecError, bundle_spec, form_bundles
from .plan import build_plan, resolve_preset

CONFIG_ENV = "UPFL_WORKFLOW_CONFIG"
"""The environment variable through which the workflow's parse hands its config (zlib-compressed JSON, base64) to
the job that writes the bundle specs: a shell command line could not carry the specs themselves (a bundle of the
full config's is 270 kB)."""
CONFIG_FILES_ENV = "UPFL_WORKFLOW_CONFIG_FILES"
"""The environment variable through which the workflow's parse names its config files (relative to the folder it
runs in, one a line) to the report jobs, for their provenance lines: in a job's params they would make the report
jobs plan again whenever the same config is chosen another way (``--config preset=quick`` after ``--configfile
config/quick.yaml``)."""
SPEC_FOLDER = "results/bundles"


def spec_text(spec: dict[str, Any]) -> str:
    """The JSON text of a spec, as written and as hashed: a line per top-level entry and per run (keys sorted
    within each), so that json's C encoder writes it (with ``indent`` json takes its pure-Python encoder: a quarter
    of a second of every parse of the full config, whose specs are 4.7 MB)."""
    entries = [f"{json.dumps(key)}: {json.dumps(spec[key], sort_keys=True)}" for key in sorted(spec) if key != "runs"]
    if "runs" in spec:
        runs = ",\n".join(json.dumps(run, sort_keys=True) for run in spec["runs"])
        entries.append(f'"runs": [\n{runs}\n]')
    return "{\n" + ",\n".join(entries) + "\n}\n"


def spec_digest(text: str) -> str:
    """The first 16 hex digits of the SHA-256 of a spec's text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def spec_path(bundle: str, digest: str) -> str:
    """``results/bundles/<bundle>-<digest>.json``."""
    return f"{SPEC_FOLDER}/{bundle}-{digest}.json"


def run_folder(run: str) -> str:
    """A run's result folder, ``results/runs/<run id>``."""
    return f"results/runs/{run}"


def run_log_file(run: str) -> str:
    """A run's training log, ``results/logs/train/<run id>.log``."""
    return f"results/logs/train/{run}.log"


def workflow_specs(config: dict[str, Any], plan=None, bundles=None) -> dict[str, str]:
    """Every bundle's spec text of a (validated) workflow config, by bundle name. ``plan`` and ``bundles`` are
    the config's :func:`build_plan` and :func:`form_bundles` when the caller has them already."""
    resolved = resolve_preset(config)
    plan = plan if plan is not None else build_plan(config)
    bundles = bundles if bundles is not None else form_bundles(plan.runs)
    resources = resolved.get("resources_dir", "resources")
    datasets = resolved["datasets"]

    def data_dir(name: str) -> str:
        return dataset_folder(resources, datasets[name]["source"], name)

    return {b.name: spec_text(bundle_spec(b, plan.runs, data_dir, run_folder, run_log_file)) for b in bundles.values()}


def result_files(run: dict[str, Any]) -> list[str]:
    """The result files (:data:`upfl.integrity.RESULT_FILES`, in the order written) of one run of a bundle spec."""
    return [os.path.join(str(run["out"]), name) for name in RESULT_FILES]


def clear_results(spec: dict[str, Any]) -> list[str]:
    """Remove the result files (:data:`upfl.integrity.RESULT_FILES`, summary.json, which marks a finished run, first)
    of every run of a bundle spec before the bundle trains, as
    Snakemake removes a job's outputs before it runs: a bundle job declares only its benchmark file (and the files of
    runs missing from it), so that the parse does not pay for every run's files. A run whose settings changed is then
    trained anew, not refused for holding another config's results; a finished run is restored from the store, and an
    interrupted one resumes from its checkpoint (kept). Returns the files removed."""
    removed = []
    for run in spec["runs"]:
        for path in reversed(result_files(run)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            removed.append(path)
    return removed


def encode_config(config: dict[str, Any]) -> str:
    """The workflow config as the value of :data:`CONFIG_ENV`."""
    data = json.dumps(config, separators=(",", ":")).encode("utf-8")  # key order kept: it orders the plan
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


def decode_config(text: str | None) -> dict[str, Any]:
    """The workflow config from :data:`CONFIG_ENV`'s value; :class:`SpecError` when it is absent or damaged."""
    if not text:
        raise SpecError(
            f"{CONFIG_ENV} is not set: bundle specs are written by the workflow's rule bundle_specs "
            "(run snakemake), not by hand"
        )
    try:
        return json.loads(zlib.decompress(base64.b64decode(text)).decode("utf-8"))
    except (ValueError, zlib.error) as e:
        raise SpecError(f"{CONFIG_ENV}: not a workflow config ({e})") from None


def write_specs(files: list[str], environ: dict[str, str] | None = None) -> list[str]:
    """Write the spec files ``files`` (each ``results/bundles/<bundle>-<digest>.json``; every spec of the config when
    none is named) from the workflow config in ``environ`` (default: this process's); a file whose bundle or digest
    the config does not give is an error naming it (the config changed since the workflow was parsed). Returns the
    files written."""
    config = decode_config((os.environ if environ is None else environ).get(CONFIG_ENV))
    by_path = {spec_path(name, spec_digest(text)): text for name, text in workflow_specs(config).items()}
    files = files or sorted(by_path)
    unknown = [f for f in files if os.path.normpath(f) not in {os.path.normpath(p) for p in by_path}]
    if unknown:
        raise SpecError(
            f"{unknown[0]}: no bundle of this workflow config has this spec (the config changed "
            "after the workflow was parsed; run snakemake again)"
        )
    normalised = {os.path.normpath(p): text for p, text in by_path.items()}
    for f in files:
        write_text(f, normalised[os.path.normpath(f)])
    return files


def check_spec_file(path: str | os.PathLike, text: str) -> None:
    """:class:`SpecError` when a spec file's text does not have the digest its name gives (an edited spec would
    train other runs than the workflow planned)."""
    stem = os.path.basename(str(path))
    if not stem.endswith(".json") or "-" not in stem:
        return
    named = stem[: -len(".json")].rsplit("-", 1)[1]
    if len(named) == 16 and all(c in "0123456789abcdef" for c in named) and spec_digest(text) != named:
        raise SpecError(
            f"{path}: its content does not match the digest in its name (the file was edited after the "
            f"workflow wrote it); delete it and run snakemake again"
        )


def config_files_from_env(environ: dict[str, str] | None = None) -> list[str]:
    """The workflow's config files named in :data:`CONFIG_FILES_ENV` ([] when it is not set)."""
    text = (os.environ if environ is None else environ).get(CONFIG_FILES_ENV, "")
    return [line for line in text.splitlines() if line]


def run_list_texts(plan) -> dict[str, str]:
    """Each experiment's run list (``EXPERIMENT:RUN_DIR`` lines, ``upfl report runs --list``), by experiment, and
    under ``""`` all of them one after another (results/runs.csv's): the report jobs read them from files, as a
    command line holding them ran to 40,000 characters."""
    texts = {e: "".join(f"{e}:{run_folder(r)}\n" for r in ids) for e, ids in plan.experiments.items()}
    return {**texts, "": "".join(texts.values())}


def run_list_path(experiment: str, digest: str) -> str:
    """``results/experiments/<experiment>/runs-<digest>.list`` (``results/runs-<digest>.list`` for every
    experiment's, ``experiment`` ""): named by its content, as a spec is."""
    folder = f"results/experiments/{experiment}" if experiment else "results"
    return f"{folder}/runs-{digest}.list"


def write_run_lists(files: list[str], environ: dict[str, str] | None = None) -> list[str]:
    """Write the run list files ``files`` (every list of the config when none is named) from the workflow config in
    ``environ`` (default: this process's), as :func:`write_specs` writes the specs; a file this config does not
    give is an error naming it."""
    from .plan import build_plan

    config = decode_config((os.environ if environ is None else environ).get(CONFIG_ENV))
    texts = run_list_texts(build_plan(config))
    by_path = {os.path.normpath(run_list_path(e, spec_digest(t))): t for e, t in texts.items()}
    files = files or sorted(by_path)
    unknown = [f for f in files if os.path.normpath(f) not in by_path]
    if unknown:
        raise SpecError(
            f"{unknown[0]}: no experiment of this workflow config has this run list (the config changed after the "
            "workflow was parsed; run snakemake again)"
        )
    for f in files:
        write_text(f, by_path[os.path.normpath(f)])
    return files
