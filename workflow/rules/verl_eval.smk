# Stage 1d (verl backend): the held-out evaluation as jobs of its own, one GPU each (opd.backends.verl.evaluate).
# The training job ends when training ends and releases its nodes; then each evaluated step of the run is one
# job reading verl's checkpoint of that step, the student's own evaluation (step 0) one job per student shared
# by all its runs (the draw depends on the step alone), and a local step joins a run's parts into its
# heldout.parquet. A timed-out or requeued job keeps its generated responses and scores them on its next
# attempt. The tiny backend's training job writes heldout.parquet itself (train.smk), so this file is
# included for the verl backend only (its input functions: common.smk).


rule heldout_base:
    """The student's own held-out evaluation (step 0), one GPU."""
    input:
        spec=lambda w: spec_file(dag.heldout_base_spec(EXPERIMENT, w.student)),
    output:
        f"{OUT}/heldout_base/{{student}}.parquet",
    log:
        job_log("heldout", "{student}.step0"),
    resources:
        slurm_jobs=lambda w: int(config["launcher"] == "slurm"),
    shell:
        "python -m opd.cli heldout --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule heldout_step:
    """One evaluated step of a run, from verl's checkpoint of that step, once the run's training has ended; one GPU."""
    input:
        meta=f"{OUT}/runs/{{run_id}}/run.json",
        spec=lambda w: spec_file(dag.heldout_spec(run_train_spec(w.run_id), int(w.step), f"{OUT}/runs/{w.run_id}")),
    output:
        f"{OUT}/runs/{{run_id}}/heldout/step_{{step}}.parquet",
    log:
        job_log("heldout", "{run_id}.step{step}"),
    wildcard_constraints:
        step=r"[1-9]\d*",
    resources:
        slurm_jobs=lambda w: int(config["launcher"] == "slurm"),
    shell:
        "python -m opd.cli heldout --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule heldout_gather:
    """A run's heldout.parquet (opd.store.HELDOUT) from its parts; local, seconds."""
    input:
        parts=heldout_parts,  # none when train.eval_every is 0: an empty file of the contract
        spec=lambda w: spec_file(run_train_spec(w.run_id)),
    output:
        f"{OUT}/runs/{{run_id}}/heldout.parquet",
    log:
        job_log("heldout_gather", "{run_id}"),
    localrule: True
    shell:
        "python -m opd.backends.verl gather-heldout --spec {input.spec} --out {output} {input.parts}"
