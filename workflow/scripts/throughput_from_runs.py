"""The staleness rows' own training steps as the async-throughput input (verl backend): the same
columns as the tiny backend's measurement, with k from each run's row."""
import pandas as pd

from opd import scripts, store


def main(inp, out, params):
    frames = [store.read_table(p) for p in inp]
    df = pd.concat(frames, ignore_index=True)
    df["k"] = df["config"].map(params.staleness).astype("int64")
    store.write_table(df, out[0])


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
