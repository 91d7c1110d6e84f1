# opd-budget: the paper "How Much Training-Inference Mismatch Can On-Policy Distillation Tolerate?"
# as a DAG. `snakemake -c 2` builds config.yaml's `experiment` (the default, on a CPU; `--config experiment=NAME`
# another); `snakemake --profile slurm` the paper.
from opd import config as C

# a YAML syntax error names the file, line and column (Snakemake's own says neither)
C.or_exit(C.check_syntax, "config.yaml")


configfile: "config.yaml"


# `snakemake --report figures/<experiment>/report.html`: every figure and table with its caption
# (workflow/report/), the findings, every run's provenance and the config used, as one HTML page.
report: "workflow/report/workflow.rst"

# The report warns once per file that this checkout's Snakemake has no job record of ("Missing metadata for file
# ..."): in a fresh clone, every committed run and measurement it did not remake, hundreds of lines. One line at the
# end says how many instead, and REPORT_UNRECORDED lists them (opd.smk).
from opd import smk

# Quiet by default: a real run's terminal shows what the jobs say and a summary at the end (opd.summary), Snakemake's
# per-job lines go to its log only; a dry run lists its jobs; `--verbose` shows everything (opd.smk.quiet_terminal).
QUIET = smk.quiet_terminal(workflow)
REPORT_UNRECORDED = ".snakemake/opd/report-unrecorded.txt"
smk.unrecorded_files(REPORT_UNRECORDED)

# Schema and cross-field checks: every error names the experiment, the row (counted from 1) with its line in
# config.yaml or the --configfile that set it, and the field; the message alone, no traceback (C.or_exit).
C.or_exit(C.validate, config,
          C.Lines(["config.yaml", *workflow.overwrite_configfiles], cli=workflow.config_settings.config))


include: "workflow/rules/common.smk"
include: "workflow/rules/jobs.smk"
include: "workflow/rules/base.smk"
include: "workflow/rules/train.smk"
if BACKEND == "verl":

    include: "workflow/rules/verl_eval.smk"


include: "workflow/rules/offline.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/outputs.smk"
include: "workflow/rules/findings.smk"
include: "workflow/rules/mechanism.smk"


# At the end of a run, a summary of at most 10 lines (opd.summary): what ran, each row whose verdict is new or changed
# against the verdicts this checkout saw before the run (opd.verdict), the plan, the findings, and the decisions of
# the admission checks and step-0 statistics it made, last.
from opd import summary
from opd import verdict as V

VERDICTS_BEFORE = V.before(config, EXP)


onstart:
    smk.unthrottled(workflow)  # no job-start limit: Snakemake's default one costs a loop pass per finished job a second


onsuccess:
    summary.at_end(workflow, log, config, EXPERIMENT, VERDICTS_BEFORE, FINDINGS["md"], PLAN is not None)


onerror:
    if QUIET:
        summary.failed(log)


rule all:
    default_target: True
    input:
        FINAL,  # common.smk: every figure and table this experiment builds, the findings, the config used
        lambda w: upstream(OUTPUTS),  # and what they are built from, so that a missing one is made again
        PLAN_FILES,  # an adaptive plan's decisions, read back by a fresh clone's DAG (opd.plan.decisions_path)


# The same outputs from the results that exist: never trains or measures (common.smk's scope(); on Slurm a
# training job is GPU-hours). A row without results is left out, named on stderr with the target that trains it.
rule figures:
    input:
        scoped_final,
