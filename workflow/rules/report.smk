# Tables and figures from the runs of each experiment (upfl report ...), and one named target per table/figure.
# Shell quoting: single values are interpolated with `:q`; the flag lists (`{params.overrides}`, `{params.options}`,
# `{params.checksums}`, `{params.then}`, `{params.claims}`) are built in common.smk with every value
# passed through `shlex.quote` (`:q` would quote the whole list as one word). tests/test_hostile_inputs.py runs names carrying `;` through them.


# One report job per experiment: `upfl report runs` checks the experiment's run folders and writes its runs table,
# then (--then) every table and figure of the experiment's outputs, in one process. Each of those files is a declared
# output of the job, so each remains its own target; building one builds its experiment's runs table and other
# outputs with it. The outputs, their files and commands come from upfl.pipeline.outputs.OUTPUT_KINDS (common.smk's
# report_files and output_command).
for _experiment in PLAN.experiments:

    rule:
        name:
            rule_name(_experiment)
        input:
            runs=lambda wildcards, e=_experiment: experiment_results(e),
            reference=experiment_references(_experiment),
            run_list=ancient(RUN_LISTS[_experiment]),
        output:
            *(f for n in experiment_outputs(_experiment) for f in report_files(n)),
            runs=experiment_table(_experiment),
        log:
            f"results/logs/report/experiments/{_experiment}.log",
        priority: REPORT_PRIORITY
        localrule: True
        params:
            then=experiment_then(_experiment),
        shell:
            "upfl report runs --verify --out {output.runs:q} --list {input.run_list:q} {params.then} > {log:q} 2>&1"


# results/runs.csv waits for the experiments' runs tables, which wait for their runs (common.smk's
# experiment_results: a retrained or edited run makes its experiment's table, and so this one, out of date); it
# reads the run folders themselves. The claims page, which reads results/runs.csv, is written by the same process
# (--then): building either builds both.
rule all_runs:
    input:
        tables=[experiment_table(e) for e in PLAN.experiments],
        run_list=ancient(RUN_LISTS[""]),
    output:
        runs="results/runs.csv",
        html=report(
            "results/tables/claims.html", category="Claims", subcategory="claims", caption="../report/claims.rst"
        ),
        csv=report("results/tables/claims.csv", category="Claims", subcategory="claims", caption="../report/claims.rst"),
        md="results/tables/claims.md",
    log:
        "results/logs/report/runs.log",
    priority: REPORT_PRIORITY
    localrule: True
    params:
        claims=shlex.quote(claims_command()),
    shell:
        "upfl report runs --verify --out {output.runs:q} --list {input.run_list:q} --then {params.claims} > {log:q} 2>&1"


# The run lists (common.smk's RUN_LISTS): written here, at job time, named by their content (the command writes every
# list of the config, which are this rule's outputs: a command naming them would run to thousands of characters).
# The report jobs take theirs as `ancient` input (the file only orders the jobs; a rewrite never dates them); a
# changed list has a new name, which reruns its report job. The lists are `temp`: removed once the jobs that read
# them are done, so that they are made anew whenever a report job runs, never an input stamped in the future.
rule run_lists:
    output:
        [temp(f) for f in sorted(RUN_LISTS.values())],
    log:
        "results/logs/report/run_lists.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl run-lists > {log:q} 2>&1"


# `snakemake claims`: the claims page (written by all_runs, with results/runs.csv).
rule claims:
    input:
        "results/tables/claims.csv",
        "results/tables/claims.md",
        "results/tables/claims.html",
    localrule: True


rule table2:
    input:
        [dataset_dir(d) for d in PLAN.datasets if CONFIG["datasets"][d].get("setting", d) == d],
    output:
        html=report(
            "results/tables/table2.html",
            category="Tables",
            subcategory=table_menu_label("table2"),
            caption="../report/table2.rst",
        ),
        csv=report(
            "results/tables/table2.csv",
            category="Tables",
            subcategory=table_menu_label("table2"),
            caption="../report/table2.rst",
        ),
        md="results/tables/table2.md",
    log:
        "results/logs/report/table2.log",
    priority: REPORT_PRIORITY
    localrule: True
    params:
        configs=config_file_args(),
    shell:
        "upfl report table2 --out-prefix results/tables/table2 {params.configs} {input:q} > {log:q} 2>&1"


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
