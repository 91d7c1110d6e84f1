"""Launchers: run a job here (`local`) or on Slurm through submitit (`slurm`).

With Slurm the Snakemake rule runs locally and blocks until the submitted job ends. The job is
checkpointable: on a timeout or preemption signal submitit requeues it and it resumes from the run's
last checkpoint. A job that vanishes without a result (scancel, out of memory, node failure) is noticed
by polling `squeue`/`scontrol` ourselves (submitit alone would wait forever without Slurm accounting)
and fails within `dead_after_s` with the Slurm state and the tail of the job's log. A job that failed with
its node or was preempted is given the same `dead_after_s` to come back requeued before the rule fails.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Mapping

import submitit

from opd import training
from opd.spec import JobSpec, Launcher, Slurm, TrainSpec


class JobFailed(RuntimeError):
    pass


class CheckpointableTrain(submitit.helpers.Checkpointable):
    """The training job as submitit runs it, once per Slurm task: task 0 is the run (run.json, training,
    results), the others only serve it (training.train_worker; a multi-node verl run has one task per node).
    On timeout/preemption submitit's task 0 resubmits it with the same arguments (its other tasks neither
    checkpoint nor requeue: submitit/core/job_environment.py:207-211) and it resumes from the run's last
    checkpoint."""

    def __call__(self, spec: TrainSpec, run_dir: str) -> dict | None:
        env = submitit.JobEnvironment()
        if env.global_rank != 0:
            return training.train_worker(spec, run_dir)
        return training.train(spec, run_dir, "slurm", [str(env.job_id)])


def train_shape(spec: TrainSpec, slurm: Slurm) -> Slurm:
    """A training job's Slurm shape: the site's and the experiment's settings, and for the verl backend the
    nodes, GPUs and tasks its layout needs (opd.backends.verl.layout; not written separately)."""
    if spec.backend != "verl":
        return slurm
    from opd.backends.verl.layout import layout
    return slurm.with_(**layout(spec.verl, spec.row).slurm())


def run_train(spec: TrainSpec | Mapping, run_dir, launcher: Launcher | Mapping) -> dict:
    spec, launcher = TrainSpec.of(spec), Launcher.of(launcher)
    if launcher.launcher == "local":
        return training.train(spec, run_dir)
    check_present(spec, spec.run_id)
    return submit_and_wait(CheckpointableTrain(), (spec, str(run_dir)), Path(run_dir),
                           train_shape(spec, launcher.slurm), name=spec.run_id)


class CheckpointableJob(submitit.helpers.Checkpointable):
    """Any other job as submitit runs it: `fn(spec, out)`. On a timeout or preemption signal submitit calls
    checkpoint(), which (submitit.helpers.Checkpointable's) resubmits the same call, so the job is requeued
    instead of ending as timed out; the jobs that take hours keep their finished parts and a requeued
    attempt skips them (opd.backends.verl.evaluate: held-out responses, KV-attribution cases)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, spec: JobSpec, out: Path):
        return self.fn(spec, out)


def run_job(fn, spec: JobSpec, out: Path, launcher: Launcher):
    """Any other job (admission check, attribution, held-out evaluation, measurements): here, or as one
    single-node Slurm job (one GPU where the experiment's jobs have GPUs), requeued on timeout
    (CheckpointableJob), whose logs land in `<out's folder>/slurm/`."""
    if launcher.launcher == "local":
        return fn(spec, out)
    out = Path(out)
    check_present(spec, out.stem)
    return submit_and_wait(CheckpointableJob(fn), (spec, out), out.parent,
                           single_job_shape(spec.backend, launcher.slurm, spec.KIND), name=out.stem)


def single_job_shape(backend: str, slurm: Slurm, kind: str | None = None) -> Slurm:
    """The Slurm shape of a job that is one process: one node, one task, and for the verl backend one GPU
    (the vLLM engines of one student), with the CPUs, memory and time of its job kind (`slurm.jobs`, a
    JobSpec.KIND; config validation requires them for the verl backend's one-GPU jobs) in place of the
    experiment's, which size its training jobs (a verl training job's GPUs come from its layout: train_shape)."""
    return slurm.for_kind(kind).with_(nodes=1, tasks_per_node=1, **({"gpus_per_node": 1} if backend == "verl" else {}))


def check_present(spec: JobSpec, name: str) -> None:
    """Before a verl job is submitted (on the login node): every model it loads is a folder or in the local Hugging
    Face cache, and its data files exist; compute nodes are often offline, and a missing model would otherwise fail
    the job after it got its node (opd.backends.verl.site.presence_errors)."""
    if spec.backend != "verl" or getattr(spec, "student_spec", None) is None or getattr(spec, "verl", None) is None:
        return
    from opd.backends.verl.site import presence_errors
    errors = presence_errors(spec.student_spec, spec.verl)
    if errors:
        raise JobFailed(f"{name}: not submitted: " + "; ".join(errors))


def executor(folder: Path, slurm: Slurm, name: str) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=slurm.max_requeues)
    params = {"name": name, "timeout_min": slurm.time_min, "nodes": slurm.nodes, "tasks_per_node": slurm.tasks_per_node,
              "cpus_per_task": slurm.cpus_per_task, "mem_gb": slurm.mem_gb,
              "slurm_setup": [clear_earlier_results(folder), *slurm.setup]}
    if slurm.gpus_per_node:
        params["gpus_per_node"] = slurm.gpus_per_node
    if slurm.exclusive:
        params["slurm_exclusive"] = True
    if slurm.signal_delay_s is not None:  # Slurm's USR2 this long before the time limit (submitit's default: 90 s)
        params["slurm_signal_delay_s"] = int(slurm.signal_delay_s)
    for key in ("partition", "account", "qos"):
        if getattr(slurm, key):
            params[f"slurm_{key}"] = getattr(slurm, key)
    ex.update_parameters(**params)
    return ex


def clear_earlier_results(folder: Path) -> str:
    """The batch script's first line: remove every task's result file of an earlier attempt of this job. A job
    Slurm requeued after a node failed keeps its id, and submitit deletes no result file on a requeue: task 0's
    error of the failed attempt (written when Ray noticed the lost node: submitit/core/submission.py:58-65)
    would otherwise stand beside the new attempt's worker results, and submit_and_wait would re-raise it while
    the new attempt still runs. The batch script runs once per attempt, before srun starts any task, so no
    result of this attempt exists yet (removing them from task 0 raced a worker that had already finished:
    the tiny backend's workers return at once). Result files are submitit's `<job id>_<task>_result.pkl`, and
    the `.save_tmp` file an attempt killed while writing one leaves (submitit refuses to write over it)."""
    folder = shlex.quote(str(Path(folder).resolve()))
    return f'rm -f {folder}/"$SLURM_JOB_ID"_*_result.pkl {folder}/"$SLURM_JOB_ID"_*_result.pkl.save_tmp'


def slurm_state(job_id: str) -> str | None:
    """The job's state from squeue while it is known there, else from scontrol (kept for MinJobAge);
    None once Slurm has forgotten it."""
    r = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.strip():
        return r.stdout.split()[0]
    r = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
    for tok in r.stdout.split():
        if tok.startswith("JobState="):
            return tok.split("=", 1)[1]
    return None


ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
          "SUSPENDED", "STAGE_OUT", "SIGNALING"}
# Ended for good: the rule fails at the next poll. A job that failed with its node (NODE_FAIL) or was preempted
# may come back, requeued by Slurm (JobRequeue, --requeue), so such a job, like one Slurm no longer knows, is
# given dead_after_s to be seen active again.
FINAL = {"CANCELLED", "FAILED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "TIMEOUT"}


def submit_and_wait(fn, args: tuple, run_dir: Path, slurm: Slurm, name: str):
    if shutil.which("sbatch") is None:
        raise JobFailed("launcher: slurm needs sbatch on PATH (run on a Slurm login node)")
    folder = Path(run_dir) / "slurm"
    job = executor(folder, slurm, name).submit(fn, *args)
    print(f"{name}: submitted Slurm job {job.job_id}; logs in {folder}", flush=True)
    poll, dead_after = slurm.poll_s, slurm.dead_after_s
    gone_since = None
    while True:
        if _all_results(job):
            # a job of several tasks has a result per task (job.result() refuses it: submitit/core/core.py:266-268);
            # task 0's is the run's. Raises submitit's FailedJobError with the traceback if a task raised.
            return job.results()[0]
        state = slurm_state(job.job_id)
        if state in ACTIVE:
            gone_since = None
        else:
            gone_since = gone_since or time.monotonic()
            may_return = state is None or state in ("NODE_FAIL", "PREEMPTED")
            if time.monotonic() - gone_since >= (0 if state in FINAL else dead_after if may_return else poll):
                time.sleep(poll)  # the result files may land just after the state changes
                if _all_results(job):
                    return job.results()[0]
                if state is not None:  # it must not come back (a late requeue) and train with no rule waiting
                    subprocess.run(["scancel", job.job_id], capture_output=True)
                missing = [i for i in range(job.num_tasks) if not job.task(i).paths.result_pickle.exists()]
                raise JobFailed(f"{name}: Slurm job {job.job_id} ended without a result (state {state or 'unknown'}"
                                f"{f', not requeued within {dead_after} s' if state in ('NODE_FAIL', 'PREEMPTED') else ''}"
                                f"{'; no result from task(s) ' + str(missing) if job.num_tasks > 1 else ''})."
                                f"\n--- tail of {job.paths.stderr} ---\n{_tail(job.paths.stderr)}"
                                f"\n--- tail of {job.paths.stdout} ---\n{_tail(job.paths.stdout)}")
        time.sleep(poll)


def _all_results(job) -> bool:
    return all(job.task(i).paths.result_pickle.exists() for i in range(job.num_tasks))


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
