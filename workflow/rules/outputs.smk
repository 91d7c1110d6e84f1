# Stage 3: every figure (PDF + PNG) and table (Markdown + LaTeX), one rule and one script each, made from
# the table in opd/outputs.py: an output is in this experiment's DAG only when the experiment holds what
# it shows. Each writes the hashes of its inputs beside itself.
from opd import outputs as O

# the analysis stage's files by name (opd.outputs names its inputs this way)
ANALYSIS_FILES = {
    **{name: path for name, path in rules.analysis.output.items()},
    "kv_attribution": rules.kv_attribution.output[0],
    "async_throughput": (rules.throughput if BACKEND == "tiny" else rules.throughput_from_runs).output[0],
    "memory_bound": rules.memory_bound.output[0],
    "admission_summary.json": rules.analysis.output.admission_summary,
}
OUTPUTS = O.selected(E)
OUTPUT_PARAMS = {"experiment": EXP, "tau": E["tau"], "baseline": BASELINE, "primary": PRIMARY,
                 "infra": E.get("infra", {}), "students": E["students"], "backend": BACKEND}


def output_files(o):
    folder = FIG if o.kind == "figure" else f"{FIG}/tables"
    return {ext: f"{folder}/{o.name}.{ext}" for ext in o.extensions}


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
            script=o.script,
        script:
            "../scripts/{params.script}"


FIGURES = [f for o in OUTPUTS if o.kind == "figure" for f in getattr(rules, o.rule).output]
TABLES = [f for o in OUTPUTS if o.kind == "table" for f in getattr(rules, o.rule).output]
