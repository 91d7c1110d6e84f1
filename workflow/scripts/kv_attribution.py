"""The per-layer FP8 KV-cache attribution from its sequences: D_hat and its bootstrap standard error over
prompts for every case, and each case's share of the keys-and-values case of the same layers, with the
share's paired bootstrap SE (the same prompts resampled for both)."""
import numpy as np
import pandas as pd

from opd import derived, scripts, stats, store

KEYS = ["student", "recipe", "mode", "layer", "part"]


def attribution(seqs: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """One row per student, recipe, mode, layer and part: d_hat, se, n_prompts, n_sequences, n_tokens,
    `share` = d_hat / d_hat of the same case with keys and values in FP8 (1 for that case itself) and
    `share_se` (0 for that case)."""
    est = stats.offline_estimates(seqs, KEYS, n_boot=n_boot, seed=seed)
    per = seqs.groupby(KEYS + ["prompt"])[["logratio_sum", "n_tokens"]].sum()
    shares = []
    for key in est[KEYS].itertuples(index=False):
        whole = (*key[:-1], "kv")
        a, b = per.loc[tuple(key)], per.loc[whole]
        b = b.reindex(a.index)
        share, se = (1.0, 0.0) if key[-1] == "kv" else stats.share_se(
            a["logratio_sum"], a["n_tokens"], b["logratio_sum"], b["n_tokens"], n_boot=n_boot, seed=seed)
        shares.append((share, se))
    est["share"], est["share_se"] = np.array(shares).T if shares else ([], [])
    return est.sort_values(KEYS, ignore_index=True)


def main(inp, out, params):
    seqs = pd.concat([store.read_table(p) for p in inp], ignore_index=True)
    b = params.bootstrap
    derived.write_table(attribution(seqs, b["resamples"], b["seed"]), out[0])


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
