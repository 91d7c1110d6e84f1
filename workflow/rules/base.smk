# Stage 0 (tiny backend): each student and its teacher, trained by the pipeline itself.


rule base_models:
    input:
        spec=lambda w: spec_file(dag.base_spec(EXPERIMENT, w.student)),
    output:
        student=f"{MODELS}/{{student}}/student.pt",
        teacher=f"{MODELS}/{{student}}/teacher.pt",
        meta=f"{MODELS}/{{student}}/base.json",
    log:
        job_log("base", "{student}"),
    shell:
        "python -m opd.cli base --spec {input.spec} --out {MODELS}/{wildcards.student}"
