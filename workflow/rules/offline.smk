# Stage 1b: measurements that need no training: the admission check, the per-layer KV-cache
# attribution, and the two throughput measurements. Each job's inputs: common.smk's offline_inputs, given its output
# (whether the job runs decides its base-model inputs where the weights are not committed).


rule admission:
    input:
        unpack(lambda w: offline_inputs("admission", lambda e, s, base: dag.admission_spec(e, ROWS[w.row], s, base),
                                        w.student, output=O.admission_path(OUT, w.row, w.student))),
    output:
        O.admission_path(OUT, "{row}", "{student}"),
    log:
        job_log("admission", "{row}.{student}"),
    shell:
        "python -m opd.cli admission --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule predictor_stats:
    """A candidate engine's offline statistics at the step-0 student (tiny backend): one row."""
    input:
        unpack(lambda w: offline_inputs("predictor_stats",
                                        lambda e, s, base: dag.predictor_spec(e, ROWS[w.row], s, base),
                                        w.student, output=O.predictor_path(OUT, w.row, w.student))),
    output:
        O.predictor_path(OUT, "{row}", "{student}"),
    log:
        job_log("predictors", "{row}.{student}"),
    shell:
        "python -m opd.cli predictors --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule kv_attribution_student:
    """One student's cases (every layer, one layer, all but one; keys and values, keys only, values only),
    one row per case and sequence."""
    input:
        unpack(lambda w: offline_inputs("kv_attribution_student", dag.kv_attribution_spec, w.student,
                                        KV_CACHE_RECIPES, output=f"{OUT}/kv_attribution/{w.student}.parquet")),
    output:
        f"{OUT}/kv_attribution/{{student}}.parquet",
    log:
        job_log("kv_attribution", "{student}"),
    shell:
        "python -m opd.cli kv-attribution --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule kv_attribution:
    """D_hat of every case with its bootstrap standard error over prompts, and its share of the same layers'
    keys-and-values case."""
    input:
        KV_ATTRIBUTION_FILES,
    output:
        ANALYSIS_FILES["kv_attribution"],
    params:
        bootstrap=EXPERIMENT.bootstrap.written(),
    log:
        f"logs/{EXP}/kv_attribution.log",
    script:
        "../scripts/kv_attribution.py"


rule throughput:
    """tiny: measured short runs at each k. verl: read from the staleness runs themselves (rule below)."""
    input:
        unpack(lambda w: offline_inputs("throughput", dag.throughput_spec, PRIMARY, STALENESS,
                                        output=TINY_THROUGHPUT)),
    output:
        TINY_THROUGHPUT,
    log:
        job_log("throughput", PRIMARY),
    threads: workflow.cores
    shell:
        "python -m opd.cli throughput --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule memory_bound:
    input:
        unpack(lambda w: offline_inputs("memory_bound", dag.memory_bound_spec, PRIMARY,
                                        output=ANALYSIS_FILES["memory_bound"])),
    output:
        ANALYSIS_FILES["memory_bound"],
    log:
        job_log("memory_bound", PRIMARY),
    threads: workflow.cores
    shell:
        "python -m opd.cli memory-bound --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule throughput_from_runs:
    """verl: async throughput from the training runs of the staleness rows (k from each row)."""
    input:
        lambda w: [f"{OUT}/runs/{r.run_id}/steps.parquet" for r in scoped_runs() if r.student == PRIMARY
                   and r.row.is_plain_opd and r.row.has_standard_numerics],
    output:
        f"{ANALYSIS}/async_throughput_runs.parquet",
    params:
        staleness={r.name: r.staleness for r in ROWS.values()},
    log:
        f"logs/{EXP}/throughput_from_runs.log",
    script:
        "../scripts/throughput_from_runs.py"
