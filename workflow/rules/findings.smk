# Stage 3: the findings as sentences, every number computed from the analysis files (linked by the README).


rule findings:
    input:
        unpack(findings_inputs),
    output:
        md=FINDINGS["md"],
    params:
        tau=EXPERIMENT.tau,
        baseline=BASELINE,
        primary=SHOWN,
        alpha=EXPERIMENT.admission.alpha,
        L=EXPERIMENT.admission.L,
        rl_collapse=EXPERIMENT.rl_collapse.written(),
        students={name: s.written() for name, s in EXPERIMENT.students.items()},
    log:
        f"logs/{EXP}/findings.log",
    script:
        "../scripts/findings.py"


# The findings as an HTML page for `snakemake --report` (its "Findings" category), from findings.md.
rule findings_html:
    input:
        FINDINGS["md"],
    output:
        reported({"html": FINDINGS["html"]}, "html", "findings", O.FINDINGS, "text")["html"],
    log:
        f"logs/{EXP}/findings_html.log",
    params:
        experiment=EXP,
    script:
        "../scripts/findings_html.py"
