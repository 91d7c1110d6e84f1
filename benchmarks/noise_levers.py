"""The instrument's noise under different training settings: the seed-vs-seed spread of Delta of the
standard engine against itself (true Delta = 0), and the share of the held-out KL gap OPD closes.
This is how the toy's settings were chosen (docs/methods.md, "The instrument"). Each setting trains `--seeds`
runs of the bf16 row of the primary student from the committed base models, two at a time.
Run: python benchmarks/noise_levers.py [--seeds 6] [--only NAME ...]   (about 40 s per run-pair on 2 cores)"""
import argparse
import itertools
import json
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "results" / "toy" / "_models" / "qwen-s"
FIRST = {"steps": 100, "prompts_per_step": 8, "responses_per_prompt": 8, "lr": 1e-4, "eval_every": 100,
         "eval_responses": 2, "checkpoint_every": 1000, "task_seed": 0}  # the first toy's settings
LEVERS = {
    "first (8 prompts, lr 1e-4 constant)": {},
    "lower lr (3e-5 constant)": {"lr": 3e-5},
    "cosine lr from 1e-4": {"lr_schedule": "cosine"},
    "cosine + 4 eval responses": {"lr_schedule": "cosine", "eval_responses": 4},
    "cosine + 16 prompts/step": {"lr_schedule": "cosine", "prompts_per_step": 16},
    "cosine + 32 prompts/step": {"lr_schedule": "cosine", "prompts_per_step": 32},
    # today's toy settings (cosine, 16 prompts/step) with fewer steps: what a cheaper run would cost the instrument
    "cosine + 16 prompts, 60 steps": {"lr_schedule": "cosine", "prompts_per_step": 16, "steps": 60},
    "cosine + 16 prompts, 50 steps": {"lr_schedule": "cosine", "prompts_per_step": 16, "steps": 50},
}


def one(job):
    settings, seed, out = job
    from opd.backends.tiny import trainer
    spec = {"experiment": "toy", "backend": "tiny", "run_id": f"noise.qwen-s.s{seed}", "row": {"name": "bf16"},
            "student": "qwen-s", "seed": seed,
            "settings": settings, "student_path": str(BASE / "student.pt"), "teacher_path": str(BASE / "teacher.pt")}
    Path(out).mkdir(parents=True, exist_ok=True)
    trainer.train_run(spec, Path(out))
    h = pd.read_parquet(Path(out) / "heldout.parquet")
    return h.pivot_table(index="step", columns="prompt_id", values="kl").to_numpy()  # (2 steps, problems)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--only", nargs="*", help="names of LEVERS to run (default: all)")
    a = p.parse_args()
    from opd import store
    store.require_weights(BASE.relative_to(ROOT), "toy", "benchmarks/noise_levers.py")
    print(f"{'setting':38s} {'SD(Δ) seed vs seed':>19s} {'KL start':>9s} {'KL end':>8s} {'gap closed':>10s} {'s/run':>6s}")
    for name, change in LEVERS.items():
        if a.only and name not in a.only:
            continue
        settings = {**FIRST, **change}
        with tempfile.TemporaryDirectory() as d, ProcessPoolExecutor(2) as ex:
            t = time.perf_counter()
            K = list(ex.map(one, [(settings, s, f"{d}/s{s}") for s in range(a.seeds)]))
            per_run = 2 * (time.perf_counter() - t) / a.seeds
        start, end = np.array([k[0] for k in K]), np.array([k[-1] for k in K])
        tot = end.sum(1)
        deltas = [tot[i] / tot[j] - 1 for i, j in itertools.permutations(range(a.seeds), 2)]
        k0, k1 = start.mean(1).mean(), end.mean(1).mean()
        print(f"{name:38s} {np.std(deltas, ddof=1):19.3f} {k0:9.4f} {k1:8.4f} {1 - k1 / k0:10.0%} {per_run:6.1f}")
    print(json.dumps({"note": "SD from %d seeds: its own relative error is about 1/sqrt(2(S-1))" % a.seeds}))


if __name__ == "__main__":
    main()
