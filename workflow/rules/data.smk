# Data sets: the paper's synthetic sets are downloaded and converted (RESOURCES/data/paper/); the FedProx
# generator's draws are generated (RESOURCES/data/generated/); LEAF sets are downloaded and preprocessed
# (RESOURCES/data/leaf/), and a LEAF-format folder named by config (`source: leaf`, `path`) is checked and copied
# there, so the runs read a fixed copy; an edit of one of its files makes the copy, and the runs, out of date.
# Shell quoting: single values are interpolated with `:q`; the flag lists (`{params.overrides}`, `{params.options}`,
# `{params.checksums}`, `{params.args}`) are built in common.smk with every value passed through `shlex.quote`
# (`:q` would quote the whole list as one word). tests/test_hostile_inputs.py runs names carrying `;` through them.
from upfl.data.registry import ARCHIVE_SOURCES


rule paper_dataset:
    input:
        paper_files,
    output:
        directory(f"{RESOURCES}/data/{DATA_FOLDERS['paper']}/{{dataset}}"),
    log:
        "results/logs/data/{dataset}.log",
    wildcard_constraints:
        dataset=_alternation(datasets_of("paper")),
    priority: DATA_PRIORITY
    localrule: True
    params:
        setting=lambda wc: dataset_setting(wc.dataset),
        overrides=paper_overrides,
        released=sources_state(paper_files),
        resources=lambda wc, input: resources_folder(input[0], paper_files(wc)[0]),
    shell:
        "upfl data prepare paper_{params.setting:q} --resources {params.resources:q} --out {output:q} --name {wildcards.dataset:q} "
        "{params.overrides} > {log:q} 2>&1"


# Our generator's draws: one job per generator setting writes every draw of it (`upfl synth --draw NAME=SEED ...`, one
# process); each data set's folder is its own declared output, so a run's input or a data set's folder named as a
# target is made by its setting's job.
for _setting, _names in synthetic_groups().items():

    rule:
        name:
            f"synthetic_dataset_{_setting}"
        output:
            [directory(dataset_dir(n)) for n in _names],
        log:
            f"results/logs/data/synth_{_setting}.log",
        priority: DATA_PRIORITY
        localrule: True
        params:
            setting=_setting,
            options=synthetic_draw_flags(_names),
            resources=resources_of(dataset_dir(_names[0])),
        shell:
            "upfl synth --setting {params.setting:q} --resources {params.resources:q} {params.options} > {log:q} 2>&1"


# The paper's released synthetic sets: one job per set fetches its four files (`upfl data fetch --source` with the
# four names, one process).
rule fetch_paper_set:
    output:
        paper_set_outputs(),
    log:
        "results/logs/data/fetch_paper_{setting}.log",
    wildcard_constraints:
        setting=_alternation(PAPER_SYNTHETIC_SETS),
    priority: DATA_PRIORITY
    localrule: True
    params:
        resources=lambda wc, output: resources_folder(output[0], paper_set_outputs()[0].format(setting=wc.setting)),
        args=paper_set_fetch_args,
    shell:
        "upfl data fetch --source {params.args} --resources {params.resources:q} --no-progress > {log:q} 2>&1"


# One archive (or one file of the paper's FEMNIST index) per job: `--source` makes `sent140` the tweets archive alone
# (as a data set name it would also fetch glove, from LEAF's URL, racing the glove job).
rule fetch_archive:
    output:
        f"{RESOURCES}/{{archive}}",
    log:
        "results/logs/data/fetch_{archive}.log",
    wildcard_constraints:
        archive=_alternation(ARCHIVES),
    priority: DATA_PRIORITY
    localrule: True
    params:
        resources=lambda wc, output: resources_folder(output[0], f"{RESOURCES}/{wc.archive}"),
        source=lambda wc: archive_source(wc.archive),
        overrides=lambda wc: source_overrides(archive_source(wc.archive)),
    shell:
        "upfl data fetch --source {params.source:q} --resources {params.resources:q} --no-progress {params.overrides} > {log:q} 2>&1"


rule leaf_dataset:
    input:
        source_archives,
    output:
        directory(f"{RESOURCES}/data/{DATA_FOLDERS['femnist']}/{{dataset}}"),
    log:
        "results/logs/data/{dataset}.log",
    wildcard_constraints:
        dataset=_alternation([d for source in ARCHIVE_SOURCES for d in datasets_of(source)]),
    priority: DATA_PRIORITY
    resources:
        mem_mb=16000,
    params:
        resources=lambda wc, input: os.path.dirname(input[0]),
        source=lambda wc: CONFIG["datasets"][wc.dataset]["source"],
        checksums=index_checksums,
        seed=lambda wc: CONFIG["datasets"][wc.dataset].get("data_seed", 0),
        options=lambda wc: prepare_options(wc.dataset),
    shell:
        "upfl data prepare {params.source:q} --resources {params.resources:q} --out {output:q} --seed {params.seed:q} "
        "--no-progress {params.options} {params.checksums} > {log:q} 2>&1"


rule leaf_folder_dataset:
    input:
        leaf_folder_inputs,
    output:
        directory(f"{RESOURCES}/data/{DATA_FOLDERS['leaf']}/{{dataset}}"),
    log:
        "results/logs/data/{dataset}.log",
    wildcard_constraints:
        dataset=_alternation(datasets_of("leaf")),
    priority: DATA_PRIORITY
    localrule: True
    params:
        path=leaf_folder_path,
        files=sources_state(leaf_folder_inputs),
    shell:
        "upfl data prepare leaf --path {params.path:q} --out {output:q} --name {wildcards.dataset:q} > {log:q} 2>&1"


# A data set's digest (upfl.data.digest): its files hashed once, here, and written beside its folder. Every training
# job takes the digest file as input. The param is the files' stat signature (change times included): a file
# replaced by other bytes reruns this job whatever its modification time says; the digest file's bytes change only
# when the content does, and Snakemake reruns a job whose input's checksum changed. A digest made again with the same
# bytes (a touched file) trains no run: a dry run cannot tell and lists the bundles, which then restore their runs
# from the store (whose key is the digest).
rule data_digest:
    input:
        lambda wc: dataset_dir(wc.dataset),
    output:
        f"{RESOURCES}/data/{{folder}}/{{dataset}}.digest.json",
    log:
        "results/logs/data/{folder}/{dataset}.digest.log",
    wildcard_constraints:
        folder=_alternation(DATA_FOLDERS.values()),
    priority: DATA_PRIORITY
    localrule: True
    params:
        state=data_state,
    shell:
        "upfl data digest {input:q} --out {output:q} > {log:q} 2>&1"
