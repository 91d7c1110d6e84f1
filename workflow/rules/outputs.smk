# Stage 3: every figure (PDF + PNG) and table (Markdown + LaTeX + HTML), one rule and one script each, made
# from the table in opd/outputs.py (common.smk's OUTPUTS): an output is in this experiment's DAG only when the
# experiment holds what it shows. Each writes the hashes of its inputs beside itself. The PNG of a figure and
# the HTML of a table are tagged for `snakemake --report`, with the output's category and its caption
# (workflow/report/<rule>.rst).

OUTPUT_PARAMS = {"experiment": EXP, "tau": EXPERIMENT.tau, "baseline": BASELINE, "primary": SHOWN,
                 "infra": EXPERIMENT.infra.written(), "backend": BACKEND,
                 "students": {name: s.written() for name, s in EXPERIMENT.students.items()}}


for o in OUTPUTS:

    rule:
        name:
            o.rule
        input:
            unpack(lambda w, o=o: output_inputs(o)),
        output:
            **reported(output_paths(o), o.shown, o.rule, o.category, o.kind),
        log:
            f"logs/{EXP}/{o.rule}.log",
        params:
            **OUTPUT_PARAMS,
            # the rows `--config highlight=ROW` names (budget figure only; absent when none, so no other output reruns)
            **({"highlight": list(C.highlighted(config))} if C.highlighted(config) and o.rule == "figure_budget" else {}),
            script=o.script,
        script:
            "../scripts/{params.script}"


# Every run's provenance (its run.json: row, student, seed, code version, packages, hardware, wall time,
# launcher), as a table for the report's infrastructure category.
rule run_provenance:
    input:
        lambda w: [f"{OUT}/runs/{r}/run.json" for r in scope().runs],
    output:
        **reported(PROVENANCE, "html", "run_provenance", O.INFRA, "table"),
    log:
        f"logs/{EXP}/run_provenance.log",
    params:
        experiment=EXP,
    script:
        "../scripts/run_provenance.py"


# The configuration this report was built from: Snakemake 9's HTML report does not show the config files
# (it records them but its page has no place for them), so the resolved config (config.yaml, any
# --configfile and --config overrides, a profile's) is a result of its own. A changed config reruns it.
rule config_used:
    output:
        **reported(CONFIG_USED, "html", "config_used", O.INFRA, "text"),
    params:
        config=config,
        files=[str(f) for f in workflow.configfiles],
        experiment=EXP,
    log:
        f"logs/{EXP}/config_used.log",
    script:
        "../scripts/config_used.py"
