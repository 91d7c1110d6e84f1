# The selected experiment, its runs and the paths every rule shares.
EXP = config["experiment"]
E = config["experiments"][EXP]
BACKEND = E["backend"]
RUNS = {r.run_id: r for r in C.runs(config)}
PRIMARY = next(iter(E["students"]))
OUT = f"results/{EXP}"
FIG = f"figures/{EXP}"
ANALYSIS = f"{OUT}/analysis"
# Where training jobs run: written to a file that is not an input, so switching launcher or editing
# the site's Slurm settings never reruns finished runs.
LAUNCH = C.write_if_changed(".snakemake/opd/launcher.json", {
    "launcher": config["launcher"], "slurm": {**config.get("slurm", {}), **E.get("slurm", {})}})


wildcard_constraints:
    run_id=r"[A-Za-z0-9][A-Za-z0-9_-]*\.[A-Za-z0-9][A-Za-z0-9_-]*\.s\d+",
    row=r"[A-Za-z0-9][A-Za-z0-9_-]*",
    student=r"[A-Za-z0-9][A-Za-z0-9_-]*",


def base_model(student, which):
    """A tiny-backend student or teacher checkpoint; ancient() so a fresh clone's checkout order never
    makes committed runs look older than their inputs."""
    return ancient(f"{OUT}/base/{student}/{which}.pt")


def base_inputs(student):
    if BACKEND != "tiny":
        return {}
    return {"student": base_model(student, "student"), "teacher": base_model(student, "teacher")}


def job_spec(**extra):
    """What every job computes from: the experiment, its backend, the task seed and the job's own fields
    (and, for verl, the experiment's verl settings: models, data, layout)."""
    spec = {"experiment": EXP, "backend": BACKEND, "task_seed": E["train"].get("task_seed", 0), **extra}
    if BACKEND == "verl":
        spec.update(verl=E.get("verl", {}), settings=E["train"])
    return spec


def spec_file(kind, name, spec):
    """A job's spec as a file under results/<experiment>/_specs/, (re)written only when its content
    changes. It is the job's input, so changing a row reruns exactly that row's jobs, also in a fresh
    clone without Snakemake's metadata. `_specs` sorts before every other folder there, so git checks
    the specs out first and committed results stay newer than the specs they were made from."""
    return C.write_if_changed(f"{OUT}/_specs/{kind}/{name}.json", spec)


def opd_engine_rows():
    """Rows that describe an engine for OPD (no staleness, no RL, no update variant): admission candidates."""
    return [r for r in E["rows"] if r.get("algorithm", "opd") == "opd" and r.get("variant", "none") == "none"
            and not r.get("staleness")]


def row_students(row):
    return row.get("students", [PRIMARY])
