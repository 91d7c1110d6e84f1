# Stage 1: one training job per run (row x student x seed), local or on Slurm.


rule train:
    input:
        unpack(train_inputs),
    output:
        steps=f"{OUT}/runs/{{run_id}}/steps.parquet",
        # the tiny backend's training evaluates itself; verl's evaluation is jobs of its own (verl_eval.smk)
        **({"heldout": f"{OUT}/runs/{{run_id}}/heldout.parquet"} if BACKEND == "tiny" else {}),
        meta=f"{OUT}/runs/{{run_id}}/run.json",
    log:
        job_log("train", "{run_id}"),
    wildcard_constraints:
        run_id=UNPROBED_RUN_ID,  # a probed run is rule train_probed's (mechanism.smk)
    resources:
        slurm_jobs=lambda w: int(config["launcher"] == "slurm"),
    # the largest students' runs start first: the short ones fill the cores at the end, not a long one alone
    priority: lambda w: STUDENT_RANK[RUNS[w.run_id].student]
    shell:
        "python -m opd.cli train --spec {input.spec} --run-dir {OUT}/runs/{wildcards.run_id} --launcher {LAUNCH}"


# One round of an adaptive design (opd.plan): the runs the plan asks for now and nothing else (no analysis, no
# figures); `python -m opd.cli calibrate` calls it until the plan is done, then builds every output once.
rule plan_round:
    input:
        [f"{OUT}/runs/{r}/run.json" for r in (PLAN.pending if PLAN is not None else ())],
