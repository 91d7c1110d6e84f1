"""On-policy distillation (and the RL baselines) with a rollout engine whose numerics differ from the
trainer's. The engine samples; the trainer recomputes log p_theta in fp32 on the engine's tokens, the
teacher scores them, and the update is the policy gradient with A_t = log p_T - log p_theta.

Rollout runs in its own thread, so with staleness k > 0 it overlaps training as in asynchronous RL:
the batch for step n is sampled with exactly the weights of policy version n - k (k = 0 is synchronous).
Every random draw is seeded by (seed, step), so a resumed run repeats exactly what the killed one did.
Each step scores its batch (the log-probs and d_n) before its optimizer step, so a mismatch guard that rejects
(opd.guard) can discard a batch that crosses its line and train on the action's batch of the same step instead.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, NamedTuple

import numpy as np
import torch
from torch.optim.adam import adam

from opd import store
from opd.guard import ROW_ENGINE, GuardState, Span
from opd.rows import Guard
from opd.spec import JobSpec, Settings, TrainSpec

from . import model as M
from .engine import Engine, Numerics, Rollout, engine_version, step_generator, token_logprobs
from .task import Problems, calibration_batch, make_task


def set_threads(spec: JobSpec) -> None:
    """One torch thread per job unless the spec says otherwise (the rule's threads, opd.cli --threads):
    Snakemake runs jobs side by side."""
    torch.set_num_threads(int(spec.threads))


CHECKPOINT = store.CHECKPOINT  # a run's checkpoint, in its folder, until its final run.json is (opd.training)


class AdamW:
    """torch.optim.AdamW's update (decoupled weight decay, no amsgrad) through torch's own functional
    `torch.optim.adam.adam`, with the parts of the optimizer interface the trainer uses (param_groups' lr,
    zero_grad, step, state_dict). The same numbers as torch.optim.AdamW, step by step (tests/test_tiny.py),
    without its constructor, which imports torch._dynamo: ~1 s of every training job's process (measured:
    a 1-step job 3.3 s, of which torch._dynamo's import 0.8), about 6% of a toy run. The base models' SFT
    (three jobs, opd/backends/tiny/sft.py) keeps torch.optim.AdamW with its learning-rate scheduler."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        self.params = list(params)
        self.param_groups = [{"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}]
        self.state: dict[int, dict] = {}  # per parameter index, created at its first gradient, as torch's

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        have = [i for i, p in enumerate(self.params) if p.grad is not None]
        for i in have:
            if i not in self.state:
                zeros = torch.zeros_like(self.params[i], memory_format=torch.preserve_format)
                self.state[i] = {"step": torch.tensor(0.0), "exp_avg": zeros, "exp_avg_sq": zeros.clone()}
        g = self.param_groups[0]
        adam([self.params[i] for i in have], [self.params[i].grad for i in have],
             [self.state[i]["exp_avg"] for i in have], [self.state[i]["exp_avg_sq"] for i in have], [],
             [self.state[i]["step"] for i in have], amsgrad=False, beta1=g["betas"][0], beta2=g["betas"][1],
             lr=g["lr"], weight_decay=g["weight_decay"], eps=g["eps"], maximize=False, decoupled_weight_decay=True)

    def state_dict(self) -> dict:
        return {"state": self.state, "param_groups": self.param_groups}

    def load_state_dict(self, state: dict) -> None:
        """Ours, or torch.optim.AdamW's (the same per-parameter state, keyed by parameter index); copied, as
        torch's optimizers copy what they load."""
        self.state = {i: {k: v.clone() for k, v in st.items()} for i, st in state["state"].items()}
        self.param_groups = [dict(g) for g in state["param_groups"]]


# ---------------------------------------------------------------- advantages and the loss

def advantages(algorithm: str, variant: str, logp_student, logp_teacher, logq, mask, rewards, group: int,
               settings: Settings):
    """Per-token advantages (B, R) and per-token loss weights (B, R), both without gradient."""
    m = mask.float()
    if algorithm == "opd":
        adv = (logp_teacher - logp_student).detach()
    elif algorithm == "reinforce":
        r = torch.as_tensor(rewards, dtype=torch.float32)
        adv = r[:, None].expand_as(m).clone()
    elif algorithm == "grpo":
        r = torch.as_tensor(rewards, dtype=torch.float32).view(-1, group)
        r = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)
        adv = r.reshape(-1)[:, None].expand_as(m).clone()
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}")
    weight = m.clone()
    if variant == "score_centering":
        adv = adv - (adv * m).sum() / m.sum()
    elif variant == "advantage_offset":
        adv = adv + settings.advantage_offset
    elif variant == "tis":  # truncated importance sampling: min(p_theta / q, C) on each token
        weight = weight * (logp_student.detach() - logq).exp().clamp(max=settings.tis_cap)
    elif variant != "none":
        raise ValueError(f"unknown variant {variant!r}")
    return adv * m, weight


class Mismatch(NamedTuple):
    d_n: float  # mean over sampled tokens of log q - log p_theta
    seq_logratio_p90: float  # the p90 over sequences of |sequence-mean log-ratio|


def mismatch(logq: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor) -> Mismatch:
    """d_n = mean over sampled tokens of log q - log p_theta, and the p90 over sequences of
    |sequence-mean log-ratio|."""
    m = mask.float()
    diff = (logq - logp.detach()) * m
    d_n = diff.sum() / m.sum()
    seq = diff.sum(1) / m.sum(1).clamp(min=1)
    return Mismatch(float(d_n), float(torch.quantile(seq.abs(), 0.9)))


# ---------------------------------------------------------------- held-out evaluation

@torch.no_grad()
def heldout_eval(student: M.Decoder, teacher: M.Decoder, heldout: Problems, settings: Settings, draw: int,
                 step: int) -> dict[str, np.ndarray]:
    """Per held-out problem: the exact full-vocabulary KL(student || teacher) per token on the student's
    own responses (sampled by the standard BF16 engine from the current weights), the sampled-token
    estimate, the token count and the fraction answered right. The random draw depends on (draw, step)
    only, and training runs all use draw 0: every configuration and every seed is scored on common
    random numbers, so differences between seeds or configurations are not inflated by independent
    evaluation draws."""
    engine = Engine(student.cfg, Numerics())
    engine.load(student.state_dict())
    R = settings.eval_responses
    idx = np.repeat(np.arange(len(heldout)), R)
    roll = engine.generate(heldout.prompts(idx), step_generator(step, 99, *([draw] if draw else [])))
    lp_s, full_s = token_logprobs(student, roll)
    lp_t, full_t = token_logprobs(teacher, roll)
    m = roll.mask.float()
    kl_tok = (full_s.exp() * (full_s - full_t)).sum(-1)
    n = len(heldout)
    per = lambda x: (x * m).sum(1).view(n, R).sum(1)  # noqa: E731  (sum over each problem's responses)
    tokens = m.sum(1).view(n, R).sum(1)
    correct = torch.as_tensor(heldout.rewards(idx, roll.responses)).view(n, R).mean(1)
    entropy = -(full_s.exp() * full_s).sum(-1)  # the student's, per response token
    return {"prompt_id": np.arange(n), "kl": (per(kl_tok) / tokens).numpy(),
            "kl_sampled": (per(lp_s - lp_t) / tokens).numpy(), "n_tokens": tokens.long().numpy(),
            "correct": correct.numpy(), "entropy": (per(entropy) / tokens).numpy()}


# ---------------------------------------------------------------- the training run

@dataclass(frozen=True)
class Rollouts:
    """What the rollout worker samples with: the row's engine, the guard action's engine where the action does
    not keep the row's numerics (`fallback`), the run's guard (`rule`: opd.rows.Guard, or None), the training
    problems, the settings, the run's seed and the row's staleness k."""
    engine: Engine
    fallback: Engine | None
    rule: Guard | None
    train: Problems
    settings: Settings
    seed: int
    staleness: int


class Batch(NamedTuple):
    """One step's rollout, as the worker hands it over."""
    step: int
    idx: np.ndarray  # the problems, one per response
    roll: Rollout
    sync_s: float  # weight sync
    rollout_s: float
    engine: str  # opd.guard.ROW_ENGINE or the guard's action


def next_batch(worker: "RolloutWorker", n: int) -> tuple[Batch, float]:
    """Step n's batch from the worker, and the seconds waited for it (re-raises the worker's failure)."""
    t = time.perf_counter()
    item = worker.out.get()
    if isinstance(item, BaseException):
        raise item
    assert item.step == n, (item.step, n)
    return item, time.perf_counter() - t


class RolloutWorker(threading.Thread):
    """Samples the batch of step n with policy version n - k as soon as that version exists (`state.versions`,
    read under `cond`). With a guard (`state.guard`, opd.guard.GuardState, read under `cond`), a step the guard
    covers is sampled by its action's engine: the row's numerics where the action keeps them
    (`rule.keeps_numerics`, opd.rows.Guard), else the standard BF16 engine, at version n - k where it keeps the
    row's staleness (`rule.keeps_staleness`), else at version n (synchronous): `fallback` BF16 at n, `sync` the
    row's numerics at n, `fallback_numerics` BF16 at n - k. Version n - k exists only once step n - k - 1 was
    observed, so the guard's decision for step n never depends on timing (a guard that flushes or rejects changes the
    decision for steps already sampled: the trainer then discards this worker and starts another, `restart`). Puts
    each step's Batch in `out`, k + 1 at most ahead, or the exception that stopped it."""

    def __init__(self, rollouts: Rollouts, state: "RunState", cond: threading.Condition, start: int):
        super().__init__(daemon=True)
        self.r, self.state, self.cond, self.start_step = rollouts, state, cond, start
        self.out: queue.Queue = queue.Queue(maxsize=rollouts.staleness + 1)
        self.stop = threading.Event()

    def halt(self) -> int:
        """Stop the worker and discard what it sampled ahead (it may be blocked on a full queue); returns how many
        rollouts it discarded."""
        self.stop.set()
        with self.cond:
            self.cond.notify_all()
        dropped = 0
        while self.is_alive() or not self.out.empty():
            try:
                item = self.out.get(timeout=0.05)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise item
            dropped += 1
        return dropped

    def restart(self, start: int) -> "RolloutWorker":
        """A guard that flushes or rejects acted: this worker's rollouts for steps >= `start` were decided before it
        did. Stop it, discard them and return a new worker that samples from `start` on with the guard's new span."""
        self.halt()
        worker = RolloutWorker(self.r, self.state, self.cond, start=start)
        worker.start()
        return worker

    def run(self):
        r, versions, guard = self.r, self.state.versions, self.state.guard
        try:
            for n in range(self.start_step, r.settings.steps):
                v = engine_version(n, r.staleness)
                with self.cond:
                    self.cond.wait_for(lambda: v in versions or self.stop.is_set())
                    kind = guard.engine(n) if guard else ROW_ENGINE
                    acting = kind != ROW_ENGINE
                    if acting and not r.rule.keeps_staleness:
                        v = n
                        self.cond.wait_for(lambda: v in versions or self.stop.is_set())
                    if self.stop.is_set():
                        return
                    weights = versions[v]
                engine = r.fallback if acting and not r.rule.keeps_numerics else r.engine
                sync = engine.load(weights, v, n) if not engine.loaded(v, n) else 0.0
                t = time.perf_counter()
                rng = np.random.default_rng([r.seed, n, 1])
                idx = np.repeat(rng.choice(len(r.train), r.settings.prompts_per_step, replace=False),
                                r.settings.responses_per_prompt)
                roll = engine.generate(r.train.prompts(idx), step_generator(r.seed, n, 2))
                self.out.put(Batch(n, idx, roll, sync, time.perf_counter() - t, kind))
        except BaseException as e:  # surface the failure in the trainer thread
            self.out.put(e)


@dataclass
class RunState:
    """A run's state between steps: exactly what its checkpoint holds, under the same keys (a run killed by
    older code resumes). `step` steps are done; `versions` holds the policy versions the rollout may still
    sample with ({version: state dict}; version 0 is the weights before the first step, n + 1 those after
    step n); `kept` the versions the caller asked to keep (a probed run's); `guard` the guard's state."""
    student: M.Decoder  # "student": its state dict
    opt: AdamW  # "optimizer"
    guard: GuardState | None = None  # "guard": GuardState.state()
    step: int = 0
    versions: dict[int, dict] = field(default_factory=dict)
    steps_rows: list[dict] = field(default_factory=list)
    heldout_rows: list[dict] = field(default_factory=list)
    kept: dict[int, dict] = field(default_factory=dict)

    def begin(self, keep) -> None:
        """A fresh run: version 0 is the student as given."""
        self.versions[0] = clone_state(self.student)
        if 0 in keep:
            self.kept[0] = self.versions[0]

    def resume(self, path: Path, keep, run_id: str) -> None:
        """Continue from the checkpoint at `path`; it must hold every version of `keep` up to its step."""
        ck = torch.load(path, map_location="cpu", weights_only=False)
        self.student.load_state_dict(ck["student"])
        self.opt.load_state_dict(ck["optimizer"])
        self.versions.update(ck["versions"])
        self.steps_rows, self.heldout_rows, self.step = ck["steps_rows"], ck["heldout_rows"], ck["step"]
        self.kept.update(ck.get("kept", {}))
        lost = {v for v in keep if v <= self.step} - set(self.kept)
        if lost:  # a checkpoint written for other probe settings (or none): it cannot give those weights back
            raise ValueError(f"{run_id}: {path} lacks the kept policy versions {sorted(lost)}; "
                             "delete it to train the run from the start")
        if self.guard is not None:
            self.guard = GuardState.from_state(ck["guard"])

    def save(self, path: Path) -> None:
        store.atomic_torch_save({"student": self.student.state_dict(), "optimizer": self.opt.state_dict(),
                                 "versions": self.versions, "steps_rows": self.steps_rows,
                                 "heldout_rows": self.heldout_rows, "step": self.step,
                                 "guard": self.guard.state() if self.guard else None, "kept": self.kept}, path)

    def evaluate(self, step: int, teacher: M.Decoder, heldout: Problems, s: Settings) -> None:
        """The held-out evaluation of the weights after `step` steps, if `step` is an evaluated one not yet done."""
        if step in s.eval_steps() and not any(r["step"] == step for r in self.heldout_rows):
            self.student.eval()
            self.heldout_rows.append({"step": step, **heldout_eval(self.student, teacher, heldout, s, 0, step)})
            self.student.train()

    def observe(self, n: int, d_n: float) -> Span | None:
        """The guard sees step n's d_n, measured before its optimizer step (call under the rollout's condition);
        returns its activation at step n, if any. The outcome never depends on the threads' timing: a span that
        starts at n + 1 + k (no flush, no reject) covers only rollouts that wait on version n + 1, which does not
        exist yet; one that starts at n + 1 (flush) or n (reject) is where the trainer restarts the rollout,
        discarding whatever was decided before."""
        return self.guard.observe(n, d_n) if self.guard is not None else None

    def advance(self, n: int, keep, staleness: int) -> None:
        """Step n is done (call under the rollout's condition): version n + 1 is stored (and kept where asked),
        and versions no rollout can still need are dropped."""
        self.versions[n + 1] = clone_state(self.student)
        if n + 1 in keep:
            self.kept[n + 1] = self.versions[n + 1]
        for old in [v for v in self.versions if v < n + 1 - staleness]:
            del self.versions[old]
        self.step = n + 1


def train_job(spec: TrainSpec | Mapping, out_dir: Path, progress=None) -> dict:
    """The tiny backend's training job: one run (`train_run`) and, where its spec asks for them (the
    mechanism stage's probed runs), the gradient probes on the policy versions the run kept
    (opd/backends/tiny/probes.py), written beside its other files. The run's checkpoint stays (opd.training
    removes it once the final run.json is in place), so a job killed while probing resumes from it. Returns what run.json records
    besides the training (probe_s: the probes' wall time). `spec`: a TrainSpec, or its file's JSON."""
    spec = TrainSpec.of(spec)
    if spec.probes is None:
        train_run(spec, out_dir, progress)
        return {}
    from . import probes
    kept = train_run(spec, out_dir, progress, keep=probes.versions(spec.probes, spec.row.staleness))
    probe_s = probes.write_run(spec, kept, out_dir)
    return {"probe_s": round(probe_s, 3)}


def train_run(spec: TrainSpec | Mapping, out_dir: Path, progress=None, keep=()) -> dict[int, dict]:
    """Run one configuration to completion, resuming from `out_dir/checkpoint.pt` if present.
    Writes steps.parquet and heldout.parquet atomically at the end and leaves the checkpoint (opd.training
    removes it once the run's final run.json is in place: a failure before that resumes from it). Returns the policy versions named in `keep`
    ({version: state dict}; version 0 is the weights before the first step, n + 1 those after step n;
    checkpointed, so a resumed run returns them too). A spec with a guard runs the mismatch guard; its state
    is checkpointed. `progress(step, steps, measurements)` is called after each step."""
    spec = TrainSpec.of(spec)
    out_dir, s, row, seed = Path(out_dir), spec.settings, spec.row, spec.seed
    k, ckpt_path = row.staleness, out_dir / CHECKPOINT

    # ---------------------------------------------------------------- set-up: task, models, optimizer
    set_threads(spec)
    torch.manual_seed(seed)
    train, heldout = make_task(s.task_seed)
    student = M.load(spec.student_path)
    teacher = M.load(spec.teacher_path).eval()
    state = RunState(student, AdamW(student.parameters(), lr=s.lr, weight_decay=0.0),
                     guard=GuardState.of(spec.guard, k, s.steps) if spec.guard else None)

    # ---------------------------------------------------------------- resume, or start from version 0
    if ckpt_path.exists():
        state.resume(ckpt_path, keep, spec.run_id)
    else:
        state.begin(keep)

    # ---------------------------------------------------------------- the rollout worker (k steps ahead)
    cond = threading.Condition()
    engine = Engine(student.cfg, Numerics.of_row(row, seed), calibration=lambda: calibration_batch(s.task_seed))
    fallback = Engine(student.cfg, Numerics()) if spec.guard and not spec.guard.keeps_numerics else None
    worker = RolloutWorker(Rollouts(engine, fallback, spec.guard, train, s, seed, k), state, cond, start=state.step)
    worker.start()

    # ---------------------------------------------------------------- training loop
    try:
        for n in range(state.step, s.steps):
            state.evaluate(n, teacher, heldout, s)
            # wait for step n's batch (sampled by version n - k); score it: log-probs and d_n, before any update
            t_step = time.perf_counter()
            batch, wait = next_batch(worker, n)
            scored = score(student, teacher, batch.roll, row.algorithm)
            # the guard sees d_n (only its row's engine's steps count), under the condition the rollout decides with
            with cond:
                span = state.observe(n, scored.d_n)
            # a guard that rejects: the batch that crossed is not trained on; step n again, from the action's engine
            # (the batches sampled after it, for steps inside the span, are discarded with it)
            rejected_d_n = float("nan")
            if span is not None and state.guard.reject:
                rejected_d_n = scored.d_n
                worker = worker.restart(n)
                batch, wait_again = next_batch(worker, n)
                wait += wait_again
                scored = score(student, teacher, batch.roll, row.algorithm)
            # one optimizer step at this step's learning rate
            for group in state.opt.param_groups:
                group["lr"] = s.lr_at(n)
            measured = update(student, state.opt, batch.roll, scored, batch.idx, train, row.algorithm, row.variant, s)
            # version n + 1 exists: the rollout may go on
            with cond:
                state.advance(n, keep, k)
                cond.notify_all()
            # a guard that flushes: the batches sampled ahead were decided before it acted
            if span is not None and state.guard.flush and not state.guard.reject:
                worker = worker.restart(n + 1)
            # log the step; checkpoint
            roll = batch.roll
            state.steps_rows.append({"step": n, **measured, "staleness": n - roll.version, "policy_version": n,
                                     "engine_version": roll.version, "rollout_s": batch.rollout_s,
                                     "weight_sync_s": batch.sync_s, "wait_s": wait,
                                     "step_s": time.perf_counter() - t_step, "engine": batch.engine,
                                     "guard_active": batch.engine != ROW_ENGINE, "rejected_d_n": rejected_d_n})
            if progress:
                progress(n + 1, s.steps, measured)
            if (n + 1) % s.checkpoint_every == 0 and n + 1 < s.steps:
                state.save(ckpt_path)
        state.evaluate(s.steps, teacher, heldout, s)
    finally:
        worker.stop.set()
        with cond:
            cond.notify_all()

    # ---------------------------------------------------------------- outputs
    write_outputs(spec, state.steps_rows, state.heldout_rows, out_dir)
    return state.kept  # the checkpoint stays: opd.training removes it once the run's final run.json is in place


def clone_state(model: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class Scored(NamedTuple):
    """A batch scored before the optimizer step: what the update needs and its mismatch."""
    lp: torch.Tensor  # the student's log-probs of the sampled tokens (B, R), with gradient
    full: torch.Tensor  # the student's full-vocabulary log-probs (B, R, V)
    lp_teacher: torch.Tensor | None  # the teacher's (opd), without gradient
    d_n: float
    seq_logratio_p90: float
    teacher_s: float
    student_s: float  # the student's forward pass (part of train_s)


def score(student, teacher, roll: Rollout, algorithm: str) -> Scored:
    """The teacher's (OPD) and the student's log-probs of a batch under the current weights, and its mismatch d_n:
    all a guard needs to reject the batch before it is trained on."""
    t = time.perf_counter()
    teacher_s = 0.0
    lp_t = None
    if algorithm == "opd":
        with torch.no_grad():
            lp_t, _ = token_logprobs(teacher, roll)
        teacher_s = time.perf_counter() - t
    t = time.perf_counter()
    lp, full = token_logprobs(student, roll)
    student_s = time.perf_counter() - t
    d_n, p90 = mismatch(roll.logprobs, lp, roll.mask)
    return Scored(lp, full, lp_t, d_n, p90, teacher_s, student_s)


def update(student, opt, roll: Rollout, scored: Scored, idx, train: Problems, algorithm, variant,
           s: Settings) -> dict:
    """One optimizer step on one scored rollout batch; returns the step's measurements."""
    t = time.perf_counter()
    lp, full = scored.lp, scored.full
    rewards = train.rewards(idx, roll.responses)
    adv, weight = advantages(algorithm, variant, lp, scored.lp_teacher, roll.logprobs, roll.mask, rewards,
                             s.responses_per_prompt, s)
    n_tok = roll.mask.sum()
    loss = -(adv * weight * lp).sum() / n_tok
    opt.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(student.parameters(), float("inf"))
    opt.step()
    train_s = scored.student_s + time.perf_counter() - t
    with torch.no_grad():
        m = roll.mask.float()
        entropy = float(-(full.exp() * full).sum(-1).mul(m).sum() / m.sum())
    return {"d_n": scored.d_n, "seq_logratio_p90": scored.seq_logratio_p90, "n_tokens": int(n_tok),
            "trained_tokens": int(n_tok), "teacher_s": scored.teacher_s, "train_s": train_s,
            "loss": float(loss.detach()), "grad_norm": float(grad_norm), "entropy": entropy,
            "response_len_mean": float(roll.mask.sum(1).float().mean()), "reward_mean": float(np.mean(rewards))}


def write_outputs(spec: TrainSpec, steps_rows: list[dict], heldout_rows: list[dict], out_dir: Path) -> None:
    import pandas as pd
    ids = {"run_id": spec.run_id, "config": spec.row.name, "student": spec.student, "seed": spec.seed}
    steps = pd.DataFrame(steps_rows).assign(**ids)
    store.write_table(steps, out_dir / "steps.parquet", store.STEPS)
    if heldout_rows:
        held = pd.concat([pd.DataFrame(r).assign(step=r["step"]) for r in heldout_rows]).assign(**ids)
        store.write_table(held, out_dir / "heldout.parquet", store.HELDOUT)


# ---------------------------------------------------------------- offline admission check

class LogRatios(NamedTuple):
    sums: np.ndarray  # per sequence: the sum of log q - log p over its response tokens
    tokens: np.ndarray  # per sequence: its response tokens


@torch.no_grad()
def offline_logratios(student: M.Decoder, numerics: Numerics, prompts: torch.Tensor, seed: int,
                      task_seed: int = 0) -> LogRatios:
    """The candidate engine generates one response per prompt row; the standard BF16 engine's numerics
    rescore the same tokens with the same weights. Per sequence: the sum of log q - log p over its
    response tokens, and their count (D_hat = sum / sum: the d_n formula with the standard engine as p)."""
    cand = Engine(student.cfg, numerics, calibration=lambda: calibration_batch(task_seed))
    cand.load(student.state_dict())
    roll = cand.generate(prompts, step_generator(seed, 0, 3))
    ref = Engine(student.cfg, Numerics())
    ref.load(student.state_dict())
    lp_ref, _ = token_logprobs(ref.model, roll)
    m = roll.mask.float()
    return LogRatios(((roll.logprobs - lp_ref.float()) * m).sum(1).double().numpy(), m.sum(1).long().numpy())


def offline_mismatch(student: M.Decoder, numerics: Numerics, prompts: torch.Tensor, seed: int,
                     task_seed: int = 0) -> float:
    """D_hat: mean per-token log-ratio of the candidate engine's responses (offline_logratios)."""
    s, n = offline_logratios(student, numerics, prompts, seed, task_seed)
    return float(s.sum() / n.sum())
