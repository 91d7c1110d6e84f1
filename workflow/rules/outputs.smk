# Stage 3: every figure (PDF + PNG) and table (Markdown + LaTeX + HTML), one rule and one script each, made
# from the table in opd/outputs.py: an output is in this experiment's DAG only when the experiment holds what
# it shows. Each writes the hashes of its inputs beside itself. The PNG of a figure and the HTML of a table
# are tagged for `snakemake --report`, with the output's category and its caption (workflow/report/<rule>.rst).
from opd import outputs as O

# the analysis stage's files by name (opd.outputs names its inputs this way)
ANALYSIS_FILES = {
    **{name: path for name, path in rules.analysis.output.items()},
    "kv_attribution": rules.kv_attribution.output[0],
    "async_throughput": (rules.throughput if BACKEND == "tiny" else rules.throughput_from_runs).output[0],
    "memory_bound": rules.memory_bound.output[0],
    "admission_summary.json": rules.analysis.output.admission_summary,
    "guard": rules.guard_analysis.output[0],
}
OUTPUTS = O.selected(E)
OUTPUT_PARAMS = {"experiment": EXP, "tau": EXPERIMENT.tau, "baseline": BASELINE, "primary": PRIMARY,
                 "infra": EXPERIMENT.infra.written(), "backend": BACKEND,
                 "students": {name: s.written() for name, s in EXPERIMENT.students.items()}}


def output_files(o):
    folder = FIG if o.kind == "figure" else f"{FIG}/tables"
    files = {ext: f"{folder}/{o.name}.{ext}" for ext in o.extensions}
    files[o.shown] = report(files[o.shown], caption=f"../report/{o.rule}.rst", category=o.category)
    return files


for o in OUTPUTS:

    rule:
        name:
            o.rule
        input:
            [ANALYSIS_FILES[i] for i in o.inputs],
        output:
            **output_files(o),
        log:
            f"logs/{EXP}/{o.rule}.log",
        params:
            **OUTPUT_PARAMS,
            # the rows `--config highlight=ROW` names (budget figure only; absent when none, so no other output reruns)
            **({"highlight": list(C.highlighted(config))} if C.highlighted(config) and o.rule == "figure_budget" else {}),
            script=o.script,
        script:
            "../scripts/{params.script}"


FIGURES = [f for o in OUTPUTS if o.kind == "figure" for f in getattr(rules, o.rule).output]
TABLES = [f for o in OUTPUTS if o.kind == "table" for f in getattr(rules, o.rule).output]


# Every run's provenance (its run.json: row, student, seed, code version, packages, hardware, wall time,
# launcher), as a table for the report's infrastructure category.
rule run_provenance:
    input:
        [f"{OUT}/runs/{r}/run.json" for r in RUNS],
    output:
        md=f"{FIG}/tables/run_provenance.md",
        tex=f"{FIG}/tables/run_provenance.tex",
        html=report(f"{FIG}/tables/run_provenance.html", caption="../report/run_provenance.rst",
                    category=O.INFRA),
    log:
        f"logs/{EXP}/run_provenance.log",
    params:
        experiment=EXP,
    script:
        "../scripts/run_provenance.py"


TABLES.extend(rules.run_provenance.output)


# The configuration this report was built from: Snakemake 9's HTML report does not show the config files
# (it records them but its page has no place for them), so the resolved config (config.yaml, any
# --configfile and --config overrides, a profile's) is a result of its own. A changed config reruns it.
rule config_used:
    output:
        yaml=f"{FIG}/config_used.yaml",
        html=report(f"{FIG}/config_used.html", caption="../report/config_used.rst", category=O.INFRA),
    params:
        config=config,
        files=[str(f) for f in workflow.configfiles],
        experiment=EXP,
    log:
        f"logs/{EXP}/config_used.log",
    script:
        "../scripts/config_used.py"
