"""What a result was made from: code version, package versions, hardware, and file hashes."""
from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("opd-budget", "torch", "numpy", "pandas", "pyarrow", "scipy", "snakemake", "submitit", "verl", "vllm")


def code_version() -> dict:
    def git(*args):
        r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "opd")
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None}


def package_versions() -> dict:
    out = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out


def hardware() -> dict:
    hw = {"host": platform.node(), "machine": platform.machine(), "cpus": os.cpu_count(),
          "python": platform.python_version()}
    try:
        import torch
        hw["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            hw["gpu"] = torch.cuda.get_device_name(0)
            hw["gpus"] = torch.cuda.device_count()
    except ImportError:
        pass
    return hw


def sha256_file(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
