"""Command line for the DAG's compute jobs: `python -m opd.cli <job> ...`.

Snakemake passes each job's inputs as JSON (`--spec`), so a job depends only on what its rule's params
hold; editing library code never reruns anything by itself."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _spec(path: str) -> dict:
    """A job's spec: the JSON file its rule wrote under results/<experiment>/_specs/."""
    with open(path) as f:
        return json.load(f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m opd.cli", description=__doc__)
    sub = p.add_subparsers(dest="job", required=True)

    t = sub.add_parser("train", help="one training run (row x student x seed)")
    t.add_argument("--spec", type=_spec, required=True)
    t.add_argument("--run-dir", type=Path, required=True)

    b = sub.add_parser("base", help="train a student and its teacher (tiny backend)")
    b.add_argument("--spec", type=_spec, required=True)
    b.add_argument("--out", type=Path, required=True)

    a = sub.add_parser("admission", help="offline admission estimate D_hat for one row and student")
    a.add_argument("--spec", type=_spec, required=True)
    a.add_argument("--out", type=Path, required=True)

    k = sub.add_parser("kv-attribution", help="per-layer FP8 KV-cache attribution of the offline mismatch")
    k.add_argument("--spec", type=_spec, required=True)
    k.add_argument("--out", type=Path, required=True)

    th = sub.add_parser("throughput", help="measured async throughput vs staleness k")
    th.add_argument("--spec", type=_spec, required=True)
    th.add_argument("--out", type=Path, required=True)

    mb = sub.add_parser("memory-bound", help="engine throughput at memory-bound batch sizes, BF16 vs FP8 KV cache")
    mb.add_argument("--spec", type=_spec, required=True)
    mb.add_argument("--out", type=Path, required=True)

    for sp in (t, b, a, k, th, mb):
        sp.add_argument("--launcher", type=_spec, default=None, help="launcher JSON file (default: run here)")
    args = p.parse_args(argv)
    launcher = args.launcher or {"launcher": "local"}
    if args.job == "train":
        from opd import launch
        launch.run_train(args.spec, args.run_dir, launcher)
        return 0
    backend = args.spec.get("backend", "tiny")
    if backend != "tiny":
        from opd.backends import verl as impl
    else:
        from opd.backends.tiny import offline as impl
    name = args.job.replace("-", "_") + "_job"
    fn = getattr(impl, name, None)
    if fn is None:
        p.error(f"the {backend} backend has no {args.job} job")
    from opd import launch
    launch.run_job(fn, args.spec, args.out, launcher if args.job != "base" else {"launcher": "local"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
