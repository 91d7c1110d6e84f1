"""One training run as the DAG runs it, independent of where it runs (the launcher) and which backend
computes it (opd.backends.JOBS): run.json around the backend's training, and the other Slurm tasks of a
multi-task job. The spec is an opd.spec.TrainSpec (a frozen dataclass, which submitit pickles for Slurm)."""
from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from opd import backends, progress, provenance, store
from opd.spec import TrainSpec, dumps


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def train(spec: TrainSpec | Mapping, run_dir, launcher: str = "local", slurm_job_ids=()) -> dict:
    """One training run: write run.json (running), train (resuming from a checkpoint if one exists),
    then run.json (complete). Returns the final run.json. `launcher` and `slurm_job_ids`: where this
    attempt runs (recorded in run.json)."""
    spec = TrainSpec.of(spec)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    meta_path = run_dir / "run.json"
    previous = store.read_json(meta_path) if meta_path.exists() else {}
    meta = {
        "run_id": spec.run_id, "experiment": spec.experiment, "row": spec.row.resolved(),
        "row_hash": provenance.sha256_text(dumps(spec.row.params())), "student": spec.student, "seed": spec.seed,
        "backend": spec.backend, "settings": spec.settings.written(), "code": provenance.code_version(),
        "packages": provenance.package_versions(), "hardware": provenance.hardware(), "launcher": launcher,
        "slurm_job_ids": previous.get("slurm_job_ids", []) + list(slurm_job_ids),
        "attempts": previous.get("attempts", 0) + 1, "start": previous.get("start") or _now(), "status": "running",
    }
    store.write_json(meta, meta_path)
    t = time.perf_counter()
    job = backends.job("train", spec.backend)
    bar = {"progress": progress.steps_callback(spec.run_id)} if spec.backend == "tiny" else {}
    extra = job(spec, run_dir, **bar) or {}  # what the job measured besides the training (probe_s: its probes)
    # hardware again at the end: as the job ran (the backend sets its thread count)
    # the size and sha256 of every file: the cache check (store.heal_runs) compares them before each DAG
    # wall_s: the training's wall time, over every attempt (a probed run's probes are probe_s, apart)
    meta.update(status="complete", end=_now(), hardware=provenance.hardware(),
                wall_s=round(time.perf_counter() - t - extra.get("probe_s", 0), 3) + previous.get("wall_s", 0),
                files=store.file_records(run_dir), **extra)
    store.write_json(meta, meta_path)
    print(summary(spec.run_id, run_dir, meta["wall_s"]), file=sys.stderr, flush=True)
    return meta


def summary(run_id: str, run_dir, wall_s: float) -> str:
    """The run's one-line summary from the files it wrote: steps, final held-out KL (mean over the last
    evaluation's prompts), wall time (all attempts)."""
    run_dir = Path(run_dir)
    steps = progress.table_rows(run_dir / "steps.parquet") if (run_dir / "steps.parquet").exists() else 0
    kl = step = None
    if (run_dir / "heldout.parquet").exists():
        held = store.read_table(run_dir / "heldout.parquet")
        if len(held):
            step = int(held["step"].max())
            kl = float(held.loc[held["step"] == step, "kl"].mean())
    return progress.training_summary(run_id, steps, kl, step, wall_s)


def train_worker(spec: TrainSpec, run_dir) -> None:
    """Every other Slurm task of a training job (launch.CheckpointableTrain): serves task 0's run and writes
    nothing (no run.json). The verl backend's tasks lend their node to the run's Ray cluster; the tiny
    backend trains in task 0 alone, so its other tasks have nothing to do."""
    if spec.backend == "verl":
        from opd.backends.verl import gpu
        gpu.train_worker(spec, Path(run_dir))
