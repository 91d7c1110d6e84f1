# Stage 2: statistics from the Parquet contract alone (whichever backend wrote it).


rule analysis:
    input:
        steps=[f"{OUT}/runs/{r}/steps.parquet" for r in RUNS],
        heldout=[f"{OUT}/runs/{r}/heldout.parquet" for r in RUNS],
        admission=ADMISSION,
        quarantined=QUARANTINED,  # a quarantined run is rerun because the analysis is (common.smk)
    output:
        steps=f"{ANALYSIS}/steps.parquet",
        heldout=f"{ANALYSIS}/heldout.parquet",
        rows=f"{ANALYSIS}/rows.parquet",
        verdicts=f"{ANALYSIS}/verdicts.parquet",
        budget=f"{ANALYSIS}/budget.parquet",
        decides=f"{ANALYSIS}/decides.parquet",
        edge=f"{ANALYSIS}/edge.parquet",
        admission=f"{ANALYSIS}/admission.parquet",
        admission_summary=f"{ANALYSIS}/admission_summary.json",
        rl=f"{ANALYSIS}/rl.parquet",
        noise=f"{ANALYSIS}/noise.parquet",
        null_deltas=f"{ANALYSIS}/null_deltas.parquet",
        staleness_lr=f"{ANALYSIS}/staleness_lr.parquet",
        time_to_kl=f"{ANALYSIS}/time_to_kl.parquet",
        infra=f"{ANALYSIS}/infra.parquet",
    params:
        rows=[r.resolved() for r in ROWS.values()],
        baseline=BASELINE,
        tau=EXPERIMENT.tau,
        taus=list(EXPERIMENT.taus),
        bootstrap=EXPERIMENT.bootstrap.written(),
        admission=EXPERIMENT.admission.written(),
        rl_collapse=EXPERIMENT.rl_collapse.written(),  # as config.yaml writes it: the script reads opd.spec.RLCollapse
        primary=PRIMARY,
        train_lr=EXPERIMENT.train.lr,
        infra=EXPERIMENT.infra.written(),
        students={name: s.written() for name, s in EXPERIMENT.students.items()},
        backend=BACKEND,
    log:
        f"logs/{EXP}/analysis.log",
    script:
        "../scripts/analysis.py"


# The mismatch guard's record (opd/guard.py): guarded rows against the same engine unguarded and the standard
# engine; in the DAG only where an output needs it (opd.outputs.guarded_rows).
rule guard_analysis:
    input:
        steps=rules.analysis.output.steps,
        verdicts=rules.analysis.output.verdicts,
    output:
        f"{ANALYSIS}/guard.parquet",
    params:
        rows=[r.resolved() for r in ROWS.values()],
        baseline=BASELINE,
        guard_line=EXPERIMENT.guard_line,  # what a guard's `d_max: budget` means
    log:
        f"logs/{EXP}/guard_analysis.log",
    script:
        "../scripts/guard_analysis.py"
