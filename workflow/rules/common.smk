# The one home of what the files in workflow/rules share - the selected experiment, its runs, every derived
# variable, every path and the final outputs. A rule file reads only what this file defines (and its own rules'
# outputs).
# EXPERIMENT (opd.spec.Experiment) holds every setting with its default resolved; the job specs are built
# from it by opd.dag.
import os
import re
import sys

from opd import dag
from opd import outputs as O
from opd import store
from opd.spec import Experiment, results_dir, run_id

EXPERIMENT = Experiment.of(config)
EXP = EXPERIMENT.name
E = config["experiments"][EXP]  # the experiment as config.yaml writes it (passed on where a script reads that form)
# The adaptive design (opd.plan), where the experiment has one: the sequential rows' seeds and the edges' rows,
# planned from the complete runs on disk each time the DAG is built. One snakemake call trains the round planned
# when it starts; `snakemake -n` shows it; `python -m opd.cli calibrate` calls snakemake until nothing is left.
from opd import plan as P

PLAN = None
if EXPERIMENT.adaptive:
    # from current runs only: a run the cache check below finds damaged or stale is read as missing
    PLAN = P.checked_plan(EXPERIMENT, results_dir(EXP))
    EXPERIMENT, E = PLAN.experiment, PLAN.written(E)
    # a real run says its plan at the end (opd.summary); a dry run its headline now, `--verbose` every row and edge
    for line in [] if QUIET else PLAN.summary() if workflow.output_settings.verbose else [PLAN.headline()]:
        print(line, file=sys.stderr, flush=True)
BACKEND = EXPERIMENT.backend
ROWS = {r.name: r for r in EXPERIMENT.rows}  # opd.rows.Row: defaults and predicates, written once
BASELINE = EXPERIMENT.baseline.name
RUNS = {r.run_id: r for r in EXPERIMENT.runs()}
PRIMARY = EXPERIMENT.primary
STUDENT_RANK = dag.student_rank(EXPERIMENT)
# the student the analysis and figures show first (their `primary`): the primary one, or where no run uses it (every
# row names other students), the first in the config's order that one does
SHOWN = next((s for s in EXPERIMENT.students if any(r.student == s for r in RUNS.values())), PRIMARY)
OUT = results_dir(EXP)
FIG = f"figures/{EXP}"
ANALYSIS = f"{OUT}/analysis"
# Where training jobs run: written to a file that is not an input, so switching launcher or editing
# the site's Slurm settings never reruns finished runs.
LAUNCH = C.write_if_changed(".snakemake/opd/launcher.json", EXPERIMENT.launcher.to_json())
# The admission line the admission job's summary line decides against (opd.cli), likewise not an input.
C.write_if_changed(dag.admission_line_path(EXP), dag.admission_line(EXPERIMENT))


RUN_ID = r"[A-Za-z0-9][A-Za-z0-9_-]*\.[A-Za-z0-9][A-Za-z0-9_-]*\.s\d+"  # <row>.<student>.s<seed>


wildcard_constraints:
    run_id=RUN_ID,
    row=r"[A-Za-z0-9][A-Za-z0-9_-]*",
    student=r"[A-Za-z0-9][A-Za-z0-9_-]*",


# Folder names matter for a fresh clone: git checks files out in path order, so _jobs/ (job specs),
# then _models/ (tiny students and teachers), then admission/, analysis/, runs/ are written in the order
# the DAG makes them, and committed results never look older than their inputs.
MODELS = f"{OUT}/_models"
BASES = dag.base_specs(EXPERIMENT)  # the base-model jobs (tiny backend) by folder: every student on every draw
# Every run's training spec (opd.dag.train_specs): what its spec file holds, and what its run.json is checked against.
SPECS = dag.train_specs(EXPERIMENT, MODELS)
# The self-checking cache, read only: every complete run's files against the sizes and sha256 its run.json records
# and its run.json's spec hash against its job's spec now, the base models' the same way against base.json
# (opd.store.inspect_all; hashes only of files whose size or mtime changed since this checkout last hashed them, in
# .snakemake/opd/). Building the DAG moves and writes nothing under results/: a run found stale, damaged or
# incomplete gets a rerun marker (workflow/rules/jobs.smk), and its job's first step sets a stale run aside under
# its spec, quarantines a damaged one (opd.store.prepare) and restores a set-aside run of the spec it is asked for.
FOUND = store.inspect_all(OUT, RUNS, store.ledger_path(EXP), specs=SPECS, base_specs=BASES)
store.say_found(FOUND, OUT, SPECS, BASES)


# ---------------------------------------------------------------- the measurements' rows and students (offline.smk)

def opd_engine_rows():
    """Rows that describe an engine for OPD: those the admission check measures (opd.rows.Row.admission_checked)."""
    return [r for r in ROWS.values() if r.admission_checked]


ADMISSION = {O.admission_path(OUT, r.name, s): r.name for r in opd_engine_rows() for s in r.students_or(PRIMARY)}
# the same candidates' offline statistics at the step-0 student (opd.dag.predictor_spec; tiny backend: exact sums
# over its vocabulary), which the predictors rule judges as predictors of training's outcome
PREDICTOR_FILES = {O.predictor_path(OUT, r.name, s): r.name for r in opd_engine_rows()
                   for s in r.students_or(PRIMARY)} if BACKEND == "tiny" and EXPERIMENT.predictors else {}
KV_CACHE_RECIPES = sorted({r.kv_cache for r in ROWS.values() if r.kv_cache != "none"})  # the experiment's own
# every student a KV-cache row runs on (the 3-layer one separates "only layer i" from "all but layer j")
KV_STUDENTS = sorted({s for r in ROWS.values() if r.kv_cache != "none" for s in r.students_or(PRIMARY)})
KV_ATTRIBUTION_FILES = [f"{OUT}/kv_attribution/{s}.parquet" for s in KV_STUDENTS]
# the measurements' outputs that do not read in full (read again where their size or mtime changed): their jobs rerun
UNREADABLE = store.unreadable([*ADMISSION, *PREDICTOR_FILES, *KV_ATTRIBUTION_FILES], store.ledger_path(EXP))
for path, why in UNREADABLE.items():
    print(f"opd: {why}: its job measures it again", file=sys.stderr, flush=True)
STALENESS = sorted({0} | {r.staleness for r in ROWS.values()})
GUARDED = any(r.guard for r in ROWS.values())


# ---------------------------------------------------------------- the mechanism stage's probed runs (mechanism.smk)

# the primary student's first-seed runs of the baseline, the noise rows and the staleness rows (tiny backend: the
# probes are exact sums over the tiny vocabulary); opd.dag.probes sets the probes' settings
PROBE_ROWS = dag.probe_rows(EXPERIMENT)
PROBE_RUNS = dag.probe_runs(EXPERIMENT)
# a probed run's files besides its training's (opd.store.PROBE_FILES: what its run.json records and checks)
PROBE_FILES = {name: f"{OUT}/runs/{{run_id}}/{f}" for name, f in store.PROBE_FILES.items()}
# the runs the train rule makes - all but the probed ones, which are train_probed's (a run id is followed by "/"
# in every path) - so each run's spec is built by one rule only
UNPROBED_RUN_ID = (f"(?!(?:{'|'.join(re.escape(r) for r in PROBE_RUNS)})/)" if PROBE_RUNS else "") + RUN_ID


# ---------------------------------------------------------------- the analysis stage's files (analysis.smk)

# by the names opd.outputs uses (ANALYSIS_TABLES: the analysis script's; OTHER_ANALYSIS_FILES: other rules')
ANALYSIS_FILES = {name: O.analysis_path(OUT, name) for name in (*O.ANALYSIS_TABLES, *O.OTHER_ANALYSIS_FILES)}
TINY_THROUGHPUT = f"{ANALYSIS}/async_throughput.parquet"  # measured (rule throughput; the tiny backend's)
if BACKEND != "tiny":  # verl: read from the staleness runs themselves (rule throughput_from_runs)
    ANALYSIS_FILES["async_throughput"] = f"{ANALYSIS}/async_throughput_runs.parquet"
# an adaptive plan's decisions, a target of `all` (opd.plan.decisions_path)
PLAN_FILES = [ANALYSIS_FILES["plan_decisions.json"]] if PLAN is not None else []
# what each of the other rules' analysis files is made from, where that is a measurement (a compute job's output)
MEASURED = {"kv_attribution": KV_ATTRIBUTION_FILES, "predictors": list(PREDICTOR_FILES),
            "predictor_stats": list(PREDICTOR_FILES), "memory_bound": [ANALYSIS_FILES["memory_bound"]],
            "async_throughput": [ANALYSIS_FILES["async_throughput"]] if BACKEND == "tiny" else []}


# ---------------------------------------------------------------- the final outputs (rule all, rule figures)

OUTPUTS = O.selected(E)  # opd/outputs.py: the figures and tables this experiment builds


def output_paths(o):
    """A figure's (PDF, PNG) or table's (Markdown, LaTeX, HTML) files, by extension."""
    folder = FIG if o.kind == "figure" else f"{FIG}/tables"
    return {ext: f"{folder}/{o.name}.{ext}" for ext in o.extensions}


def table_paths(name):
    return {ext: f"{FIG}/tables/{name}.{ext}" for ext in ("md", "tex", "html")}


def reported(files, shown, rule, category, kind):
    """`files` (extension -> path) with the one `snakemake --report` shows tagged for it: its caption
    (workflow/report/<rule>.rst), its category and, as the menu's label, the caption's title and its kind
    ("Budget (figure)"), where the menu would otherwise show the bare path. One label: the report makes a second
    one a toggle where it has two values, and a figure and a table may share a title."""
    caption = f"{O.CAPTIONS}/{rule}.rst"
    labels = {"result": f"{O.caption_title(os.path.join(workflow.basedir, caption))} ({kind})"}
    return {**files, shown: report(files[shown], caption=f"../report/{rule}.rst", category=category, labels=labels)}


MECHANISM_FILES = {"png": f"{FIG}/mechanism.png", "pdf": f"{FIG}/mechanism.pdf",
                   **{f"{name}.{ext}": path for name in ("mechanism", "mechanism_runs")
                      for ext, path in table_paths(name).items()}}
MECHANISM = sorted(MECHANISM_FILES.values()) if PROBE_RUNS else []
PROVENANCE = table_paths("run_provenance")
FINDINGS = {"md": f"{FIG}/findings.md", "html": f"{FIG}/findings.html"}
CONFIG_USED = {"yaml": f"{FIG}/config_used.yaml", "html": f"{FIG}/config_used.html"}


def final_outputs(outputs, mechanism):
    """Every figure and table of `outputs` (opd.outputs), the mechanism stage's where `mechanism`, the run
    provenance, the findings and the configuration used."""
    return ([f for o in outputs for f in output_paths(o).values()] + (MECHANISM if mechanism else [])
            + list(PROVENANCE.values()) + list(FINDINGS.values()) + list(CONFIG_USED.values()))


FINAL = final_outputs(OUTPUTS, bool(PROBE_RUNS))  # rule all (with upstream(OUTPUTS))


# ---------------------------------------------------------------- what the analysis is built from (opd.dag.Scope)

_SCOPE = []


def figures_only():
    """The target is `figures` alone (`snakemake figures`): build from the results that exist, never train or
    measure. Snakemake knows its targets once it builds the DAG, so this is asked from input functions only."""
    targets = getattr(workflow.dag_settings, "targets", None) if workflow.dag_settings else None
    return bool(targets) and set(targets) == {"figures"}


def scope():
    """This DAG's opd.dag.Scope (every run, or for `figures` those with results), worked out once, when Snakemake
    first asks; for `figures` what it leaves out is said on stderr, naming the target that would make it."""
    if not _SCOPE:
        s = dag.scope(EXPERIMENT, OUT, figures_only(), current=lambda rid: not FOUND[rid].reruns)
        _SCOPE.append(s)
        for line in s.left_out:
            print(f"figures: {line}", file=sys.stderr, flush=True)
    return _SCOPE[0]


def scoped_runs():
    return [RUNS[r] for r in scope().runs]


def scoped_rows():
    """The rows in scope, resolved (opd.rows.Row.resolved): the analysis's `rows` parameter."""
    return [EXPERIMENT.resolved_row(ROWS[name]) for name in scope().rows]


def scoped_files(files):
    """Of a measurement's files ({path: row}: ADMISSION, PREDICTOR_FILES), those of rows in scope that scope has."""
    s = scope()
    return [p for p, row in files.items() if row in s.rows and s.has(p)]


def scoped_admission():
    return scoped_files(ADMISSION)


def output_inputs(o):
    """An output's analysis files by name (opd.outputs.analysis_key): its inputs, then those of its optional ones
    that are measurements this experiment makes and, for `snakemake figures`, has."""
    s = scope()
    assert set(o.optional) <= set(MEASURED), f"{o.rule}: an optional input is a measurement (MEASURED) or nothing"
    names = [*o.inputs, *(i for i in o.optional if MEASURED.get(i) and s.all_in(MEASURED[i]))]
    return {O.analysis_key(i): ANALYSIS_FILES[i] for i in names}


def scoped_final(w=None):
    """The inputs of the figures target - the final outputs the results that exist can make (all for every other
    target)."""
    s = scope()
    outputs, left = [], []
    for o in O.selected(s.experiment(E)):
        if o in OUTPUTS and all(s.all_in(MEASURED.get(i, [])) for i in o.inputs):
            outputs.append(o)
    mechanism = bool(PROBE_RUNS) and all(r in s.runs for r in PROBE_RUNS)
    if s.existing_only:
        for o in OUTPUTS:
            if o not in outputs:
                needs = [p for i in o.inputs for p in MEASURED.get(i, []) if not s.has(p)]
                left.append(f"{o.rule} left out: " + (f"its measurements are missing ({', '.join(needs)}); to make "
                            f"them: `snakemake -c 2 {' '.join(needs)}`" if needs else
                            "the rows it shows have no results yet"))
        if PROBE_RUNS and not mechanism:
            missing = [r for r in PROBE_RUNS if r not in s.runs]
            left.append(f"the mechanism figure and tables left out: probed runs without results ({', '.join(missing)})")
        for line in left:
            print(f"figures: {line}", file=sys.stderr, flush=True)
    return final_outputs(outputs, mechanism) + upstream(outputs)


def upstream(outputs):
    """The runs' files, the measurements and the analysis files the final `outputs` are built from, in scope: inputs
    of the targets too, so that one that went missing (a run folder deleted, an analysis job killed midway) is made
    again with everything after it (Snakemake 9 reruns a job for a missing input only where a job downstream of it
    runs anyway)."""
    s = scope()
    runs = [f"{OUT}/runs/{r}/{f}" for r in s.runs for f in ("run.json", "steps.parquet", "heldout.parquet")]
    analysis = {f for o in outputs for f in output_inputs(o).values()} | set(findings_inputs(None).values())
    return runs + scoped_admission() + scoped_files(PREDICTOR_FILES) + sorted(analysis)


_ANALYSIS_RECORD = []


def analysis_record():
    """What the analysis would be computed from now (opd.dag.analysis_inputs over the runs, rows and admission checks
    in scope, as the analysis job computes it from its inputs), worked out once."""
    if not _ANALYSIS_RECORD:
        _ANALYSIS_RECORD.append(dag.analysis_inputs(EXPERIMENT.tau, dag.analysis_settings(EXPERIMENT), scoped_rows(),
                                                    OUT, scope().runs, scoped_admission()))
    return _ANALYSIS_RECORD[0]


def analysis_marker():
    """The analysis's rerun marker (opd.dag.rerun_marker): rewritten when the analysis files on disk record other
    inputs than the analysis would read now (another tau, settings, rows, runs), so that it is remade whatever the
    files' times; and said on stderr, whatever the target (a report built now would show the stale files)."""
    verdicts = ANALYSIS_FILES["verdicts"]
    changes = dag.analysis_changes(store.read_inputs(verdicts), analysis_record()) if os.path.exists(verdicts) else []
    if changes:
        print(f"opd: the analysis files ({ANALYSIS}/) were computed from other inputs than this call's: "
              + "; ".join(changes) + ". The analysis is remade (`snakemake -c 2`).", file=sys.stderr, flush=True)
    return dag.rerun_marker(EXP, "analysis", "analysis", changes)


# ---------------------------------------------------------------- the findings' inputs (findings.smk)

def findings_inputs(w):
    """The analysis files the findings read, with the KV attribution, the guard's record, the predictors' record and
    the gradient probes where the experiment (and, for `snakemake figures`, the results that exist) has them."""
    s = scope()
    files = {k: ANALYSIS_FILES[k] for k in ("verdicts", "budget", "noise", "null_deltas", "staleness_lr", "heldout",
                                            "rl", "rows", "edge", "decides", "draws", "edges", "edge_ratios", "steps")}
    files["admission_summary"] = ANALYSIS_FILES["admission_summary.json"]
    if KV_STUDENTS and s.all_in(MEASURED["kv_attribution"]):
        files["kv_attribution"] = ANALYSIS_FILES["kv_attribution"]
    if GUARDED and any(ROWS[r].guard for r in s.rows):
        files["guard"] = ANALYSIS_FILES["guard"]
    if PREDICTOR_FILES and s.all_in(MEASURED["predictors"]):
        files.update(predictors=ANALYSIS_FILES["predictors"], predictor_stats=ANALYSIS_FILES["predictor_stats"])
    if PROBE_RUNS and all(r in s.runs for r in PROBE_RUNS):
        files.update(probes=ANALYSIS_FILES["probes"], probes_prefix=ANALYSIS_FILES["probes_prefix"])
    return files


# ---------------------------------------------------------------- the compute jobs' inputs (their spec files)

def forced(rulename, outputs):
    """Whether this call forces a job (its rule's name, its outputs) to run: --forceall, --forcerun naming the rule
    or an output, or --force with an output as a target (Snakemake knows its settings once it builds the DAG, so this
    is asked from input functions only)."""
    s = workflow.dag_settings
    if not s:
        return False
    names = {os.path.normpath(n) for n in (*s.forcerun, *(s.targets if s.forcetargets else ()))}
    return s.forceall or rulename in names or any(os.path.normpath(o) in names for o in outputs)


def base_found(spec):
    """What the cache check found of the base models a measurement reads (opd.dag.measured_base), or None."""
    folder = dag.measured_base(spec)
    return FOUND.get(f"base models of {folder}") if folder else None


def job_runs(spec, rulename, outputs):
    """Whether the compute job of `spec` (an opd.spec JobSpec; its rule's name and its outputs) must run, as this DAG
    decides it: where this call forces it (forced), its folder is not found current (FOUND: a run's), an output is
    missing or does not read in full (UNREADABLE: a measurement's), or its spec file is missing or its job must rerun
    (opd.dag.rerun_reasons: another spec, or a measurement's base models retrained; base models whose weights are not
    committed, `pinned`, are current)."""
    if forced(rulename, outputs):
        return True
    path = dag.spec_path(OUT, spec)
    _, key = dag.job_folder(OUT, spec) or (None, None)
    found = FOUND.get(key) if key else None
    if (found is not None and found.reruns) or not os.path.exists(path) or any(
            not os.path.exists(o) or o in UNREADABLE for o in outputs):
        return True
    return bool(dag.rerun_reasons(spec, path, found, base=base_found(spec)))


def base_inputs(student, draw=0, runs=True):
    """The inputs a tiny-backend job has of a student's base models and its teacher's on a base-model draw (none for
    verl: its models are named in config). The offline measurements read draw 0's; a run reads its seed's draw.
    The weights, student.pt and teacher.pt, as ancient: they count by their record, not their times (opd.store checks
    them against base.json; a run's spec holds the base models' spec, and a measurement reruns where its base models
    are retrained: opd.dag.rerun_reasons). Where they are absent (the toy does not commit them: .gitignore; base.json
    pins their sha256), a job that runs (`runs`: job_runs) gets them all the same, so rule base_models retrains them
    first and checks them against base.json; a job that does not run gets only base.json, so retraining them for one
    job reruns no other (Snakemake runs a job after one that runs unless every file between them is ancient and
    exists). Where they are there, every job has them, so its inputs stay those it ran with (Snakemake reruns a job
    whose set of inputs changed since it ran)."""
    weights = dag.base_paths(EXPERIMENT, MODELS, student, draw)
    if not weights:
        return {}
    if not runs and not all(os.path.exists(f) for f in weights.values()):
        return {"base": ancient(dag.base_record(MODELS, student, draw))}
    return {k: ancient(v) for k, v in weights.items()}


JOB_SPECS = {}  # spec file path -> (opd.spec JobSpec, the folder its job keeps or None, its key in FOUND or None)


def spec_file(spec):
    """A job's spec (opd.spec: built by opd.dag) as its file under results/<experiment>/_jobs/ (dag.spec_path),
    the job's input. Building the DAG never writes it: rule job_spec (jobs.smk) does, when it is missing or holds
    another spec, or when the job's folder (dag.job_folder: a run's, or a student's base models') holds something
    other than a sound result of this spec; so changing a row reruns exactly that row's jobs, also in a fresh clone
    without Snakemake's metadata, and a dry run writes nothing."""
    path = dag.spec_path(OUT, spec)
    JOB_SPECS[path] = (spec, *(dag.job_folder(OUT, spec) or (None, None)))
    return path


def rerun_marker(path):
    """The rerun marker of the job whose spec file is `path` (opd.dag.rerun_marker): touched now when the spec file
    holds another spec or the job's folder holds something other than a sound result of it, so that job_spec runs."""
    if path not in JOB_SPECS:
        raise ValueError(f"{path}: a job's spec file is written for its job: ask for the job's output instead")
    spec, folder, key = JOB_SPECS[path]
    reasons = dag.rerun_reasons(spec, path, FOUND.get(key) if key else None,
                                UNREADABLE.get(dag.measurement_path(OUT, spec)), base_found(spec))
    return dag.rerun_marker(EXP, spec.KIND, spec.name, reasons)


def train_inputs(w):
    """A run's training job's inputs: its base models (tiny; base_inputs: counted by their record, so base models
    rebuilt after damage rerun no run computed from the same spec) and its spec (SPECS: opd.dag.train_specs; a probed
    run's spec holds the probes, opd.dag.probes, and every run's its base models' spec: student_spec)."""
    run, spec = RUNS[w.run_id], SPECS[w.run_id]
    probed = w.run_id in PROBE_RUNS
    files = ("run.json", *store.RUN_FILES, *(store.PROBE_FILES.values() if probed else ()))
    runs = job_runs(spec, "train_probed" if probed else "train", [f"{OUT}/runs/{w.run_id}/{f}" for f in files])
    return {**base_inputs(run.student, EXPERIMENT.draw_of(run.seed), runs), "spec": spec_file(spec)}


def offline_inputs(rulename, build, student, *args, output):
    """A measurement's inputs: its base models (tiny; base_inputs: draw 0's) and its spec file,
    `build(EXPERIMENT, student, base, *args)` (an opd.dag function). `rulename` and `output`: the rule's name and
    output, which job_runs reads."""
    spec = build(EXPERIMENT, student, dag.base_paths(EXPERIMENT, MODELS, student), *args)
    return {**base_inputs(student, 0, BACKEND != "tiny" or job_runs(spec, rulename, [output])),
            "spec": spec_file(spec)}


# the base models' acceptance check (base.smk): it reads every base model's weights
BASE_ACCEPTANCE = {"table": f"{ANALYSIS}/base_acceptance.parquet", "draws": f"{ANALYSIS}/base_draws.parquet",
                   "md": f"{ANALYSIS}/base_acceptance.md"}


def base_acceptance_runs():
    """Whether the base models' acceptance check runs (as job_runs says of a compute job): where this call forces it,
    or its tables are missing or older than a base.json."""
    records = [dag.base_record(MODELS, b.student, b.draw) for b in BASES.values()]
    if forced("base_acceptance", BASE_ACCEPTANCE.values()) or not all(
            os.path.exists(f) for f in [*records, *BASE_ACCEPTANCE.values()]):
        return True
    return min(os.stat(f).st_mtime for f in BASE_ACCEPTANCE.values()) < max(os.stat(f).st_mtime for f in records)


def base_acceptance_weights(w):
    """Every base model's weights where the check reads them (base_inputs: unless they are absent and it does not
    run)."""
    runs = base_acceptance_runs()
    return [f for b in BASES.values() for k, f in base_inputs(b.student, b.draw, runs).items() if k != "base"]


# the verl backend's held-out evaluation jobs (verl_eval.smk)

def run_train_spec(run_id):
    """A run's training spec, as the train rule builds it (common.smk's train_inputs; verl runs are never probed)."""
    run = RUNS[run_id]
    base = dag.base_paths(EXPERIMENT, MODELS, run.student, EXPERIMENT.draw_of(run.seed))
    return dag.train_spec(EXPERIMENT, run, base)


def heldout_parts(w):
    """A run's held-out parts in step order: the student's step 0 (when evaluated), then the run's steps."""
    run = RUNS[w.run_id]
    steps = EXPERIMENT.settings(run.row).eval_steps()
    return ([f"{OUT}/heldout_base/{run.student}.parquet"] if 0 in steps else []) + \
        [f"{OUT}/runs/{w.run_id}/heldout/step_{s}.parquet" for s in steps if s]


def job_log(kind, name):
    """A compute job's `log:` (opd.dag.log_path: the CLI writes it, the command never names it)."""
    return dag.log_path(EXP, kind, name)
