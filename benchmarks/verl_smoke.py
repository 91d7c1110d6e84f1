"""GPU smoke test of the verl backend on one node, no downloads: the toy experiment's student and teacher
(results/toy/_models/qwen-s) exported as Hugging Face Qwen2 checkpoints, the synthetic addition task as
verl parquet, then for each row two OPD steps with the overrides opd.backends.verl.overrides builds,
verl's JSONL log parsed into steps.parquet (d_n, loss and staleness printed), the last checkpoint merged
with verl.model_merger and the held-out evaluation (vLLM samples, transformers scores) into heldout.parquet.

Rows (default): one synchronous row with NVFP4 weights through the weight-sync hook plus vLLM's FP8 KV
cache, layer 0 kept BF16 (engine settings and hook both exercised), and one k = 2 row (verl's fully-async
trainer).

GPUs, TP and replicas (`plan`): verl 0.9.1 gives the trainer, the teacher and (for k > 0) the rollout
engine each their own pool of whole GPUs, so a synchronous OPD run needs 2 GPUs and a k > 0 run 3. The
toy models have 2 attention heads and 1 KV head, so every engine runs at TP 1 and a pool of n GPUs holds
n replicas. Synchronous: the trainer (with its rollout replicas on the same GPUs) gets the largest power
of two <= half the GPUs (the batch of 64 responses splits evenly), the teacher the rest. k > 0: the
trainer the same, the rest split between rollout and teacher. 1 GPU: trainer 1, nothing else: no
training row fits, so the smoke runs what does, the offline admission check of the first row and the
held-out evaluation of the student at step 0. 2 GPUs: the synchronous row (trainer 1 + teacher 1); the
k = 2 row is skipped and says why. 8 GPUs: synchronous trainer 4 (4 replicas) + teacher 4; k = 2:
trainer 4, rollout 2, teacher 2.

Run:  python benchmarks/verl_smoke.py --out /tmp/opd-smoke [--gpus N] [--rows '[{"name": "bf16"}]']
Needs the `cluster` extra (verl, vLLM) and GPUs. tests/test_verl.py composes its commands on a CPU.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

from opd import store
from opd.backends.tiny import model as M
from opd.backends.tiny.task import (  # the toy models' context is exactly their sum
    PROMPT_LEN,
    RESPONSE_LEN,
)
from opd.backends.verl import logparse, reward
from opd.backends.verl.data import toy_task
from opd.backends.verl.layout import Layout, Pool
from opd.backends.verl.overrides import entry_point, hydra_value, overrides
from opd.spec import AdmissionSpec, TrainSpec

ROOT = Path(__file__).resolve().parent.parent
ROWS = [{"name": "nvfp4-kv-l0", "weights": "nvfp4", "kv_cache": "fp8_e4m3", "bf16_layers": [0]},
        {"name": "stale-k2", "staleness": 2}]
TOY_TP = 1  # 2 attention heads, 1 KV head


def plan(gpus: int, staleness: int) -> Layout | None:
    """The row's pools on one node of `gpus` GPUs, or None when verl 0.9.1 needs more (see the docstring)."""
    trainer = 1
    while trainer * 2 <= gpus // 2:
        trainer *= 2
    rest = gpus - trainer
    if staleness == 0:
        return Layout(Pool(1, trainer), teacher=Pool(1, rest), rollout=None, rollout_tp=TOY_TP,
                      teacher_tp=TOY_TP) if rest >= 1 else None
    if rest < 2:
        return None
    return Layout(Pool(1, trainer), teacher=Pool(1, rest - rest // 2), rollout=Pool(1, rest // 2), rollout_tp=TOY_TP,
                  teacher_tp=TOY_TP)


def experiment(out: Path, steps: int = 2) -> dict:
    """The smoke run's experiment, in config.yaml's shape: `steps` steps, a checkpoint and an evaluation at
    the last (steps = 0: the student's evaluation only)."""
    return {
        "students": {"toy": {"model": str(out / "student"), "teacher": str(out / "teacher"), "layers": 2}},
        "train": {"steps": steps, "prompts_per_step": 8, "responses_per_prompt": 8, "lr": 1e-5, "temperature": 1.0,
                  "max_prompt_length": PROMPT_LEN, "max_response_length": RESPONSE_LEN, "eval_every": 2,
                  "eval_responses": 4, "checkpoint_every": 2},
        "verl": {"data": {"train": str(out / "train.parquet"), "heldout": [str(out / "heldout.parquet")]},
                 "engine": {"gpu_memory_utilization": 0.3}}}


def command(out: Path, row: dict, gpus: int) -> tuple[str, list[str]]:
    """verl's entry point and Hydra overrides for the smoke run of `row` in `out/<row>` (tests/test_verl.py
    composes them on a CPU); ValueError when the row does not fit on `gpus` GPUs."""
    k = int(row.get("staleness", 0))
    pools = plan(gpus, k)
    if pools is None:
        raise ValueError(f"row {row['name']!r}: verl 0.9.1 needs {3 if k else 2} GPUs for "
                         f"{'an asynchronous' if k else 'a synchronous'} OPD run (trainer, "
                         f"{'rollout, ' if k else ''}teacher: one pool each), this node has {gpus}")
    e = experiment(out)
    run_dir = out / row["name"]
    args = overrides(row, e["students"]["toy"], e["train"], e["verl"], student="toy", seed=0, run_dir=str(run_dir),
                     pools=pools, log_path=str(logparse.attempt_log(run_dir)))
    args += ["actor_rollout_ref.rollout.gpu_memory_utilization=0.3", "actor_rollout_ref.model.trust_remote_code=False",
             # verl scores every batch; its own scorer does not know the toy task
             f"reward.custom_reward_function.path={hydra_value(reward.__file__)}",
             "reward.custom_reward_function.name=compute_score"]
    return entry_point(row), args


def train_spec(out: Path, row: dict, steps: int = 2) -> TrainSpec:
    """The smoke run of `row` as a training job's spec (what its held-out evaluation reads)."""
    e = experiment(out, steps)
    return TrainSpec.from_json({"experiment": "smoke", "backend": "verl", "run_id": f"{row['name']}.toy.s0", "row": row,
                                "student": "toy", "seed": 0, "student_spec": e["students"]["toy"], "settings": e["train"],
                                "verl": e["verl"], "student_path": None, "teacher_path": None})


def admission_spec(out: Path, row: dict) -> AdmissionSpec:
    """The offline admission check of `row` on the toy student: 16 prompts x 2 responses."""
    e = experiment(out)
    return AdmissionSpec.from_json({"experiment": "smoke", "backend": "verl", "task_seed": 0, "student": "toy",
                                    "student_path": None, "teacher_path": None, "row": row, "prompts": 16,
                                    "responses": 2, "seed": 0, "student_spec": e["students"]["toy"],
                                    "verl": e["verl"], "settings": e["train"]})


def train_row(out: Path, row: dict, gpus: int) -> None:
    from opd.backends.verl import gpu
    entry, args = command(out, row, gpus)
    run_dir = out / row["name"]
    run_dir.mkdir(parents=True, exist_ok=True)
    print("python -m", entry, " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", entry, *args], check=True, cwd=run_dir)
    steps = logparse.write_steps(logparse.attempt_logs(run_dir), run_dir / "steps.parquet", run_id=row["name"],
                                 config=row["name"], student="toy", seed=0, responses_per_step=64,
                                 staleness=int(row.get("staleness", 0)))
    print(steps[["step", "d_n", "loss", "staleness", "step_s", "rollout_s", "train_s", "weight_sync_s"]].to_string(index=False))
    assert steps["d_n"].notna().all() and steps["step"].max() == 2, "expected d_n for every step up to step 2"
    gpu.heldout_eval(train_spec(out, row), run_dir)
    held = store.read_table(run_dir / "heldout.parquet", store.HELDOUT)
    print(held.groupby("step")[["kl", "correct", "n_tokens"]].mean().to_string())


def one_gpu(out: Path, row: dict) -> None:
    """What fits on one GPU: the offline admission check of `row` and the student's held-out evaluation."""
    from opd.backends.verl import gpu
    print(f"{row['name']}: D_hat = {gpu.offline_mismatch(admission_spec(out, row)):.5f}", flush=True)
    run_dir = out / "student-step0"
    gpu.heldout_eval(train_spec(out, {"name": "bf16"}, steps=0), run_dir)
    print(store.read_table(run_dir / "heldout.parquet", store.HELDOUT)[["kl", "correct", "n_tokens"]].mean().to_string())


def main():
    import torch
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gpus", type=int, default=torch.cuda.device_count(), help="GPUs to use (default: all)")
    p.add_argument("--rows", type=json.loads, default=ROWS)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    base = ROOT / "results" / "toy" / "_models" / "qwen-s"
    for which in ("student", "teacher"):
        M.export_hf(M.load(base / f"{which}.pt"), a.out / which)
    toy_task(a.out)
    fits = [r for r in a.rows if plan(a.gpus, int(r.get("staleness", 0)))]
    for r in a.rows:
        if r not in fits:
            print(f"skipped: {r['name']}: needs {3 if r.get('staleness') else 2} GPUs (verl 0.9.1: trainer, "
                  f"{'rollout, ' if r.get('staleness') else ''}teacher in pools of their own); this node has {a.gpus}")
    if not fits:
        one_gpu(a.out, a.rows[0])
    for r in fits:
        train_row(a.out, r, a.gpus)


if __name__ == "__main__":
    main()
