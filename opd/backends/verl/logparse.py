"""verl's JSONL file logger (one `{"step": n, "data": {metric: value}}` per line) as steps.parquet.

Mapping (verl 0.9 metric names):
  d_n               rollout_corr/kl (decoupled rollout correction: mean of log q - log p_theta)
  step_s            timing_s/step        rollout_s   timing_s/gen        train_s    timing_s/update_actor
  teacher_s         timing_s/teacher if logged, else NaN (not measured): verl 0.9 has no teacher timer; its
                    agent loop asks the teacher servers for log-probs inside generation, so that time is in rollout_s
  weight_sync_s     timing_s/update_weights, else timing_s/param_sync (fully async)
  wait_s            timing_s/wait_for_enough_samples (fully async), else timing_s/gen (synchronous: the
                    trainer waits for the whole rollout)
  loss, grad_norm, entropy   actor/pg_loss, actor/grad_norm, actor/entropy
  response_len_mean response_length/mean      reward_mean  critic/score/mean
  n_tokens, trained_tokens   round(response_length/mean x responses per step): an estimate, said so here
  policy_version    the step; engine_version  fully_async/count/current_param_version at sampling, else the step
  seq_logratio_p90  not logged by verl: NaN
Validation-only lines (no rollout_corr/kl) are skipped. verl's file logger truncates its file when it
starts, so each attempt of a run (a requeued job resumes from verl's last checkpoint) logs to its own
file, `verl.<attempt>.jsonl` (`attempt_log`); `parse` reads them in attempt order and a step logged
again after a resume keeps its last record, so every step appears exactly once.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from opd import store


def attempt_log(run_dir: Path) -> Path:
    """The log file for a new attempt of the run in run_dir: verl.0.jsonl, verl.1.jsonl, ..."""
    return Path(run_dir) / f"verl.{len(attempt_logs(run_dir))}.jsonl"


def attempt_logs(run_dir: Path) -> list[Path]:
    """Every attempt's log in run_dir, in attempt order."""
    logs = Path(run_dir).glob("verl.*.jsonl")
    return sorted((p for p in logs if p.name.split(".")[1].isdigit()), key=lambda p: int(p.name.split(".")[1]))


def parse(jsonl: Path | list[Path], run_id: str, config: str, student: str, seed: int,
          responses_per_step: int) -> pd.DataFrame:
    """steps.parquet's rows from one log or from a run's attempt logs (in attempt order)."""
    records = {}
    for path in [jsonl] if isinstance(jsonl, (str, Path)) else jsonl:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                d = rec["data"]
                if "rollout_corr/kl" not in d:
                    continue
                records[int(rec["step"])] = d
    rows = []
    for step in sorted(records):
        d = records[step]
        g = lambda k, default=math.nan: float(d.get(k, default))  # noqa: E731
        tokens = int(round(g("response_length/mean", 0.0) * responses_per_step))
        engine_version = int(d.get("fully_async/count/current_param_version", step))
        asynchronous = "timing_s/wait_for_enough_samples" in d
        rows.append({
            "run_id": run_id, "config": config, "student": student, "seed": seed, "step": step,
            "d_n": g("rollout_corr/kl"), "seq_logratio_p90": math.nan, "n_tokens": tokens, "trained_tokens": tokens,
            "step_s": g("timing_s/step"), "rollout_s": g("timing_s/gen", 0.0), "teacher_s": g("timing_s/teacher"),
            "train_s": g("timing_s/update_actor", 0.0),
            "weight_sync_s": g("timing_s/update_weights", g("timing_s/param_sync", 0.0)),
            "wait_s": g("timing_s/wait_for_enough_samples") if asynchronous else g("timing_s/gen", 0.0),
            "staleness": step - engine_version, "policy_version": step, "engine_version": engine_version,
            "loss": g("actor/pg_loss"), "grad_norm": g("actor/grad_norm"), "entropy": g("actor/entropy"),
            "response_len_mean": g("response_length/mean"), "reward_mean": g("critic/score/mean"),
        })
    if not rows:
        raise ValueError(f"{jsonl}: no training steps (no line with rollout_corr/kl)")
    return pd.DataFrame(rows)


def write_steps(jsonl: Path | list[Path], out: Path, **ids) -> pd.DataFrame:
    df = parse(jsonl, **ids)
    store.write_table(df, out, store.STEPS)
    return df
