"""Students and teachers, trained by the pipeline itself: supervised fine-tuning on reference solutions.
The student is the model after `student_steps`; its teacher is the same model trained on for
`teacher_steps` in total (its own improved version, as each paper student distils from its own
RL-fine-tuned version)."""
from __future__ import annotations

import math

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


def train_base(student: Student | dict, task_seed: int, seed: int, out_dir, label: str = "base") -> dict:
    """Train and save `student.pt` and `teacher.pt`; returns the loss curve summary. Progress (opd.progress)
    under `label`."""
    from pathlib import Path

    from opd.progress import Progress
    student = Student.of(student)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    train, _ = make_task(task_seed)
    model = M.Decoder(model_config(student))
    opt = torch.optim.AdamW(model.parameters(), lr=student.sft_lr, weight_decay=0.0)
    total = student.teacher_steps
    # linear warm-up, then cosine decay to a tenth over the teacher's whole schedule
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / WARMUP) * (
        0.1 + 0.45 * (1 + math.cos(math.pi * min(i, total) / total))))
    rng = np.random.default_rng([seed, 7])
    losses = {}
    bar = Progress(label, total, "step")
    for step in range(1, total + 1):
        idx = rng.integers(0, len(train), size=student.sft_batch)
        loss = sft_loss(model, train.prompts(idx), train.solutions(idx))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step == student.student_steps:
            M.save(model, out_dir / "student.pt")
            losses["student_loss"] = loss.item()
        bar.update(loss=loss.item())
    M.save(model, out_dir / "teacher.pt")
    losses["teacher_loss"] = loss.item()
    return losses
