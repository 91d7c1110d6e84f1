"""The two backends, and the one place that maps a job kind and a backend to the function computing it.

`tiny` is plain PyTorch on a CPU (opd.backends.tiny); `verl` is verl + vLLM on GPUs (opd.backends.verl).
Both write the same files (the Parquet contracts of opd.store: STEPS, HELDOUT). A job a backend lacks is
absent from JOBS, and asking for it is an error that names the backend and the job. Every job function takes
its job's typed spec (opd.spec) and reads attributes only.
"""
from __future__ import annotations

import importlib
from typing import Callable

from opd.spec import Student

JOBS: dict[tuple[str, str], str] = {
    ("train", "tiny"): "opd.backends.tiny.trainer:train_job",
    ("train", "verl"): "opd.backends.verl:train_run",
    ("base", "tiny"): "opd.backends.tiny.offline:base_job",
    ("admission", "tiny"): "opd.backends.tiny.offline:admission_job",
    ("admission", "verl"): "opd.backends.verl:admission_job",
    ("predictors", "tiny"): "opd.backends.tiny.offline:predictors_job",
    ("kv-attribution", "tiny"): "opd.backends.tiny.offline:kv_attribution_job",
    ("kv-attribution", "verl"): "opd.backends.verl:kv_attribution_job",
    ("heldout", "verl"): "opd.backends.verl:heldout_step_job",
    ("throughput", "tiny"): "opd.backends.tiny.offline:throughput_job",
    ("memory-bound", "tiny"): "opd.backends.tiny.offline:memory_bound_job",
}


# Each backend's checks of an experiment that names it, beyond the schema (what it cannot run), which
# opd.config.validate reports: a function (cfg, experiment) -> [(row index or None, field, why)], imported on first
# use (validation imports no torch). A backend without checks is absent.
CONFIG_CHECKS: dict[str, str] = {
    "verl": "opd.backends.verl.checks:config_errors",
}


def config_errors(cfg: dict, experiment: str) -> list[tuple[int | None, str, str]]:
    """The checks of experiment `experiment`'s backend (CONFIG_CHECKS): (row index, or None for the experiment's own
    settings; field; why)."""
    target = CONFIG_CHECKS.get(cfg["experiments"][experiment].get("backend"))
    if target is None:
        return []
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)(cfg, experiment)


def job(kind: str, backend: str) -> Callable:
    """The function computing job `kind` on `backend` (imported on first use: torch, verl and vLLM load
    only in the jobs that need them)."""
    try:
        target = JOBS[(kind, backend)]
    except KeyError:
        have = sorted(k for k, b in JOBS if b == backend)
        raise ValueError(f"the {backend} backend has no {kind!r} job; it has {have}") from None
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def train_flops_per_token(student: Student | dict, backend: str) -> float:
    """Forward + backward FLOPs per trained token: 3 x the student's forward FLOPs (tiny: counted from
    the architecture at the task's full sequence length; verl: 2 x n_params from the student's spec)."""
    student = Student.of(student)
    if backend == "tiny":
        from opd.backends.tiny.sft import model_config
        from opd.backends.tiny.model import flops_per_token
        from opd.backends.tiny.task import PROMPT_LEN, RESPONSE_LEN
        return 3 * flops_per_token(model_config(student), PROMPT_LEN + RESPONSE_LEN)
    return 3 * 2 * float(student.n_params)
