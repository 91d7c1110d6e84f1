"""Paper Fig. 5: how much of the FP8 KV-cache mismatch each layer carries (one layer quantized at a
time, and all layers but one)."""
import numpy as np

from opd import report, scripts, store


def main(inp, out, params):
    kv = store.read_table(inp[0])
    recipes = sorted(kv["recipe"].unique())
    fig, axes = report.figure(height=2.0, ncols=len(recipes), squeeze=False, sharey=True,
                              width=report.COLUMN_WIDTH * max(1, 0.75 * len(recipes)))
    for ax, recipe in zip(axes[0], recipes):
        k = kv[kv["recipe"] == recipe]
        full = k.loc[k["mode"] == "all", "d_hat"].iloc[0]
        only = k[k["mode"] == "only"].sort_values("layer")
        allbut = k[k["mode"] == "all_but"].sort_values("layer")
        x = np.arange(len(only))
        ax.bar(x - 0.2, only["d_hat"], 0.4, color="#b2182b", label="only this layer FP8")
        ax.bar(x + 0.2, allbut["d_hat"], 0.4, color="#92c5de", label="all but this layer FP8")
        ax.axhline(full, color=report.NEUTRAL, ls="--", lw=0.7, label=f"all layers FP8: {full:.2g}")
        ax.set_xticks(x, [f"layer {i}" for i in only["layer"]])
        ax.set_title(recipe)
    axes[0][0].set_ylabel("offline mismatch D̂ (nats/token)")
    axes[0][0].legend(frameon=False, loc="upper right")
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
