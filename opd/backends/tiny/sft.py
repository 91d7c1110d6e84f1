"""Students and teachers, trained by the pipeline itself: supervised fine-tuning on reference solutions.
The fixed recipe (`train_base`): the student is the model after `student_steps`; its teacher is the same model
trained on for `teacher_steps` in total (its own improved version, as each paper student distils from its own
RL-fine-tuned version). The converged recipe (`train_converged`, a student with `converge:`): the teacher trained to
a measured plateau of the held-out cross-entropy, the student the first checkpoint of the same trajectory whose
held-out KL to that teacher is below a target."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from opd.spec import Student

from . import model as M
from .task import PROMPT_LEN, RESPONSE_LEN, VOCAB, make_task

WARMUP = 20
ARCH = {"qwen2": dict(qkv_bias=True), "llama": dict(qkv_bias=False)}


def model_config(student: Student | dict) -> M.ModelConfig:
    """The architecture of a student (opd.spec.Student, or config.yaml's mapping of one)."""
    s = Student.of(student)
    return M.ModelConfig(vocab_size=len(VOCAB), n_layers=s.layers, n_heads=s.heads, n_kv_heads=s.kv_heads,
                         head_dim=s.head_dim, d_ff=s.d_ff, max_seq_len=PROMPT_LEN + RESPONSE_LEN, **ARCH[s.family])


def sft_loss(model: M.Decoder, prompts: torch.Tensor, solutions: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on solution tokens up to and including <eos>."""
    from .task import PAD_ID
    seq = torch.cat([prompts, solutions], 1)
    logits = model(seq[:, :-1])[:, PROMPT_LEN - 1:]
    target = solutions
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=PAD_ID)


def lr_lambda(total: int):
    """The SFT's learning-rate factor at optimizer step i: linear warm-up, then cosine decay to a tenth over `total`
    steps, then a tenth."""
    return lambda i: min(1.0, (i + 1) / WARMUP) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(i, total) / total)))


@torch.no_grad()
def heldout_ce(model: M.Decoder, heldout) -> float:
    """The teacher-forced cross-entropy on the held-out problems' reference solutions (sft_loss, no gradient)."""
    return float(sft_loss(model, heldout.prompts(), heldout.solutions()))


def initial_kl(student: M.Decoder, teacher: M.Decoder, heldout, eval_responses: int) -> float:
    """A student's initial held-out KL to its teacher: the mean over held-out problems of the tiny trainer's step-0
    evaluation (opd.backends.tiny.trainer.heldout_eval, draw 0, step 0, `eval_responses` per problem), the number
    every OPD run from these base models reports at its step 0."""
    from opd.spec import Settings

    from .trainer import heldout_eval
    was = student.training
    student.eval()
    kl = float(np.mean(heldout_eval(student, teacher, heldout, Settings(eval_responses=eval_responses), 0, 0)["kl"]))
    student.train(was)
    return kl


def measure_base(folder, task_seed: int, eval_responses: int) -> tuple[float, float]:
    """Saved base models (a folder's student.pt and teacher.pt): the student's initial held-out KL to the teacher
    (initial_kl) and the teacher's held-out cross-entropy (heldout_ce), on task `task_seed`'s held-out problems."""
    torch.set_num_threads(1)  # as the base job (opd.backends.tiny.trainer.set_threads): the same sums, the same KL
    _, heldout = make_task(task_seed)
    student, teacher = M.load(Path(folder) / "student.pt"), M.load(Path(folder) / "teacher.pt")
    return initial_kl(student, teacher.eval(), heldout, eval_responses), heldout_ce(teacher, heldout)


def plateaued(ces: list[float], window: int, tol: float) -> bool:
    """Whether the best of the last `window` evaluations is not below (1 - tol) x the best of those before them."""
    return len(ces) > window and min(ces[-window:]) > (1 - tol) * min(ces[:-window])


class NoStudent(RuntimeError):
    pass


def sft_start(student: Student, task_seed: int, seed: int):
    """Either recipe's start, in one order of random draws: (train and held-out problems, the model, AdamW at
    `sft_lr`, its schedule - linear warm-up, then cosine decay to a tenth over `teacher_steps` - and the batches'
    generator)."""
    torch.manual_seed(seed)
    train, heldout = make_task(task_seed)
    model = M.Decoder(model_config(student))
    opt = torch.optim.AdamW(model.parameters(), lr=student.sft_lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(student.teacher_steps))
    return train, heldout, model, opt, sched, np.random.default_rng([seed, 7])


def sft_step(model: M.Decoder, opt, sched, train, idx) -> torch.Tensor:
    """One SFT step of either recipe on the training problems `idx` (gradient clipped to 1.0); its loss."""
    loss = sft_loss(model, train.prompts(idx), train.solutions(idx))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss


def train_converged(student: Student | dict, task_seed: int, seed: int, out_dir, eval_responses: int,
                    label: str = "base") -> tuple[dict, "pd.DataFrame"]:
    """The converged recipe (opd.spec.Converge; docs/methods.md#base-model-draws): train until the held-out
    cross-entropy plateaus (checked every `eval_every` steps from `teacher_steps` on) or `max_steps`, save that model
    as `teacher.pt`, then save as `student.pt` the first checkpoint (every `save_every` steps) whose initial held-out KL
    to it is below `student_kl`: the KL at every evaluation step up to the first below the target, then at every
    checkpoint of that interval. Returns (what base.json records, the curves: one row per step with its lr and SFT
    loss, and its held-out cross-entropy and KL to the final teacher where measured, NaN elsewhere)."""
    import pandas as pd

    from opd.progress import Progress
    student = Student.of(student)
    c = student.converge
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train, heldout, model, opt, sched, rng = sft_start(student, task_seed, seed)
    rows, ces, saved = [], [], {}
    bar = Progress(label, c.max_steps, "step")
    plateau = False
    for step in range(1, c.max_steps + 1):
        lr = opt.param_groups[0]["lr"]
        loss = sft_step(model, opt, sched, train, rng.integers(0, len(train), size=student.sft_batch))
        row = {"step": step, "lr": lr, "sft_loss": loss.item(), "heldout_ce": math.nan, "heldout_kl": math.nan}
        if step % c.save_every == 0:
            saved[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if step % c.eval_every == 0:
            row["heldout_ce"] = heldout_ce(model, heldout)
            ces.append(row["heldout_ce"])
        rows.append(row)
        bar.update(loss=loss.item())
        if step % c.eval_every == 0 and step >= student.teacher_steps and plateaued(ces, c.window, c.tol):
            plateau = True
            break
    teacher_step = step
    teacher = model.eval()
    M.save(teacher, out_dir / "teacher.pt")
    probe = M.Decoder(model_config(student))
    kls: dict[int, float] = {}

    def kl_at(s: int) -> float:
        if s not in kls:
            probe.load_state_dict(saved[s])
            kls[s] = initial_kl(probe, teacher, heldout, eval_responses)
        return kls[s]

    crossing = next((s for s in range(c.eval_every, teacher_step + 1, c.eval_every) if kl_at(s) < c.student_kl), None)
    chosen = None if crossing is None else next(
        s for s in range(crossing - c.eval_every + c.save_every, crossing + 1, c.save_every) if kl_at(s) < c.student_kl)
    curves = pd.DataFrame(rows)
    curves["heldout_kl"] = curves["step"].map(kls).astype(float)
    if chosen is None or chosen >= teacher_step:
        raise NoStudent(f"{label}: no checkpoint before the teacher (step {teacher_step}) has held-out KL below "
                        f"student_kl {c.student_kl} (at steps {sorted(kls)}: {[round(kls[s], 4) for s in sorted(kls)]})")
    probe.load_state_dict(saved[chosen])
    M.save(probe, out_dir / "student.pt")
    at = curves.set_index("step")
    return {"recipe": "converge", "student_step": chosen, "teacher_step": teacher_step, "plateau": plateau,
            "student_kl": kls[chosen], "teacher_ce": float(at.loc[teacher_step, "heldout_ce"]),
            "student_loss": float(at.loc[chosen, "sft_loss"]), "teacher_loss": float(at.loc[teacher_step, "sft_loss"])}, curves


def train_base(student: Student | dict, task_seed: int, seed: int, out_dir, label: str = "base") -> dict:
    """The fixed recipe: train and save `student.pt` and `teacher.pt`; returns the loss curve summary. Progress
    (opd.progress) under `label`."""
    from opd.progress import Progress
    student = Student.of(student)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train, _, model, opt, sched, rng = sft_start(student, task_seed, seed)
    total = student.teacher_steps
    losses = {}
    bar = Progress(label, total, "step")
    for step in range(1, total + 1):
        loss = sft_step(model, opt, sched, train, rng.integers(0, len(train), size=student.sft_batch))
        if step == student.student_steps:
            M.save(model, out_dir / "student.pt")
            losses["student_loss"] = loss.item()
        bar.update(loss=loss.item())
    M.save(model, out_dir / "teacher.pt")
    losses["teacher_loss"] = loss.item()
    return losses
