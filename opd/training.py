"""One training run as the DAG runs it, independent of where it runs (the launcher) and which backend
computes it (opd.backends.JOBS): run.json around the backend's training, and the other Slurm tasks of a
multi-task job. Plain JSON-able arguments, so submitit can pickle them for Slurm."""
from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

from opd import config as C
from opd import backends, provenance, store
from opd.rows import Row


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def train(spec: dict, run_dir, launcher_info: dict | None = None) -> dict:
    """One training run: write run.json (running), train (resuming from a checkpoint if one exists),
    then run.json (complete). Returns the final run.json."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    meta_path = run_dir / "run.json"
    previous = store.read_json(meta_path) if meta_path.exists() else {}
    meta = {
        "run_id": spec["run_id"], "experiment": spec["experiment"], "row": Row.of(spec["row"]).resolved(),
        "row_hash": provenance.sha256_text(C.dumps(spec["row"])), "student": spec["student"], "seed": spec["seed"],
        "backend": spec["backend"], "settings": spec["settings"], "code": provenance.code_version(),
        "packages": provenance.package_versions(), "hardware": provenance.hardware(),
        "launcher": (launcher_info or {}).get("launcher", "local"),
        "slurm_job_ids": previous.get("slurm_job_ids", []) + (launcher_info or {}).get("slurm_job_ids", []),
        "attempts": previous.get("attempts", 0) + 1, "start": previous.get("start") or _now(), "status": "running",
    }
    store.write_json(meta, meta_path)
    t = time.perf_counter()
    train_run = backends.job("train", spec["backend"])
    if spec["backend"] == "tiny":
        train_run(spec, run_dir, progress=_progress(spec["run_id"]))
    else:
        train_run(spec, run_dir)
    # hardware again at the end: as the job ran (the backend sets its thread count)
    # the size and sha256 of every file: the cache check (store.heal_runs) compares them before each DAG
    meta.update(status="complete", end=_now(), hardware=provenance.hardware(),
                wall_s=round(time.perf_counter() - t, 3) + previous.get("wall_s", 0),
                files=store.file_records(run_dir))
    store.write_json(meta, meta_path)
    return meta


def train_worker(spec: dict, run_dir) -> None:
    """Every other Slurm task of a training job (launch.CheckpointableTrain): serves task 0's run and writes
    nothing (no run.json). The verl backend's tasks lend their node to the run's Ray cluster; the tiny
    backend trains in task 0 alone, so its other tasks have nothing to do."""
    if spec["backend"] == "verl":
        from opd.backends.verl import gpu
        gpu.train_worker(spec, Path(run_dir))


def _progress(label: str):
    """A tqdm bar on stderr when it is a terminal, else a line every tenth of the run."""
    import sys

    from tqdm import tqdm
    bar = {}

    def report(n, total, row):
        if "bar" not in bar:
            bar["bar"] = tqdm(total=total, initial=n - 1, desc=label, disable=not sys.stderr.isatty(), leave=False)
        bar["bar"].update(1)
        bar["bar"].set_postfix(d_n=f"{row['d_n']:.4f}", loss=f"{row['loss']:.3f}")
        if not sys.stderr.isatty() and (n % max(1, total // 10) == 0 or n == total):
            print(f"{label}: step {n}/{total} d_n={row['d_n']:.4f} loss={row['loss']:.3f}", file=sys.stderr, flush=True)
        if n == total:
            bar["bar"].close()
    return report
