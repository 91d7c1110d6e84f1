# Stage 3: one rule and one script per table; each writes Markdown and LaTeX.
TABLE_INPUTS = {
    "runs": [f"{ANALYSIS}/verdicts.parquet", f"{ANALYSIS}/rows.parquet"],
    "budget": [f"{ANALYSIS}/budget.parquet"],
    "admission": [f"{ANALYSIS}/admission.parquet", f"{ANALYSIS}/admission_summary.json"],
    "time_to_kl": [f"{ANALYSIS}/heldout.parquet", f"{ANALYSIS}/steps.parquet", f"{ANALYSIS}/rows.parquet"],
    "variants": [f"{ANALYSIS}/verdicts.parquet", f"{ANALYSIS}/rows.parquet"],
    "infra": [f"{ANALYSIS}/steps.parquet", f"{ANALYSIS}/rows.parquet"],
    "rl": [f"{ANALYSIS}/rl.parquet"],
    "noise": [f"{ANALYSIS}/noise.parquet"],
}
TABLES = [f"{FIG}/tables/{name}.{ext}" for name in TABLE_INPUTS for ext in ("md", "tex")]
TABLE_PARAMS = {"experiment": EXP, "baseline": BASELINE, "primary": PRIMARY,
                "infra": E.get("infra", {}), "students": E["students"], "backend": BACKEND}


rule table_runs:
    input:
        TABLE_INPUTS["runs"],
    output:
        md=f"{FIG}/tables/runs.md",
        tex=f"{FIG}/tables/runs.tex",
    params:
        **TABLE_PARAMS,
    script:
        "../scripts/table_runs.py"


rule table_budget:
    input:
        TABLE_INPUTS["budget"],
    output:
        md=f"{FIG}/tables/budget.md",
        tex=f"{FIG}/tables/budget.tex",
    params:
        **TABLE_PARAMS,
    script:
        "../scripts/table_budget.py"


rule table_admission:
    input:
        TABLE_INPUTS["admission"],
    output:
        md=f"{FIG}/tables/admission.md",
        tex=f"{FIG}/tables/admission.tex",
    params:
        **TABLE_PARAMS,
    script:
        "../scripts/table_admission.py"


rule table_time_to_kl:
    input:
        TABLE_INPUTS["time_to_kl"],
    output:
        md=f"{FIG}/tables/time_to_kl.md",
        tex=f"{FIG}/tables/time_to_kl.tex",
    params:
        **TABLE_PARAMS,
    script:
        "../scripts/table_time_to_kl.py"


rule table_variants:
    input:
        TABLE_INPUTS["variants"],
    output:
        md=f"{FIG}/tables/variants.md",
        tex=f"{FIG}/tables/variants.tex",
    params:
        **TABLE_PARAMS,
    script:
        "../scripts/table_variants.py"


rule table_infra:
    input:
        TABLE_INPUTS["infra"],
    output:
        md=f"{FIG}/tables/infra.md",
        tex=f"{FIG}/tables/infra.tex",
    params:
        **TABLE_PARAMS,
    script:
        "../scripts/table_infra.py"


rule table_rl:
    input:
        TABLE_INPUTS["rl"],
    output:
        md=f"{FIG}/tables/rl.md",
        tex=f"{FIG}/tables/rl.tex",
    params:
        **TABLE_PARAMS,
    script:
        "../scripts/table_rl.py"


rule table_noise:
    input:
        TABLE_INPUTS["noise"],
    output:
        md=f"{FIG}/tables/noise.md",
        tex=f"{FIG}/tables/noise.tex",
    params:
        **TABLE_PARAMS,
    script:
        "../scripts/table_noise.py"


rule findings:
    """The findings as sentences with every number computed from the analysis files (linked by the README)."""
    input:
        verdicts=f"{ANALYSIS}/verdicts.parquet",
        budget=f"{ANALYSIS}/budget.parquet",
        noise=f"{ANALYSIS}/noise.parquet",
        null_deltas=f"{ANALYSIS}/null_deltas.parquet",
        staleness_lr=f"{ANALYSIS}/staleness_lr.parquet",
        heldout=f"{ANALYSIS}/heldout.parquet",
        rl=f"{ANALYSIS}/rl.parquet",
        rows=f"{ANALYSIS}/rows.parquet",
        admission_summary=f"{ANALYSIS}/admission_summary.json",
    output:
        md=f"{FIG}/findings.md",
    params:
        tau=E["tau"],
        baseline=BASELINE,
        primary=PRIMARY,
        alpha=E["admission"]["alpha"],
        L=E["admission"]["L"],
    script:
        "../scripts/findings.py"
