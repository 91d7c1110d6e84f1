"""The mismatch guard's record (analysis stage), from the runs' steps and the verdicts alone: per guarded row
and student, its Delta against the baseline with the seed-aware interval and verdict next to the same engine
unguarded; the share of steps the cheap engine (the row's own) rolled out and got trained on (a step whose batch a
guard that rejects discarded counts as a fallback step: it was rolled out twice, and the action's batch trained
on); the guard's activations and rejected batches; inside
each guarded run, measured in one job: the cheap engine's tokens/s over the fallback's and the whole run's over
the fallback's, which are ratios to the standard engine where the fallback is the standard engine
(Row.guard_falls_back_to_standard); and the false alarms: each guard replayed over the standard engine's runs.

The throughput comparison is the in-run one. `cross_job_ratio` and `unguarded_cross_job_ratio` (the guarded and
unguarded runs' tokens/s over the standard engine's own runs) compare jobs that ran at different times under
different machine load, so they measure the load as much as the engine: they stay in guard.parquet as a record
and no table, figure or finding reads them."""
import numpy as np
import pandas as pd

from opd import derived, scripts, store
from opd.guard import GuardState
from opd.rows import Guard, Row


def tokens_per_s(st: pd.DataFrame) -> float:
    """Trained tokens per second of wall time per step, pooled over the steps given."""
    return float(st["trained_tokens"].sum() / st["step_s"].sum()) if len(st) else float("nan")


def per_run(st: pd.DataFrame) -> pd.DataFrame:
    """Per run: tokens/s, the share of its steps trained on the row's engine's batches, the guard's activations
    (spans started) and rejected batches (steps whose row-engine batch was discarded: guard-active steps, their wall
    time both rollouts'). The fallback's tokens/s is over the guard-active steps without a rejection (the
    action's engine alone); the whole run's includes the rejected batches' cost."""
    out = []
    for rid, s in st.sort_values("step").groupby("run_id"):
        active = s["guard_active"].to_numpy(bool)
        rejected = s["rejected_d_n"].notna().to_numpy()
        starts = int(np.sum(active & ~np.r_[False, active[:-1]]))
        out.append({"run_id": rid, "tokens_per_s": tokens_per_s(s), "cheap_share": float(1 - active.mean()),
                    "activations": starts, "rejected": int(rejected.sum()),
                    "cheap_tokens_per_s": tokens_per_s(s[~active]),
                    "fallback_tokens_per_s": tokens_per_s(s[active & ~rejected])})
    return pd.DataFrame(out)


def false_alarms(guard: Guard, baseline_steps: pd.DataFrame) -> tuple[int, float]:
    """The guard replayed over every standard-engine run given: activations in all, and the largest mean of
    d_n over its window (what the line must stay above)."""
    n, worst = 0, -np.inf
    for _, s in baseline_steps.sort_values("step").groupby("run_id"):
        g = GuardState.of(guard, 0, len(s))
        for step, d in zip(s["step"], s["d_n"]):
            g.observe(int(step), float(d))
        n += g.activations
        worst = max(worst, float(s["d_n"].rolling(guard.window).mean().max()))
    return n, worst


def guard_record(steps: pd.DataFrame, verdicts: pd.DataFrame, rows: list[Row], baseline: str,
                 guard_line: float) -> pd.DataFrame:
    """`guard_line`: what `d_max: budget` means (opd.spec.Experiment.guard_line)."""
    v = verdicts.set_index(["student", "config"])
    out = []
    for g in [r for r in rows if r.guard is not None]:
        plain = g.unguarded_in(rows)
        spec = g.guard.resolved(guard_line)
        for student in sorted(steps.loc[steps["config"] == g.name, "student"].unique()):
            base = steps[(steps["config"] == baseline) & (steps["student"] == student)]
            base_tps = per_run(base)["tokens_per_s"].mean()
            runs = per_run(steps[(steps["config"] == g.name) & (steps["student"] == student)])
            alarms, worst = false_alarms(spec, base)
            rec = {"student": student, "config": g.name, "unguarded": plain.name if plain else None,
                   "action": spec.action, "d_max": spec.d_max, "window": spec.window, "cooldown": spec.cooldown,
                   "flush": spec.flush, "reject": spec.reject, "n_runs": len(runs),
                   "cheap_share": runs["cheap_share"].mean(),
                   "activations": runs["activations"].mean(), "activations_max": int(runs["activations"].max()),
                   "rejected": runs["rejected"].mean(),
                   "tokens_per_s": runs["tokens_per_s"].mean(),
                   "cross_job_ratio": runs["tokens_per_s"].mean() / base_tps,
                   "cheap_over_fallback": (runs["cheap_tokens_per_s"] / runs["fallback_tokens_per_s"]).mean(),
                   "run_over_fallback": (runs["tokens_per_s"] / runs["fallback_tokens_per_s"]).mean(),
                   "fallback_is_standard": g.guard_falls_back_to_standard,
                   "baseline_alarms": alarms, "baseline_runs": base["run_id"].nunique(),
                   "baseline_max_window_d": worst}
            for prefix, name in (("", g.name), ("unguarded_", plain.name if plain else None)):
                have = name is not None and (student, name) in v.index
                for col in ("D", "delta", "ci_lo_seeds", "ci_hi_seeds", "verdict_seeds", "ci_lo", "ci_hi", "verdict"):
                    rec[prefix + col] = v.loc[(student, name), col] if have else None
            rec["D_over_d_max"] = rec["D"] / spec.d_max if rec["D"] is not None else float("nan")
            if plain is not None:
                u = per_run(steps[(steps["config"] == plain.name) & (steps["student"] == student)])
                rec["unguarded_tokens_per_s"] = u["tokens_per_s"].mean() if len(u) else float("nan")
                rec["unguarded_cross_job_ratio"] = rec["unguarded_tokens_per_s"] / base_tps
            out.append(rec)
    return pd.DataFrame(out)


def main(inp, out, params):
    steps = store.read_table(inp.steps)
    verdicts = store.read_table(inp.verdicts)
    rows = [Row.of(r) for r in params.rows]
    derived.write_table(guard_record(steps, verdicts, rows, params.baseline, params.guard_line), out[0])


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
