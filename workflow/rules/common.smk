# Config handling, the run grid and input functions. The grid logic is upfl.pipeline.plan (tested with pytest).
import base64
import json
import os
import shlex
import sys

from upfl.data.sources import (
    DATA_FOLDERS,
    DATASET_SOURCES,
    PAPER_SET_SOURCES,
    PAPER_SYNTHETIC_SETS,
    SOURCES,
    dataset_folder,
    paper_file_filename,
)
from upfl.data.digest import digest_path, files_signature, stat_signature
from upfl.pipeline.bundles import bundle_priorities, check_single_runs, form_bundles
from upfl.pipeline.specs import (
    CONFIG_ENV,
    CONFIG_FILES_ENV,
    encode_config,
    run_folder,
    run_list_path,
    run_list_texts,
    spec_digest,
    spec_path,
    workflow_specs,
)
from upfl.pipeline.outputs import output_files, output_kind, report_command
from upfl.pipeline.plan import ExperimentError, build_plan, names_regex, resolve_preset
from upfl.paper_order import table_menu_label

try:
    # The config with the preset's keys in place (its `datasets`, `resources_dir`): what the rules read.
    CONFIG = resolve_preset(config)
    PLAN = build_plan(config)
except ExperimentError as e:
    raise WorkflowError(f"config: {e}") from None

RESOURCES = CONFIG.get("resources_dir", "resources")
RUNS = PLAN.runs
OUTPUTS = PLAN.outputs
# Runs with `job.runs_per_job` > 1 are trained in bundles (upfl.pipeline.bundles, one job each); the others one per job.
BUNDLES = form_bundles(RUNS)
try:
    check_single_runs(RUNS, BUNDLES)
except ExperimentError as e:
    raise WorkflowError(f"config: {e}") from None
BUNDLE_OF = {r: b.name for b in BUNDLES.values() for r in b.run_ids}
# Bundles with more estimated work start first (upfl.pipeline.bundles.bundle_priorities); data sets before any training
# (they are quick and every bundle waits for its data).
BUNDLE_PRIORITY = bundle_priorities(BUNDLES, RUNS)
DATA_PRIORITY = len(BUNDLE_PRIORITY) + 1
# Report jobs (runs tables, tables, figures, claims) run as soon as their runs are done, before any waiting bundle:
# the reports of experiments finished early overlap the remaining training instead of queuing at the end, and a
# ready job waiting behind the bundles has its inputs stat'ed again at every scheduling step (Snakemake's cost).
REPORT_PRIORITY = DATA_PRIORITY
# The record of the numba kernels' warm-up (rule warm_up_kernels), which the CPU training jobs wait for.
KERNELS_RECORD = "resources/kernels/numba.json"
SINGLE_RUNS = [r for r in RUNS if r not in BUNDLE_OF]


def _alternation(names):
    """A wildcard constraint matching exactly `names` (upfl.pipeline.plan.names_regex: prefixes factored, so that a
    match costs a path's length, not the number of runs)."""
    return names_regex(names)


wildcard_constraints:
    dataset=_alternation(CONFIG["datasets"]),
    experiment=_alternation(PLAN.experiments),
    run=_alternation(SINGLE_RUNS),


def datasets_of(source):
    return [n for n, d in CONFIG["datasets"].items() if d["source"] == source]


def resources_folder(path, planned):
    """The resources folder of a file `path` planned as `planned` = `RESOURCES/<file name, maybe nested>`."""
    return path[: len(path) - len(planned) + len(RESOURCES)]


def dataset_setting(name):
    """`datasets.<name>.setting`: the paper set or generator setting a data set is made from (default: its name)."""
    return CONFIG["datasets"][name].get("setting", name)


def paper_files(wildcards):
    """The four released files of a `source: paper` data set (`upfl data fetch` puts them under RESOURCES)."""
    return [
        f"{RESOURCES}/{SOURCES[s].filename}" for s in PAPER_SET_SOURCES[f"paper_{dataset_setting(wildcards.dataset)}"]
    ]


def paper_overrides(wildcards):
    """`--url`/`--sha256` of the set's files from `sources` (the mirror they came from, checksums of other files)."""
    return overrides_of(PAPER_SET_SOURCES[f"paper_{dataset_setting(wildcards.dataset)}"])


def overrides_of(names):
    """`source_overrides` of every source of `names`, each flag once (the mirror's `--url` is every file's)."""
    return " ".join(dict.fromkeys(f for n in names for f in override_flags(n)))


# The paper's released synthetic sets are fetched one set (its four files) per job (rule fetch_paper_set); every
# other source is one file per job (rule fetch_archive).
PAPER_SET_FILES = {s for names in PAPER_SET_SOURCES.values() for s in names}
ARCHIVES = {src.filename: name for name, src in SOURCES.items() if name not in PAPER_SET_FILES}


def paper_set_outputs():
    """The four files of the released set `{setting}` under RESOURCES, as output patterns (wildcard `setting`)."""
    return [
        f"{RESOURCES}/{paper_file_filename('{setting}', split, groups)}"
        for split in ("train", "test")
        for groups in (False, True)
    ]


def paper_set_fetch_args(wildcards):
    """`upfl data fetch --source`'s names (the set's four files) and their `--url`/`--sha256` flags."""
    names = PAPER_SET_SOURCES[f"paper_{wildcards.setting}"]
    return " ".join([*(shlex.quote(n) for n in names), overrides_of(names)]).strip()


def synthetic_groups():
    """The `source: synthetic` data sets by generator setting: one job writes all the draws of a setting."""
    groups = {}
    for name in sorted(datasets_of("synthetic")):
        groups.setdefault(dataset_setting(name), []).append(name)
    return groups


def synthetic_draw_flags(names):
    """`upfl synth`'s `--draw NAME=SEED` of each data set of `names` (its `data_seed`, default 0)."""
    seeds = {n: CONFIG["datasets"][n].get("data_seed", 0) for n in names}
    return " ".join(f"--draw {shlex.quote(f'{n}={seed}')}" for n, seed in seeds.items())


def resources_of(planned):
    """A params function: the resources folder of a job whose first output is planned as `planned`."""
    return lambda wildcards, output: resources_folder(output[0], planned)


def archive_source(archive):
    return ARCHIVES[archive]


def dataset_sources(dataset):
    """The sources `upfl data prepare` reads for a LEAF data set: its archives, and for FEMNIST with the
    default `options.sizes: paper_index` the authors' device index (their per-device counts)."""
    d = CONFIG["datasets"][dataset]
    names = [n for n in DATASET_SOURCES[d["source"]] if not SOURCES[n].mirror]
    if d["source"] == "femnist" and d.get("options", {}).get("sizes", "paper_index") == "paper_index":
        names += list(DATASET_SOURCES["paper_femnist"])
    return names


def source_archives(wildcards):
    return [f"{RESOURCES}/{SOURCES[name].filename}" for name in dataset_sources(wildcards.dataset)]


def sha256_flag(name, digest):
    return f"--sha256 {shlex.quote(f'{name}={digest}')}"


def index_checksums(wildcards):
    """`--sha256 NAME=HEX` for the FEMNIST index files whose checksum `sources` overrides."""
    spec = CONFIG.get("sources", {})
    return " ".join(
        sha256_flag(n, spec[n]["sha256"])
        for n in dataset_sources(wildcards.dataset)
        if SOURCES[n].mirror and "sha256" in spec.get(n, {})
    )


def source_overrides(name):
    """`--url`/`--sha256` flags from `sources.<name>` (a mirror, a known checksum)."""
    return " ".join(override_flags(name))


def override_flags(name):
    """`source_overrides`' flags, each with its quoted value (`--url 'NAME=URL'`)."""
    spec = CONFIG.get("sources", {}).get(name, {})
    url = spec.get("url")
    flags = [f"--url {shlex.quote(f'{name}={url}')}"] if url else []
    mirror = SOURCES[name].mirror
    base = CONFIG.get("sources", {}).get(mirror, {}).get("url") if mirror else None
    flags += [f"--url {shlex.quote(f'{mirror}={base}')}"] if base and not url else []
    flags += [sha256_flag(name, spec["sha256"])] if "sha256" in spec else []
    return flags


def prepare_options(dataset):
    """`--set KEY=VALUE` flags of `upfl data prepare` from `datasets.<name>.options` (spec fields)."""
    options = CONFIG["datasets"][dataset].get("options", {})
    return " ".join(f"--set {shlex.quote(f'{k}={json.dumps(v)}')}" for k, v in options.items())


def dataset_dir(name):
    """`RESOURCES/data/<paper|generated|leaf>/<name>`: the authors' draws and ours never share a path."""
    return dataset_folder(RESOURCES, CONFIG["datasets"][name]["source"], name)


def run_dir(run):
    return run_folder(run)


def dataset_digest(name):
    """`<dataset_dir>.digest.json`: the data set's digest (upfl.data.digest), written by rule `data_digest`; the input
    of every job that reads the data set, so a job reruns when the data's content changes (its checksum), not its
    clock."""
    return str(digest_path(dataset_dir(name)))


def data_state(wildcards):
    """The stat signature of a data set's files (sizes, modification and change times, inodes; no file read): the
    param of rule `data_digest`, which reruns when a file is replaced whatever its modification time says. A param
    of the wildcards alone (Snakemake compares those), evaluated again when the job runs, after its data was made."""
    return stat_signature(dataset_dir(wildcards.dataset))


def sources_state(inputs):
    """A params function: the stat signature of the files ``inputs(wildcards)`` (the paper's released files, a LEAF
    folder's files), so a file replaced with its modification time kept still reruns the job."""
    return lambda wildcards: files_signature(list(inputs(wildcards)))


# Each bundle's spec (what `upfl run-many` trains: per run its id, data, result folder, log, config) is computed
# here and written by the job `bundle_specs` (upfl.pipeline.specs), never by the parse: a dry run or a report
# changes no file. A spec's file name carries its digest, and a bundle job takes the digest as a param, so it
# reruns when its spec's content changes (Snakemake's params trigger), whatever the files' modification times.
# The job computes the specs again from this config, handed over in the environment (a shell command could not
# carry the specs).
SPEC_DIGESTS = {name: spec_digest(text) for name, text in workflow_specs(config, PLAN, BUNDLES).items()}
BUNDLE_SPECS = {name: spec_path(name, digest) for name, digest in SPEC_DIGESTS.items()}
os.environ[CONFIG_ENV] = encode_config(config)


def run_data(wildcards):
    return dataset_dir(RUNS[wildcards.run].dataset)


def run_data_digest(wildcards):
    return dataset_digest(RUNS[wildcards.run].dataset)


def run_flags(wildcards):
    return " ".join(shlex.quote(f) for f in RUNS[wildcards.run].flags())


def run_job(key):
    return lambda wildcards: RUNS[wildcards.run].job[key]


def kernels_input(job):
    """The kernels' warm-up record for a CPU job (none for a GPU job), ``ancient``: only its existence orders the job."""
    return [] if job["gpus"] else [ancient(KERNELS_RECORD)]


def run_kernels(wildcards):
    return kernels_input(RUNS[wildcards.run].job)


def bundle_benchmark(bundle):
    """A bundle job's benchmark file: its first output, written when the whole bundle has finished."""
    return f"results/benchmarks/bundles/{bundle}.tsv"


def runs_missing_from(bundle):
    """The runs of a finished bundle (its benchmark file exists) whose summary.json is missing (a deleted run
    folder), sorted; none for a bundle that has not finished (it trains all its runs anyway). The bundle's rule
    declares these runs' files as outputs, and the targets ask for their summary.json (run_results): Snakemake
    reruns the bundle, which restores or retrains them. A bundle declares no other run's files: Snakemake's parse
    pays for every output it declares (each is matched, expanded and checked against directory outputs), and the
    full config's runs would be 10,400 of them. Only file times are read; nothing is written."""
    if not os.path.exists(bundle_benchmark(bundle)):
        return []
    return [r for r in BUNDLES[bundle].run_ids if not os.path.exists(f"{run_dir(r)}/summary.json")]


MISSING_RUNS = {name: runs_missing_from(name) for name in BUNDLES}
MISSING_RUN = {r for runs in MISSING_RUNS.values() for r in runs}
# A run's file named as a target (`snakemake results/runs/<run id>/summary.json`) is an output of its bundle.
NAMED_RUN_FILES = {os.path.normpath(a) for a in sys.argv[1:] if os.path.normpath(a).startswith("results/runs/")}


def bundle_run_outputs(bundle):
    """The run files a bundle declares as outputs besides its benchmark file: those of its runs missing from it once
    it has finished (runs_missing_from), and those named as targets on the command line."""
    files = []
    for r in MISSING_RUNS[bundle] if not NAMED_RUN_FILES else BUNDLES[bundle].run_ids:
        run_files = [f"{run_dir(r)}/summary.json", f"{run_dir(r)}/metrics.csv"]
        files += [f for f in run_files if r in MISSING_RUN or f in NAMED_RUN_FILES]
    return files


def run_results(run_ids):
    """What a target building from the runs ``run_ids`` asks for: each bundle's benchmark file (written when the
    whole bundle has finished), the summary.json of a run trained on its own (rule `train`), and the summary.json
    of a run missing from a bundle that has finished (runs_missing_from, an output of its bundle's rule then).
    Snakemake reruns a job for a missing output only when a job or target asks for that file: a deleted run folder
    is restored or retrained, and its tables rebuilt, because the target asks for its summary."""
    benchmarks, summaries = set(), []
    for r in run_ids:
        bundle = BUNDLE_OF.get(r)
        if bundle is None or r in MISSING_RUN:
            summaries.append(f"{run_dir(r)}/summary.json")
        if bundle is not None:
            benchmarks.add(bundle_benchmark(bundle))
    return sorted(benchmarks) + summaries


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return None


def experiment_results(experiment):
    """What the report job of ``experiment`` (its runs table, tables and figures) waits for: each bundle's benchmark file (written when the whole bundle has
    finished, after its runs' files, and never older than them: upfl.commands.bundle.write_benchmark), the summary.json of a run trained on its own (rule `train`), and both files
    (summary.json, metrics.csv) of a bundled run either of which is newer than its bundle's benchmark file (edited
    since: the table's job checks each run's files against the checksums recorded when the run was trained,
    upfl.pipeline.integrity, and restores an edited run before reading it). Snakemake reruns a job whose set of
    inputs changed since it ran: a run restored by the table stays newer than the benchmark file, so the set stays
    the same until the bundle runs again. A bundled run's files are not asked for otherwise: its bundle does not
    declare them (runs_missing_from), and each file asked for costs the parse a search for its producer."""
    finished, files = {}, []
    for r in PLAN.experiments[experiment]:
        bundle = BUNDLE_OF.get(r)
        if bundle is None:
            files.append(f"{run_dir(r)}/summary.json")
            continue
        if bundle not in finished:
            finished[bundle] = _mtime(bundle_benchmark(bundle))
        run_files = [f"{run_dir(r)}/summary.json", f"{run_dir(r)}/metrics.csv"]
        if finished[bundle] is not None and any((_mtime(f) or 0) > finished[bundle] for f in run_files):
            files += run_files
    return sorted(bundle_benchmark(b) for b in finished) + files


def target_results(names):
    """The inputs (run_results) that the target building the outputs ``names`` asks for, as an input function:
    evaluated only when the target is built, not by every job's parse. A target has no outputs, so the set may
    change with what exists."""
    run_ids = sorted({r for n in names for r in PLAN.experiments[OUTPUTS[n]["experiment"]]})
    return lambda wildcards: run_results(run_ids)


# Each experiment's run list (EXPERIMENT:RUN_DIR lines), which its report job and the one of results/runs.csv read
# with `--list`: written by the job run_lists and named by its content, as the bundles' specs are.
# RUN_LISTS[""]: every experiment's, results/runs.csv's.
RUN_LISTS = {e: run_list_path(e, spec_digest(text)) for e, text in run_list_texts(PLAN).items()}


def output_of(name):
    out = OUTPUTS[name]
    return output_files(out["kind"], name)


# `snakemake --report FILE` reports the outputs that exist (after any preset or single target); only a plain
# run (or --report-after-run, which reports after building) asks for every output of the config.
MAKING_REPORT = any(a == "--report" or a.startswith("--report=") for a in sys.argv[1:])


def leaf_folder_path(wildcards):
    """`datasets.<name>.path` of a `source: leaf` data set (relative paths: to the workflow's directory)."""
    return os.path.expanduser(CONFIG["datasets"][wildcards.dataset]["path"])


def leaf_folder_inputs(wildcards):
    """The files the copy of a `source: leaf` folder holds (upfl.data.leaf_folder.folder_files; imported here, as
    it imports numpy, which parsing the workflow does not need)."""
    from upfl.data.leaf_folder import folder_files

    try:
        return [str(f) for f in folder_files(leaf_folder_path(wildcards))]
    except ValueError as e:
        raise WorkflowError(f"config: datasets.{wildcards.dataset}.path: {e}") from None


def all_outputs(wildcards=None):
    """The inputs of `all` (an input function: the job of a cluster node does not evaluate it)."""
    files = [f for name in OUTPUTS for f in output_of(name)]
    files += [
        "results/runs.csv",
        "results/tables/table2.csv",
        "results/tables/table2.md",
        "results/tables/table2.html",
        "results/tables/claims.csv",
        "results/tables/claims.md",
        "results/tables/claims.html",
    ]
    return [f for f in files if os.path.exists(f)] if MAKING_REPORT else files + run_results(RUNS)


# The report jobs name this invocation's config files in their provenance lines (upfl.pipeline.specs.CONFIG_FILES_ENV):
# relative to the folder the workflow runs in, and outside the jobs' params, so that choosing a preset by its file or
# by `--config preset=NAME` plans the same jobs.
os.environ[CONFIG_FILES_ENV] = "\n".join(os.path.relpath(f) for f in workflow.configfiles)


def config_file_args():
    """`--preset NAME` for the provenance line (`upfl report` names the config files from CONFIG_FILES_ENV)."""
    return f"--preset {shlex.quote(CONFIG.get('preset', 'full'))}"


def claims_command():
    """The `upfl report claims` command line (without `upfl report`) that writes the claims page from
    results/runs.csv."""
    return f"claims --runs results/runs.csv {claims_args()} {config_file_args()} --out-prefix results/tables/claims"


def claims_args():
    """`upfl report claims` flags: the experiments each group of claims reads (config `claims`) and the data
    sets this preset leaves out (named as the reason for 'not measured here')."""
    args = [f"--experiment-for {shlex.quote(f'{role}={exp}')}" for role, exp in CONFIG.get("claims", {}).items()]
    excluded = set(CONFIG.get("exclude_sources", []))
    left_out = [n for n, d in CONFIG["datasets"].items() if d["source"] in excluded]
    if left_out:
        args.append(f"--excluded {shlex.quote(','.join(left_out))}")
    return " ".join(args)


def experiment_outputs(experiment):
    """The outputs (tables, figures) made from the runs of ``experiment``, in the config's order."""
    return [n for n, o in OUTPUTS.items() if o["experiment"] == experiment]


def experiment_references(experiment):
    """The runs tables of other experiments that outputs of ``experiment`` read (a draws output's reference
    experiment: the paper's draw)."""
    refs = {o.get("reference") for o in OUTPUTS.values() if o["experiment"] == experiment}
    return sorted(f"results/experiments/{r}/runs.csv" for r in refs if r in PLAN.experiments and r != experiment)


def report_files(name):
    """The files of output ``name`` (upfl.pipeline.outputs), with tables' HTML and CSV and figures' PNG in the
    Snakemake report under its kind's caption. `snakemake --report` reports the files that exist: one of a report job
    whose other files exist (a figure deleted, a table built alone before) is then a plain output."""
    kind = output_kind(OUTPUTS[name]["kind"])
    caption = f"../report/{kind.caption}.rst"
    files = []
    for path in output_of(name):
        folder, ext = os.path.basename(os.path.dirname(path)), os.path.splitext(path)[1]
        if MAKING_REPORT and not os.path.exists(path):
            files.append(path)
        elif folder == "tables" and ext in (".html", ".csv"):
            files.append(report(path, category="Tables", subcategory=table_menu_label(name), caption=caption))
        elif folder == "figures" and ext == ".png":
            files.append(report(path, category="Figures", caption=figure_caption(name), labels=figure_labels(name)))
        else:
            files.append(path)
    return files


def figure_caption(name):
    """A figure's caption file in the report: the one its job wrote beside it (``results/figures/NAME.rst``, its
    number, data, seeds and provenance; upfl.pipeline.captions.figure_caption), named by its absolute path as
    Snakemake reads a caption relative to the rule file; workflow/report/figure.rst where it was never written."""
    written = os.path.abspath(f"results/figures/{name}.rst")
    return written if MAKING_REPORT and os.path.exists(written) else "../report/figure.rst"


def output_command(name):
    """The `upfl report` command line (without `upfl report`) that writes output ``name`` from its experiment's
    runs table: the kind's sub-command and prefixes (upfl.pipeline.outputs.report_command), the run selection, the
    reference runs and the config files."""
    out = OUTPUTS[name]
    args = [report_command(out["kind"], name), f"--runs {shlex.quote(experiment_table(out['experiment']))}"]
    args.append(f"--experiment {shlex.quote(out['experiment'])}")
    args += [f"--where {shlex.quote(w)}" for w in out.get("where", [])]
    if out.get("metrics"):
        args.append(f"--metrics {shlex.quote(','.join(out['metrics']))}")
    if out.get("reference") in PLAN.experiments:
        ref = out["reference"]
        args.append(f"--reference-runs {shlex.quote(experiment_table(ref))} --reference-experiment {shlex.quote(ref)}")
    args.append(config_file_args())
    return " ".join(args)


def experiment_table(experiment):
    return f"results/experiments/{experiment}/runs.csv"


def experiment_then(experiment):
    """`--then COMMAND` for each output of ``experiment`` (upfl report runs runs them once the table is written)."""
    return " ".join(f"--then {shlex.quote(output_command(n))}" for n in experiment_outputs(experiment))


def rule_name(experiment):
    return f"report_{experiment}"


def front_page():
    """What the report's front page shows from the files that exist: the claims page's summary line, the headline
    figure (the first Table 1 convergence figure built), the runs in results/runs.csv and the preset the claims page
    was built for (upfl.report.built), for `workflow/report/workflow.rst`."""
    from upfl.paper_order import paper_figure
    from upfl.report.front import claims_summary, headline_numbers, headline_table_rst

    summary = claims_summary("results/tables/claims.md") or ""

    # The headline figure: the convergence figure built that comes first in the paper (Figure 2, left, in the
    # full config), a few panels that stay legible at the page's width.
    first = sorted(
        (paper_figure(name) or (99, ""), i, name)
        for i, (name, out) in enumerate(OUTPUTS.items())
        if out["kind"] == "convergence"
    )
    figures = [f for *_, name in first for f in output_of(name) if f.endswith(".png") and os.path.exists(f)]
    image = ""
    if figures:
        with open(figures[0], "rb") as f:
            # in lines of 76 characters: docutils refuses longer lines; it joins an image URI's lines
            image = f"data:image/png;base64,\n{base64.encodebytes(f.read()).decode('ascii').rstrip()}"
    tables = [f for f in all_outputs() if f.endswith(".md")]
    return {
        "claims_summary": summary,
        "headlines": headline_table_rst(headline_numbers("results/tables/claims.csv")),
        "headline_figure": os.path.basename(figures[0]) if figures else "",
        "headline_image": image,
        "runs": built_runs("results/runs.csv"),
        "planned_runs": len(RUNS),
        "built_presets": built_presets(tables),
    }


def figure_labels(name):
    """A figure's label in the report, as a function Snakemake calls when it makes the report: its place in the
    paper's order (Snakemake sorts the labels as text)."""

    def labels(wildcards):
        from upfl.paper_order import paper_order_label

        return {"figure": paper_order_label(name)}

    return labels


# The front page's and the tables' caption templates read these as `snakemake.config["front_page"]` and
# `snakemake.config["captions"][<rule>/<template>]` (set after the config was checked).
if MAKING_REPORT:
    from upfl.pipeline.captions import table_captions
    from upfl.report.built import built_presets, built_runs

    config["front_page"] = front_page()
    config["captions"] = table_captions(CONFIG, PLAN, rule_name)
