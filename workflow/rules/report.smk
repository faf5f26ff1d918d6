# Tables and figures from the runs of each experiment (upfl report ...), and one named target per table/figure.
# Shell quoting: single values are interpolated with `:q`; the flag lists (`{params.overrides}`, `{params.options}`,
# `{params.checksums}`, `{params.pairs}`) are built in common.smk with every value passed through `shlex.quote`
# (`:q` would quote the whole list as one word). tests/test_hostile_inputs.py runs names carrying `;` through them.


rule experiment_runs:
    input:
        experiment_results,
    output:
        "results/experiments/{experiment}/runs.csv",
    params:
        pairs=lambda wc: experiment_pairs(wc.experiment),
    log:
        "results/logs/report/runs_{experiment}.log",
    localrule: True
    priority: REPORT_PRIORITY
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
    params:
        pairs=" ".join(experiment_pairs(e) for e in PLAN.experiments),
    log:
        "results/logs/report/runs.log",
    localrule: True
    priority: REPORT_PRIORITY
    shell:
        "upfl report runs --verify --out {output:q} {params.pairs} > {log:q} 2>&1"


rule table2:
    input:
        [dataset_dir(d) for d in PLAN.datasets if CONFIG["datasets"][d].get("setting", d) == d],
    output:
        html=report("results/tables/table2.html", category="Tables", subcategory="table2", caption="../report/table2.rst"),
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


rule accuracy_table:
    input:
        report_inputs,
    output:
        html=report("results/tables/{name}.html", category="Tables", subcategory="{name}", caption="../report/table1.rst"),
        csv=report("results/tables/{name}.csv", category="Tables", subcategory="{name}", caption="../report/table1.rst"),
        md="results/tables/{name}.md",
        tex="results/tables/{name}.tex",
    wildcard_constraints:
        name=names_of("table1"),
    params:
        args=report_args,
        configs=config_file_args(),
    log:
        "results/logs/report/{name}.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report table1 --runs {input:q} {params.args} {params.configs} "
        "--out-prefix results/tables/{wildcards.name:q} > {log:q} 2>&1"


rule time_table:
    input:
        report_inputs,
    output:
        html=report("results/tables/{name}.html", category="Tables", subcategory="{name}", caption="../report/time.rst"),
        csv=report("results/tables/{name}.csv", category="Tables", subcategory="{name}", caption="../report/time.rst"),
        md="results/tables/{name}.md",
    wildcard_constraints:
        name=names_of("time"),
    params:
        args=report_args,
        configs=config_file_args(),
    log:
        "results/logs/report/{name}.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report time --runs {input:q} {params.args} {params.configs} --out-prefix results/tables/{wildcards.name:q} > {log:q} 2>&1"


rule privacy_table:
    input:
        report_inputs,
    output:
        html=report("results/tables/{name}.html", category="Tables", subcategory="{name}", caption="../report/privacy.rst"),
        csv=report("results/tables/{name}.csv", category="Tables", subcategory="{name}", caption="../report/privacy.rst"),
        md="results/tables/{name}.md",
        tex="results/tables/{name}.tex",
    wildcard_constraints:
        name=names_of("privacy_table"),
    params:
        args=report_args,
        configs=config_file_args(),
    log:
        "results/logs/report/{name}.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report privacy-table --runs {input:q} {params.args} {params.configs} "
        "--out-prefix results/tables/{wildcards.name:q} > {log:q} 2>&1"


rule ablation_table:
    input:
        report_inputs,
    output:
        html=report("results/tables/{name}.html", category="Tables", subcategory="{name}", caption="../report/ablation.rst"),
        csv=report("results/tables/{name}.csv", category="Tables", subcategory="{name}", caption="../report/ablation.rst"),
        md="results/tables/{name}.md",
    wildcard_constraints:
        name=names_of("momentum_table", "bases_table"),
    params:
        kind=lambda wc: OUTPUTS[wc.name]["kind"],
        args=report_args,
        configs=config_file_args(),
    log:
        "results/logs/report/{name}.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report ablation-table {params.kind:q} --runs {input:q} {params.args} {params.configs} "
        "--out-prefix results/tables/{wildcards.name:q} > {log:q} 2>&1"


rule draws_report:
    input:
        unpack(reference_inputs),
    output:
        html=report("results/tables/{name}.html", category="Tables", subcategory="{name}", caption="../report/draws.rst"),
        csv=report("results/tables/{name}.csv", category="Tables", subcategory="{name}", caption="../report/draws.rst"),
        md="results/tables/{name}.md",
        png=report("results/figures/{name}.png", category="Figures", caption="../report/draws.rst", labels=figure_labels),
        pdf="results/figures/{name}.pdf",
        fig_csv="results/figures/{name}.csv",
    wildcard_constraints:
        name=names_of("draws"),
    params:
        args=report_args,
        reference=reference_args,
        configs=config_file_args(),
    log:
        "results/logs/report/{name}.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report draws --runs {input.runs:q} {params.args} {params.reference} {params.configs} "
        "--out-prefix results/tables/{wildcards.name:q} --figure-prefix results/figures/{wildcards.name:q} > {log:q} 2>&1"


rule sensitivity_table:
    input:
        report_inputs,
    output:
        html=report("results/tables/{name}.html", category="Tables", subcategory="{name}", caption="../report/sensitivity.rst"),
        csv=report("results/tables/{name}.csv", category="Tables", subcategory="{name}", caption="../report/sensitivity.rst"),
        md="results/tables/{name}.md",
    wildcard_constraints:
        name=names_of("sensitivity"),
    params:
        args=report_args,
        configs=config_file_args(),
    log:
        "results/logs/report/{name}.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report sensitivity --runs {input:q} {params.args} {params.configs} "
        "--out-prefix results/tables/{wildcards.name:q} > {log:q} 2>&1"


rule protocol_gap_table:
    input:
        report_inputs,
    output:
        html=report("results/tables/{name}.html", category="Tables", subcategory="{name}", caption="../report/protocol_gap.rst"),
        csv=report("results/tables/{name}.csv", category="Tables", subcategory="{name}", caption="../report/protocol_gap.rst"),
        md="results/tables/{name}.md",
    wildcard_constraints:
        name=names_of("protocol_gap"),
    params:
        args=report_args,
        configs=config_file_args(),
    log:
        "results/logs/report/{name}.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report protocol-gap --runs {input:q} {params.args} {params.configs} "
        "--out-prefix results/tables/{wildcards.name:q} > {log:q} 2>&1"


rule claims:
    input:
        "results/runs.csv",
    output:
        html=report("results/tables/claims.html", category="Claims", subcategory="claims", caption="../report/claims.rst"),
        csv=report("results/tables/claims.csv", category="Claims", subcategory="claims", caption="../report/claims.rst"),
        md="results/tables/claims.md",
    params:
        args=claims_args(),
        configs=config_file_args(),
    log:
        "results/logs/report/claims.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report claims --runs {input:q} {params.args} {params.configs} "
        "--out-prefix results/tables/claims > {log:q} 2>&1"


rule figure:
    input:
        report_inputs,
    output:
        png=report("results/figures/{name}.png", category="Figures", caption="../report/figure.rst", labels=figure_labels),
        pdf="results/figures/{name}.pdf",
        csv="results/figures/{name}.csv",
    wildcard_constraints:
        name=names_of("convergence", "lambda_sweep", "privacy_tradeoff", "momentum_curves", "schedule_figure"),
    params:
        kind=lambda wc: OUTPUTS[wc.name]["kind"],
        args=report_args,
        configs=config_file_args(),
    log:
        "results/logs/report/{name}.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report figure {params.kind:q} --runs {input:q} {params.args} {params.configs} "
        "--out-prefix results/figures/{wildcards.name:q} > {log:q} 2>&1"


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
