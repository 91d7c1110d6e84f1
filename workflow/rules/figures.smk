# Stage 3: one rule and one script per figure; each writes a PDF, a PNG and the hashes of its inputs.
FIGURE_INPUTS = {
    "budget": [f"{ANALYSIS}/verdicts.parquet", f"{ANALYSIS}/budget.parquet", f"{ANALYSIS}/rows.parquet"],
    "admission": [f"{ANALYSIS}/admission.parquet", f"{ANALYSIS}/admission_summary.json"],
    "kv_attribution": [f"{ANALYSIS}/kv_attribution.parquet"],
    "async_throughput": [f"{ANALYSIS}/async_throughput.parquet"],
    "memory_bound": [f"{ANALYSIS}/memory_bound.parquet"],
    "rl_vs_opd": [f"{ANALYSIS}/rl.parquet", f"{ANALYSIS}/heldout.parquet", f"{ANALYSIS}/steps.parquet",
                  f"{ANALYSIS}/rows.parquet"],
    "mismatch_steps": [f"{ANALYSIS}/steps.parquet", f"{ANALYSIS}/rows.parquet"],
    "heldout_kl": [f"{ANALYSIS}/heldout.parquet", f"{ANALYSIS}/rows.parquet", f"{ANALYSIS}/verdicts.parquet"],
}
FIGURES = [f"{FIG}/{name}.{ext}" for name in FIGURE_INPUTS for ext in ("pdf", "png")]
FIGURE_PARAMS = {"experiment": EXP, "tau": E["tau"], "baseline": C.baseline_row(config)["name"], "primary": PRIMARY}


for _name, _inputs in FIGURE_INPUTS.items():

    rule:
        name:
            f"figure_{_name}"
        input:
            _inputs,
        output:
            pdf=f"{FIG}/{_name}.pdf",
            png=f"{FIG}/{_name}.png",
        params:
            **FIGURE_PARAMS,
        script:
            f"../scripts/figure_{_name}.py"
