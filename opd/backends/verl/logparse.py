"""verl's JSONL file logger (one `{"step": n, "data": {metric: value}}` per line) as steps.parquet.
File:line are under the installed `verl` package (0.9.1).

Which steps a record covers. The synchronous trainer logs every optimizer step. The fully-async trainer
(k > 0) logs per parameter version: its MetricsAggregator averages (`avg`) or sums (`timing_s/*`) the
metrics of the steps since its last log (detach_utils.py:179-290), logged under the version number
(fully_async_trainer.py:806-809), and the step that triggers a weight sync joins the *next* record
(fully_async_trainer.py:600-605). So a record is keyed by `training/global_step` (aggregated as `last`: the
last optimizer step it covers) and covers the steps after the previous record's; for k > 0 steps.parquet
has one row per record, each with the token counts and times of all the steps it covers (columns stay
additive), and means (d_n, loss, ...) that are verl's averages over them.

Mapping:
  d_n               rollout_corr/kl + ppo_kl. rollout_corr/kl is the token mean of log q - log p_old over the
                    step's tokens (trainer/ppo/rollout_corr_helper.py:959); ppo_kl (actor/distillation/ppo_kl
                    for OPD, actor/ppo_kl for RL) is the mean of log p_old - log p_theta, p_theta the weights
                    being updated (trainer/ppo/core_algos.py:1336-1340). Synchronous runs: p_old = p_theta up
                    to numerics, ppo_kl ~ 0. k > 0: p_old is the weights the engine sampled with
                    (fully_async_trainer.py:654-674), ppo_kl is the staleness. verl averages ppo_kl over
                    micro-batches and ranks (workers/utils/losses.py:114-116, engine_workers.py:326-331), not
                    over tokens: the sum is exactly the paper's d_n when the micro-batches hold equal token
                    counts, otherwise the staleness term is weighted per micro-batch (README: "Known to differ").
  loss              actor/distillation/loss (OPD: the optimised policy-gradient loss, trainer/distillation/
                    losses.py:219-225; actor/pg_loss is the zeroed task-reward loss there, :212-217), else
                    actor/pg_loss
  step_s, train_s   timing_s/step, timing_s/update_actor (summed over the covered steps)
  rollout_s         synchronous: timing_s/gen. k > 0: fully_async/rollouter/active_time, the rollouter's
                    generating time for the version that ended (fully_async_rollouter.py:606-615; logged in
                    its own record under the same step, fully_async_trainer.py:783-786, merged here)
  teacher_s         timing_s/teacher if logged, else NaN (not measured): verl 0.9 has no teacher timer; its
                    agent loop asks the teacher servers for log-probs inside generation, so that time is in rollout_s
  weight_sync_s     timing_s/update_weights (synchronous), timing_s/timing_s/param_sync (k > 0: the timer is
                    named timing_s/param_sync and compute_timing_metrics prefixes it again,
                    fully_async_trainer.py:729); 0 when none of the covered steps synced
  wait_s            timing_s/gen: the synchronous trainer waits for the whole rollout; the async trainer's
                    `gen` timer is its wait on the sample queue (fully_async_trainer.py:646-648)
  entropy, grad_norm actor/entropy, actor/grad_norm
  response_len_mean response_length/mean      reward_mean  critic/score/mean
  n_tokens, trained_tokens   round(response_length/mean x responses per step x covered steps): an estimate
  staleness         k > 0: the largest, over the covered steps, of (step - 1) mod k, the updates between the
                    weights that sampled a step's batch and the ones it updates (staleness_threshold = 0: every
                    batch is sampled by the last synced weights), plus k when verl counted any trajectory a
                    version behind (fully_async/count/stale_trajectory_processed, cumulative); 0 synchronous.
                    An integer (store.STEPS); the covered steps' mean is (k - 1) / 2 for a full cycle
  policy_version    the last covered step; engine_version = policy_version - staleness
  seq_logratio_p90  not logged by verl: NaN
  engine, guard_active  with a guard: the weight-sync hook's decision for the step (`guard_log`, GUARD_LOG in
                    the run folder: the engine of the first step each sync serves, for the k steps it serves),
                    else the row's engine and False
  rejected_d_n      NaN: verl's guard cannot reject a batch (plan.errors refuses guard.reject), every batch it
                    samples is trained on
Validation-only lines are skipped. verl's file logger truncates its file when it starts, so each attempt of
a run (a requeued job resumes from verl's last checkpoint) logs to its own file, `verl.<attempt>.jsonl`
(`attempt_log`); `parse` reads them in attempt order and a step logged again after a resume keeps its last
record, so every step appears exactly once.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from opd import store
from opd.guard import ROW_ENGINE

STEP_KEY = "training/global_step"
STALE_KEY = "fully_async/count/stale_trajectory_processed"
VERSION_KEY = "fully_async/count/current_param_version"


def attempt_log(run_dir: Path) -> Path:
    """The log file for a new attempt of the run in run_dir: verl.0.jsonl, verl.1.jsonl, ..."""
    return Path(run_dir) / f"verl.{len(attempt_logs(run_dir))}.jsonl"


def attempt_logs(run_dir: Path) -> list[Path]:
    """Every attempt's log in run_dir, in attempt order."""
    logs = Path(run_dir).glob("verl.*.jsonl")
    return sorted((p for p in logs if p.name.split(".")[1].isdigit()), key=lambda p: int(p.name.split(".")[1]))


def training_records(paths: list[Path]) -> dict[int, dict]:
    """{last optimizer step covered: metrics} from the attempt logs, later attempts winning. A record
    without rollout_corr/kl that precedes a training record under the same logged step (the async
    rollouter's timing) is merged into it; validation lines are dropped."""
    records = {}
    for path in paths:
        pending: dict[int, dict] = {}
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                d, logged = rec["data"], int(rec["step"])
                if "rollout_corr/kl" not in d:
                    if not any(k.startswith("val-") for k in d):
                        pending.setdefault(logged, {}).update(d)
                    continue
                records[int(d.get(STEP_KEY, logged))] = {**pending.pop(logged, {}), **d, "_file": str(path)}
    return records


def pg_kl_key(d: dict) -> str:
    """The policy loss's log p_old - log p_theta key in a training record (OPD's, else PPO's)."""
    return "actor/distillation/ppo_kl" if "actor/distillation/ppo_kl" in d else "actor/ppo_kl"


def d_n_of(d: dict) -> float:
    """A training record's d_n: rollout_corr/kl (log q - log p_old) + ppo_kl (log p_old - log p_theta)."""
    return float(d["rollout_corr/kl"]) + float(d[pg_kl_key(d)])


def d_n_by_step(paths: list[Path]) -> dict[int, float]:
    """{step: d_n} of every training record logged so far that has both parts (what the guard watches)."""
    return {step: d_n_of(d) for step, d in training_records(paths).items() if pg_kl_key(d) in d}


def guard_engines(guard_log: Path | None, staleness: int) -> dict[int, str]:
    """{step: engine} from the weight-sync hook's decisions (opd.backends.verl.hook.GUARD_LOG): each sync's
    decision holds for the step it was made for and, with k > 0, the k - 1 after it (the k batches one
    weight version serves); a later record for the same step wins (a resumed run)."""
    if guard_log is None or not Path(guard_log).exists():
        return {}
    out = {}
    for line in Path(guard_log).read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            for s in range(rec["step"], rec["step"] + max(1, int(staleness))):
                out[s] = rec["engine"]
    return out


def parse(jsonl: Path | list[Path], run_id: str, config: str, student: str, seed: int,
          responses_per_step: int, staleness: int = 0, guard_log: Path | None = None) -> pd.DataFrame:
    """steps.parquet's rows from one log or a run's attempt logs (in attempt order); `staleness` is the
    row's k (trigger_parameter_sync_step; 0: the synchronous trainer); `guard_log`: the hook's guard decisions."""
    paths = [Path(jsonl)] if isinstance(jsonl, (str, Path)) else [Path(p) for p in jsonl]
    records = training_records(paths)
    if not records:
        raise ValueError(f"{', '.join(map(str, paths))}: no training steps (no line with rollout_corr/kl)")
    k = int(staleness)
    engines = guard_engines(guard_log, k)
    rows, prev_step, prev_stale = [], 0, 0.0
    for step in sorted(records):
        d = records[step]
        g = lambda key, default=math.nan: float(d.get(key, default))  # noqa: E731
        covered = list(range(prev_step + 1, step + 1))
        pg_kl = pg_kl_key(d)
        if pg_kl not in d:
            raise ValueError(f"{d['_file']}, step {step}: no actor/distillation/ppo_kl or actor/ppo_kl, so d_n lacks "
                             f"its log p_old - log p_theta part")
        if k:
            if VERSION_KEY in d and int(d[VERSION_KEY]) != (step - 1) // k:
                raise ValueError(f"{d['_file']}, step {step}: verl's parameter version {int(d[VERSION_KEY])} is not "
                                 f"(step - 1) // k = {(step - 1) // k}: the log is not the fully-async trainer's with "
                                 f"trigger_parameter_sync_step = {k}")
            stale_now = g(STALE_KEY, prev_stale)
            stale = max((s - 1) % k for s in covered) + k * int(stale_now > prev_stale)
            prev_stale = stale_now
        else:
            stale = 0
        tokens = int(round(g("response_length/mean", 0.0) * responses_per_step * len(covered)))
        rows.append({
            "run_id": run_id, "config": config, "student": student, "seed": seed, "step": step,
            "d_n": d_n_of(d), "seq_logratio_p90": math.nan, "n_tokens": tokens,
            "trained_tokens": tokens, "step_s": g("timing_s/step"),
            "rollout_s": g("fully_async/rollouter/active_time") if k else g("timing_s/gen", 0.0),
            "teacher_s": g("timing_s/teacher"), "train_s": g("timing_s/update_actor", 0.0),
            "weight_sync_s": g("timing_s/update_weights", g("timing_s/timing_s/param_sync", 0.0)),
            "wait_s": g("timing_s/gen", 0.0), "staleness": stale, "policy_version": step,
            "engine_version": step - stale,
            "loss": g("actor/distillation/loss", g("actor/pg_loss")), "grad_norm": g("actor/grad_norm"),
            "entropy": g("actor/entropy"), "response_len_mean": g("response_length/mean"),
            "reward_mean": g("critic/score/mean"), "engine": engines.get(step, ROW_ENGINE),
            "guard_active": engines.get(step, ROW_ENGINE) != ROW_ENGINE, "rejected_d_n": math.nan,
        })
        prev_step = step
    return pd.DataFrame(rows)


def write_steps(jsonl: Path | list[Path], out: Path, **ids) -> pd.DataFrame:
    df = parse(jsonl, **ids)
    store.write_table(df, out, store.STEPS)
    return df
