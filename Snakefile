# opd-budget: the paper "How Much Training-Inference Mismatch Can On-Policy Distillation Tolerate?"
# as a DAG. `snakemake -c 2` builds the toy experiment on a CPU; `snakemake --profile slurm` the paper.
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


# At the end of a run, one line per row whose verdict is new or changed (opd.verdict; `python -m opd.cli
# verdict ROW` explains one), against the verdicts this checkout saw before the run.
from opd import verdict as V

VERDICTS_BEFORE = V.before(config, EXP)


onsuccess:
    V.announce(config, EXP, VERDICTS_BEFORE)
    if PLAN is not None:  # an adaptive design (opd.plan): where it stands now, and whether a round is left
        for line in P.next_round(Experiment.of(config), OUT):
            print(line, file=sys.stderr, flush=True)


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
