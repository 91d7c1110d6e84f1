"""The tiny backend's speed on this machine: engine tokens/s, training-step tokens/s, the cost of
computing d_n as a fraction of a step (goal <= 2%), and with --pipeline the full default pipeline's
wall time from scratch in a scratch copy (goal <= 10 min on 2 cores).
Run: python benchmarks/tiny.py [--pipeline]"""
import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from opd.backends.tiny import model as M
from opd.backends.tiny.engine import Engine, Numerics
from opd.backends.tiny.task import make_task
from opd.backends.tiny.trainer import Settings, mismatch, step_generator, token_logprobs, update

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "results" / "toy" / "_models" / "qwen-s"


def best_of(fn, n=5):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def kernels():
    torch.set_num_threads(1)
    student, teacher = M.load(BASE / "student.pt"), M.load(BASE / "teacher.pt")
    train, _ = make_task(0)
    s = Settings()
    idx = np.repeat(np.arange(s.prompts_per_step), s.responses_per_prompt)
    engine = Engine(student.cfg, Numerics())
    engine.load(student.state_dict())
    gen_s, roll = best_of(lambda: engine.generate(train.prompts(idx), step_generator(0, 0)))
    tokens = int(roll.mask.sum())
    opt = torch.optim.AdamW(student.parameters(), lr=0.0)  # lr 0: time the step, keep the weights
    step_s, row = best_of(lambda: update(student, teacher, opt, roll, idx, train, "opd", "none", s))
    with torch.no_grad():
        lp, _ = token_logprobs(student, roll)
    dn_s, _ = best_of(lambda: mismatch(roll.logprobs, lp, roll.mask), n=50)
    total = gen_s + step_s
    print(f"batch: {len(idx)} responses, {tokens} tokens (student {student.n_params():,} parameters, 1 thread)")
    print(f"engine generation:       {tokens / gen_s:10.0f} tokens/s  ({gen_s * 1e3:.1f} ms)")
    print(f"training step (teacher scoring + update): {tokens / step_s:10.0f} tokens/s  ({step_s * 1e3:.1f} ms)")
    print(f"d_n (and p90) from log-probs the step already has: {dn_s * 1e3:.3f} ms = "
          f"{100 * dn_s / total:.2f}% of rollout + step (goal <= 2%)")


def pipeline():
    with tempfile.TemporaryDirectory() as d:
        files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"], capture_output=True,
                               text=True, check=True).stdout.split()
        for f in files:
            if not f.startswith(("results/", "figures/")) and (ROOT / f).exists():
                (Path(d) / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, Path(d) / f)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "snakemake", "-c", "2", "-q", "rules"], cwd=d, check=True)
        wall = time.perf_counter() - t
    print(f"full default pipeline from scratch (snakemake -c 2): {wall / 60:.1f} min (goal <= 10 min)")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--pipeline", action="store_true", help="also time the whole toy pipeline from scratch")
    a = p.parse_args()
    kernels()
    if a.pipeline:
        pipeline()
