"""The DAG's job specs, built from the experiment (opd.spec.Experiment): one function per job kind, which the
rule files (workflow/rules/*.smk) call and whose result the rule writes to the job's spec file, its input.
A job depends only on that file, so a changed spec reruns exactly its job, and an unchanged one (a library
edit, a placement field, a new default) reruns nothing.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

from opd.rows import Row
from opd.spec import (AdmissionSpec, BaseSpec, Experiment, HeldoutSpec, JobSpec, KVAttributionSpec, MemoryBoundSpec,
                      PredictorSpec, Probes, Run, Settings, ThroughputSpec, TrainSpec, Verl, base_name, run_id,
                      spec_text)


def spec_path(out: str, spec: JobSpec) -> str:
    """Where a job's spec file lives: `<out>/_jobs/<kind>/<name>.json` (out: results/<experiment>)."""
    return f"{out}/_jobs/{spec.KIND}/{spec.name}.json"


def job_folder(out: str, spec: JobSpec) -> tuple[str, str] | None:
    """The folder a job's results live in and are kept by (opd.store: checked, set aside, restored), with its key in
    opd.store.inspect_all's findings: a run's (`runs/<run_id>`, keyed by the run id) or a student's base models'
    (`_models/<folder>`, `base models of <folder>`); None for a job whose output Snakemake replaces itself."""
    if spec.KIND == "train":
        return f"{out}/runs/{spec.run_id}", spec.run_id
    if spec.KIND == "base":
        return f"{out}/_models/{spec.name}", f"base models of {spec.name}"
    return None


MEASUREMENTS = ("admission", "predictors", "kv_attribution")  # the job kinds whose output is <kind>/<name>.parquet


def measurement_path(out: str, spec: JobSpec) -> str | None:
    """A measurement job's output (results/<experiment>/<kind>/<name>.parquet, which its rule writes), or None."""
    return f"{out}/{spec.KIND}/{spec.name}.parquet" if spec.KIND in MEASUREMENTS else None


def rerun_reasons(spec: JobSpec, path: str, found=None, damaged: str | None = None, base=None) -> list[str]:
    """Why a job must run although Snakemake would find its outputs up to date by their times: its spec file `path`
    holds another spec, or its folder holds a result that is not a sound one of this spec (`found`, an
    opd.store.Found: stale, damaged, incomplete), or its output is not readable (`damaged`: why), or the base models
    it reads are retrained (`base`, their Found: stale, damaged, incomplete or missing; a measurement's, whose spec
    names their files, not their spec - a run's spec holds theirs). [] when none of these; a missing spec file or
    missing outputs Snakemake sees itself."""
    reasons = []
    if os.path.exists(path):
        with open(path) as f:
            if f.read() != spec_text(spec.to_json(), path):
                reasons.append("spec changed")
    if found is not None and found.state in ("stale", "damaged", "incomplete"):
        reasons.append(f"{found.state}: " + "; ".join(found.problems))
    if damaged:
        reasons.append(f"damaged: {damaged}")
    if base is not None and base.reruns:
        reasons.append(f"its base models are {base.state}: retrained first")
    return reasons


def measured_base(spec: JobSpec) -> str | None:
    """The folder (opd.spec.base_name) of the base models a tiny-backend measurement reads (from its spec's
    student_path), None for any other job (a run's spec holds its base models' spec)."""
    path = getattr(spec, "student_path", None)
    return os.path.basename(os.path.dirname(path)) if path and spec.KIND != "train" else None


def rerun_marker(experiment: str, kind: str, name: str, reasons: list[str]) -> str:
    """A job's rerun marker (workflow/rules/jobs.smk: the one input of rule job_spec; the analysis's too): a file under
    .snakemake/opd/rerun/ (never results/). Where the job must rerun (`reasons`), it is rewritten now with them and the
    time: newer than the job's spec file and with content Snakemake has not recorded (it reruns a job for a newer
    input only if the input's checksum differs from the one it recorded), so Snakemake reruns job_spec; a missing file
    would not do (Snakemake 9 reruns a job for a missing input only where a job downstream runs anyway). Otherwise it is
    emptied with the oldest time there is (also where a dry run or a stopped run left it newer: it must not rerun a
    job whose reasons are gone), so it reruns nothing; it stays, so that the rule's set of inputs is always the same. One folder each: Snakemake reads the times of a folder's files at once, the first time
    it needs one, which may be before the input function that rewrites another one runs."""
    import time
    from pathlib import Path
    path = Path(f".snakemake/opd/rerun/{experiment}/{kind}/{name}/marker")
    path.parent.mkdir(parents=True, exist_ok=True)
    if reasons:
        path.write_text(f"{time.time_ns()}\n" + "".join(r + "\n" for r in reasons))
    elif not path.exists() or path.stat().st_mtime_ns != 0:  # a marker left newer (a dry run, a stopped run) reset
        path.write_text("")
        os.utime(path, (0, 0))
    return str(path)


# ---------------------------------------------------------------- what the analysis is computed from

def analysis_settings(e: Experiment) -> dict:
    """Every setting of the experiment the analysis reads besides its rows and runs (the analysis rule passes each
    as a parameter): what its record's `settings` hash covers."""
    return {"tau": e.tau, "taus": list(e.taus), "bootstrap": e.bootstrap.written(), "base_draws": e.base_draws,
            "sequential": e.sequential.written() if e.sequential else None, "admission": e.admission.written(),
            "rl_collapse": e.rl_collapse.written(), "infra": e.infra.written(), "train_lr": e.train.lr,
            "students": {n: s.written() for n, s in e.students.items()}, "backend": e.backend,
            "baseline": e.baseline.name}


def run_record(out: str, rid: str) -> str | None:
    """What identifies a complete run's content: the sha256 of its run.json (which records its files' sha256) and of
    any of its files it does not record (verl's held-out file, another rule's); None without a readable run.json."""
    from opd.provenance import sha256_file, sha256_text
    d = f"{out}/runs/{rid}"
    try:
        with open(f"{d}/run.json", "rb") as f:
            raw = f.read()
        recorded = set(json.loads(raw).get("files") or {})
    except (OSError, ValueError, AttributeError):
        return None
    extra = [sha256_file(f"{d}/{n}") for n in ("steps.parquet", "heldout.parquet")
             if n not in recorded and os.path.exists(f"{d}/{n}")]
    return sha256_text(raw.decode(errors="replace") + "".join(extra))


def settings_record(e: Experiment) -> str:
    from opd.provenance import sha256_text
    from opd.spec import dumps
    return sha256_text(dumps(analysis_settings(e)))


def analysis_inputs(tau: float, settings: dict, rows: list[dict], out: str, runs, measurements) -> dict:
    """The record of what an analysis is computed from, which verdicts.parquet carries in full and every other
    analysis file by its sha256 (record_reference) (opd.store's `inputs` metadata; verdicts.parquet also a `tau`
    column): tau; the sha256 of the settings (analysis_settings) and of the
    rows (as resolved: opd.spec.Experiment.resolved_row); each measurement file's sha256; each run's record
    (run_record, of the runs under `out`); and `sha256` over all of it. The analysis job makes it from its inputs; the DAG compares
    the one the files on disk hold with the one the inputs give now, to remake a stale analysis; `verdict` refuses a
    stale one."""
    from opd.provenance import sha256_file, sha256_text
    from opd.spec import dumps
    run_sha = {r: x for r in runs if (x := run_record(out, r)) is not None}
    rec = {"tau": tau, "settings": sha256_text(dumps(settings)), "rows": sha256_text(dumps(list(rows))),
           "measurements": {str(m): sha256_file(m) for m in sorted(map(str, measurements)) if os.path.exists(m)},
           "runs": dict(sorted(run_sha.items()))}
    return {**rec, "sha256": sha256_text(dumps(rec))}


def record_reference(record: dict) -> dict:
    """What every analysis file but verdicts.parquet carries of its analysis_inputs record: tau and the record's
    sha256, which name the one verdicts.parquet holds in full (the DAG and `verdict` read that one). The full record
    lists every run's and measurement's hash (56 kB on the toy), so it is written once, not in twenty files."""
    return {"tau": record["tau"], "sha256": record["sha256"], "full": "verdicts.parquet"}


def analysis_changes(recorded: dict | None, now: dict) -> list[str]:
    """How an analysis record differs from the one the inputs give now, in words ([] when it does not)."""
    if recorded is None:
        return ["it records no inputs (made before they were recorded)"]
    if recorded.get("sha256") == now["sha256"]:
        return []
    out = []
    if recorded.get("tau") != now["tau"]:
        out.append(f"tau {recorded.get('tau')} -> {now['tau']}")
    out += [f"{k} changed" for k in ("settings", "rows") if recorded.get(k) != now[k]]
    if recorded.get("measurements") != now["measurements"]:
        out.append("the admission checks changed")
    was, runs = recorded.get("runs") or {}, now["runs"]
    changed = [r for r in runs if r in was and was[r] != runs[r]]
    new, gone = [r for r in runs if r not in was], [r for r in was if r not in runs]
    for what, rs in (("changed", changed), ("new", new), ("no longer read", gone)):
        if rs:
            out.append(f"{len(rs)} run(s) {what} ({', '.join(rs[:3])}{', ...' if len(rs) > 3 else ''})")
    return out or ["its inputs changed"]


SPEC_CLASSES = {c.KIND: c for c in (BaseSpec, TrainSpec, AdmissionSpec, PredictorSpec, KVAttributionSpec,
                                     ThroughputSpec, MemoryBoundSpec, HeldoutSpec)}  # by the folder under _jobs/


def prepare_job(spec: JobSpec, path: str, folder: str | None, out: str) -> None:
    """rule job_spec (`python -m opd.cli prepare-job`): the job's folder made ready for it (opd.store.prepare: a
    result, current or stale, set aside under the spec it was computed from, since Snakemake deletes a job's outputs
    before it runs it; a damaged one quarantined; an incomplete one's outputs quarantined; `folder` None for a job
    whose outputs Snakemake replaces itself), then its spec file written
    (always: newer than the job's outputs and its rerun marker, so the job runs and the marker has done its work).
    What it did is printed (the rule's log)."""
    from pathlib import Path
    from opd import store
    if folder is not None:
        store.prepare(folder, spec, out, "base.json" if spec.KIND == "base" else "run.json",
                      log=lambda msg: print(msg, flush=True))
    text = spec_text(spec.to_json(), path)
    store.atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text))
    print(f"{path}: written")


def admission_line_path(experiment: str) -> str:
    """Where the DAG writes the experiment's admission line (alpha, L and the bootstrap settings) for the admission
    job's summary line: not a job input, so moving the line never reruns a check (opd.cli reads it)."""
    return f".snakemake/opd/admission-line-{experiment}.json"


def admission_line(e: Experiment) -> dict:
    """The admission line as admission_line_path's file holds it."""
    return {"experiment": e.name, "alpha": e.admission.alpha, "L": e.admission.L,
            "resamples": e.bootstrap.resamples, "seed": e.bootstrap.seed}


def base_paths(e: Experiment, models: str, student: str, draw: int = 0) -> dict[str, str]:
    """A tiny-backend student's checkpoint and its teacher's on base-model draw `draw`, under `models`
    (results/<experiment>/_models/<student>/, or <student>.d<draw>/ for a later draw: opd.spec.base_name); none
    for verl, whose models the config names."""
    if e.backend != "tiny":
        return {}
    folder = f"{models}/{base_name(student, draw)}"
    return {"student": f"{folder}/student.pt", "teacher": f"{folder}/teacher.pt"}


def base_record(models: str, student: str, draw: int = 0) -> str:
    """A student's base-model record on draw `draw` (base.json beside base_paths' weights): what they were trained
    from and the sha256 of each, written by the base-model job once its weights are."""
    return f"{models}/{base_name(student, draw)}/base.json"


def base_specs(e: Experiment) -> dict[str, BaseSpec]:
    """Every base-model job of a tiny experiment by its folder name (opd.spec.base_name): each student on each
    draw; none for verl."""
    if e.backend != "tiny":
        return {}
    return {b.name: b for b in (base_spec(e, s, d) for s in e.students for d in e.draws())}


def student_rank(e: Experiment) -> dict[str, int]:
    """Each student's rank by size (Student.params), smallest 0: the training jobs' priority, so the largest
    students' runs start first and the short ones fill the cores at the end."""
    return {s: i for i, s in enumerate(sorted(e.students, key=lambda s: e.students[s].params()))}


def _verl(e: Experiment, student: str, *, settings: bool = True) -> dict:
    """What a verl job adds to its spec: the student's spec (its models come from it), the verl settings and
    the experiment's training settings."""
    if e.backend != "verl":
        return {}
    return {"student_spec": e.students[student], "verl": e.verl or Verl(), **({"settings": e.train} if settings else {})}


def _needs(e: Experiment, value, name: str, job: str):
    if value is None:
        raise ValueError(f"experiment {e.name!r}, field {name!r}: the {job} needs it")
    return value


def base_spec(e: Experiment, student: str, draw: int = 0) -> BaseSpec:
    if e.backend != "tiny":
        raise ValueError(f"experiment {e.name!r}: the {e.backend} backend trains no base models")
    s = e.base_student(student, draw)
    return BaseSpec(experiment=e.name, backend=e.backend, task_seed=e.train.task_seed, student=student,
                    student_spec=s, draw=draw, eval_responses=e.train.eval_responses if s.converge else None)


def train_spec(e: Experiment, run: Run, base: dict[str, str], probes: Probes | None = None) -> TrainSpec:
    """A run's training job: the row's computed fields, the student on the run's base-model draw (base: that
    draw's base_paths), the run's settings, the resolved guard, and the probes where the mechanism stage probes
    the run."""
    return TrainSpec(experiment=e.name, backend=e.backend, run_id=run.run_id, row=Row.of(run.row.params()),
                     student=run.student, seed=run.seed, student_spec=e.base_student(run.student, e.draw_of(run.seed)),
                     settings=e.settings(run.row), student_path=base.get("student"), teacher_path=base.get("teacher"),
                     guard=e.guard(run.row), probes=probes, verl=(e.verl or Verl()) if e.backend == "verl" else None)


def probe_rows(e: Experiment) -> list[Row]:
    """The mechanism stage's probed rows (tiny backend; workflow/rules/mechanism.smk): the budget rows of the
    baseline, noise and staleness families that run the primary student (not a redrawn-direction noise row: the
    probes key on a fixed noise direction; not an edge's row, which exists only where the results take the
    bisection). A sequential row is probed on its first seed, seed 0 whatever the plan adds after it."""
    if e.backend != "tiny":
        return []
    return [r for r in e.rows if r.in_budget and r.family in ("baseline", "noise", "staleness")
            and not r.noise_redraw and e.primary in r.students_or(e.primary) and not e.is_edge_row(r)]


def probe_runs(e: Experiment) -> list[str]:
    """The probed runs: the primary student's first-seed run of each probed row."""
    return [run_id(r.name, e.primary, e.seeds_of(r, e.primary)[0]) for r in probe_rows(e)]


def probes(e: Experiment) -> Probes:
    """The probes' settings (opd.spec.Probes), the one place they are set; a probed run's spec holds them, so
    changing one retrains exactly the probed runs. 128 prompts x 2 responses: ~6,000 prefixes per set, where
    T / U repeats within ~15% over probe seeds (over probe seeds at step 0, S / U spreads up to 2.5x at sigma
    0.15: two extra seeds at the first and last step show it); probed at the runs' evaluation steps."""
    return Probes.of({"prompts": 128, "responses": 2, "probe_seed": 0, "extra_seeds": [1, 2], "sample_prefixes": 200,
                      "steps": e.train.eval_steps()})


def train_specs(e: Experiment, models: str) -> dict[str, TrainSpec]:
    """Every run's training spec by run id (models: results/<experiment>/_models): what the train rules write as
    each run's spec file, and what the cache check (opd.store.inspect_all) compares each run's run.json with."""
    probed, p = set(probe_runs(e)), probes(e)
    return {r.run_id: train_spec(e, r, base_paths(e, models, r.student, e.draw_of(r.seed)),
                                 p if r.run_id in probed else None)
            for r in e.runs()}


def _offline(e: Experiment, student: str, base: dict[str, str]) -> dict:
    return {"experiment": e.name, "backend": e.backend, "task_seed": e.train.task_seed, "student": student,
            "student_path": base.get("student"), "teacher_path": base.get("teacher")}


def admission_spec(e: Experiment, row: Row, student: str, base: dict[str, str]) -> AdmissionSpec:
    a = e.admission
    return AdmissionSpec(**_offline(e, student, base), row=Row.of(row.params()), prompts=a.prompts,
                         responses=a.responses, seed=a.seed, **_verl(e, student))


def predictor_spec(e: Experiment, row: Row, student: str, base: dict[str, str]) -> PredictorSpec:
    """A candidate engine's step-0 statistics: the probes' prompts and probe seed (probes), the admission check's
    seed for the engine's own randomness, a training run's steps as the run-horizon error's horizon."""
    if e.backend != "tiny":
        raise ValueError(f"experiment {e.name}: the step-0 predictor statistics are exact sums over the tiny "
                         f"backend's vocabulary; the {e.backend} backend has no such job (docs/methods.md)")
    p = probes(e)
    return PredictorSpec(**_offline(e, student, base), row=Row.of(row.params()), probes=p.with_(steps=(0,), extra_seeds=()),
                         seed=e.admission.seed, horizon=e.train.steps)


def kv_attribution_spec(e: Experiment, student: str, base: dict[str, str], recipes) -> KVAttributionSpec:
    k = e.kv_attribution
    return KVAttributionSpec(**_offline(e, student, base), recipes=tuple(recipes), prompts=k.prompts,
                             responses=k.responses, seed=e.admission.seed, **_verl(e, student))


def throughput_spec(e: Experiment, student: str, base: dict[str, str], ks) -> ThroughputSpec:
    return ThroughputSpec(**_offline(e, student, base), seed=0, ks=tuple(ks), settings=e.train,
                          steps=_needs(e, e.infra.throughput_steps, "infra.throughput_steps", "throughput measurement"),
                          **_verl(e, student, settings=False))


def memory_bound_spec(e: Experiment, student: str, base: dict[str, str]) -> MemoryBoundSpec:
    job = "memory-bound measurement"
    return MemoryBoundSpec(**_offline(e, student, base),
                           batches=_needs(e, e.infra.memory_bound_batches, "infra.memory_bound_batches", job),
                           kv_budget_sequences=_needs(e, e.infra.kv_budget_sequences, "infra.kv_budget_sequences", job),
                           **_verl(e, student))


def log_path(experiment: str, kind: str, name: str) -> str:
    """Where a compute job (`python -m opd.cli <job> --spec ...`) writes its log: `logs/<experiment>/<kind>/<name>.log`,
    from its spec's experiment, KIND and name. The CLI writes it itself (opd.cli), and the job's rule declares the
    same path as its `log:` (workflow/rules/*.smk call this function with the rule's wildcards), so the rule's
    command text, which Snakemake reruns a job for when it changes, never names it."""
    return f"logs/{experiment}/{kind}/{name}.log"


def spec_log_path(spec: JobSpec) -> str:
    """log_path of a job's spec."""
    return log_path(spec.experiment, spec.KIND, spec.name)


# ---------------------------------------------------------------- `snakemake figures`: the results that exist

@dataclass(frozen=True)
class Scope:
    """What the DAG's analysis and outputs are built from. For `snakemake` (every other target) that is every run
    and measurement of the experiment, trained or measured where missing. For `snakemake figures` it is only the
    results that exist, so that it never trains or measures (on Slurm a training job is GPU-hours): the complete
    runs (their run.json says so), the rows with one at least, and the measurement files present; `left_out`
    says what was left out and which target would make it."""
    runs: tuple[str, ...]
    rows: tuple[str, ...]
    existing_only: bool = False
    exists: Callable[[str], bool] = field(default=lambda path: True, compare=False, repr=False)
    left_out: tuple[str, ...] = ()

    def has(self, path: str) -> bool:
        """Whether a compute job's output is in scope: always, except for `figures` where it must exist."""
        return not self.existing_only or self.exists(path)

    def all_in(self, paths) -> bool:
        return all(self.has(p) for p in paths)

    def experiment(self, experiment: dict) -> dict:
        """The experiment as config.yaml writes it, cut to the rows in scope, each with the seeds it has runs
        of: what opd.outputs.selected decides the outputs from."""
        if not self.existing_only:
            return experiment
        seeds: dict[str, set[int]] = {}
        for r in self.runs:
            row, _, seed = r.split(".")
            seeds.setdefault(row, set()).add(int(seed[1:]))
        return {**experiment, "rows": [{**r, "seeds": sorted(seeds[r["name"]])} for r in experiment["rows"]
                                       if r["name"] in self.rows]}


def scope(e: Experiment, out: str, existing_only: bool, exists: Callable[[str], bool] | None = None,
          current: Callable[[str], bool] | None = None) -> Scope:
    """The Scope of a DAG (existing_only: the target is `figures`). A run is there when `current(run_id)` says so
    (the DAG's: the cache check found it complete, sound and computed from its spec now; by default, when its
    run.json says complete: opd.store.is_complete), so `figures` never retrains a stale or damaged run."""
    from opd import store
    runs = e.runs()
    if not existing_only:
        return Scope(tuple(r.run_id for r in runs), tuple(r.name for r in e.rows))
    current = current or (lambda rid: store.is_complete(f"{out}/runs/{rid}"))
    done = [r for r in runs if current(r.run_id)]
    rows = tuple(r.name for r in e.rows if any(d.name == r.name for d in done))
    if e.baseline.name not in rows:
        raise ValueError(f"experiment {e.name!r}: `snakemake figures` builds from the results that exist, and the "
                         f"baseline row {e.baseline.name!r} has none; `snakemake -c 2` trains it")
    left_out = []
    for r in e.rows:
        missing = [m.run_id for m in runs if m.name == r.name and m not in done]
        if missing:
            targets = " ".join(f"{out}/runs/{m}/run.json" for m in missing)
            what = "left out, no run has results" if r.name not in rows else f"{len(missing)} run(s) left out"
            left_out.append(f"row {r.name!r} {what} ({', '.join(missing)}); to train them: `snakemake -c 2 {targets}`")
    return Scope(tuple(d.run_id for d in done), rows, True, exists or os.path.exists, tuple(left_out))
# ---- the verl backend's held-out evaluation: its own jobs (the tiny backend's training job evaluates itself)

HELDOUT_SETTINGS = ("eval_responses", "temperature", "max_prompt_length", "max_response_length")


def _heldout_settings(s: Settings) -> Settings:
    """What the held-out evaluation reads of a run's settings (and nothing else, so a row's learning rate or
    step count never reruns the student's step-0 evaluation)."""
    return Settings().with_(**{k: getattr(s, k) for k in HELDOUT_SETTINGS})


def _heldout_verl(v: Verl) -> Verl:
    """What the held-out evaluation reads of the verl settings: the data and the standalone engine's arguments (a
    changed layout, logger or speculative setting reruns no evaluation)."""
    return Verl().with_(data=v.data, engine=dict(v.engine))


def heldout_base_spec(e: Experiment, student: str) -> HeldoutSpec:
    """The student's own held-out evaluation (step 0), shared by every run of the student: the evaluation's draw
    depends on the step alone (common random numbers across rows and seeds), and no row changes the student."""
    return HeldoutSpec(experiment=e.name, backend=e.backend, student=student, student_spec=e.students[student],
                       settings=_heldout_settings(e.train), verl=_heldout_verl(e.verl or Verl()), step=0)


def heldout_spec(train: TrainSpec, step: int, run_dir: str) -> HeldoutSpec:
    """The held-out evaluation of a run (its training spec; its folder `run_dir`) at `step`: the student as given
    at step 0 (equal to heldout_base_spec's), else the run's weights after `step` updates, from verl's checkpoint
    of that step in the run folder (plan.schedule names it) merged into `<run_dir>/hf/step_<step>`."""
    from opd.backends.verl.plan import CHECKPOINTS, schedule
    common = dict(experiment=train.experiment, backend=train.backend, student=train.student,
                  student_spec=train.student_spec, settings=_heldout_settings(train.settings),
                  verl=_heldout_verl(train.verl),
                  step=step)
    if step == 0:
        return HeldoutSpec(**common)
    ckpt = schedule(train.settings, train.row.staleness).checkpoint(step)
    return HeldoutSpec(**common, run_id=train.run_id, checkpoint=f"{run_dir}/{CHECKPOINTS}/global_step_{ckpt}/actor",
                       merged=f"{run_dir}/hf/step_{step}")
