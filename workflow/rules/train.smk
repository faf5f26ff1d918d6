# Training. Runs with `job.runs_per_job: 1` are one job each (rule `train`); the others are trained in
# bundles (upfl.pipeline.bundles, docs/pipeline.md "Many runs per job"): one rule per bundle, one process
# (`upfl run-many`) per job, reading the bundle's spec results/bundles/<name>-<digest>.json.
# Identical runs requested by several experiments are one run. A bundle job times itself (`upfl run-many
# --benchmark`, Snakemake's benchmark format): the `benchmark:` directive's per-second sampling of the process's
# memory maps cost Snakemake's scheduler more CPU than it measured.
# `resources: gpu` comes from the experiment's `job.gpus`; the run itself picks its device (`device: auto`).
# A bundle's output is its benchmark file, written when the whole bundle has finished, and the files of its runs
# missing from it once it has finished (a deleted run folder) or named as targets (common.smk's bundle_run_outputs);
# the runs tables and targets ask for the benchmark file, and for a run's files only where one is missing or edited
# (common.smk's experiment_results and run_results). Its runs' other files are not declared: each declared file
# costs every parse (a cluster job's included). So Snakemake does not remove them before the job runs; `upfl
# run-many --clear-results` does, as Snakemake does a job's outputs, so that a run whose settings changed is trained
# anew.
# Exit status 3 is a diverged run: its summary.json records `diverged` and the report marks its cell, so the
# job succeeds; any other non-zero status fails the job (a bundle records a diverged run and goes on).


rule train:
    input:
        data=run_data_digest,
        kernels=run_kernels,
    output:
        metrics="results/runs/{run}/metrics.csv",
        summary="results/runs/{run}/summary.json",
    log:
        "results/logs/train/{run}.log",
    benchmark:
        "results/benchmarks/train/{run}.tsv"
    threads: run_job("threads")
    resources:
        gpu=run_job("gpus"),
        runtime=run_job("runtime"),
        mem_mb=run_job("mem_mb"),
    params:
        flags=run_flags,
        data=run_data,
        out=lambda wc: run_dir(wc.run),
    shell:
        "upfl run --data {params.data:q} --out {params.out:q} --threads {threads} {params.flags} > {log:q} 2>&1 "
        "|| [ $? -eq 3 ]"


# numba's kernels are compiled once, before the CPU training jobs: on a fresh clone the compile takes about 20
# CPU-seconds, which jobs started together would each pay; it runs beside the data jobs. The training jobs take its
# record as `ancient` input (common.smk's kernels_input), so only its existence orders them: a new warm-up never
# makes a finished job out of date. The record is `temp`: removed once the jobs that wait for it are done, so that
# it is made anew whenever training is to be done, never an input stamped in the future (Snakemake refuses a job
# whose outputs end older than an input). A run that finds the kernels missing from numba's cache (a changed
# source, another CPU) compiles them itself.
rule warm_up_kernels:
    output:
        KERNELS_RECORD,
    log:
        "results/logs/kernels/warm_up.log",
    priority: DATA_PRIORITY
    threads: 1
    resources:
        runtime=15,
        mem_mb=2000,
    shell:
        "upfl kernels warm-up --threads 1 --out {output:q} > {log:q} 2>&1"


# The bundles' specs (common.smk, upfl.pipeline.specs): written here, at job time, named by their content (the
# command writes every spec of the config, which are this rule's outputs: a command naming them ran to 7,700
# characters). A bundle job takes its spec as `ancient` input (the file only orders the jobs; a rewrite never dates
# a bundle) and the spec's digest as a param: it reruns when its spec's content changes, whatever the modification
# times.
if BUNDLES:

    rule bundle_specs:
        output:
            sorted(BUNDLE_SPECS.values()),
        log:
            "results/logs/bundles/specs.log",
        priority: DATA_PRIORITY
        localrule: True
        shell:
            "upfl bundle-specs > {log:q} 2>&1"


for _bundle in BUNDLES.values():

    rule:
        name:
            f"train_bundle_{_bundle.name}"
        input:
            spec=ancient(BUNDLE_SPECS[_bundle.name]),
            data=sorted({dataset_digest(RUNS[r].dataset) for r in _bundle.run_ids}),
            kernels=kernels_input(_bundle.job),
        output:
            benchmark=bundle_benchmark(_bundle.name),
            runs=bundle_run_outputs(_bundle.name),
        log:
            f"results/logs/bundles/{_bundle.name}.log",
        priority: BUNDLE_PRIORITY[_bundle.name]
        threads: _bundle.job["threads"]
        resources:
            gpu=_bundle.job["gpus"],
            runtime=_bundle.job["runtime"],
            mem_mb=_bundle.job["mem_mb"],
        params:
            spec_digest=SPEC_DIGESTS[_bundle.name],
        shell:
            "upfl run-many --spec {input.spec:q} --clear-results --benchmark {output.benchmark:q} > {log:q} 2>&1"
