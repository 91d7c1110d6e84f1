"""GPU smoke test of the verl backend: two OPD steps end to end, then the held-out evaluation, with no
downloads.

The toy experiment's student and teacher (results/toy/_models/qwen-s) are exported as Hugging Face Qwen2
checkpoints, the synthetic addition task is written as verl parquet, and verl's trainer runs two steps
with the overrides opd.backends.verl.overrides builds for a row (default: NVFP4 weights through the
weight-sync hook plus vLLM's FP8 KV cache, layer 0 kept BF16, so both the engine settings and the hook are
exercised). It then parses verl's JSONL log into steps.parquet and prints d_n per step, merges the step-2
checkpoint with verl.model_merger and runs the held-out evaluation (vLLM samples, transformers scores)
into heldout.parquet. Needs the `cluster` extra (verl, vLLM) and GPUs.

Run:  python benchmarks/verl_smoke.py --out /tmp/opd-smoke [--gpus 2] [--row '{"name": "bf16"}']
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from opd import store
from opd.backends.tiny import model as M
from opd.backends.tiny.task import (  # the toy models' context is exactly their sum
    PROMPT_LEN,
    RESPONSE_LEN,
)
from opd.backends.verl import gpu, logparse, reward
from opd.backends.verl.data import toy_task
from opd.backends.verl.overrides import entry_point, overrides

ROOT = Path(__file__).resolve().parent.parent


def experiment(out: Path, gpus: int) -> dict:
    """The smoke run's experiment, in config.yaml's shape: 2 steps, a checkpoint and an evaluation at step 2."""
    return {
        "students": {"toy": {"model": str(out / "student"), "teacher": str(out / "teacher"), "layers": 2}},
        "train": {"steps": 2, "prompts_per_step": 8, "responses_per_prompt": 8, "lr": 1e-5, "temperature": 1.0,
                  "max_prompt_length": PROMPT_LEN, "max_response_length": RESPONSE_LEN, "eval_every": 2,
                  "eval_responses": 4, "checkpoint_every": 2},
        "verl": {"data": {"train": str(out / "train.parquet"), "heldout": [str(out / "heldout.parquet")]},
                 "layout": {"nodes": 2, "teacher_nodes": 1, "gpus_per_node": max(1, gpus // 2), "rollout_replicas": 1},
                 "engine": {"gpu_memory_utilization": 0.3}}}


def command(out: Path, row: dict, gpus: int) -> tuple[str, list[str]]:
    """verl's entry point and Hydra overrides for the smoke run (tests/test_verl.py composes them on CPU)."""
    cfg = {"experiments": {"smoke": experiment(out, gpus)}}
    args = overrides(row, cfg, student="toy", seed=0, run_dir=str(out), experiment="smoke")
    args += ["trainer.nnodes=1", "distillation.nnodes=1", "trainer.val_before_train=False",
             "actor_rollout_ref.rollout.gpu_memory_utilization=0.3", "actor_rollout_ref.model.trust_remote_code=False",
             # verl scores every batch (and validation); its own scorer does not know the toy task
             f"reward.custom_reward_function.path={reward.__file__}", "reward.custom_reward_function.name=compute_score"]
    return entry_point(row), args


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gpus", type=int, default=2, help="GPUs on this node: half for the teacher, half for training")
    p.add_argument("--row", type=json.loads, default={"name": "nvfp4-kv-l0", "weights": "nvfp4", "kv_cache": "fp8_e4m3",
                                                      "bf16_layers": [0]})
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    base = ROOT / "results" / "toy" / "_models" / "qwen-s"
    for which in ("student", "teacher"):
        M.export_hf(M.load(base / f"{which}.pt"), a.out / which)
    toy_task(a.out)
    entry, args = command(a.out, a.row, a.gpus)
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(logparse.attempt_log(a.out))}
    print("python -m", entry, " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", entry, *args], check=True, env=env, cwd=a.out)
    steps = logparse.write_steps(logparse.attempt_logs(a.out), a.out / "steps.parquet", run_id="smoke", config=a.row["name"], student="toy",
                                 seed=0, responses_per_step=64)
    print(steps[["step", "d_n", "step_s", "rollout_s", "train_s", "loss"]].to_string(index=False))
    assert len(steps) == 2 and steps["d_n"].notna().all(), "expected two steps with d_n"
    e = experiment(a.out, a.gpus)
    spec = {"experiment": "smoke", "backend": "verl", "run_id": f"{a.row['name']}.toy.s0", "row": a.row,
            "student": "toy", "seed": 0, "student_spec": e["students"]["toy"], "settings": e["train"], "verl": e["verl"]}
    gpu.heldout_eval(spec, a.out)
    held = store.read_table(a.out / "heldout.parquet", store.HELDOUT)
    print(held.groupby("step")[["kl", "correct", "n_tokens"]].mean().to_string())


if __name__ == "__main__":
    main()
