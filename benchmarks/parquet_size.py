"""The size of an experiment's Parquet files as the store writes them (opd.store.parquet_options) against Parquet's
defaults, each file read and written again in memory (nothing on disk changes). Prints one line per folder kind
(runs, analysis, measurements...) and the total, in MB, with the ratio to the store's options.

usage: python benchmarks/parquet_size.py [--experiment lean] [--limit 0]"""
import argparse
import io
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from opd import store  # noqa: E402

WAYS = {
    "snappy (pyarrow's default)": lambda t: {"compression": "snappy"},
    "zstd, default level": lambda t: {"compression": "zstd"},
    "the store's (opd.store.parquet_options)": store.parquet_options,
}


def size(table, options) -> int:
    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    return len(buf.getvalue())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="lean")
    ap.add_argument("--limit", type=int, default=0, help="at most this many files per kind (0: all)")
    a = ap.parse_args()
    out = ROOT / "results" / a.experiment
    files = defaultdict(list)
    for p in sorted(out.rglob("*.parquet")):
        files[p.relative_to(out).parts[0]].append(p)
    totals = defaultdict(int)
    print(f"{'kind':<16}{'files':>6}  " + "  ".join(f"{w[:28]:>28}" for w in WAYS))
    for kind, paths in files.items():
        paths = paths[:a.limit] if a.limit else paths
        sizes = defaultdict(int)
        for p in paths:
            t = pq.read_table(p)
            for w, opts in WAYS.items():
                sizes[w] += size(t, opts(t))
        for w in WAYS:
            totals[w] += sizes[w]
        print(f"{kind:<16}{len(paths):>6}  " + "  ".join(f"{sizes[w] / 1e6:>25.2f} MB" for w in WAYS))
    ours = totals[list(WAYS)[-1]]
    print(f"{'total':<16}{'':>6}  " + "  ".join(f"{totals[w] / 1e6:>18.2f} MB ({totals[w] / ours:.2f}x)"
                                                for w in WAYS))


if __name__ == "__main__":
    main()
