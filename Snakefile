# Upcycled-FL: from data to the paper's tables and figures. Rules live in workflow/rules/.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


# Duplicate keys and alias bombs are refused before anything walks the config (upfl.config.check_workflow_yaml).
from upfl.config import ConfigError, check_workflow_yaml

try:
    for _file in workflow.configfiles:
        check_workflow_yaml(_file)
except ConfigError as e:
    raise WorkflowError(f"config: {e}") from None


validate(config, schema="workflow/schemas/config.schema.yaml")


# The report's front page: what was built, where, and how to get the full paper.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        all_outputs(),
    default_target: True
