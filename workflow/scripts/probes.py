"""The mechanism stage's tables: every probed run's probes.parquet and probes_prefix.parquet (written by its
own training job, opd/backends/tiny/probes.py) as one table each, in the order of the probed runs."""
import pandas as pd

from opd import scripts, store


def main(inp, out, params):
    for runs, table in ((inp.probes, out.probes), (inp.prefix, out.prefix)):
        store.write_table(pd.concat([store.read_table(f) for f in runs], ignore_index=True), table)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
