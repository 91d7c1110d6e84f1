"""The CPU Snakemake's own process spends scheduling, with its default job-start limit and with the limit off as
this workflow's Snakefile sets it (opd.smk.unthrottled), on a workflow of N one-core jobs that only sleep (so nearly
all the CPU measured is Snakemake's). The jobs run on --cores slots, as README command 1 runs the experiment's jobs.

Snakemake 9's default limit (100 starts per second) re-arms a one-second timer at every pass of its scheduler loop,
and every finished job starts one more such timer, so its loop runs about once a second per job finished so far; on
a real run that CPU is taken from the training jobs. Prints, for each, the wall time and the CPU seconds of the
Snakemake process itself (from /proc, without its jobs), and the ratio.

usage: python benchmarks/snakemake_overhead.py [--jobs 120] [--seconds 1.0] [--cores 2]"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAKEFILE = """
{setup}
rule all:
    input: expand("done/{{i}}", i=range({jobs}))

rule job:
    output: "done/{{i}}"
    shell: "sleep {seconds} && touch {{output}}"
"""


def own_cpu_seconds(pid: int) -> float:
    """utime + stime of the process itself (not its children), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # USER_HZ is 100 on Linux


UNTHROTTLED = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom opd import smk\nonstart:\n    smk.unthrottled(workflow)"


def measure(jobs: int, seconds: float, cores: int, setup: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "Snakefile").write_text(SNAKEFILE.format(setup=setup, jobs=jobs, seconds=seconds))
        argv = [sys.executable, "-m", "snakemake", "-c", str(cores), "--quiet", "all"]
        start = time.perf_counter()
        p = subprocess.Popen(argv, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        cpu = 0.0
        while p.poll() is None:  # the last reading before it exits (a zombie's /proc entry may read 0 after)
            try:
                cpu = max(cpu, own_cpu_seconds(p.pid))
            except (FileNotFoundError, IndexError, ValueError):
                pass
            time.sleep(0.2)
        wall = time.perf_counter() - start
        if p.returncode != 0:
            raise SystemExit(f"snakemake failed:\n{p.stderr.read()[-2000:]}")
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=120)
    ap.add_argument("--seconds", type=float, default=1.0, help="how long each job sleeps")
    ap.add_argument("--cores", type=int, default=2)
    a = ap.parse_args()
    print(f"{a.jobs} jobs of {a.seconds:g} s on {a.cores} cores (ideal wall {a.jobs * a.seconds / a.cores:.0f} s)")
    cpu = {}
    for name, setup in (("Snakemake's default limit (100/1s)", ""), ("no limit (opd.smk.unthrottled)", UNTHROTTLED)):
        wall, cpu[name] = measure(a.jobs, a.seconds, a.cores, setup)
        print(f"  {name:32s} wall {wall:6.1f} s   Snakemake's own CPU {cpu[name]:6.1f} s", flush=True)
    default, mine = cpu.values()
    print(f"  ratio of Snakemake's CPU, default limit / none: {default / max(mine, 0.01):.1f}x")


if __name__ == "__main__":
    main()
