"""What a verl experiment will ask of the cluster before it runs: each job kind's Slurm request, the plan's
GPU-hours (per-phase times: estimates until measured, replaced by `--times`, which takes what
benchmarks/verl_smoke.py prints) with what requeues lose, and the checkpoints' disk (checkpoints.disk).
`python -m opd.backends.verl cost` prints it; benchmarks/cluster_cost.py compares it with the earlier design."""
from __future__ import annotations

import math

from opd.spec import Experiment, Slurm

from .checkpoints import disk
from .layout import layout
from .plan import ONE_GPU_JOBS, attention_mask_gib, schedule

REFERENCE = "r1-7b"  # the student issue #28's estimates are for
# (value for the reference student, source); every value an estimate until measured
ESTIMATES = {
    "train_h": (6.0, "estimate, issue #28: about 6 h of training (200 steps) for the 7B student"),
    "eval_step_h": (4.0 / 6, "estimate, issue #28: 3-5 h for 6 evaluated steps x 2,120 responses on one GPU "
                             "(generation, then two transformers models scoring); midpoint 4 h / 6 steps"),
    "eval_job_start_h": (5 / 60, "estimate: a fresh 1-GPU job loads one vLLM engine and two scorers (~5 min)"),
    "merge_h": (3 / 60, "estimate: verl.model_merger of one FSDP checkpoint to a Hugging Face folder (~3 min)"),
    "train_restart_h": (10 / 60, "estimate: a requeued training job restarts Ray and verl and resumes (~10 min)"),
    "kv_case_h": (8.0 / 57, "estimate, issue #28: 7-9 h for the 57 cases of a 28-layer 7B student (midpoint 8 h)"),
    "kv_restart_h": (5 / 60, "estimate: a requeued attribution job restarts its engines (~5 min)"),
    "admission_h": (0.25, "estimate: 16 prompts x 2 responses, a candidate and a reference engine (~15 min)"),
}
PER_TOKEN = ("train_h", "eval_step_h", "kv_case_h", "admission_h")  # scaled by parameter count


def scaled(key: str, student: str, e: Experiment, times: dict) -> float:
    """A phase's hours for `student`: measured (`times[key][student]`, or `times[key]["*"]` for every student)
    where given, else the reference student's estimate scaled by parameter count for the per-token phases."""
    given = times.get(key, {})
    if student in given or "*" in given:
        return float(given.get(student, given.get("*")))
    value = ESTIMATES[key][0]
    if key in PER_TOKEN and REFERENCE in e.students:
        value *= e.students[student].params() / e.students[REFERENCE].params()
    return value


def attempts(work_h: float, limit_h: float, restart_h: float, lost_h: float = 0.0) -> tuple[float, int]:
    """(hours allocated, attempts) to do `work_h` in jobs of at most `limit_h`, each requeued attempt paying
    `restart_h` of start-up and each cut losing `lost_h` of work done after its last save (trained again)."""
    if work_h <= limit_h:
        return work_h, 1
    hours, left, n = limit_h, work_h - (limit_h - lost_h), 1
    if limit_h - lost_h - restart_h <= 0:
        return math.inf, 1
    while left > 0:
        n += 1
        step = min(limit_h, left + restart_h)
        hours += step
        left -= step - restart_h - (lost_h if step == limit_h else 0)
    return hours, n


def requeue_loss_h(e: Experiment, run, times: dict) -> float:
    """Training hours a cut attempt loses: k = 0, up to verl.resume_every steps (half on average); k > 0, the
    step in flight at verl's deadline save (one step, plus its margin)."""
    steps = e.settings(run.row).steps
    step_h = scaled("train_h", run.student, e, times) / steps
    if run.row.staleness:
        return step_h * run.row.staleness + 120 / 3600
    every = schedule(e.settings(run.row), 0, e.verl.resume_every).save_freq
    return step_h * every / 2


def requests(e: Experiment) -> list[dict]:
    """Each job kind's Slurm request: training per layout (nodes x GPUs, whole nodes), the one-GPU kinds with
    their own sizes (slurm.jobs)."""
    out, seen = [], set()
    for run in e.runs():
        lay = layout(e.verl, run.row)
        shape = lay.slurm()
        key = ("train", shape["nodes"])
        if key in seen:
            continue
        seen.add(key)
        s = e.slurm.with_(**shape)
        out.append({"kind": f"train ({'k > 0' if run.row.staleness else 'RL' if run.row.algorithm != 'opd' else 'k = 0'})",
                    "nodes": s.nodes, "gpus": s.nodes * s.gpus_per_node, "cpus": s.nodes * s.cpus_per_task,
                    "mem_gb": s.nodes * s.mem_gb, "time_min": s.time_min, "exclusive": True})
    for kind in ONE_GPU_JOBS:
        s = e.slurm.for_kind(kind)
        out.append({"kind": kind, "nodes": 1, "gpus": 1, "cpus": s.cpus_per_task, "mem_gb": s.mem_gb,
                    "time_min": s.time_min, "exclusive": False})
    return out


def gpu_hours(e: Experiment, times: dict | None = None) -> dict:
    """GPU-hours per phase of this design (training jobs end with training; one-GPU evaluation, attribution and
    admission jobs of their own sizes), requeues included, and what the requeues lose."""
    times = times or {}
    out = {"training": 0.0, "  of which requeue loss": 0.0, "held-out evaluation": 0.0, "KV attribution": 0.0,
           "admission": 0.0}
    limit = e.slurm.time_min / 60
    students = set()
    for run in e.runs():
        gpus = layout(e.verl, run.row).gpus
        train = scaled("train_h", run.student, e, times)
        lost = requeue_loss_h(e, run, times)
        hours, n = attempts(train, limit, scaled("train_restart_h", run.student, e, times), lost)
        out["training"] += hours * gpus
        out["  of which requeue loss"] += (n - 1) * (lost + scaled("train_restart_h", run.student, e, times)) * gpus
        steps = e.settings(run.row).eval_steps()
        start = scaled("eval_job_start_h", run.student, e, times)
        out["held-out evaluation"] += sum(scaled("eval_step_h", run.student, e, times) + start
                                          + scaled("merge_h", run.student, e, times) for s in steps if s)
        if 0 in steps and run.student not in students:
            out["held-out evaluation"] += scaled("eval_step_h", run.student, e, times) + start
        students.add(run.student)
    from opd.quant import kv_attribution_cases
    kv_limit = e.slurm.for_kind("kv_attribution").time_min / 60
    recipes = {r.kv_cache for r in e.rows if r.kv_cache != "none"}
    for s in sorted({s for r in e.rows if r.kv_cache != "none" for s in r.students_or(e.primary)}):
        start = scaled("kv_restart_h", s, e, times)
        work = start + len(kv_attribution_cases(e.students[s].layers, parts=("kv",))) * len(recipes) * scaled(
            "kv_case_h", s, e, times)
        out["KV attribution"] += attempts(work, kv_limit, start, scaled("kv_case_h", s, e, times) / 2)[0]
    for r in e.rows:
        if r.admission_checked:
            out["admission"] += sum(scaled("admission_h", s, e, times) for s in r.students_or(e.primary))
    return out


def total(phases: dict) -> float:
    return sum(v for k, v in phases.items() if not k.startswith(" "))


def disk_summary(e: Experiment, in_flight: int = 8) -> dict:
    """The checkpoints' disk in TB: per run at its peak, the sum of every run's peak (all at once: an upper bound),
    the `in_flight` largest peaks (the runs in flight at once, slurm/profile.yaml's slurm_jobs), and with
    verl.keep_checkpoints true for comparison."""
    peaks, keep = [], []
    for run in e.runs():
        d = disk(e.students[run.student], e.settings(run.row), run.row.staleness, e.verl)
        k = disk(e.students[run.student], e.settings(run.row), run.row.staleness, e.verl.with_(keep_checkpoints=True))
        peaks.append((d.peak / 1e12, run.run_id))
        keep.append(k.after / 1e12)
    peaks.sort(reverse=True)
    return {"largest_run": peaks[0], "all_runs_tb": sum(p for p, _ in peaks),
            "in_flight_tb": sum(p for p, _ in peaks[:in_flight]), "in_flight": in_flight,
            "kept_all_tb": sum(keep), "retention": not e.verl.keep_checkpoints}


def measured_note(e: Experiment, times: dict) -> str:
    """Which phases `times` measured, and for which of the experiment's students they count ('*': every one; a
    student the experiment lacks, such as the smoke's toy, is named as not applied)."""
    parts = []
    for k in (k for k in ESTIMATES if k in times):
        used = [s for s in times[k] if s == "*" or s in e.students]
        unused = [s for s in times[k] if s not in used]
        why = f"{', '.join(unused)}: not a student of {e.name}"
        parts.append(f"{k} for {', '.join(used)}" + (f" ({why})" if unused else "") if used else
                     f"{k} not applied ({why})")
    return ("measured: " + "; ".join(parts) + "; the rest estimates") if parts else \
        "estimates: no phase measured on a GPU yet"


def report(e: Experiment, times: dict | None = None) -> str:
    """The printed plan: requests per job kind, GPU-hours, disk, attention-mask memory."""
    lines = [f"{e.name}: {len(e.runs())} runs; Slurm requests per job kind", "",
             "| job kind | nodes | GPUs | CPUs | memory (GB) | time limit | whole nodes |", "|---|---|---|---|---|---|---|"]
    for r in requests(e):
        lines.append(f"| {r['kind']} | {r['nodes']} | {r['gpus']} | {r['cpus']} | {r['mem_gb']:g} | "
                     f"{r['time_min'] / 60:g} h | {'yes' if r['exclusive'] else 'no'} |")
    h = gpu_hours(e, times)
    lines += ["", f"GPU-hours ({measured_note(e, times or {})})", ""]
    lines += [f"| {k:<26} | {v:8.0f} |" for k, v in h.items()]
    lines.append(f"| {'total':<26} | {total(h):8.0f} |")
    d = disk_summary(e)
    lines += ["", f"checkpoint disk ({'retention on' if d['retention'] else 'verl.keep_checkpoints: every checkpoint kept'}): "
              f"largest run {d['largest_run'][0]:.2f} TB ({d['largest_run'][1]}); {d['in_flight']} runs in flight "
              f"{d['in_flight_tb']:.1f} TB; every run at its peak at once {d['all_runs_tb']:.1f} TB; "
              f"with every checkpoint kept {d['kept_all_tb']:.1f} TB"]
    m = attention_mask_gib(e.train, e.verl.attention)
    lines.append(f"attention mask ({e.verl.attention}) per micro-batch: {m['update']:.1f} GiB in the update, "
                 f"{m['log_prob']:.1f} GiB in the log-prob recompute" + (
                     " (flash_attention_2 builds none: docs/cluster.md)" if e.verl.attention == "sdpa" else ""))
    return "\n".join(lines)
