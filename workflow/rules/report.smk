# Tables and figures from the runs of each experiment (upfl report ...), and one named target per table/figure.
# Shell quoting: single values are interpolated with `:q`; the flag lists (`{params.overrides}`, `{params.options}`,
# `{params.checksums}`, `{params.pairs}`) are built in common.smk with every value passed through `shlex.quote`
# (`:q` would quote the whole list as one word). tests/test_hostile_inputs.py runs names carrying `;` through them.


rule experiment_runs:
    input:
        experiment_results,
    output:
        "results/experiments/{experiment}/runs.csv",
    log:
        "results/logs/report/runs_{experiment}.log",
    priority: REPORT_PRIORITY
    localrule: True
    params:
        pairs=lambda wc: experiment_pairs(wc.experiment),
    shell:
        "upfl report runs --verify --out {output:q} {params.pairs} > {log:q} 2>&1"


# results/runs.csv waits for the experiments' runs tables, which wait for their runs (common.smk's
# experiment_results: a retrained or edited run makes its experiment's table, and so this one, out of date); it
# reads the run folders themselves.
rule all_runs:
    input:
        [f"results/experiments/{e}/runs.csv" for e in PLAN.experiments],
    output:
        "results/runs.csv",
    log:
        "results/logs/report/runs.log",
    priority: REPORT_PRIORITY
    localrule: True
    params:
        pairs=" ".join(experiment_pairs(e) for e in PLAN.experiments),
    shell:
        "upfl report runs --verify --out {output:q} {params.pairs} > {log:q} 2>&1"


rule table2:
    input:
        [dataset_dir(d) for d in PLAN.datasets if CONFIG["datasets"][d].get("setting", d) == d],
    output:
        html=report(
            "results/tables/table2.html", category="Tables", subcategory="table2", caption="../report/table2.rst"
        ),
        csv=report("results/tables/table2.csv", category="Tables", subcategory="table2", caption="../report/table2.rst"),
        md="results/tables/table2.md",
    log:
        "results/logs/report/table2.log",
    priority: REPORT_PRIORITY
    localrule: True
    params:
        configs=config_file_args(),
    shell:
        "upfl report table2 --out-prefix results/tables/table2 {params.configs} {input:q} > {log:q} 2>&1"


# One rule per entry of upfl.pipeline.outputs.OUTPUT_KINDS (kinds sharing a rule write the same files): its files,
# caption and `upfl report` command all come from that table.
for _rule, _kind in report_rules().items():

    rule:
        name:
            _rule
        input:
            unpack(report_inputs),
        output:
            **report_outputs(_kind),
        log:
            "results/logs/report/{name}.log",
        wildcard_constraints:
            name=names_of(*kinds_of_rule(_rule)),
        priority: REPORT_PRIORITY
        localrule: True
        params:
            command=report_command_of,
            args=report_args,
            reference=reference_args,
            configs=config_file_args(),
        shell:
            "upfl report {params.command} --runs {input.runs:q} {params.args} {params.reference} {params.configs} "
            "> {log:q} 2>&1"


rule claims:
    input:
        "results/runs.csv",
    output:
        html=report(
            "results/tables/claims.html", category="Claims", subcategory="claims", caption="../report/claims.rst"
        ),
        csv=report("results/tables/claims.csv", category="Claims", subcategory="claims", caption="../report/claims.rst"),
        md="results/tables/claims.md",
    log:
        "results/logs/report/claims.log",
    priority: REPORT_PRIORITY
    localrule: True
    params:
        args=claims_args(),
        configs=config_file_args(),
    shell:
        "upfl report claims --runs {input:q} {params.args} {params.configs} "
        "--out-prefix results/tables/claims > {log:q} 2>&1"


for _target, _names in PLAN.targets.items():

    rule:
        name:
            _target
        input:
            [f for n in _names for f in output_of(n)],
            target_results(_names),
        localrule: True


rule runs:
    input:
        "results/runs.csv",
        lambda wildcards: run_results(RUNS),
    localrule: True
