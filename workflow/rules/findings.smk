# Stage 3: the findings as sentences, every number computed from the analysis files (linked by the README).


def findings_probes(w):
    """The gradient probes' tables where the experiment has the mechanism stage (mechanism.smk's MECHANISM: tiny
    backend); a function, as mechanism.smk is included after this file."""
    return {"probes": rules.probes.output.probes, "probes_prefix": rules.probes.output.prefix} if MECHANISM else {}


rule findings:
    input:
        unpack(findings_probes),
        **{k: rules.analysis.output[k] for k in ("verdicts", "budget", "noise", "null_deltas", "staleness_lr",
                                                 "heldout", "rl", "rows", "admission_summary", "edge",
                                                 "decides")},
        **({"kv_attribution": rules.kv_attribution.output[0]} if KV_STUDENTS else {}),
        **({"guard": rules.guard_analysis.output[0]} if any(r.guard for r in ROWS.values()) else {}),
    output:
        md=f"{FIG}/findings.md",
    params:
        tau=EXPERIMENT.tau,
        baseline=BASELINE,
        primary=PRIMARY,
        alpha=EXPERIMENT.admission.alpha,
        L=EXPERIMENT.admission.L,
        rl_collapse=EXPERIMENT.rl_collapse.written(),
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
