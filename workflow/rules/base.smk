# Stage 0 (tiny backend): each student and its teacher, trained by the pipeline itself, once per base-model draw
# (BASES: opd.dag.base_specs; the folder is the student's name for draw 0, <student>.d<draw> for a later one).


rule base_models:
    input:
        spec=lambda w: spec_file(BASES[w.base]),
    output:
        student=f"{MODELS}/{{base}}/student.pt",
        teacher=f"{MODELS}/{{base}}/teacher.pt",
        meta=f"{MODELS}/{{base}}/base.json",
    log:
        job_log("base", "{base}"),
    wildcard_constraints:
        base=r"[A-Za-z0-9][A-Za-z0-9_-]*(\.d\d+)?",
    shell:
        "python -m opd.cli base --spec {input.spec} --out {MODELS}/{wildcards.base}"
