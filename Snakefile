# Upcycled-FL: from data to the paper's tables and figures. Rules live in workflow/rules/.
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from upfl.errors import ConfigError
from upfl.yaml_safety import check_workflow_yaml
from upfl.pipeline.plan import ExperimentError, check_workflow_config, misspelt_targets

min_version("9.0")


configfile: "config/config.yaml"


# Duplicate keys and alias bombs are refused before anything walks the config (upfl.yaml_safety.check_workflow_yaml).
try:
    for _file in workflow.configfiles:
        check_workflow_yaml(_file)
except ConfigError as e:
    raise WorkflowError(f"config: {e}") from None


# One short line naming the key, its value and what is allowed (Snakemake's own message would print the schema);
# then Snakemake's check, which also fills the schema's defaults.
try:
    check_workflow_config(config, "workflow/schemas/config.schema.yaml")
except ExperimentError as e:
    raise WorkflowError(f"config: {e}") from None

validate(config, schema="workflow/schemas/config.schema.yaml")


# The report's front page: what was built, where, and how to get the full paper.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/sensitivity.smk"


rule all:
    input:
        all_outputs(),
    default_target: True


# A misspelt target (`fig55`) is named with the closest target before Snakemake's generic "No rule to produce".
for _line in misspelt_targets(sys.argv, [*PLAN.targets, *OUTPUTS, *(r.name for r in workflow.rules)]):
    print(f"Target {_line}", file=sys.stderr)
