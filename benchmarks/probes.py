"""What the mechanism's gradient probes (opd/backends/tiny/probes.py) add to a from-scratch regeneration of
the toy: the probe job as its rule runs it (one process per core), its wall and CPU time, and how that time
splits into re-creating the runs' weights (retraining each probed run; the runs keep no weights) and the
probes themselves (what the job would cost if the runs saved the weights it needs). Goal: at most 60 s on
2 cores.

Run: python benchmarks/probes.py [--threads 2] [--runs N]   (reads the job spec the DAG wrote:
results/toy/_jobs/probes/<primary student>.json; `snakemake -n` writes it)"""
import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 60.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", default=None, help="the probe job's spec (default: the toy's, under results/toy/_jobs/probes/)")
    ap.add_argument("--threads", type=int, default=2, help="cores the job gets (the rule gives it all of them)")
    ap.add_argument("--runs", type=int, default=None, help="probe only the first N runs (a quick look)")
    args = ap.parse_args()
    os.chdir(ROOT)
    from opd import store
    from opd.backends.tiny import probes as P

    spec_path = Path(args.spec) if args.spec else next(iter(sorted((ROOT / "results/toy/_jobs/probes").glob("*.json"))))
    spec = {**store.read_json(spec_path), "threads": args.threads}
    if args.runs:
        spec["runs"] = spec["runs"][:args.runs]
    print(f"spec {spec_path.relative_to(ROOT)}: {len(spec['runs'])} runs x steps {spec['steps']}, "
          f"{spec['prompts']} prompts x {spec['responses']} responses; {args.threads} processes; "
          f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        P.probes_job(spec, Path(d) / "probes.parquet")
        wall = time.perf_counter() - t
        table = store.read_table(Path(d) / "probes.parquet")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own2 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
           + own2.ru_utime + own2.ru_stime - own.ru_utime - own.ru_stime)
    # CPU seconds of each run's process (not wall: on a shared machine wall time counts the others' work)
    per_run = table.groupby("config")[["recreate_cpu_s", "run_cpu_s", "recreate_s", "run_s"]].first()
    recreate, total = per_run["recreate_cpu_s"].sum(), per_run["run_cpu_s"].sum()
    probing = total - recreate
    n_points = len(table)
    print(per_run.assign(probe_cpu_s=per_run["run_cpu_s"] - per_run["recreate_cpu_s"]).round(1).to_string())
    print(f"job: {wall:.1f} s wall, {cpu:.1f} s CPU in all ({n_points} probe points; "
          f"load average after: {os.getloadavg()[0]:.1f})")
    print(f"  re-creating weights: {recreate:.1f} CPU s ({recreate / len(per_run):.1f} per run)")
    print(f"  probing: {probing:.1f} CPU s ({probing / n_points:.2f} per point)")
    print(f"added to a from-scratch regeneration on {args.threads} cores (CPU time / cores: the cores are busy "
          f"with training while it runs): {cpu / args.threads:.0f} s as built (goal {GOAL_S:.0f} s); "
          f"{(cpu - recreate) / args.threads:.0f} s if the runs saved the weights the probes need")


if __name__ == "__main__":
    main()
