"""GPU smoke test of the verl backend, no downloads: the toy experiment's student and teacher
(results/toy/_models/qwen-s) exported as Hugging Face Qwen2 checkpoints, the synthetic addition task as
verl parquet, then for each row 4 OPD steps of verl's real training loop with the overrides
opd.backends.verl.overrides builds, verl's JSONL log parsed into steps.parquet (d_n, loss and staleness
printed), the held-out evaluation as the DAG's jobs run it (the student's step 0 once, each row's last step
from its merged checkpoint: opd.backends.verl.evaluate) and the offline admission check of the first row;
at the end each phase's wall time.

Rows (default): one synchronous row with NVFP4 weights through the weight-sync hook plus vLLM's FP8 KV
cache, layer 0 kept BF16 (engine settings and hook both exercised), and one k = 2 row (verl's fully-async
trainer).

GPUs (`plan`): verl 0.9.1 gives the trainer, the teacher and (k > 0) the rollout engine each a Ray pool of
whole GPUs (opd.backends.verl.layout). One GPU (`--gpus 1`, the target: one H200, both rows, evaluation and
admission in at most 8 minutes) holds them all: the smoke's Ray cluster declares 2 GPUs that are both
this process's GPU (`ray.init(num_gpus=2)`, and that one GPU's id as CUDA_VISIBLE_DEVICES in the
runtime_env of every worker: Ray maps a worker's GPU slot i to the i-th id its workers started with and,
for a slot beyond them, to all of them, ray/_private/worker.py:1150-1163, so both slots' workers get that
GPU, and workers without a GPU see it as they would without the smoke); the trainer pool holds the trainer and its rollout
replica (verl's hybrid engine; for k > 0 the fully-async trainer's hybrid replicas with no standalone
rollout pool, async_training.use_dynamic_resource_scheduling with rollout.nnodes=0, weights synced
in-process by verl's naive checkpoint engine: fully_async_trainer.py:148-153, 182-206), the teacher pool
verl's teacher server; each vLLM engine reserves a fifth of the GPU, and none captures CUDA graphs.
More GPUs: the toy models have 2 attention heads and 1 KV head, so every engine runs at TP 1 and a pool
of n GPUs holds n replicas. Synchronous: the trainer (with its rollout replicas on the same GPUs) gets the
largest power of two <= half the GPUs (the batch of 64 responses splits evenly), the teacher the rest.
k > 0: the trainer the same, the rest split between rollout and teacher. 2 GPUs: the synchronous row
only (the k = 2 row is skipped and says why); 8 GPUs: synchronous trainer 4 (4 replicas) + teacher 4;
k = 2: trainer 4, rollout 2, teacher 2.

Run:  python benchmarks/verl_smoke.py --out /tmp/opd-smoke --gpus 1 [--rows '[{"name": "bf16"}]']
Needs the `cluster` extra (verl, vLLM) and a GPU. tests/test_verl.py composes its commands on a CPU and
passes them through verl's own start-up checks.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from opd.backends.tiny import model as M
from opd.backends.tiny.task import (  # the toy models' context is exactly their sum
    PROMPT_LEN,
    RESPONSE_LEN,
)
from opd.backends.verl import logparse
from opd.backends.verl.data import toy_task
from opd.backends.verl.layout import Layout, Pool
from opd.backends.verl.overrides import entry_point, hydra_value, overrides
from opd.spec import AdmissionSpec, TrainSpec

ROOT = Path(__file__).resolve().parent.parent
ROWS = [{"name": "nvfp4-kv-l0", "weights": "nvfp4", "kv_cache": "fp8_e4m3", "bf16_layers": [0]},
        {"name": "stale-k2", "staleness": 2}]
TOY_TP = 1  # 2 attention heads, 1 KV head


SHARED_SLOTS = 2  # one GPU: Ray's GPU slots, both the one GPU (trainer + its rollout; teacher)
SHARED_MEMORY = 0.2  # one GPU: each vLLM engine's share of its memory (hybrid rollout, teacher, evaluation)


def plan(gpus: int, staleness: int) -> Layout | None:
    """The row's pools on one node of `gpus` GPUs, or None when verl 0.9.1 needs more (see the docstring). On one
    GPU the pools are Ray's SHARED_SLOTS slots of it, the rollout on the trainer's (no rollout pool)."""
    if gpus == 1:
        return Layout(Pool(1, 1), teacher=Pool(1, 1), rollout=None, rollout_tp=TOY_TP, teacher_tp=TOY_TP)
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


def one_gpu_overrides(staleness: int) -> list[str]:
    """What puts a row's pools on one GPU (the docstring): a fresh local Ray cluster of SHARED_SLOTS GPU slots
    that are all this process's first visible GPU (CUDA_VISIBLE_DEVICES's first entry, else GPU 0), a fifth of
    the GPU per engine, eager vLLM; for k > 0 the fully-async trainer's hybrid rollout replicas and no
    standalone rollout pool (the hybrid replica's share: `command`)."""
    import os
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    o = ["+ray_kwargs.ray_init.address=local", f"+ray_kwargs.ray_init.num_gpus={SHARED_SLOTS}",
         f"+ray_kwargs.ray_init.runtime_env.env_vars.CUDA_VISIBLE_DEVICES={hydra_value(gpu)}",
         "actor_rollout_ref.rollout.enforce_eager=True",
         f"distillation.teacher_models.teacher_model.inference.gpu_memory_utilization={SHARED_MEMORY}"]
    if staleness:
        o += ["async_training.use_dynamic_resource_scheduling=True", "rollout.nnodes=0", "rollout.n_gpus_per_node=1"]
    return o


STEPS = 4  # >= 3, and a multiple of the k = 2 row's staleness (its trainer checkpoints once per 2 steps)


def experiment(out: Path, steps: int = STEPS, gpus: int = 2) -> dict:
    """The smoke run's experiment, in config.yaml's shape: `steps` steps, a checkpoint and an evaluation at
    the last and at step 0. Responses stop one token short of the toy models' 51 positions (11 + 40): the
    teacher engine's context is prompt + response + 1 (the token vLLM must generate; the longest toy solution
    is 36 tokens)."""
    return {
        "students": {"toy": {"model": str(out / "student"), "teacher": str(out / "teacher"), "layers": 2}},
        "train": {"steps": steps, "prompts_per_step": 8, "responses_per_prompt": 8, "lr": 1e-5, "temperature": 1.0,
                  "max_prompt_length": PROMPT_LEN, "max_response_length": RESPONSE_LEN - 1, "eval_every": steps,
                  "eval_responses": 4, "checkpoint_every": steps},
        "verl": {"data": {"train": str(out / "train.parquet"), "heldout": [str(out / "heldout.parquet")]},
                 "engine": {"gpu_memory_utilization": SHARED_MEMORY if gpus == 1 else 0.3, "enforce_eager": True}}}


def command(out: Path, row: dict, gpus: int) -> tuple[str, list[str]]:
    """verl's entry point and Hydra overrides for the smoke run of `row` in `out/<row>` (tests/test_verl.py
    composes them on a CPU); ValueError when the row does not fit on `gpus` GPUs."""
    k = int(row.get("staleness", 0))
    pools = plan(gpus, k)
    if pools is None:
        raise ValueError(f"row {row['name']!r}: verl 0.9.1 needs {3 if k else 2} GPUs for "
                         f"{'an asynchronous' if k else 'a synchronous'} OPD run (trainer, "
                         f"{'rollout, ' if k else ''}teacher: one pool each), or one GPU they share; this node has {gpus}")
    e = experiment(out, gpus=gpus)
    run_dir = out / row["name"]
    args = overrides(row, e["students"]["toy"], e["train"], e["verl"], student="toy", seed=0, run_dir=str(run_dir),
                     pools=pools, log_path=str(logparse.attempt_log(run_dir)))
    args += [f"actor_rollout_ref.rollout.gpu_memory_utilization={SHARED_MEMORY if gpus == 1 else 0.3}",
             "actor_rollout_ref.model.trust_remote_code=False"]
    if gpus == 1:
        args += one_gpu_overrides(k)
    return entry_point(row), args


def train_spec(out: Path, row: dict, gpus: int = 2) -> TrainSpec:
    """The smoke run of `row` as a training job's spec (what its held-out evaluation reads)."""
    e = experiment(out, gpus=gpus)
    return TrainSpec.from_json({"experiment": "smoke", "backend": "verl", "run_id": f"{row['name']}.toy.s0", "row": row,
                                "student": "toy", "seed": 0, "student_spec": e["students"]["toy"], "settings": e["train"],
                                "verl": e["verl"], "student_path": None, "teacher_path": None})


def admission_spec(out: Path, row: dict, gpus: int = 2) -> AdmissionSpec:
    """The offline admission check of `row` on the toy student: 16 prompts x 2 responses."""
    e = experiment(out, gpus=gpus)
    return AdmissionSpec.from_json({"experiment": "smoke", "backend": "verl", "task_seed": 0, "student": "toy",
                                    "student_path": None, "teacher_path": None, "row": row, "prompts": 16,
                                    "responses": 2, "seed": 0, "student_spec": e["students"]["toy"],
                                    "verl": e["verl"], "settings": e["train"]})


class Phases:
    """Each phase's wall time, printed at the end."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn, *args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.seconds[name] = time.perf_counter() - t
            print(f"[smoke] {name}: {self.seconds[name]:.1f} s", flush=True)


def train_row(out: Path, row: dict, gpus: int, phases: Phases) -> None:
    """verl's training loop for the row, its steps.parquet, then its held-out evaluation as the DAG's jobs run it
    (the student's step 0, shared by the rows, then the last step) gathered into its heldout.parquet."""
    from opd import dag
    from opd.backends.verl import evaluate
    entry, args = command(out, row, gpus)
    run_dir = out / row["name"]
    run_dir.mkdir(parents=True, exist_ok=True)
    print("python -m", entry, " ".join(args), flush=True)
    phases(f"{row['name']}: verl training ({STEPS} steps, start-up included)",
           lambda: subprocess.run([sys.executable, "-m", entry, *args], check=True, cwd=run_dir))
    steps = logparse.write_steps(logparse.attempt_logs(run_dir), run_dir / "steps.parquet", run_id=row["name"],
                                 config=row["name"], student="toy", seed=0, responses_per_step=64,
                                 staleness=int(row.get("staleness", 0)))
    print(steps[["step", "d_n", "loss", "staleness", "step_s", "rollout_s", "teacher_s", "train_s",
                 "weight_sync_s"]].to_string(index=False), flush=True)
    k = max(1, int(row.get("staleness", 0)))  # k > 0: verl logs once per parameter version (k steps; logparse)
    if not (steps["d_n"].notna().all() and steps["step"].tolist() == list(range(k, STEPS + 1, k))):
        raise SystemExit(f"{row['name']}: expected d_n for steps {list(range(k, STEPS + 1, k))}, got "
                         f"{steps['step'].tolist()} with d_n {steps['d_n'].tolist()}")
    spec = train_spec(out, row, gpus)
    base = out / "heldout_base" / "toy.parquet"
    if not base.exists():
        phases("held-out evaluation, step 0 (the student)", evaluate.heldout_step_job, dag.heldout_spec(spec, 0, ""),
               base)
    last = run_dir / "heldout" / f"step_{STEPS}.parquet"
    phases(f"{row['name']}: held-out evaluation, step {STEPS} (merge + generate + score)", evaluate.heldout_step_job,
           dag.heldout_spec(spec, STEPS, str(run_dir)), last)
    held = evaluate.gather_heldout([base, last], run_dir / "heldout.parquet", run_id=spec.run_id, config=row["name"],
                                   student="toy", seed=0)
    print(held.groupby("step")[["kl", "correct", "n_tokens"]].mean().to_string(), flush=True)


def main():
    import torch
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gpus", type=int, default=torch.cuda.device_count(), help="GPUs to use (default: all)")
    p.add_argument("--rows", type=json.loads, default=ROWS)
    a = p.parse_args()
    from opd.backends.verl import gpu
    t0 = time.perf_counter()
    phases = Phases()
    a.out.mkdir(parents=True, exist_ok=True)
    base = ROOT / "results" / "toy" / "_models" / "qwen-s"
    for which in ("student", "teacher"):
        M.export_hf(M.load(base / f"{which}.pt"), a.out / which)
    toy_task(a.out)
    fits = [r for r in a.rows if plan(a.gpus, int(r.get("staleness", 0)))]
    for r in a.rows:
        if r not in fits:
            print(f"skipped: {r['name']}: needs {3 if r.get('staleness') else 2} GPUs (verl 0.9.1: trainer, "
                  f"{'rollout, ' if r.get('staleness') else ''}teacher in pools of their own) or one they share; "
                  f"this node has {a.gpus}")
    for r in fits:
        train_row(a.out, r, a.gpus, phases)
    row = a.rows[0]
    d_hat = phases(f"{row['name']}: admission check (candidate + reference engine)", gpu.offline_mismatch,
                   admission_spec(a.out, row, a.gpus))
    print(f"{row['name']}: D_hat = {d_hat:.5f}", flush=True)
    print("\nphase times (s):")
    for name, sec in phases.seconds.items():
        print(f"  {sec:7.1f}  {name}")
    print(f"  {time.perf_counter() - t0:7.1f}  total")


if __name__ == "__main__":
    main()
