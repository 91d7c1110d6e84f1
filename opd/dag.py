"""The DAG's job specs, built from the experiment (opd.spec.Experiment): one function per job kind, which the
rule files (workflow/rules/*.smk) call and whose result the rule writes to the job's spec file, its input.
A job depends only on that file, so a changed spec reruns exactly its job, and an unchanged one (a library
edit, a placement field, a new default) reruns nothing.
"""
from __future__ import annotations

from opd.rows import Row
from opd.spec import (AdmissionSpec, BaseSpec, Experiment, HeldoutSpec, JobSpec, KVAttributionSpec, MemoryBoundSpec,
                      Probes, Run, Settings, ThroughputSpec, TrainSpec, Verl)


def spec_path(out: str, spec: JobSpec) -> str:
    """Where a job's spec file lives: `<out>/_jobs/<kind>/<name>.json` (out: results/<experiment>)."""
    return f"{out}/_jobs/{spec.KIND}/{spec.name}.json"


def admission_line_path(experiment: str) -> str:
    """Where the DAG writes the experiment's admission line (alpha, L and the bootstrap settings) for the admission
    job's summary line: not a job input, so moving the line never reruns a check (opd.cli reads it)."""
    return f".snakemake/opd/admission-line-{experiment}.json"


def admission_line(e: Experiment) -> dict:
    """The admission line as admission_line_path's file holds it."""
    return {"experiment": e.name, "alpha": e.admission.alpha, "L": e.admission.L,
            "resamples": e.bootstrap.resamples, "seed": e.bootstrap.seed}


def base_paths(e: Experiment, models: str, student: str) -> dict[str, str]:
    """A tiny-backend student's checkpoint and its teacher's under `models` (results/<experiment>/_models);
    none for verl, whose models the config names."""
    if e.backend != "tiny":
        return {}
    return {"student": f"{models}/{student}/student.pt", "teacher": f"{models}/{student}/teacher.pt"}


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


def base_spec(e: Experiment, student: str) -> BaseSpec:
    if e.backend != "tiny":
        raise ValueError(f"experiment {e.name!r}: the {e.backend} backend trains no base models")
    return BaseSpec(experiment=e.name, backend=e.backend, task_seed=e.train.task_seed, student=student,
                    student_spec=e.students[student])


def train_spec(e: Experiment, run: Run, base: dict[str, str], probes: Probes | None = None) -> TrainSpec:
    """A run's training job: the row's computed fields, the run's settings, the resolved guard, and the probes
    where the mechanism stage probes the run."""
    return TrainSpec(experiment=e.name, backend=e.backend, run_id=run.run_id, row=Row.of(run.row.params()),
                     student=run.student, seed=run.seed, student_spec=e.students[run.student],
                     settings=e.settings(run.row), student_path=base.get("student"), teacher_path=base.get("teacher"),
                     guard=e.guard(run.row), probes=probes, verl=(e.verl or Verl()) if e.backend == "verl" else None)


def _offline(e: Experiment, student: str, base: dict[str, str]) -> dict:
    return {"experiment": e.name, "backend": e.backend, "task_seed": e.train.task_seed, "student": student,
            "student_path": base.get("student"), "teacher_path": base.get("teacher")}


def admission_spec(e: Experiment, row: Row, student: str, base: dict[str, str]) -> AdmissionSpec:
    a = e.admission
    return AdmissionSpec(**_offline(e, student, base), row=Row.of(row.params()), prompts=a.prompts,
                         responses=a.responses, seed=a.seed, **_verl(e, student))


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
