# Stage 2: statistics from the Parquet contract alone (whichever backend wrote it).


rule analysis:
    input:
        # the runs and admission checks in scope: all of them, or for `snakemake figures` those with results
        steps=lambda w: [f"{OUT}/runs/{r}/steps.parquet" for r in scope().runs],
        heldout=lambda w: [f"{OUT}/runs/{r}/heldout.parquet" for r in scope().runs],
        admission=lambda w: scoped_admission(),
        # rewritten when the record of what the analysis files were computed from is not what it would be now
        rerun=lambda w: analysis_marker(),
    output:
        **{O.analysis_key(name): ANALYSIS_FILES[name] for name in O.ANALYSIS_TABLES},
    params:
        rows=lambda w: scoped_rows(),
        baseline=BASELINE,
        tau=EXPERIMENT.tau,
        taus=list(EXPERIMENT.taus),
        bootstrap=EXPERIMENT.bootstrap.written(),
        # a one-seed row's run-to-run variance: the experiment's sequential rule's assumption (opd.plan.rule_of)
        one_seed_ratio=P.rule_of(EXPERIMENT).one_seed_ratio,
        base_draws=EXPERIMENT.base_draws,  # run seed s trains from base-model draw s % base_draws
        admission=EXPERIMENT.admission.written(),
        rl_collapse=EXPERIMENT.rl_collapse.written(),  # as config.yaml writes it: the script reads opd.spec.RLCollapse
        primary=SHOWN,
        train_lr=EXPERIMENT.train.lr,
        infra=EXPERIMENT.infra.written(),
        students={name: s.written() for name, s in EXPERIMENT.students.items()},
        backend=BACKEND,
        settings=dag.analysis_settings(EXPERIMENT),  # what the record of its inputs hashes of the settings
    log:
        f"logs/{EXP}/analysis.log",
    script:
        "../scripts/analysis.py"


# The bisected edges (opd.plan; docs/calibration.md): every value tried, in order, against the grid's budget;
# in the DAG only where the experiment has edges (opd.outputs).
rule bisection:
    input:
        steps=rules.analysis.output.steps,
        heldout=rules.analysis.output.heldout,
        verdicts=rules.analysis.output.verdicts,
    output:
        ANALYSIS_FILES["bisection"],
    params:
        name=EXP,
        experiment=config["experiments"][EXP],  # as configured: the script replays the plan (opd.plan.planned)
    log:
        f"logs/{EXP}/bisection.log",
    script:
        "../scripts/bisection.py"


# An adaptive plan's decisions, keyed on the runs' content (opd.plan.decisions_path): committed, so that a fresh
# clone's DAG reads them back rather than recomputing each; in the DAG only where the experiment is adaptive.
rule plan_decisions:
    input:
        steps=rules.analysis.input.steps,
        heldout=rules.analysis.input.heldout,
    output:
        ANALYSIS_FILES["plan_decisions.json"],
    params:
        name=EXP,
        experiment=config["experiments"][EXP],  # as configured: the script replays the plan (opd.plan.planned)
    log:
        f"logs/{EXP}/plan_decisions.log",
    script:
        "../scripts/plan_decisions.py"


# The mismatch guard's record (opd/guard.py): guarded rows against the same engine unguarded and the standard
# engine; in the DAG only where an output needs it (opd.outputs.guarded_rows).
rule guard_analysis:
    input:
        steps=rules.analysis.output.steps,
        verdicts=rules.analysis.output.verdicts,
    output:
        ANALYSIS_FILES["guard"],
    params:
        rows=lambda w: scoped_rows(),
        baseline=BASELINE,
        guard_line=EXPERIMENT.guard_line,  # what a guard's `d_max: budget` means
    log:
        f"logs/{EXP}/guard_analysis.log",
    script:
        "../scripts/guard_analysis.py"


# Which offline statistic predicts training (tiny backend): every candidate's step-0 statistics (rule
# predictor_stats) beside its admission estimate and training outcome, and each statistic's leave-one-candidate-out
# and leave-one-student-out agreement with training (opd.stats.predictor_record).
rule predictors:
    input:
        stats=lambda w: scoped_files(PREDICTOR_FILES),
        admission=rules.analysis.output.admission,
        verdicts=rules.analysis.output.verdicts,
    output:
        table=ANALYSIS_FILES["predictor_stats"],
        record=ANALYSIS_FILES["predictors"],
    params:
        frozen_rules=[r.written() for r in EXPERIMENT.frozen_rules],
    log:
        f"logs/{EXP}/predictors.log",
    script:
        "../scripts/predictors.py"
