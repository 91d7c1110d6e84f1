"""The tiny backend's speed on this machine, against its roofline and against an earlier revision.

Prints: the measured matmul rate of one core at the model's shapes (fp32, and BF16 as the engine
computes), engine generation and training-step tokens/s with the fraction of that rate they reach,
the cost of d_n as a fraction of a step (goal <= 2%), and one full 100-step run's wall time (training
runs per core-hour). With --against REV the same measurements run on that git revision's package
(a temporary worktree, same models, same machine, same settings) and the ratios are printed.
With --pipeline: the full default pipeline's wall time from scratch in a scratch copy.
With --toy: at the toy experiment's own training settings (config.yaml) instead of the fixed 8 x 8 ones.
Run: python benchmarks/tiny.py [--toy] [--against REV] [--pipeline]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from opd import config as C
from opd.spec import Settings

ROOT = Path(__file__).resolve().parent.parent
# a qwen-s student and its teacher whose weights are committed (the default experiment's; the toy's qwen-s has the
# same shapes, and the toy commits only their base.json)
BASE = ROOT / "results" / "lean" / "_models" / "qwen-s"
# today's toy settings except the ones that change the work per step (kept as in the first toy, so that
# revisions compare like for like): 8 prompts x 8 responses, constant lr
RUN_SETTINGS = {"steps": 100, "prompts_per_step": 8, "responses_per_prompt": 8, "lr": 1e-4, "eval_every": 25,
                "eval_responses": 2, "checkpoint_every": 10, "task_seed": 0}


def best_of(fn, n=5):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def matmul_rate(m: int, k: int, n: int, dtype) -> float:
    """FLOP/s of one (m, k) @ (k, n) product on one thread, best of many."""
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    reps = max(3, int(4e8 // (m * k * n)))  # ~0.8 GFLOP a measurement: a few ms at the fp32 rate, not one call
    s, _ = best_of(lambda: [a @ b for _ in range(reps)], n=7)
    return 2 * m * k * n * reps / s


def toy_settings() -> dict:
    """The toy experiment's own training settings, as config.yaml gives them today."""
    return dict(C.load()["experiments"]["toy"]["train"])


def measure(settings: dict) -> dict:
    from opd.backends.tiny import model as M
    from opd.backends.tiny.engine import Engine, Numerics
    from opd.backends.tiny.task import make_task
    from opd.backends.tiny.trainer import mismatch, score, step_generator, token_logprobs, train_run, update

    from opd import store
    torch.set_num_threads(1)
    store.require_weights(BASE.relative_to(ROOT), "lean", "benchmarks/tiny.py")
    student, teacher = M.load(BASE / "student.pt"), M.load(BASE / "teacher.pt")
    train, _ = make_task(0)
    s = Settings.of(settings)
    rng = np.random.default_rng([0, 0, 1])  # a training step's prompts, as a run draws them
    idx = np.repeat(rng.choice(len(train), s.prompts_per_step, replace=False), s.responses_per_prompt)
    engine = Engine(student.cfg, Numerics())
    engine.load(student.state_dict())
    gen_s, roll = best_of(lambda: engine.generate(train.prompts(idx), step_generator(0, 0, 2)))
    tokens = int(roll.mask.sum())
    opt = torch.optim.AdamW(student.parameters(), lr=0.0)  # lr 0: time the step, keep the weights
    step_s, _ = best_of(lambda: update(student, opt, roll, score(student, teacher, roll, "opd"), idx, train, "opd",
                                       "none", s))
    with torch.no_grad():
        lp, _ = token_logprobs(student, roll)
    dn_s, _ = best_of(lambda: mismatch(roll.logprobs, lp, roll.mask), n=50)
    # FLOPs: generation = one forward per token at its position; a training step = teacher forward +
    # student forward and backward (3x) over every position of the batch's sequences
    seq = roll.prompts.shape[1] + int(roll.mask.sum(1).max())  # useful positions: up to the longest response
    fwd = M.flops_per_token(student.cfg, seq)
    gen_flops = tokens * fwd
    step_flops = 4 * len(idx) * seq * fwd
    spec = {"experiment": "toy", "backend": "tiny", "task_seed": 0, "run_id": "bench.qwen-s.s0",
            "row": {"name": "bf16"}, "student": "qwen-s", "seed": 0, "settings": settings,
            "student_path": str(BASE / "student.pt"), "teacher_path": str(BASE / "teacher.pt")}
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        train_run(spec, Path(d))
        run_s = time.perf_counter() - t
    # the same run as the DAG runs it: a training job in a new process (imports, run.json, file records)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "spec.json").write_text(json.dumps(spec))
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "opd.cli", "train", "--spec", f"{d}/spec.json", "--run-dir", f"{d}/run"],
                       check=True, capture_output=True, cwd=d)
        job_s = time.perf_counter() - t
    return {"tokens": tokens, "responses": len(idx), "gen_s": gen_s, "step_s": step_s, "dn_s": dn_s,
            "gen_flops": gen_flops, "step_flops": step_flops, "run_s": run_s, "job_s": job_s,
            "n_params": student.n_params()}


def roofline() -> dict:
    torch.set_num_threads(1)
    d = 64  # qwen-s: d_model 64, d_ff 128
    return {"decode_bf16": matmul_rate(64, d, d, torch.bfloat16), "decode_fp32": matmul_rate(64, d, d, torch.float32),
            "train_fp32": matmul_rate(64 * 45, d, 2 * d, torch.float32)}


def report(m: dict, r: dict, settings: dict) -> None:
    print(f"batch: {m['responses']} responses, {m['tokens']} tokens (student {m['n_params']:,} parameters, 1 thread)")
    print(f"one core, matmul at the model's shapes: decode (64x64)@(64x64) {r['decode_bf16'] / 1e9:.1f} GFLOP/s BF16, "
          f"{r['decode_fp32'] / 1e9:.1f} fp32; training (2880x64)@(64x128) {r['train_fp32'] / 1e9:.1f} GFLOP/s fp32")
    g = m["gen_flops"] / m["gen_s"]
    t = m["step_flops"] / m["step_s"]
    print(f"engine generation: {m['tokens'] / m['gen_s']:8.0f} tokens/s = {g / 1e9:5.2f} GFLOP/s, "
          f"{100 * g / r['decode_bf16']:.0f}% of the BF16 decode matmul rate")
    print(f"training step (teacher scoring + update): {m['tokens'] / m['step_s']:8.0f} tokens/s = {t / 1e9:5.2f} GFLOP/s, "
          f"{100 * t / r['train_fp32']:.0f}% of the fp32 training matmul rate")
    print(f"d_n (and p90) from log-probs the step already has: {m['dn_s'] * 1e3:.3f} ms = "
          f"{100 * m['dn_s'] / (m['gen_s'] + m['step_s']):.2f}% of rollout + step (goal <= 2%)")
    print(f"one {settings['steps']}-step run ({settings['prompts_per_step']} x {settings['responses_per_prompt']} responses, "
          f"{len(Settings.of(settings).eval_steps())} evaluations): {m['run_s']:.1f} s = "
          f"{3600 / m['run_s']:.0f} runs per core-hour")
    print(f"the same run as a training job (a new process, as the DAG runs it): {m['job_s']:.1f} s = "
          f"{3600 / m['job_s']:.0f} runs per core-hour ({m['job_s'] - m['run_s']:.1f} s of process start, imports and "
          f"run records)")


def against(rev: str, toy: bool) -> dict:
    """The same measurements with the package of git revision `rev` (a temporary worktree)."""
    with tempfile.TemporaryDirectory() as d:
        wt = Path(d) / "wt"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), rev], check=True,
                       capture_output=True)
        try:
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--json", *(["--toy"] if toy else [])], check=True,
                                 capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(wt)}).stdout
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], check=True)
    return json.loads(out.splitlines()[-1])


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
    print(f"full default pipeline from scratch (snakemake -c 2): {wall / 60:.1f} min (goal <= 20 min)")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--against", metavar="REV", help="also measure git revision REV's package and print ratios")
    p.add_argument("--pipeline", action="store_true",
                   help="also time the whole default pipeline (config.yaml's experiment) from scratch")
    p.add_argument("--toy", action="store_true",
                   help="measure at the toy experiment's own settings (config.yaml) instead of the fixed 8 x 8 ones")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # used by --against
    a = p.parse_args()
    settings = toy_settings() if a.toy else RUN_SETTINGS
    if a.json:
        print(json.dumps(measure(settings)))
        sys.exit(0)
    r = roofline()
    now = measure(settings)
    report(now, r, settings)
    if a.against:
        old = against(a.against, a.toy)
        print(f"\nagainst {a.against} (same models, settings and machine):")
        report(old, r, settings)
        print(f"\nratios (this tree / {a.against}): generation tokens/s x{old['gen_s'] / now['gen_s'] * now['tokens'] / old['tokens']:.2f}"
              f" (same prompts), training-step tokens/s x{old['step_s'] / now['step_s']:.2f}, "
              f"runs per core-hour x{old['run_s'] / now['run_s']:.2f} (in one process), "
              f"x{old['job_s'] / now['job_s']:.2f} (as training jobs)")
    if a.pipeline:
        pipeline()
