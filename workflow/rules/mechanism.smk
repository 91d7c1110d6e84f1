# Stage 1c (tiny backend): the gradient probes of the paper's mechanism (opd/backends/tiny/probes.py), on
# the primary student's first-seed runs of the baseline, the noise rows and the staleness rows, at the runs'
# evaluation steps; then their figure and tables. The probes are exact sums over the tiny vocabulary, so
# the verl backend has no such stage.
import re

PROBE_ROWS = [r for r in ROWS.values() if r.in_budget and r.family in ("baseline", "noise", "staleness")
              and not r.noise_redraw and PRIMARY in r.students_or(PRIMARY)] if BACKEND == "tiny" else []
PROBE_RUNS = [run_id(r.name, PRIMARY, (r.seeds or EXPERIMENT.seeds)[0]) for r in PROBE_ROWS]
# The probes' settings (opd.spec.Probes), the one place they are set; a probed run's spec holds them, so
# changing one retrains exactly the probed runs. 128 prompts x 2 responses: ~6,000 prefixes per set, where
# T / U repeats within ~15% over probe seeds (over probe seeds at step 0, S / U spreads up to 2.5x at sigma
# 0.15: two extra seeds at the first and last step show it); probed at the runs' evaluation steps.
PROBES = Probes.of({"prompts": 128, "responses": 2, "probe_seed": 0, "extra_seeds": [1, 2], "sample_prefixes": 200,
                    "steps": EXPERIMENT.train.eval_steps()})
MECHANISM = ([f"{FIG}/mechanism.{ext}" for ext in ("pdf", "png")]
             + [f"{FIG}/tables/{name}.{ext}" for name in ("mechanism", "mechanism_runs")
                for ext in ("md", "tex", "html")]
             if PROBE_RUNS else [])


# a probed run's files besides its training's (opd.store.PROBE_FILES: what its run.json records and checks)
PROBE_FILES = {name: f"{OUT}/runs/{{run_id}}/{f}" for name, f in store.PROBE_FILES.items()}


if PROBE_RUNS:

    # A probed run trains as every run does (the train rule: the same job; its spec adds PROBES) and then
    # probes the policy versions it kept, in the same job: its weights are never re-created and never stored.
    use rule train as train_probed with:
        output:
            **rules.train.output,
            **PROBE_FILES,
        wildcard_constraints:
            run_id="|".join(re.escape(r) for r in PROBE_RUNS),

    ruleorder: train_probed > train


rule probes:
    input:
        **{name: expand(path, run_id=PROBE_RUNS) for name, path in PROBE_FILES.items()},
    output:
        probes=f"{ANALYSIS}/probes.parquet",
        prefix=f"{ANALYSIS}/probes_prefix.parquet",
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
        pdf=f"{FIG}/mechanism.pdf",
        png=report(f"{FIG}/mechanism.png", caption="../report/figure_mechanism.rst", category=O.MECHANISM),
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
        md=f"{FIG}/tables/mechanism.md",
        tex=f"{FIG}/tables/mechanism.tex",
        html=report(f"{FIG}/tables/mechanism.html", caption="../report/table_mechanism.rst", category=O.MECHANISM),
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
        md=f"{FIG}/tables/mechanism_runs.md",
        tex=f"{FIG}/tables/mechanism_runs.tex",
        html=report(f"{FIG}/tables/mechanism_runs.html", caption="../report/table_mechanism_runs.rst",
                    category=O.MECHANISM),
    log:
        f"logs/{EXP}/table_mechanism_runs.log",
    params:
        **MECHANISM_PARAMS,
    script:
        "../scripts/table_mechanism_runs.py"
