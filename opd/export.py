"""The runs' per-step and held-out curves in the field's tools: TensorBoard event files and Weights & Biases
offline runs, from each run's steps.parquet and heldout.parquet (`python -m opd.cli export`).

One TensorBoard run folder (`DIR/<run_id>/`) or one W&B offline run (under `DIR/wandb/`, named by run id,
grouped by row; upload later with `wandb sync`) per training run. Scalars: `train/<column>` for every numeric
column of steps.parquet at its step (d_n, loss, grad norm, entropy, timings, ...; NaN values left out), and
`heldout/kl` (mean K_x over the held-out problems: the quantity Delta compares), `heldout/kl_sampled`,
`heldout/accuracy` and, where the run logged it, `heldout/entropy` (token-weighted) at each evaluation step.
Wall times are the run's own (its start plus the steps' seconds), so exporting twice writes the same events.

Both tools are optional (`pip install -e '.[export]'`; verl's install brings both) and imported only here."""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from opd import config as C
from opd import outputs as O
from opd import progress, store
from opd.spec import results_dir

SKIP_STEP_COLUMNS = ("step", "seed", "policy_version", "engine_version")  # bookkeeping, not curves


@dataclass(frozen=True)
class ExportRun:
    """One complete run: where its files are and what its run.json says about it."""
    run_id: str
    row: str
    student: str
    seed: int
    folder: Path

    @property
    def meta(self) -> dict:
        return store.read_json(self.folder / "run.json")


def select(cfg: dict, experiment: str | None = None, run: str | None = None, row: str | None = None,
           student: str | None = None) -> list[ExportRun]:
    """The complete runs of one run id, one row (optionally one student), or the whole experiment."""
    exp = experiment or cfg["experiment"]
    if exp not in cfg["experiments"]:
        raise C.ConfigError(f"unknown experiment {exp!r}; known: {sorted(cfg['experiments'])}")
    runs = C.runs(cfg, exp)
    if row is not None and row not in {r.name for r in runs}:
        raise C.ConfigError(f"experiment {exp!r} has no row {row!r}")
    chosen = [r for r in runs if (run is None or r.run_id == run) and (row is None or r.name == row)
              and (student is None or r.student == student)]
    if run is not None and not chosen:
        raise C.ConfigError(f"experiment {exp!r} has no run {run!r} (run ids are <row>.<student>.s<seed>)")
    out = [ExportRun(r.run_id, r.name, r.student, r.seed, Path(results_dir(exp)) / "runs" / r.run_id) for r in chosen]
    done = [r for r in out if store.is_complete(r.folder)]
    if not done:
        raise C.ConfigError(f"none of the {len(out)} selected runs of {exp!r} is complete (no results yet): "
                            f"`snakemake -c 2 {O.analysis_path(results_dir(exp), 'verdicts')}` trains them")
    return done


@dataclass(frozen=True)
class Curves:
    """A run's scalars, {step: {tag: value}} in step order, and each step's wall time (seconds since the epoch:
    the run's start plus the seconds of the steps before it)."""
    scalars: dict
    walltime: dict


def curves(run: ExportRun) -> Curves:
    steps = store.read_table(run.folder / "steps.parquet").sort_values("step", kind="stable")
    held = store.read_table(run.folder / "heldout.parquet")
    start = datetime.fromisoformat(run.meta["start"]).timestamp() if run.meta.get("start") else 0.0
    secs = steps["step_s"].fillna(0.0)
    began = dict(zip(steps["step"].astype(int), start + secs.cumsum() - secs))  # when each step began
    end = start + float(secs.sum())
    scalars: dict[int, dict[str, float]] = {}
    numeric = [c for c in steps.columns if c not in SKIP_STEP_COLUMNS
               and (pd.api.types.is_numeric_dtype(steps[c]) or pd.api.types.is_bool_dtype(steps[c]))]
    for rec in steps[["step", *numeric]].itertuples(index=False):
        d = {f"train/{c}": float(v) for c, v in zip(numeric, rec[1:]) if not math.isnan(float(v))}
        scalars.setdefault(int(rec[0]), {}).update(d)
    for step, g in held.groupby("step"):
        d = {"heldout/kl": float(g["kl"].mean()), "heldout/kl_sampled": float(g["kl_sampled"].mean()),
             "heldout/accuracy": float(g["correct"].mean())}
        if "entropy" in g and g["entropy"].notna().any():
            d["heldout/entropy"] = float((g["entropy"] * g["n_tokens"]).sum() / g["n_tokens"].sum())
        scalars.setdefault(int(step), {}).update(d)
    # step n's scalars at the time step n began (its evaluation scores the weights of the steps before it)
    walltime = {step: float(began.get(step, end)) for step in sorted(scalars)}
    return Curves({s: scalars[s] for s in sorted(scalars)}, walltime)


def _missing(tool: str, e: ImportError) -> RuntimeError:
    return RuntimeError(f"--{tool} needs the {tool} package ({e.name} not found): pip install -e '.[export]'")


def to_tensorboard(runs: list[ExportRun], folder: Path) -> list[Path]:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise _missing("tensorboard", e) from e
    out = []
    bar = progress.Progress("export tensorboard", len(runs), "run")
    for run in runs:
        c = curves(run)
        w = SummaryWriter(log_dir=str(Path(folder) / run.run_id))
        w.add_text("run", f"row {run.row}, student {run.student}, seed {run.seed}: {run.meta.get('row')}", 0,
                   walltime=c.walltime.get(0))
        for step, tags in c.scalars.items():
            for tag, value in tags.items():
                w.add_scalar(tag, value, step, walltime=c.walltime[step])
        w.close()
        out.append(Path(folder) / run.run_id)
        bar.update(run=run.run_id)
    return out


def to_wandb(runs: list[ExportRun], folder: Path, project: str) -> list[Path]:
    try:
        import wandb
    except ImportError as e:
        raise _missing("wandb", e) from e
    Path(folder).mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(quiet=True, silent=True, console="off", x_disable_stats=True,
                              x_disable_machine_info=True, disable_git=True, save_code=False)
    out = []
    bar = progress.Progress("export wandb", len(runs), "run")
    for run in runs:
        c = curves(run)
        meta = run.meta
        w = wandb.init(mode="offline", dir=str(folder), project=project, name=run.run_id, group=run.row,
                       job_type=run.student, settings=settings,
                       config={"row": meta.get("row"), "student": run.student, "seed": run.seed,
                               "settings": meta.get("settings"), "backend": meta.get("backend")})
        for step, tags in c.scalars.items():
            w.log(tags, step=step)
        w.finish()
        out.append(Path(w.dir).parent)
        bar.update(run=run.run_id)
    return out


def main(args) -> int:
    cfg = C.load(args.config or C.ROOT / "config.yaml")
    runs = select(cfg, args.experiment, args.run, args.row, args.student)
    exp = args.experiment or cfg["experiment"]
    if args.tensorboard:
        written = to_tensorboard(runs, args.tensorboard)
        print(f"export: {len(written)} run(s) as TensorBoard event files in {args.tensorboard} "
              f"(`tensorboard --logdir {args.tensorboard}`)")
    if args.wandb:
        written = to_wandb(runs, args.wandb, args.project or f"opd-budget-{exp}")
        print(f"export: {len(written)} run(s) as W&B offline runs in {Path(args.wandb) / 'wandb'} "
              f"(`wandb sync {Path(args.wandb) / 'wandb'}/offline-run-*` uploads them)")
    return 0

