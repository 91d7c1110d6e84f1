# Stage 0 (tiny backend): each student and its teacher, trained by the pipeline itself, once per base-model draw
# (BASES: opd.dag.base_specs; the folder is the student's name for draw 0, <student>.d<draw> for a later one).
# Two recipes (opd/backends/tiny/sft.py): the fixed one (student at student_steps) and the converged one (a student
# with `converge:`), whose job also writes its SFT curves; each folder is made by the rule of its student's recipe.
# An experiment may leave the weights uncommitted (the toy's: .gitignore) and keep base.json, which pins their sha256:
# where they are absent, a job that does not run gets only base.json and one that runs the weights (common.smk's
# base_inputs), so this rule retrains them first. base.json is flagged `update`: Snakemake keeps it while the job runs,
# and the job checks the weights it retrains against it (opd.store.check_pinned: it fails where they differ, and
# Snakemake keeps base.json as it was).
CONVERGED = sorted(n for n, b in BASES.items() if b.student_spec.converge is not None)
_CONVERGED = "|".join(re.escape(n) for n in CONVERGED) or "(?!)"  # (?!): matches nothing


rule base_models:
    input:
        spec=lambda w: spec_file(BASES[w.base]),
    output:
        student=f"{MODELS}/{{base}}/student.pt",
        teacher=f"{MODELS}/{{base}}/teacher.pt",
        meta=update(f"{MODELS}/{{base}}/base.json"),
    log:
        job_log("base", "{base}"),
    wildcard_constraints:
        # not a converged one's folder (a folder name is followed by "/" in every path)
        base=rf"(?!(?:{_CONVERGED})/)[A-Za-z0-9][A-Za-z0-9_-]*(\.d\d+)?",
    shell:
        "python -m opd.cli base --spec {input.spec} --out {MODELS}/{wildcards.base}"


rule base_models_converged:
    input:
        spec=lambda w: spec_file(BASES[w.base]),
    output:
        student=f"{MODELS}/{{base}}/student.pt",
        teacher=f"{MODELS}/{{base}}/teacher.pt",
        curves=f"{MODELS}/{{base}}/curves.parquet",
        meta=update(f"{MODELS}/{{base}}/base.json"),
    log:
        job_log("base", "{base}"),
    wildcard_constraints:
        base=rf"(?:{_CONVERGED})",
    shell:
        "python -m opd.cli base --spec {input.spec} --out {MODELS}/{wildcards.base}"


# Every base model of the experiment and nothing else (no OPD run): `snakemake -c 2 base_models_all`.
rule base_models_all:
    input:
        [f"{MODELS}/{b}/{f}" for b in BASES for f in ("student.pt", "teacher.pt", "base.json")],
        [f"{MODELS}/{b}/curves.parquet" for b in CONVERGED],
    localrule: True


# The base models' acceptance check against the experiment's pre-registered band (opd.base_check): measured from the
# saved models, so it trains nothing where they are there. `snakemake -c 2 base_acceptance`. Its inputs: every
# base.json, and the weights it reads (common.smk's base_acceptance_weights: retrained first where not committed).
rule base_acceptance:
    input:
        [dag.base_record(MODELS, b.student, b.draw) for b in BASES.values()],
        base_acceptance_weights,
    output:
        **BASE_ACCEPTANCE,
    log:
        f"logs/{EXP}/base_acceptance.log",
    params:
        configs=" ".join(f"--config {f}" for f in workflow.configfiles),
        experiment=EXP,
    shell:
        # exit 1: a student outside the band (the table says which), not a failure of the check
        "python -m opd.cli base-acceptance {params.configs} --experiment {params.experiment} "
        "--out $(dirname {output.table}) > {log} 2>&1 || [ $? -eq 1 ]"
