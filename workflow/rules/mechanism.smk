# Stage 1c (tiny backend): the gradient probes of the paper's mechanism (opd/backends/tiny/probes.py), on
# the primary student's first-seed runs of the baseline, the noise rows and the staleness rows, at the runs'
# evaluation steps; then their figure and tables. The probes are exact sums over the tiny vocabulary, so
# the verl backend has no such stage.
import re


if PROBE_RUNS:

    # A probed run trains as every run does (the train rule: the same job; its spec adds the probes, opd.dag.probes) and then
    # probes the policy versions it kept, in the same job: its weights are never re-created and never stored.
    use rule train as train_probed with:
        input:
            unpack(train_inputs),
        output:
            **rules.train.output,
            **PROBE_FILES,
        wildcard_constraints:
            run_id="|".join(re.escape(r) for r in PROBE_RUNS),


rule probes:
    input:
        **{name: expand(path, run_id=PROBE_RUNS) for name, path in PROBE_FILES.items()},
    output:
        probes=ANALYSIS_FILES["probes"],
        prefix=ANALYSIS_FILES["probes_prefix"],
    log:
        f"logs/{EXP}/probes.log",
    script:
        "../scripts/probes.py"


MECHANISM_PARAMS = {"experiment": EXP, "baseline": BASELINE, "primary": PRIMARY}


rule figure_mechanism:
    input:
        rules.probes.output.probes,
        rules.probes.output.prefix,
    output:
        **reported({"pdf": MECHANISM_FILES["pdf"], "png": MECHANISM_FILES["png"]}, "png", "figure_mechanism",
                   O.MECHANISM, "figure"),
    log:
        f"logs/{EXP}/figure_mechanism.log",
    params:
        **MECHANISM_PARAMS,
    script:
        "../scripts/figure_mechanism.py"


rule table_mechanism:
    input:
        rules.probes.output.probes,
    output:
        **reported({ext: MECHANISM_FILES[f"mechanism.{ext}"] for ext in ("md", "tex", "html")}, "html",
                   "table_mechanism", O.MECHANISM, "table"),
    log:
        f"logs/{EXP}/table_mechanism.log",
    params:
        **MECHANISM_PARAMS,
    script:
        "../scripts/table_mechanism.py"


rule table_mechanism_runs:
    input:
        rules.probes.output.probes,
    output:
        **reported({ext: MECHANISM_FILES[f"mechanism_runs.{ext}"] for ext in ("md", "tex", "html")}, "html",
                   "table_mechanism_runs", O.MECHANISM, "table"),
    log:
        f"logs/{EXP}/table_mechanism_runs.log",
    params:
        **MECHANISM_PARAMS,
    script:
        "../scripts/table_mechanism_runs.py"
