"""The DAG's job specs, built from the experiment (opd.spec.Experiment): one function per job kind, which the
rule files (workflow/rules/*.smk) call and whose result the rule writes to the job's spec file, its input.
A job depends only on that file, so a changed spec reruns exactly its job, and an unchanged one (a library
edit, a placement field, a new default) reruns nothing.
"""
from __future__ import annotations

from opd.rows import Row
from opd.spec import (AdmissionSpec, BaseSpec, Experiment, JobSpec, KVAttributionSpec, MemoryBoundSpec, Probes, Run,
                      ThroughputSpec, TrainSpec, Verl, run_id)


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


def probe_rows(e: Experiment) -> list[Row]:
    """The mechanism stage's probed rows (tiny backend; workflow/rules/mechanism.smk): the budget rows of the
    baseline, noise and staleness families that run the primary student."""
    if e.backend != "tiny":
        return []
    return [r for r in e.rows if r.in_budget and r.family in ("baseline", "noise", "staleness")
            and e.primary in r.students_or(e.primary)]


def probe_runs(e: Experiment) -> list[str]:
    """The probed runs: the primary student's first-seed run of each probed row."""
    return [run_id(r.name, e.primary, (r.seeds or e.seeds)[0]) for r in probe_rows(e)]


def probes(e: Experiment) -> Probes:
    """The probes' settings (opd.spec.Probes), the one place they are set; a probed run's spec holds them, so
    changing one retrains exactly the probed runs. 128 prompts x 2 responses: ~6,000 prefixes per set, where
    T / U repeats within ~15% over probe seeds (over probe seeds at step 0, S / U spreads up to 2.5x at sigma
    0.15: two extra seeds at the first and last step show it); probed at the runs' evaluation steps."""
    return Probes.of({"prompts": 128, "responses": 2, "probe_seed": 0, "extra_seeds": [1, 2], "sample_prefixes": 200,
                      "steps": e.train.eval_steps()})


def train_specs(e: Experiment, models: str) -> dict[str, TrainSpec]:
    """Every run's training spec by run id (models: results/<experiment>/_models): what the train rules write as
    each run's spec file, and what the cache check (opd.store.heal_runs) compares each run's run.json with."""
    probed, p = set(probe_runs(e)), probes(e)
    return {r.run_id: train_spec(e, r, base_paths(e, models, r.student), p if r.run_id in probed else None)
            for r in e.runs()}


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
