# Stage 3: the findings as sentences, every number computed from the analysis files (linked by the README).


def findings_inputs(w):
    """The analysis files the findings read, with the KV attribution, the guard's record and the gradient probes
    where the experiment (and, for `snakemake figures`, the results that exist) has them."""
    s = scope()
    files = {k: ANALYSIS_FILES[k] for k in ("verdicts", "budget", "noise", "null_deltas", "staleness_lr", "heldout",
                                            "rl", "rows")}
    files["admission_summary"] = ANALYSIS_FILES["admission_summary.json"]
    if KV_STUDENTS and s.all_in(MEASURED["kv_attribution"]):
        files["kv_attribution"] = ANALYSIS_FILES["kv_attribution"]
    if GUARDED and any(ROWS[r].guard for r in s.rows):
        files["guard"] = ANALYSIS_FILES["guard"]
    if PROBE_RUNS and all(r in s.runs for r in PROBE_RUNS):
        files.update(probes=ANALYSIS_FILES["probes"], probes_prefix=ANALYSIS_FILES["probes_prefix"])
    return files


rule findings:
    input:
        unpack(findings_inputs),
    output:
        md=FINDINGS["md"],
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
        FINDINGS["md"],
    output:
        report(FINDINGS["html"], caption="../report/findings.rst", category=O.FINDINGS),
    log:
        f"logs/{EXP}/findings_html.log",
    params:
        experiment=EXP,
    script:
        "../scripts/findings_html.py"
