# One job per run of the grid; identical runs requested by several experiments are one job.
# `resources: gpu` comes from the experiment's `job.gpus`; the run itself picks its device (`device: auto`).
# Exit status 3 is a diverged run: its summary.json records `diverged` and the report marks its cell, so the
# job succeeds; any other non-zero status fails the job.


rule train:
    input:
        run_data,
    output:
        metrics="results/runs/{run}/metrics.csv",
        summary="results/runs/{run}/summary.json",
    params:
        flags=run_flags,
        out=lambda wc: run_dir(wc.run),
    log:
        "results/logs/train/{run}.log",
    benchmark:
        "results/benchmarks/train/{run}.tsv"
    threads: run_job("threads")
    resources:
        gpu=run_job("gpus"),
        runtime=run_job("runtime"),
        mem_mb=run_job("mem_mb"),
    shell:
        "upfl run --data {input} --out {params.out} --threads {threads} {params.flags} > {log} 2>&1 "
        "|| [ $? -eq 3 ]"
