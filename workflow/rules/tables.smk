# Stage 3: one rule and one script per table; each writes Markdown and LaTeX.
TABLE_INPUTS = {
    "runs": [f"{ANALYSIS}/verdicts.parquet", f"{ANALYSIS}/rows.parquet"],
    "budget": [f"{ANALYSIS}/budget.parquet"],
    "admission": [f"{ANALYSIS}/admission.parquet", f"{ANALYSIS}/admission_summary.json"],
    "time_to_kl": [f"{ANALYSIS}/heldout.parquet", f"{ANALYSIS}/steps.parquet", f"{ANALYSIS}/rows.parquet"],
    "variants": [f"{ANALYSIS}/verdicts.parquet", f"{ANALYSIS}/rows.parquet"],
    "infra": [f"{ANALYSIS}/steps.parquet", f"{ANALYSIS}/rows.parquet"],
    "rl": [f"{ANALYSIS}/rl.parquet"],
}
TABLES = [f"{FIG}/tables/{name}.{ext}" for name in TABLE_INPUTS for ext in ("md", "tex")]
TABLE_PARAMS = {"experiment": EXP, "baseline": C.baseline_row(config)["name"], "primary": PRIMARY,
                "infra": E.get("infra", {}), "students": E["students"], "backend": BACKEND}


for _name, _inputs in TABLE_INPUTS.items():

    rule:
        name:
            f"table_{_name}"
        input:
            _inputs,
        output:
            md=f"{FIG}/tables/{_name}.md",
            tex=f"{FIG}/tables/{_name}.tex",
        params:
            **TABLE_PARAMS,
        script:
            f"../scripts/table_{_name}.py"
