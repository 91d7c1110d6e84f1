"""python -m opd.backends.verl overrides --experiment paper --json
python -m opd.backends.verl prepare-data --train DAPO.parquet --heldout aime24=AIME24.jsonl math500=MATH500.jsonl --out data/
python -m opd.backends.verl heldout --spec results/paper/_jobs/train/RUN.json --run-dir results/paper/runs/RUN
  (re)runs a finished run's held-out evaluation from its checkpoints, step by step in this process (needs vLLM)
python -m opd.backends.verl gather-heldout --spec results/paper/_jobs/train/RUN.json --out RUN/heldout.parquet PART...
  joins a run's held-out parts (the student's step 0, the run's steps) into its heldout.parquet
python -m opd.backends.verl cost --experiment paper [--times smoke-times.json]
  each job kind's Slurm request, the plan's GPU-hours (requeue loss included) and checkpoint disk
python -m opd.backends.verl prefetch --experiment paper
  downloads every model the plan loads into the Hugging Face cache (run on a node with network)"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from opd import config as C
from opd.spec import TrainSpec, results_dir

from . import data
from .overrides import entry_point, run_overrides


def heldout_run(spec: TrainSpec, run_dir: Path) -> pd.DataFrame:
    """A finished run's whole held-out evaluation in this process, step by step as the DAG's jobs compute it
    (parts under `<run_dir>/heldout/`), into the run folder's heldout.parquet: what `python -m
    opd.backends.verl heldout` runs by hand. (Here, above opd.dag, which builds the steps' specs and imports
    this package: evaluate itself imports no opd.dag.)"""
    from opd.dag import heldout_spec

    from .evaluate import gather_heldout, heldout_step_job

    run_dir = Path(run_dir)
    parts = []
    for step in spec.settings.eval_steps():
        parts.append(run_dir / "heldout" / f"step_{step}.parquet")
        heldout_step_job(heldout_spec(spec, step, str(run_dir)), parts[-1])
    return gather_heldout(parts, run_dir / "heldout.parquet", run_id=spec.run_id, config=spec.row.name,
                          student=spec.student, seed=spec.seed)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m opd.backends.verl")
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("overrides", help="verl's Hydra overrides for every run of an experiment")
    o.add_argument("--experiment", default="paper")
    o.add_argument("--config", type=Path, default=C.ROOT / "config.yaml")
    o.add_argument("--json", action="store_true", help="print {run_id: [override, ...]} as JSON")
    d = sub.add_parser("prepare-data", help="DAPO-Math-17k and the held-out sets as verl parquet files")
    d.add_argument("--train", type=Path, required=True)
    d.add_argument("--heldout", nargs="+", required=True, help="name=path, e.g. aime24=aime24.jsonl")
    d.add_argument("--out", type=Path, required=True)
    h = sub.add_parser("heldout", help="held-out evaluation of a run's checkpoints with vLLM -> heldout.parquet")
    h.add_argument("--spec", type=Path, required=True, help="the run's spec (results/<exp>/_jobs/train/<run>.json)")
    h.add_argument("--run-dir", type=Path, required=True)
    g = sub.add_parser("gather-heldout", help="a run's held-out parts -> its heldout.parquet")
    g.add_argument("--spec", type=Path, required=True, help="the run's spec (results/<exp>/_jobs/train/<run>.json)")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("parts", type=Path, nargs="*")
    c = sub.add_parser("cost", help="Slurm requests per job kind, GPU-hours and checkpoint disk of an experiment")
    c.add_argument("--experiment", default="paper")
    c.add_argument("--config", type=Path, default=C.ROOT / "config.yaml")
    c.add_argument("--times", type=Path, default=None,
                   help="measured phase hours, JSON {phase: {student or '*': hours}} (benchmarks/verl_smoke.py writes one)")
    f = sub.add_parser("prefetch", help="download every model the experiment loads (on a node with network)")
    f.add_argument("--experiment", default="paper")
    f.add_argument("--config", type=Path, default=C.ROOT / "config.yaml")
    a = p.parse_args(argv)
    if a.cmd == "cost":
        from opd.spec import Experiment

        from .cost import report
        print(report(Experiment.of(C.load(a.config), a.experiment), json.loads(a.times.read_text()) if a.times else None))
        return 0
    if a.cmd == "prefetch":
        from opd.spec import Experiment

        from .site import prefetch, presence_errors
        e = Experiment.of(C.load(a.config), a.experiment)
        for name, folder in prefetch(e).items():
            print(f"{name}: {folder}")
        missing = sorted({m for s in e.students.values() for m in presence_errors(s, e.verl)})
        for m in missing:
            print(f"still missing: {m}", file=sys.stderr)
        return 1 if missing else 0
    if a.cmd == "heldout":
        # run.json records the training's files only (the held-out file is the evaluation jobs'), so no hash changes
        heldout_run(TrainSpec.from_json(json.loads(a.spec.read_text()), where=str(a.spec)), a.run_dir)
        return 0
    if a.cmd == "gather-heldout":
        from . import evaluate
        from opd import cli, dag
        spec = TrainSpec.from_json(json.loads(a.spec.read_text()), where=str(a.spec))
        with cli.job_log(dag.log_path(spec.experiment, "heldout_gather", spec.run_id)):  # the rule's log:
            evaluate.gather_heldout(a.parts, a.out, run_id=spec.run_id, config=spec.row.name, student=spec.student,
                                    seed=spec.seed)
        return 0
    if a.cmd == "prepare-data":
        paths = data.prepare(a.train, dict(h.split("=", 1) for h in a.heldout), a.out)
        print(json.dumps({k: str(v) for k, v in paths.items()}))
        return 0
    cfg = C.load(a.config)
    runs = C.runs(cfg, a.experiment)
    result = {r.run_id: run_overrides(cfg, r, run_dir=f"{results_dir(a.experiment)}/runs/{r.run_id}") for r in runs}
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        for r in runs:
            print(f"# {r.run_id}\npython -m {entry_point(r.row)} " + " ".join(result[r.run_id]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
