"""GPU-hours of the paper experiment on a Slurm cluster, today's job design against the new one (issue #28).

Before: the held-out evaluation ran inside each training job, on one GPU of the run's allocation (8 GPUs for
k = 0, 12 for k > 0) while the others waited, and wrote heldout.parquet once at the end, so a job cut by its
time limit restarted the whole evaluation; the KV attribution was one 1-GPU job per student with one output
written at the end, which a time limit ended with nothing kept.
Now (workflow/rules/verl_eval.smk, opd.backends.verl.evaluate): the training job ends with training; each
evaluated step is a 1-GPU job (the student's step 0 once per student), and the KV attribution keeps one part
per case and is requeued on its time limit.

Every number comes from the experiment (runs, students, layout -> GPUs per run, evaluated steps, the Slurm time
limit: opd.spec.Experiment) and from per-phase times. No phase has been measured on a GPU yet: the times below
are ESTIMATES, each with its source (issue #28's estimates for the 7B student, scaled to the other students by
their parameter count, which over-states the smaller students' speed: their GPUs are less busy). Pass measured
times as JSON with --times to replace any of them ({"train_h": {"r1-7b": 5.5}, "eval_step_h": {...}, ...}).

Run: python benchmarks/cluster_cost.py [--experiment paper] [--times measured.json] [--json]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opd import config as C  # noqa: E402
from opd.backends.verl.layout import layout  # noqa: E402
from opd.quant import kv_attribution_cases  # noqa: E402
from opd.spec import Experiment  # noqa: E402

from opd.backends.verl import cost as C_  # noqa: E402  the design's own cost model: one home of the estimates

ESTIMATES, scaled = C_.ESTIMATES, C_.scaled


def attempts(work_h: float, limit_h: float, restart_h: float, keeps: bool) -> tuple[float, int]:
    """(hours allocated, attempts) to get `work_h` of work done in jobs of at most `limit_h` each, requeued with
    `restart_h` of set-up each time. keeps=False: a cut attempt loses its work (it has to fit in one attempt
    after the restart; inf when it cannot)."""
    if work_h <= limit_h:
        return work_h, 1
    if not keeps:
        return math.inf, 1
    hours, left, n = limit_h, work_h - limit_h, 1
    while left > 0:
        n += 1
        step = min(limit_h, left + restart_h)
        hours += step
        left -= step - restart_h
    return hours, n


OLD_EVAL_GPUS = 3  # before: the engine on GPU 0, the student and teacher scorers on GPUs 1 and 2 (issue #28)
IDLE = "  of which GPUs idle"  # allocated GPUs with nothing to do (a part of the evaluation's row above)


def costs(e: Experiment, times: dict | None = None) -> dict:
    times = times or {}
    limit_h = e.slurm.time_min / 60
    old = {"training": 0.0, "held-out evaluation": 0.0, IDLE: 0.0, "KV attribution": 0.0, "admission": 0.0}
    new = dict.fromkeys(old, 0.0)
    notes = []
    students = set()
    for run in e.runs():
        gpus = layout(e.verl, run.row).gpus
        steps = e.settings(run.row).eval_steps()
        train = scaled("train_h", run.student, e, times)
        step_h = scaled("eval_step_h", run.student, e, times)
        merge = scaled("merge_h", run.student, e, times)
        restart = scaled("train_restart_h", run.student, e, times)
        # before: one job, training then the evaluation of every step on one of its GPUs; checkpointable, but
        # the evaluation restarts from step 0 in each attempt (heldout.parquet written once, at the end)
        ev = len(steps) * step_h + (len(steps) - 1) * merge
        hours = train
        if train + ev <= limit_h:
            hours += ev
        else:  # the first attempt's evaluation is cut; the next attempt restarts and evaluates again from step 0
            train_h, n = attempts(train, limit_h, restart, keeps=True)
            done_in_last = train_h - limit_h * (n - 1)
            lost = limit_h - done_in_last
            hours = train_h + lost + restart + ev
            if restart + ev > limit_h:
                notes.append(f"{run.run_id}: before, the evaluation ({ev:.1f} h) never fits one attempt of "
                             f"{limit_h:.0f} h: the job never finishes")
        old["training"] += train * gpus
        old["held-out evaluation"] += (hours - train) * gpus
        old[IDLE] += (hours - train) * (gpus - min(gpus, OLD_EVAL_GPUS))
        # now: the training job ends with training; one 1-GPU job per later step; step 0 once per student
        new["training"] += attempts(train, limit_h, restart, keeps=True)[0] * gpus
        new["held-out evaluation"] += sum(step_h + merge + scaled("eval_job_start_h", run.student, e, times)
                                          for s in steps if s)
        if 0 in steps and run.student not in students:
            new["held-out evaluation"] += step_h + scaled("eval_job_start_h", run.student, e, times)
        students.add(run.student)
    kv_students = sorted({s for r in e.rows if r.kv_cache != "none" for s in r.students_or(e.primary)})
    for s in kv_students:
        n_cases = len(kv_attribution_cases(e.students[s].layers, parts=("kv",))) * len(
            {r.kv_cache for r in e.rows if r.kv_cache != "none"})
        start = scaled("kv_restart_h", s, e, times)  # each attempt starts its engines
        work = start + n_cases * scaled("kv_case_h", s, e, times)
        before, _ = attempts(work, limit_h, 0, keeps=False)
        if math.isinf(before):
            notes.append(f"KV attribution of {s}: before, {work:.1f} h of cases in one {limit_h:.0f}-h job with one "
                         f"output at the end: cut at the limit, nothing kept, and the rule fails ({limit_h:.0f} "
                         f"GPU-h spent per try)")
            before = limit_h
        old["KV attribution"] += before
        new["KV attribution"] += attempts(work, limit_h, start, keeps=True)[0]
    for r in e.rows:
        if r.in_budget and not r.staleness:
            for s in r.students_or(e.primary):
                old["admission"] += scaled("admission_h", s, e, times)
                new["admission"] += scaled("admission_h", s, e, times)
    # after: the design's own cost model (opd.backends.verl.cost), requeue loss and one-GPU job sizes included
    now = C_.gpu_hours(e, times)
    new = {"training": now["training"], "held-out evaluation": now["held-out evaluation"], IDLE: 0.0,
           "KV attribution": now["KV attribution"], "admission": now["admission"]}
    return {"before": old, "after": new, "notes": notes, "time_limit_h": limit_h, "requeue_loss": now[
            "  of which requeue loss"], "disk": C_.disk_summary(e),
            "runs": len(e.runs()), "sources": {k: v[1] for k, v in ESTIMATES.items() if k not in times}}


def total(phases: dict) -> float:
    return sum(v for k, v in phases.items() if k != IDLE)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default="paper")
    p.add_argument("--times", type=Path, default=None,
                   help="measured phase hours, JSON {phase: {student or '*': hours}}: what benchmarks/verl_smoke.py "
                        "writes (smoke-times.json), or your own")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    e = Experiment.of(C.load(), a.experiment)
    c = costs(e, json.loads(a.times.read_text()) if a.times else None)
    if a.json:
        print(json.dumps(c, indent=1))
        return 0
    print(f"{a.experiment}: {c['runs']} runs, Slurm time limit {c['time_limit_h']:.0f} h; GPU-hours "
          f"({C_.measured_note(e, json.loads(a.times.read_text()) if a.times else {})})\n")
    print(f"| {'phase':<30} | {'before':>9} | {'after':>9} |\n|{'-' * 32}|{'-' * 11}|{'-' * 11}|")
    for k in c["before"]:
        print(f"| {k:<30} | {c['before'][k]:9.0f} | {c['after'][k]:9.0f} |")
    tot = {w: total(c[w]) for w in ("before", "after")}
    print(f"| {'total':<30} | {tot['before']:9.0f} | {tot['after']:9.0f} |")
    print(f"\nsaved: {tot['before'] - tot['after']:.0f} GPU-h ({1 - tot['after'] / tot['before']:.0%})")
    print(f"requeue loss (after): {c['requeue_loss']:.0f} GPU-h of the training row (k = 0: half of verl.resume_every "
          f"steps per cut; k > 0: the step in flight at verl's deadline save)")
    d = c["disk"]
    print(f"checkpoint disk (after, {'retention' if d['retention'] else 'every checkpoint kept'}): largest run "
          f"{d['largest_run'][0]:.2f} TB, {d['in_flight']} runs in flight {d['in_flight_tb']:.1f} TB, every run at its "
          f"peak {d['all_runs_tb']:.1f} TB; with verl.keep_checkpoints {d['kept_all_tb']:.1f} TB")
    for n in c["notes"]:
        print(f"- {n}")
    print("\nsources:")
    for k, v in c["sources"].items():
        print(f"- {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
