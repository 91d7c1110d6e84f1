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


def _attempts(run_dir: Path, spec_sha: str) -> list[dict]:
    """The earlier attempts of this run (store.ATTEMPTS: kept beside its checkpoint, never a job output, so a
    failed job's outputs removed by Snakemake take nothing with them); none when the record is of another spec.
    An attempt that ended without finishing (killed, timed out, a full disk) is given the wall time up to its
    last write in the run folder (its last checkpoint): what the run kept of it."""
    try:
        rec = store.read_json(run_dir / store.ATTEMPTS)
    except (OSError, ValueError):
        return []
    if not isinstance(rec, dict) or rec.get("spec_sha256") != spec_sha or not isinstance(rec.get("attempts"), list):
        return []
    out = rec["attempts"]
    if out and out[-1].get("wall_s") is None:
        t0 = out[-1]["t0"]
        last = max((f.stat().st_mtime for f in run_dir.iterdir() if f.name not in (store.ATTEMPTS, "run.json")),
                   default=t0)
        out[-1]["wall_s"] = round(max(0.0, last - t0), 3)
    return out


def train(spec: TrainSpec | Mapping, run_dir, launcher: str = "local", slurm_job_ids=()) -> dict:
    """One training run: write run.json (running), train (resuming from a checkpoint if one exists),
    then run.json (complete), then remove the checkpoint and the record of attempts. Returns the final
    run.json. `launcher` and `slurm_job_ids`: where this attempt runs. run.json records every attempt (store.ATTEMPTS
    keeps them between attempts): their number, the first one's start, the Slurm jobs of all and the wall
    time over all (wall_s; each unfinished attempt's up to its last checkpoint)."""
    spec = TrainSpec.of(spec)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    meta_path = run_dir / "run.json"
    spec_sha = spec.sha256()
    attempts = _attempts(run_dir, spec_sha) + [{"start": _now(), "t0": time.time(), "launcher": launcher,
                                                 "slurm_job_ids": list(slurm_job_ids), "wall_s": None}]
    store.write_json({"spec_sha256": spec_sha, "attempts": attempts}, run_dir / store.ATTEMPTS)
    meta = {
        "run_id": spec.run_id, "experiment": spec.experiment, "row": spec.row.resolved(),
        "row_hash": provenance.sha256_text(dumps(spec.row.params())), "spec_sha256": spec_sha,
        "student": spec.student, "seed": spec.seed,
        "backend": spec.backend, "settings": spec.settings.written(), "code": provenance.code_version(),
        "packages": provenance.package_versions(), "hardware": provenance.hardware(), "launcher": launcher,
        "slurm_job_ids": [j for a in attempts for j in a["slurm_job_ids"]],
        "attempts": len(attempts), "start": attempts[0]["start"], "status": "running",
    }
    store.write_json(meta, meta_path)
    t = time.perf_counter()
    job = backends.job("train", spec.backend)
    bar = {"progress": progress.steps_callback(spec.run_id)} if spec.backend == "tiny" else {}
    extra = job(spec, run_dir, **bar) or {}  # what the job measured besides the training (probe_s: its probes)
    # hardware again at the end: as the job ran (the backend sets its thread count)
    # the size and sha256 of every file: the cache check (store.inspect_all) compares them as each DAG is built
    # wall_s: the training's wall time, over every attempt (a probed run's probes are probe_s, apart)
    wall = time.perf_counter() - t - extra.get("probe_s", 0) + sum(a["wall_s"] for a in attempts[:-1])
    meta.update(status="complete", end=_now(), hardware=provenance.hardware(), wall_s=round(wall, 3),
                files=store.file_records(run_dir), **extra)
    store.write_json(meta, meta_path)
    # only now: a failure before the final run.json (a full disk) resumes from the checkpoint
    for name in (store.CHECKPOINT, store.ATTEMPTS):
        (run_dir / name).unlink(missing_ok=True)
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
