"""The cost of the cache check (opd.store.inspect_all, read only) that runs while every DAG is built, on a copy of an
experiment's runs (default: results/toy/runs, the runs of the config's toy experiment), each run.json also
compared with its job spec's hash (built as the DAG builds it). Prints the time of each case:

- legacy, first sight: run.json without hashes, each Parquet file read in full and checked, then hashed
- legacy, again: sizes and mtimes against this checkout's record (.snakemake/opd/verified-<exp>.json)
- hashed, first sight (a fresh clone): run.json with sizes and sha256, every file hashed once
- hashed, again: the steady state of every `snakemake` call
- hashed, --hash (on request: python -m opd.cli check-runs --hash)

usage: python benchmarks/cache_check.py [--experiment toy] [--repeat 3]"""
import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from opd import store  # noqa: E402
from opd.spec import results_dir  # noqa: E402


def timed(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default="toy")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    src = ROOT / "results" / a.experiment / "runs"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / a.experiment
        shutil.copytree(src, out / "runs")
        runs = sorted(d.name for d in (out / "runs").iterdir() if (d / "run.json").exists())
        size = sum(f.stat().st_size for r in runs for f in (out / "runs" / r).iterdir())
        print(f"{len(runs)} runs, {size / 2**20:.1f} MiB in {src}")
        ledger = Path(tmp) / "verified.json"

        # every run's job spec, as the DAG builds them: each run.json's spec hash is compared with its spec's
        from opd import config as C
        from opd import dag
        from opd.spec import Experiment
        e = Experiment.of(C.load(), a.experiment)
        specs = {r: s for r, s in dag.train_specs(e, f"{results_dir(a.experiment)}/_models").items() if r in runs}
        runs = list(specs)

        def check(hash_all=False, fresh=False):
            if fresh:
                ledger.unlink(missing_ok=True)
            found = store.inspect_all(out, runs, ledger, specs=specs, hash_all=hash_all)
            bad = {r: f for r, f in found.items() if f.reruns}
            assert not bad, bad
        rows = [("legacy, first sight (read + schema + hash)", timed(lambda: check(fresh=True), a.repeat)[0]),
                ("legacy, again (stat against the record)", timed(check, a.repeat)[0])]
        for r in runs:
            store.record_files(out / "runs" / r)
        rows += [("hashed, first sight (hash every file)", timed(lambda: check(fresh=True), a.repeat)[0]),
                 ("hashed, again (sizes, mtimes)", timed(check, a.repeat)[0]),
                 ("hashed, --hash (every file hashed)", timed(lambda: check(hash_all=True), a.repeat)[0])]
        for what, s in rows:
            print(f"{what:45s} {1000 * s:8.1f} ms  ({1000 * s / len(runs):.2f} ms/run)")


if __name__ == "__main__":
    main()
