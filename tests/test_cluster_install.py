"""The cluster install, `pip install -e '.[cluster]'`, brings every module a paper run imports.

tests/fixtures/cluster_resolution.json is pip's own resolution of that install (`pip install --dry-run
--report`, wheels preferred, CPython 3.11 on x86-64 Linux: what `python tests/test_cluster_install.py` writes;
it needs the network, the tests do not). The tests check it is the resolution of the extra pyproject.toml
declares today, and that it holds every module the paths of a paper run import that the CPU tests cannot: the
verl backend's own imports (vLLM, transformers, ...; its jobs run them on GPUs only), and the modules verl
imports only when a setting selects them (the attention implementation, the checkpoint engine that syncs
weights for k > 0), read from the composed config and verl's source. (verl's trainers themselves import on a
CPU: tests/test_verl.py runs their start-up checks.)"""
import ast
import json
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from opd import config as C
from opd.spec import Experiment
from opd.backends.verl import overrides as O
from test_verl import VERL

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "cluster_resolution.json"
# modules this CPU machine does not have (GPU packages, verl's transports), and the distributions that provide them
NOT_HERE = {"cupy": {"cupy-cuda13x", "cupy-cuda12x"}, "flash_attn": {"flash-attn"}, "vllm": {"vllm"}, "zmq": {"pyzmq"}}


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def cluster_install() -> list[str]:
    """What `pip install -e '.[cluster]'` asks for: the project's dependencies and the cluster extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["cluster"]]


def resolve(requirements: list[str]) -> dict:
    """pip's resolution of `requirements` on this machine (Linux x86-64, CPython 3.11, the cluster's), ignoring
    its installed packages and pip configuration, wheels preferred: pip builds nothing but the metadata of the
    two pure-Python sdists the project's dependencies need (PURE_SDISTS); pip cannot restrict a platform
    without refusing every sdist."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--quiet", "--ignore-installed",
                        "--prefer-binary", "--report", str(report), *requirements], check=True)
        return fixture_of(json.loads(report.read_text()), requirements)


def fixture_of(report: dict, requirements: list[str]) -> dict:
    installs = sorted(report["install"], key=lambda i: canonical(i["metadata"]["name"]))
    return {"requirements": requirements, "python": report["environment"]["python_version"],
            "platform": f"{report['environment']['sys_platform']} {report['environment']['platform_machine']}",
            "packages": {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in installs},
            "sdists": [canonical(i["metadata"]["name"]) for i in installs
                       if not i["download_info"]["url"].endswith(".whl")]}


PURE_SDISTS = {"connection-pool", "antlr4-python3-runtime"}  # snakemake's and hydra-core's: no compiler, no torch


@pytest.fixture(scope="module")
def resolution() -> dict:
    return json.loads(FIXTURE.read_text())


def test_the_fixture_is_the_resolution_of_the_cluster_extra_pyproject_declares(resolution):
    assert resolution["requirements"] == cluster_install(), (
        "pyproject.toml's cluster extra changed: re-resolve it with `python tests/test_cluster_install.py`")
    assert resolution["packages"]["verl"] == "0.9.1" and "vllm" in resolution["packages"]
    assert set(resolution["sdists"]) <= PURE_SDISTS  # nothing to compile: flash-attn's sdist would need torch and CUDA


def module_imports(path: Path) -> set[str]:
    """The top-level names a module imports when it is imported: its module-level imports, also inside `with`
    and `if` blocks; not those in functions, and not those in a try whose ImportError is caught (optional)."""
    out = set()

    def visit(nodes):
        for n in nodes:
            if isinstance(n, ast.Import):
                out.update(a.name.split(".")[0] for a in n.names)
            elif isinstance(n, ast.ImportFrom) and n.level == 0:
                out.add(n.module.split(".")[0])
            elif isinstance(n, (ast.With, ast.If)):
                visit(n.body)
            elif isinstance(n, ast.Try) and not any(
                    h.type is not None and "ImportError" in ast.unparse(h.type) for h in n.handlers):
                visit(n.body)

    visit(ast.parse(path.read_text()).body)
    return out


def checkpoint_engine_module(backend: str) -> Path:
    """The file of verl's checkpoint engine registered under `backend` (`@CheckpointEngineRegistry.register`) on
    CUDA (Ascend's hccl engine registers the name nccl too: the file named after the backend first)."""
    hits = [p for p in (VERL / "checkpoint_engine").glob("*_checkpoint_engine.py")
            if f'register("{backend}"' in p.read_text()] or [VERL / "checkpoint_engine" / "base.py"]
    return sorted(hits, key=lambda p: (p.name != f"{backend}_checkpoint_engine.py", p.name))[0]


def lazy_imports() -> set[str]:
    """What the verl backend's own functions import when they run (vLLM, transformers, ...), read from its source."""
    out = set()
    for p in (ROOT / "opd" / "backends" / "verl").glob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Import):
                out.update(a.name.split(".")[0] for a in n.names)
            elif isinstance(n, ast.ImportFrom) and n.level == 0:
                out.add(n.module.split(".")[0])
    return out


def distributions(module: str) -> set[str]:
    return {canonical(d) for d in packages_distributions().get(module, ())} | NOT_HERE.get(module, set())


def missing_from(resolution: dict, modules: set[str]) -> dict[str, set[str]]:
    """The non-standard-library modules of `modules` no distribution of the resolution provides."""
    have = set(resolution["packages"])
    third = {m for m in modules if m not in sys.stdlib_module_names and not m.startswith("_") and m not in ("opd",)}
    return {m: distributions(m) for m in sorted(third) if not distributions(m) & have}


def selected_modules(paper_composed: dict) -> dict[str, set[str]]:
    """Per paper run: the modules its composed verl config selects (attention, the weight-sync engine), from the
    session's composition (conftest.paper_composed)."""
    out = {}
    for _, _, run, _, _, composed in paper_composed.values():
        attention = composed.actor_rollout_ref.model.override_config.attn_implementation
        engine = checkpoint_engine_module(composed.actor_rollout_ref.rollout.checkpoint_engine.backend)
        out[run.run_id] = set(O.ATTENTION_MODULES[attention]) | module_imports(engine)
    return out


def test_every_module_a_paper_run_imports_is_in_the_cluster_install(resolution, paper_composed):
    assert not missing_from(resolution, lazy_imports())
    selected = selected_modules(paper_composed)
    assert any("cupy" in m for m in selected.values()), "the k > 0 runs' weight sync no longer imports cupy: re-read verl"
    for run_id, modules in selected.items():
        assert not missing_from(resolution, modules), run_id


def test_flash_attention_is_opt_in_and_a_run_without_it_says_which_setting_to_change(resolution):
    """verl asks for flash_attention_2 unless told (workers/config/model.py:185); pip cannot install flash-attn
    (no wheel), so the default is sdpa, and choosing flash_attention_2 names the package a run needs."""
    cfg = C.load()
    run = next(r for r in C.runs(cfg, "paper") if r.row.staleness > 0)
    assert Experiment.of(cfg, "paper").verl.attention == "sdpa"
    assert set(O.runtime_modules(run.row, Experiment.of(cfg, "paper").verl)) == {"cupy"}
    flash = Experiment.of(cfg, "paper").verl.with_(attention="flash_attention_2")
    need = O.runtime_modules(run.row, flash)
    assert "flash_attn" in need and "verl.attention" in need["flash_attn"] and "docs/cluster.md" in need["flash_attn"]
    assert missing_from(resolution, set(need)) == {"flash_attn": {"flash-attn"}}
    bad = json.loads(json.dumps(cfg))
    bad["experiments"]["paper"]["verl"]["attention"] = "flash_attention_3"
    with pytest.raises(C.ConfigError, match="verl.attention"):
        C.validate(bad)


if __name__ == "__main__":  # re-resolve the cluster extra (needs the network)
    FIXTURE.write_text(json.dumps(resolve(cluster_install()), indent=1) + "\n")
    print(f"wrote {FIXTURE}")
