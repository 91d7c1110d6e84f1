# Stage 1: one training job per run (row x student x seed), local or on Slurm.


def train_inputs(w):
    r = RUNS[w.run_id]
    base = base_inputs(r.student)
    spec = job_spec(run_id=r.run_id, row=r.row.params(), student=r.student, seed=r.seed,
                    student_spec=E["students"][r.student], settings=C.run_settings(E["train"], r.row),
                    student_path=base.get("student"), teacher_path=base.get("teacher"),
                    **({"guard": C.guard_spec(E, r.row)} if r.row.guard else {}),  # d_max as a number
                    **({"probes": PROBES} if r.run_id in PROBE_RUNS else {}))  # mechanism.smk's probed runs
    return {**base, "spec": spec_file("train", r.run_id, spec)}


rule train:
    input:
        unpack(train_inputs),
    output:
        steps=f"{OUT}/runs/{{run_id}}/steps.parquet",
        heldout=f"{OUT}/runs/{{run_id}}/heldout.parquet",
        meta=f"{OUT}/runs/{{run_id}}/run.json",
    resources:
        slurm_jobs=lambda w: int(config["launcher"] == "slurm"),
    # the largest students' runs start first: the short ones fill the cores at the end, not a long one alone
    priority: lambda w: STUDENT_RANK[RUNS[w.run_id].student]
    shell:
        "python -m opd.cli train --spec {input.spec} --run-dir {OUT}/runs/{wildcards.run_id} --launcher {LAUNCH}"
