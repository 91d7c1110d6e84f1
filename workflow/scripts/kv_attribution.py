"""The per-layer FP8 KV-cache attribution from its sequences: D_hat and its bootstrap standard error over
prompts for every case, and each case's share of the keys-and-values case of the same layers."""
import pandas as pd

from opd import scripts, stats, store

KEYS = ["student", "recipe", "mode", "layer", "part"]


def attribution(seqs: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """One row per student, recipe, mode, layer and part: d_hat, se, n_prompts, n_sequences, n_tokens, and
    `share` = d_hat / d_hat of the same case with keys and values in FP8 (1 for that case itself)."""
    est = stats.offline_estimates(seqs, KEYS, n_boot=n_boot, seed=seed)
    kv = est[est["part"] == "kv"].set_index(KEYS[:-1])["d_hat"].rename("d_hat_kv")
    est = est.join(kv, on=KEYS[:-1])
    est["share"] = est["d_hat"] / est.pop("d_hat_kv")
    return est.sort_values(KEYS, ignore_index=True)


def main(inp, out, params):
    seqs = pd.concat([store.read_table(p) for p in inp], ignore_index=True)
    b = params.bootstrap
    store.write_table(attribution(seqs, b["resamples"], b["seed"]), out[0])


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
