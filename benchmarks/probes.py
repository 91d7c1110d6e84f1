"""What the mechanism's gradient probes (opd/backends/tiny/probes.py) add to a from-scratch regeneration of
the toy. The probes run inside each probed run's own training job (rule train_probed), on the weights the
run keeps, so their cost is the CPU time they add to those jobs: this trains each probed run as its job does
(trainer.train_job, one torch thread), takes the probes' own CPU time (probe_cpu_s in the run's
probes.parquet) and the whole job's, and prints their sum over the runs, divided over the cores of a
from-scratch regeneration (the other training jobs keep every core busy while they run). Goal: at most
60 s on 2 cores.

Run: python benchmarks/probes.py [--cores 2] [--runs N]   (reads the probed runs' job specs the DAG wrote:
results/toy/_jobs/train/*.json with "probes"; `snakemake -n --config experiment=toy` writes them)"""
import argparse
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 60.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cores", type=int, default=2, help="cores of the from-scratch regeneration")
    ap.add_argument("--runs", type=int, default=None, help="only the first N probed runs (a quick look)")
    args = ap.parse_args()
    os.chdir(ROOT)
    from opd import config as C
    from opd import store
    from opd.backends.tiny import trainer
    from opd.spec import TrainSpec

    current = {r.run_id for r in C.runs(C.load(), "toy")}  # a removed row's spec file stays behind: skip it
    files = sorted((ROOT / "results/toy/_jobs/train").glob("*.json"))
    specs = [s for s in (TrainSpec.from_json(store.read_json(p)) for p in files) if s.probes and s.run_id in current]
    if not specs:
        raise SystemExit("no probed run's job spec under results/toy/_jobs/train/: run "
                         "`snakemake -n --config experiment=toy` first")
    specs = specs[:args.runs] if args.runs else specs
    probe = specs[0].probes
    print(f"{len(specs)} probed runs x steps {list(probe.steps)}, {probe.prompts} prompts x {probe.responses} "
          f"responses; load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    probe_cpu = job_cpu = 0.0
    for spec in specs:
        c, t = time.process_time(), time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            trainer.train_job(spec, Path(d))
            table = store.read_table(Path(d) / "probes.parquet")
        job, wall, probes = time.process_time() - c, time.perf_counter() - t, float(table["probe_cpu_s"].iloc[0])
        probe_cpu, job_cpu = probe_cpu + probes, job_cpu + job
        print(f"  {spec.run_id:24s} job {job:5.1f} CPU s ({wall:5.1f} s wall): probes {probes:5.1f} CPU s "
              f"({len(table)} points, {probes / len(table):.2f} s each), training {job - probes:5.1f}")
    print(f"probes: {probe_cpu:.1f} CPU s of {job_cpu:.1f} in these jobs ({100 * probe_cpu / job_cpu:.0f}%); added to a "
          f"from-scratch regeneration on {args.cores} cores: about {probe_cpu / args.cores:.0f} s (goal {GOAL_S:.0f} s)")


if __name__ == "__main__":
    main()
