# Stage 3: the findings as sentences, every number computed from the analysis files (linked by the README).


rule findings:
    input:
        **{k: rules.analysis.output[k] for k in ("verdicts", "budget", "noise", "null_deltas", "staleness_lr",
                                                 "heldout", "rl", "rows", "admission_summary")},
        **({"kv_attribution": rules.kv_attribution.output[0]} if KV_STUDENTS else {}),
    output:
        md=f"{FIG}/findings.md",
    params:
        tau=E["tau"],
        baseline=BASELINE,
        primary=PRIMARY,
        alpha=E["admission"]["alpha"],
        L=E["admission"]["L"],
    log:
        f"logs/{EXP}/findings.log",
    script:
        "../scripts/findings.py"


# The findings as an HTML page for `snakemake --report` (its "Findings" category), from findings.md.
rule findings_html:
    input:
        rules.findings.output.md,
    output:
        report(f"{FIG}/findings.html", caption="../report/findings.rst", category=O.FINDINGS),
    log:
        f"logs/{EXP}/findings_html.log",
    params:
        experiment=EXP,
    script:
        "../scripts/findings_html.py"
