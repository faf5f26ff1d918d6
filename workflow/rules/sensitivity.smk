# How large can the gain get (experiment `sensitivity`, output kind `gain_grid`): the table and the figure of the
# Upcycled-FL gain over the grid (upfl report gain-grid; docs/experiments.md "Sensitivity"). The runs are trained by
# train.smk's bundles like every other experiment's; `snakemake --cores all sensitivity` builds this output alone.


rule gain_grid:
    input:
        report_inputs,
    output:
        html=report("results/tables/{name}.html", category="Tables", subcategory="{name}", caption="../report/gain_grid.rst"),
        csv=report("results/tables/{name}.csv", category="Tables", subcategory="{name}", caption="../report/gain_grid.rst"),
        md="results/tables/{name}.md",
        png=report("results/figures/{name}.png", category="Figures", caption="../report/gain_grid.rst"),
        pdf="results/figures/{name}.pdf",
        fig_csv="results/figures/{name}.csv",
    wildcard_constraints:
        name=names_of("gain_grid"),
    params:
        args=report_args,
        configs=config_file_args(),
    log:
        "results/logs/report/{name}.log",
    priority: REPORT_PRIORITY
    localrule: True
    shell:
        "upfl report gain-grid --runs {input:q} {params.args} {params.configs} "
        "--out-prefix results/tables/{wildcards.name:q} --figure-prefix results/figures/{wildcards.name:q} > {log:q} 2>&1"
