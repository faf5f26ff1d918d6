# Data sets: the FedProx synthetic sets are generated; LEAF sets are downloaded and preprocessed.


rule synthetic_dataset:
    output:
        directory(f"{RESOURCES}/data/{{dataset}}"),
    params:
        data_seed=lambda wc: config["datasets"][wc.dataset].get("data_seed", 0),
    log:
        f"results/logs/data/{{dataset}}.log",
    wildcard_constraints:
        dataset=_alternation(datasets_of("synthetic")),
    localrule: True
    conda:
        "../envs/upfl.yaml"
    shell:
        "upfl synth --name {wildcards.dataset} --data-seed {params.data_seed} --out {output} > {log} 2>&1"
