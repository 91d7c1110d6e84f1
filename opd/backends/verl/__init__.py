"""The verl + vLLM backend: the paper-scale runs on a GPU cluster.

`overrides` (CPU) turns a row into verl's Hydra overrides; `plan` says what verl can run of a row and
when it checkpoints, `layout` where its processes go (both imported by config validation, so neither
imports torch); `logparse` (CPU) turns verl's JSONL log into steps.parquet; `hook` applies the weight
numerics vLLM lacks; `data` prepares verl's parquet files; `gpu` holds what needs GPUs (training job,
admission check), `evaluate` the evaluation jobs of one GPU each (held-out evaluation per step, KV-cache
attribution per case), resumable. Every job takes its typed spec (opd.spec)."""
from __future__ import annotations

from pathlib import Path

from opd.spec import AdmissionSpec, HeldoutSpec, KVAttributionSpec, TrainSpec


def train_run(spec: TrainSpec, run_dir: Path) -> None:
    from . import gpu
    gpu.train_run(spec, run_dir)


def admission_job(spec: AdmissionSpec, out: Path) -> None:
    from . import gpu
    gpu.admission_job(spec, out)


def kv_attribution_job(spec: KVAttributionSpec, out: Path) -> None:
    from . import evaluate
    evaluate.kv_attribution_job(spec, out)


def heldout_step_job(spec: HeldoutSpec, out: Path) -> None:
    from . import evaluate
    evaluate.heldout_step_job(spec, out)
