"""Paper Fig. 5: how much of the FP8 KV-cache mismatch each layer carries, and within a layer how much is
key rounding and how much value rounding: every layer in FP8, one layer at a time, all layers but one,
each with keys and values, keys only, values only in FP8. One panel per student and recipe, each with
its own y-axis; the error bars are the bootstrap standard errors over prompts."""
import numpy as np

from opd import report, scripts, store

PARTS = (("kv", "keys + values", "#b2182b"), ("k", "keys only", "#ef8a62"), ("v", "values only", "#67a9cf"))
ALL_BUT = ("all but this layer (K+V)", "#bbbbbb")


def bars(k):
    """(group label, [(value, se, label, color)]) per group: every layer, then each layer alone."""
    groups = [("all layers", k[k["mode"] == "all"])]
    groups += [(f"layer {int(i)}", g) for i, g in k[k["mode"] == "only"].groupby("layer")]
    out = []
    for label, g in groups:
        g = g.set_index("part")
        b = [(g.loc[p, "d_hat"], g.loc[p, "se"], name, color) for p, name, color in PARTS if p in g.index]
        if label != "all layers":
            ab = k[(k["mode"] == "all_but") & (k["layer"] == int(label.split()[1]))]
            if len(ab):
                b.append((ab["d_hat"].iloc[0], ab["se"].iloc[0], *ALL_BUT))
        out.append((label, b))
    return out


def main(inp, out, params):
    kv = store.read_table(inp[0])
    panels = [(s, r) for s in sorted(kv["student"].unique()) for r in sorted(kv["recipe"].unique())]
    ncols = min(2, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = report.figure(height=1.9 * nrows, ncols=ncols, nrows=nrows, squeeze=False,
                              width=report.COLUMN_WIDTH * (1.0 if ncols == 1 else 2.0))
    for ax, (student, recipe) in zip(axes.flat, panels):
        groups = bars(kv[(kv["student"] == student) & (kv["recipe"] == recipe)])
        width = 0.8 / max(len(b) for _, b in groups)
        for gi, (_, b) in enumerate(groups):
            for j, (v, se, name, color) in enumerate(b):
                ax.bar(gi - 0.4 + width * (j + 0.5), v, width, yerr=se, color=color, error_kw={"lw": 0.6, "capsize": 1},
                       label=name if gi == (0 if j < len(PARTS) else 1) else None)
        ax.axhline(0, color=report.NEUTRAL, lw=0.5)
        top = max(v + se for _, b in groups for v, se, *_ in b)
        ax.set_ylim(top=1.45 * top)  # room for the legend above the bars
        ax.set_xticks(np.arange(len(groups)), [g for g, _ in groups])
        ax.set_title(f"{student}, {recipe}")
        ax.set_ylabel("offline D̂ ± SE (nats/token)")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        report.panel_legend(ax, loc="upper center", ncol=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
