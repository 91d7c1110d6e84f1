# Before a compute job: its spec file and its folder. Building the DAG reads and never writes results/, so the spec
# files (common.smk's spec_file) are written by rule job_spec. Snakemake runs it where a spec file is missing, and
# where what is on disk does not match what the job is asked to compute: the spec file holds another spec, or the
# job's folder (a run's, a student's base models') holds a stale, damaged or incomplete result (FOUND:
# opd.store.inspect_all). For those, the DAG touches the job's rerun marker under .snakemake/opd/rerun/ (job_spec's one
# input: newer than the spec file, so Snakemake reruns job_spec). job_spec then sets a stale result aside under
# the spec it was computed from (results/<experiment>/_set_aside/), quarantines a damaged one (opd.store.prepare) and
# writes the spec: newer than the job's outputs, so the job reruns; the job itself restores a set-aside result of its
# spec instead of computing it again (opd.cli).


rule job_spec:
    input:
        lambda w: rerun_marker(f"{OUT}/_jobs/{w.kind}/{w.name}.json"),
    output:
        f"{OUT}/_jobs/{{kind}}/{{name}}.json",
    params:
        # the spec as JSON text (a shell command, not a script: Snakemake reruns a script's jobs whenever the script
        # is newer than their outputs, and this rule's outputs are every job's input)
        spec=lambda w, output: C.spec_text(JOB_SPECS[output[0]][0].to_json(), output[0]),
        folder=lambda w, output: JOB_SPECS[output[0]][1] or "-",  # -: a job whose outputs Snakemake replaces
    log:
        f"logs/{EXP}/job_spec/{{kind}}/{{name}}.log",
    wildcard_constraints:
        kind=r"[a-z][a-z_-]*",
        name=r"[^/]+",
    localrule: True
    shell:
        "python -m opd.cli prepare-job --kind {wildcards.kind} --spec-json {params.spec:q} --out {output} "
        "--folder {params.folder:q} > {log} 2>&1"
