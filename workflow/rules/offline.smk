# Stage 1b: measurements that need no training: the admission check, the per-layer KV-cache
# attribution, and the two throughput measurements.
ADMISSION = [f"{OUT}/admission/{r.name}.{s}.parquet" for r in opd_engine_rows() for s in r.students_or(PRIMARY)]
KV_CACHE_RECIPES = sorted({r.kv_cache for r in ROWS.values() if r.kv_cache != "none"})  # the experiment's own
# every student a KV-cache row runs on (the 3-layer one separates "only layer i" from "all but layer j")
KV_STUDENTS = sorted({s for r in ROWS.values() if r.kv_cache != "none" for s in r.students_or(PRIMARY)})
STALENESS = sorted({0} | {r.staleness for r in ROWS.values()})


def offline_inputs(build, student, *args):
    """A measurement's inputs: the base models (tiny) and its spec file, `build(EXPERIMENT, student, base, *args)`
    (an opd.dag function)."""
    base = base_inputs(student)
    return {**base, "spec": spec_file(build(EXPERIMENT, student, base, *args))}


rule admission:
    input:
        unpack(lambda w: offline_inputs(lambda e, s, base: dag.admission_spec(e, ROWS[w.row], s, base), w.student)),
    output:
        f"{OUT}/admission/{{row}}.{{student}}.parquet",
    shell:
        "python -m opd.cli admission --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule kv_attribution_student:
    """One student's cases (every layer, one layer, all but one; keys and values, keys only, values only),
    one row per case and sequence."""
    input:
        unpack(lambda w: offline_inputs(dag.kv_attribution_spec, w.student, KV_CACHE_RECIPES)),
    output:
        f"{OUT}/kv_attribution/{{student}}.parquet",
    shell:
        "python -m opd.cli kv-attribution --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule kv_attribution:
    """D_hat of every case with its bootstrap standard error over prompts, and its share of the same layers'
    keys-and-values case."""
    input:
        [f"{OUT}/kv_attribution/{s}.parquet" for s in KV_STUDENTS],
    output:
        f"{ANALYSIS}/kv_attribution.parquet",
    params:
        bootstrap=EXPERIMENT.bootstrap.written(),
    log:
        f"logs/{EXP}/kv_attribution.log",
    script:
        "../scripts/kv_attribution.py"


rule throughput:
    """tiny: measured short runs at each k. verl: read from the staleness runs themselves (rule below)."""
    input:
        unpack(lambda w: offline_inputs(dag.throughput_spec, PRIMARY, STALENESS)),
    output:
        f"{ANALYSIS}/async_throughput.parquet",
    threads: workflow.cores
    shell:
        "python -m opd.cli throughput --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule memory_bound:
    input:
        unpack(lambda w: offline_inputs(dag.memory_bound_spec, PRIMARY)),
    output:
        f"{ANALYSIS}/memory_bound.parquet",
    threads: workflow.cores
    shell:
        "python -m opd.cli memory-bound --spec {input.spec} --out {output} --launcher {LAUNCH}"


rule throughput_from_runs:
    """verl: async throughput from the training runs of the staleness rows (k from each row)."""
    input:
        [f"{OUT}/runs/{r.run_id}/steps.parquet" for r in RUNS.values() if r.student == PRIMARY
         and r.row.is_plain_opd and r.row.has_standard_numerics],
    output:
        f"{ANALYSIS}/async_throughput_runs.parquet",
    params:
        staleness={r.name: r.staleness for r in ROWS.values()},
    log:
        f"logs/{EXP}/throughput_from_runs.log",
    script:
        "../scripts/throughput_from_runs.py"
