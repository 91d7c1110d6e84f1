# The selected experiment, its runs and the paths every rule shares.
EXP = config["experiment"]
E = config["experiments"][EXP]
BACKEND = E["backend"]
ROWS = {r.name: r for r in C.rows(config)}  # opd.rows.Row: defaults and predicates, written once
BASELINE = C.baseline_row(config).name
RUNS = {r.run_id: r for r in C.runs(config)}
PRIMARY = next(iter(E["students"]))
STUDENT_RANK = {s: i for i, s in enumerate(sorted(E["students"], key=lambda s: C.student_params(E["students"][s])))}
OUT = f"results/{EXP}"
FIG = f"figures/{EXP}"
ANALYSIS = f"{OUT}/analysis"
# Where training jobs run, and the admission line the admission check's summary line decides against:
# written to a file that is not an input, so switching launcher, editing the site's Slurm settings or moving
# the line never reruns finished jobs.
LAUNCH = C.write_if_changed(".snakemake/opd/launcher.json", {
    "launcher": config["launcher"], "slurm": {**config.get("slurm", {}), **E.get("slurm", {})},
    "admission_line": {"experiment": EXP, "alpha": E["admission"]["alpha"], "L": E["admission"]["L"],
                       "resamples": E["bootstrap"]["resamples"], "seed": E["bootstrap"]["seed"]}})
# The self-checking cache, before the DAG is built: every complete run's files against the sizes and sha256
# its run.json records (opd.store.heal_runs; hashes only of files whose size or mtime changed since this
# checkout last hashed them). A damaged run is named on stderr and its files move to {OUT}/_quarantine/,
# so the DAG reruns exactly the damaged runs.
from opd import store
DAMAGED = store.heal_runs(OUT, RUNS, ledger=f".snakemake/opd/verified-{EXP}.json")
# an input of the analysis once a run was ever quarantined (store.quarantine_log): the last quarantine's time
QUARANTINED = [str(store.quarantine_log(OUT))] if store.quarantine_log(OUT).exists() else []


wildcard_constraints:
    run_id=r"[A-Za-z0-9][A-Za-z0-9_-]*\.[A-Za-z0-9][A-Za-z0-9_-]*\.s\d+",
    row=r"[A-Za-z0-9][A-Za-z0-9_-]*",
    student=r"[A-Za-z0-9][A-Za-z0-9_-]*",


# Folder names matter for a fresh clone: git checks files out in path order, so _jobs/ (job specs),
# then _models/ (tiny students and teachers), then admission/, analysis/, runs/ are written in the order
# the DAG makes them, and committed results never look older than their inputs.
MODELS = f"{OUT}/_models"


def base_inputs(student):
    """A tiny-backend student's checkpoint and its teacher's (none for verl: its models are named in config)."""
    if BACKEND != "tiny":
        return {}
    return {"student": f"{MODELS}/{student}/student.pt", "teacher": f"{MODELS}/{student}/teacher.pt"}


def job_spec(**extra):
    """What every job computes from: the experiment, its backend, the task seed and the job's own fields
    (and, for verl, the experiment's verl settings: models, data, layout)."""
    spec = {"experiment": EXP, "backend": BACKEND, "task_seed": E["train"].get("task_seed", 0), **extra}
    if BACKEND == "verl":
        spec["verl"] = E.get("verl", {})
        spec.setdefault("settings", E["train"])  # a training run passes its own (C.run_settings)
    return spec


def spec_file(kind, name, spec):
    """A job's spec as a file under results/<experiment>/_jobs/, (re)written only when its content
    changes. It is the job's input, so changing a row reruns exactly that row's jobs, also in a fresh
    clone without Snakemake's metadata."""
    return C.write_if_changed(f"{OUT}/_jobs/{kind}/{name}.json", spec)


def opd_engine_rows():
    """Rows that describe an engine for OPD (budget rows without staleness): the admission check's candidates."""
    return [r for r in ROWS.values() if r.in_budget and not r.staleness]
