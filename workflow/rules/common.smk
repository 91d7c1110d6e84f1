# The selected experiment, its runs and the paths every rule shares. EXPERIMENT (opd.spec.Experiment) holds
# every setting with its default resolved; the job specs are built from it by opd.dag.
from opd import dag
from opd.spec import Experiment, Probes, run_id

EXPERIMENT = Experiment.of(config)
EXP = EXPERIMENT.name
E = config["experiments"][EXP]  # the experiment as config.yaml writes it (passed on where a script reads that form)
BACKEND = EXPERIMENT.backend
ROWS = {r.name: r for r in EXPERIMENT.rows}  # opd.rows.Row: defaults and predicates, written once
BASELINE = EXPERIMENT.baseline.name
RUNS = {r.run_id: r for r in EXPERIMENT.runs()}
PRIMARY = EXPERIMENT.primary
STUDENT_RANK = dag.student_rank(EXPERIMENT)
OUT = f"results/{EXP}"
FIG = f"figures/{EXP}"
ANALYSIS = f"{OUT}/analysis"
# Where training jobs run: written to a file that is not an input, so switching launcher or editing
# the site's Slurm settings never reruns finished runs.
LAUNCH = C.write_if_changed(".snakemake/opd/launcher.json", EXPERIMENT.launcher.to_json())
# The admission line the admission job's summary line decides against (opd.cli), likewise not an input.
C.write_if_changed(dag.admission_line_path(EXP), dag.admission_line(EXPERIMENT))


wildcard_constraints:
    run_id=r"[A-Za-z0-9][A-Za-z0-9_-]*\.[A-Za-z0-9][A-Za-z0-9_-]*\.s\d+",
    row=r"[A-Za-z0-9][A-Za-z0-9_-]*",
    student=r"[A-Za-z0-9][A-Za-z0-9_-]*",


# Folder names matter for a fresh clone: git checks files out in path order, so _jobs/ (job specs),
# then _models/ (tiny students and teachers), then admission/, analysis/, runs/ are written in the order
# the DAG makes them, and committed results never look older than their inputs.
MODELS = f"{OUT}/_models"
# Every run's training spec (opd.dag.train_specs): what its spec file holds, and what its run.json is checked against.
SPECS = dag.train_specs(EXPERIMENT, MODELS)
# The self-checking cache, before the DAG is built: every complete run's files against the sizes and sha256
# its run.json records and its run.json's spec hash against its job's spec now, the base models' the same way
# against base.json (opd.store.heal_runs; hashes only of files whose size or mtime changed since this checkout
# last hashed them). A damaged or stale run is named on stderr and its files move to {OUT}/_quarantine/; it and
# a run found incomplete or missing are logged there, and the log is an input of the analysis: the DAG reruns
# exactly those runs, whatever else is up to date.
from opd import store
DAMAGED = store.heal_runs(OUT, RUNS, ledger=f".snakemake/opd/verified-{EXP}.json", specs=SPECS,
                          base_specs={s: dag.base_spec(EXPERIMENT, s) for s in EXPERIMENT.students}
                          if BACKEND == "tiny" else None)
# an input of the analysis once a run was ever quarantined (store.quarantine_log): the last quarantine's time
QUARANTINED = [str(store.quarantine_log(OUT))] if store.quarantine_log(OUT).exists() else []


def base_inputs(student):
    """A tiny-backend student's checkpoint and its teacher's (none for verl: its models are named in config)."""
    return dag.base_paths(EXPERIMENT, MODELS, student)


def spec_file(spec):
    """A job's spec (opd.spec: built by opd.dag) as a file under results/<experiment>/_jobs/ (its path:
    dag.spec_path), (re)written only when its content changes. It is the job's input, so changing a row
    reruns exactly that row's jobs, also in a fresh clone without Snakemake's metadata."""
    return C.write_if_changed(dag.spec_path(OUT, spec), spec.to_json())


def opd_engine_rows():
    """Rows that describe an engine for OPD (budget rows without staleness): the admission check's candidates."""
    return [r for r in ROWS.values() if r.in_budget and not r.staleness]
