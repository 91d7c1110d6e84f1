"""The verl + vLLM backend: the paper-scale runs on a GPU cluster.

`overrides` (CPU) turns a row into verl's Hydra overrides; `plan` says what verl can run of a row and
when it checkpoints, `layout` where its processes go (both imported by config validation, so neither
imports torch); `logparse` (CPU) turns verl's JSONL log into steps.parquet; `hook` applies the weight
numerics vLLM lacks; `data` prepares verl's parquet files; `gpu` holds what needs GPUs (training job,
admission check), `evaluate` the evaluation jobs of one GPU each (held-out evaluation per step, KV-cache
attribution per case), resumable; `site` what a cluster site must provide (the driver, every job checks it first;
models and data, checked before submission; prefetch). Every job takes its typed spec (opd.spec)."""
from __future__ import annotations

from pathlib import Path

from opd.spec import AdmissionSpec, HeldoutSpec, KVAttributionSpec, TrainSpec

from .site import check_driver


def train_run(spec: TrainSpec, run_dir: Path) -> None:
    from . import gpu
    gpu.train_run(spec, run_dir)  # checks the driver first (site.check_driver), as every verl job does


def admission_job(spec: AdmissionSpec, out: Path) -> None:
    check_driver(f"admission {Path(out).stem}")
    from . import gpu
    gpu.admission_job(spec, out)


def kv_attribution_job(spec: KVAttributionSpec, out: Path) -> None:
    check_driver(f"kv attribution {Path(out).stem}")
    from . import evaluate
    evaluate.kv_attribution_job(spec, out)


def heldout_step_job(spec: HeldoutSpec, out: Path) -> None:
    check_driver(f"held-out evaluation {spec.name}")
    from . import evaluate
    evaluate.heldout_step_job(spec, out)
