# Stage 0 (tiny backend): each student and its teacher, trained by the pipeline itself.


rule base_models:
    input:
        spec=lambda w: spec_file("base", w.student, job_spec(student=w.student, student_spec=E["students"][w.student])),
    output:
        student=f"{OUT}/base/{{student}}/student.pt",
        teacher=f"{OUT}/base/{{student}}/teacher.pt",
        meta=f"{OUT}/base/{{student}}/base.json",
    shell:
        "python -m opd.cli base --spec {input.spec} --out {OUT}/base/{wildcards.student}"
