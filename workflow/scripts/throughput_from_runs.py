"""The staleness rows' own training steps as the async-throughput input (verl backend): the same
columns as the tiny backend's measurement, with k from each run's row."""
import pandas as pd

from opd import store


def main(inp, out, params):
    frames = [store.read_table(p) for p in inp]
    df = pd.concat(frames, ignore_index=True)
    df["k"] = df["config"].map(params.staleness).astype("int64")
    store.write_table(df, out[0])


if "snakemake" in globals():
    main(snakemake.input, snakemake.output, snakemake.params)  # noqa: F821
