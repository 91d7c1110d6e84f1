"""What several test files share that is not a fixture (the fixtures are in conftest.py): loading a script of
workflow/scripts/ or benchmarks/ as a module, and the paper experiment's runs with hostile but legal paths."""
import importlib.util
import os
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_script(path: str | Path, name: str | None = None) -> ModuleType:
    """A script of this tree (`workflow/scripts/figure_budget.py`, `benchmarks/verl_smoke.py`, ...; relative to the
    repository root) imported as a module, so a test calls its functions as Snakemake's `script:` or the command
    line would. `workflow/scripts/<name>` may be written as `<name>`."""
    p = Path(path)
    if not p.suffix:
        p = Path("workflow") / "scripts" / f"{p}.py"
    p = p if p.is_absolute() else ROOT / p
    spec = importlib.util.spec_from_file_location(name or p.stem, p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# legal in a POSIX path or a Hub name: a sweep's comma, a space, list and dict brackets, both quotes, '=',
# ':', '$' (not '${'), '%', '#', '~', unicode, a backslash inside, before a quote and at the end
WEIRD = "d a,b/[x]{y}/'s' \"d\"/k=v:w/$HOME %p #h ~u/ünï ☃/back\\slash/q\\'"


def folder(path: str) -> str:
    """`path` made as a folder (a model must exist to pass the site's check); the string itself."""
    Path(path).mkdir(parents=True, exist_ok=True)
    return path


def hostile(cfg: dict, tmp: Path) -> tuple[dict, str]:
    """The paper experiment of `cfg` (changed in place) with every model and data path under a hostile folder in
    `tmp`, its model folders made (resolved: the jobs get a model folder's resolved path), and a hostile run root,
    relative to the working directory as config.yaml's are: the experiment and the run root."""
    e = cfg["experiments"]["paper"]
    weird = f"{tmp.resolve()}/{WEIRD}"
    for i, s in enumerate(e["students"].values()):
        s.update(model=folder(f"{weird}/student {i}\\"), teacher=folder(f"{weird}/teacher,{i}'"),
                 eagle3=folder(f"{weird}/eagle=3 [{i}]"))
    e["verl"]["data"] = {"train": f"{weird}/train.parquet", "heldout": [f"{weird}/aime,24.parquet", "math 500.parquet"]}
    return e, "runs, [a]={b} 'c' $d ü"


def compose_paper(tmp: Path) -> dict:
    """Every run of the paper experiment, with hostile() paths, composed against verl's installed config as its
    entry point composes it (opd.backends.verl.compose): run id -> (cfg, experiment, run, run_dir (absolute, as
    the working directory made it), overrides, composed config). Composing is the slow part (seconds a run):
    conftest.paper_composed does it once a session; a test that changes a composed config changes a copy."""
    from opd import config as C
    from opd.backends.verl import compose
    from opd.backends.verl.overrides import ASYNC_ENTRY, entry_point, run_overrides
    cfg = C.load()
    e, run_root = hostile(cfg, tmp)
    out = {}
    for r in C.runs(cfg, "paper"):
        run_dir = f"{run_root}/{r.run_id}"
        ov = run_overrides(cfg, r, run_dir=run_dir)
        out[r.run_id] = (cfg, e, r, os.path.abspath(run_dir), ov, compose.compose(ov, entry_point(r.row) == ASYNC_ENTRY))
    return out


class Crash(Exception):
    """A run killed mid-way: raised by crash_at's progress callback."""


def crash_at(step: int):
    """A training run's `progress` callback that kills the run (raises Crash) once `step` steps are done."""
    def progress(n, total, measured):
        if n == step:
            raise Crash
    return progress
