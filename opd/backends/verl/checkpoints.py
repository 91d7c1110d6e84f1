"""verl's checkpoints of a run: what is kept, what is pruned, and the disk they take.

verl's FSDP checkpoint manager writes, per rank, `model_world_size_{W}_rank_{r}.pt` (the sharded parameters,
fp32 master weights: 4 bytes a parameter), `optim_world_size_{W}_rank_{r}.pt` (AdamW's two moments, fp32: 8 bytes
a parameter) and `extra_state_world_size_{W}_rank_{r}.pt` (scheduler and RNG) under `global_step_{n}/actor/`
(utils/checkpoint/fsdp_checkpoint_manager.py:316-318), and the step of the latest complete one in
`latest_checkpointed_iteration.txt` (trainer/ppo/v1/trainer_base.py:1022-1026), which a resumed run loads from.
It keeps them all (trainer.max_actor_ckpt_to_keep: null, trainer/config/ppo_trainer.yaml:220): a 7.6B student's
checkpoint is about 91 GB.

Retention (verl.keep_checkpoints false, the default): the training job (gpu.train_run) prunes every minute and
at its end, `prune_training`: older checkpoints lose their optimizer and extra state (only the latest resumes a
run), and those of steps the held-out evaluation does not read go entirely; the model state of an evaluated
step stays until its evaluation job has written its part, which then removes it and the merged folder
(`prune_evaluated`). With a run's evaluation done, its checkpoints hold no weights."""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from opd.spec import Settings, Student, Verl

from .plan import CHECKPOINTS, schedule

MODEL_BYTES = 4  # per parameter: verl's FSDP master weights, fp32
OPTIM_BYTES = 8  # per parameter: AdamW's exp_avg and exp_avg_sq, fp32
MERGED_BYTES = 2  # per parameter: the merged Hugging Face folder the evaluation reads, BF16
STEP = re.compile(r"global_step_(\d+)")
RESUME_ONLY = ("optim_world_size_*_rank_*.pt", "extra_state_world_size_*_rank_*.pt")


def latest(checkpoints: Path) -> int | None:
    tracker = Path(checkpoints) / "latest_checkpointed_iteration.txt"
    return int(tracker.read_text().strip()) if tracker.exists() else None


def saved(checkpoints: Path) -> dict[int, Path]:
    """{verl's counter n: its global_step_{n} folder}."""
    out = {}
    for p in Path(checkpoints).glob("global_step_*"):
        m = STEP.fullmatch(p.name)
        if m and p.is_dir():
            out[int(m.group(1))] = p
    return out


def prune_training(checkpoints: Path, evaluated: set[int]) -> list[Path]:
    """Older checkpoints than the latest (verl's tracker) lose what only a resume reads (optimizer, extra state);
    those whose counter is not in `evaluated` (verl's counters of the steps the evaluation reads) go entirely.
    The latest is never touched, nor anything newer (a save in progress). Returns what it removed."""
    last = latest(checkpoints)
    if last is None:
        return []
    removed = []
    for n, folder in sorted(saved(checkpoints).items()):
        if n >= last:
            continue
        if n not in evaluated:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
            continue
        for pattern in RESUME_ONLY:
            for f in folder.glob(f"actor/{pattern}"):
                f.unlink(missing_ok=True)
                removed.append(f)
    return removed


def prune_evaluated(checkpoints: Path, n: int, merged: Path, finished: bool) -> list[Path]:
    """After an evaluation job wrote the part of verl's checkpoint n: its folder (the model state; the optimizer
    is gone already unless it is the latest) and the merged folder go. The latest checkpoint stays while the run
    may still resume (`finished` False)."""
    if not finished and latest(checkpoints) == n:
        return []
    removed = []
    folder = saved(checkpoints).get(n)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    if Path(merged).exists():
        shutil.rmtree(merged, ignore_errors=True)
        removed.append(Path(merged))
    return removed


def run_checkpoints(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


@dataclass(frozen=True)
class Disk:
    """A run's disk in bytes: at its peak during training, at its peak during evaluation, and once evaluated."""
    training: float
    evaluation: float
    after: float

    @property
    def peak(self) -> float:
        return max(self.training, self.evaluation)


def disk(student: Student, settings: Settings, staleness: int, verl: Verl) -> Disk:
    """A run's checkpoint disk from the student's parameter count and the run's schedule (plan.schedule): with
    retention, the evaluated steps' model states wait for their evaluation and one optimizer state is kept (two
    while the next is written), and during the evaluation every evaluated step's merged folder may exist at once;
    without it, every checkpoint verl saves and every merged folder stay."""
    n = float(Student.of(student).params())
    s, v = Settings.of(settings), Verl.of(verl)
    plan = schedule(s, staleness, v.resume_every)
    k = plan.k
    saves = len({(step // k) for step in range(k * plan.save_freq, s.steps + 1, k * plan.save_freq)} | {s.steps // k})
    evaluated = len([e for e in plan.eval_steps if e])
    if v.keep_checkpoints:
        train = saves * (MODEL_BYTES + OPTIM_BYTES) * n
        return Disk(train, train + evaluated * MERGED_BYTES * n, train + evaluated * MERGED_BYTES * n)
    train = (evaluated * MODEL_BYTES + 2 * OPTIM_BYTES + MODEL_BYTES) * n
    final = (MODEL_BYTES + OPTIM_BYTES) * n  # the last checkpoint, until its evaluation
    evaluation = (evaluated - 1) * MODEL_BYTES * n + final + evaluated * MERGED_BYTES * n
    return Disk(train, evaluation, 0.0)


class Pruner:
    """prune_training every `every_s` seconds in a thread of the training job, and once more at `stop` (the
    evaluated steps are the run's, in verl's counter: plan.Schedule.checkpoint)."""

    def __init__(self, run_dir: Path, spec, every_s: float = 60):
        import threading
        plan = schedule(spec.settings, spec.row.staleness, spec.verl.resume_every)
        self.folder = run_checkpoints(run_dir)
        self.evaluated = {plan.checkpoint(s) for s in plan.eval_steps if s}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(every_s,), daemon=True, name="opd-prune")
        self._thread.start()

    def _loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            prune_training(self.folder, self.evaluated)

    def stop(self) -> list[Path]:
        self._stop.set()
        self._thread.join()
        return prune_training(self.folder, self.evaluated)
