"""How long building the DAG takes: `snakemake -n` twice in a fresh clone, of the toy experiment (`--config
experiment=toy`, not the default one: its committed results, the first call with no Snakemake metadata and no
memo: its decisions are memoised on the runs' content, so the first call should cost what the second does), then
twice on a generated 1,000-row matrix (the toy experiment's settings, 1,000 OPD rows of varied noise and staleness,
no results). Prints each wall time. Goals: the toy's first dry run
within 1.5x its second; the 1,000-row matrix <= 15 s.
Run: python benchmarks/dag_scale.py [--rows N]"""
import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def dry_runs(folder: Path, what: str, *args: str) -> list[float]:
    """Wall time of two `snakemake -n ARGS` calls in `folder`, printed."""
    times = []
    for label in ("first", "second"):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-q", "rules", *args], cwd=folder,
                           capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if r.returncode:
            sys.exit(r.stdout[-3000:] + r.stderr[-3000:])
        print(f"snakemake -n on {what}, {label}: {times[-1]:6.1f} s")
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        subprocess.run(["git", "clone", "-q", str(ROOT), str(d / "toy")], check=True)  # the committed tree
        toy = dry_runs(d / "toy", "the toy (a fresh clone of HEAD)", "--config", "experiment=toy")
        big = d / "matrix"
        big.mkdir()
        for f in ("Snakefile", "config.yaml"):
            shutil.copy(ROOT / f, big / f)
        shutil.copytree(ROOT / "workflow", big / "workflow")
        cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
        cfg["experiment"] = "toy"  # the matrix replaces the toy's rows: select it (config.yaml's default is another)
        exp = cfg["experiments"]["toy"]
        baseline = next(r for r in exp["rows"] if r.get("baseline"))
        rows = [baseline] + [{"name": f"row{i:05d}", "noise_sigma": round(0.001 * (i % 300), 4), "staleness": i % 9}
                             for i in range(args.rows - 1)]
        exp["rows"] = rows
        exp.pop("edges", None)  # a fixed design: the toy's bisected edges would add their own rows
        (big / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        matrix = dry_runs(big, f"{args.rows} rows")
        print(f"goal: the toy's first dry run within 1.5x its second ({toy[0] / toy[1]:.2f}x) -> "
              f"{'met' if toy[0] <= 1.5 * toy[1] else 'NOT met'}")
        print(f"goal: {args.rows} rows <= 15 s -> {'met' if max(matrix) <= 15 else 'NOT met'}")


if __name__ == "__main__":
    main()
