# Stage 1: one training job per run (row x student x seed), local or on Slurm.


def train_inputs(w):
    # SPECS: common.smk's (opd.dag.train_specs); a probed run's spec holds the probes (opd.dag.probes). The base
    # models count by their spec (it is in the run's: student_spec), not their file times: base models rebuilt
    # after damage (opd.store.heal_runs checks them against base.json) rerun no run computed from the same spec.
    base = {k: ancient(v) for k, v in base_inputs(RUNS[w.run_id].student).items()}
    return {**base, "spec": spec_file(SPECS[w.run_id])}


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
