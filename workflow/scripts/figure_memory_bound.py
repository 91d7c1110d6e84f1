"""Paper Fig. 7, in the paper's unit: optimizer updates per hour when a step asks for more responses than
the KV-cache budget holds in BF16 (an FP8 cache holds twice as many per wave).

Measured (rule memory_bound): the seconds the engine takes to generate one step's responses (best of its
repeats) under a fixed KV-cache budget, and the waves it needs. Derived here: updates per hour =
3600 / those seconds, i.e. as if generation were the whole step (teacher scoring and the update itself are
not in this measurement), an upper bound on the real rate, and each cache's rate relative to BF16's."""
import numpy as np

from opd import plotmath, report, scripts, store

COLORS = {"none": "#000000", "fp8_e4m3": "#b2182b", "fp8_e4m3-l0": "#2166ac"}
LABELS = {"none": "BF16 cache", "fp8_e4m3": "FP8 E4M3 cache", "fp8_e4m3-l0": "FP8 cache, layer 0 BF16"}
REFERENCE = "none"  # the cache every ratio is taken against


def updates_per_hour(seconds_per_step):
    """Optimizer updates per hour if a step took only its generation time: 3600 / seconds."""
    return 3600.0 / np.asarray(seconds_per_step, dtype=float)


def main(inp, out, params):
    mb = store.read_table(inp[0]).assign(updates_h=lambda d: updates_per_hour(d["seconds"]))
    ref = mb[mb["kv_cache"] == REFERENCE].set_index("batch")["updates_h"]
    fit = int(mb.loc[mb["kv_cache"] == REFERENCE, "concurrent"].max())
    fig, (ax, axr) = report.figure(width=report.COLUMN_WIDTH * 1.6, height=2.3, ncols=2)
    caches = [c for c in COLORS if c in set(mb["kv_cache"])] + sorted(set(mb["kv_cache"]) - set(COLORS))
    batches = sorted(mb["batch"].unique())
    width = 0.8 / max(1, len(caches) - 1)
    for i, kv in enumerate(caches):
        g = mb[mb["kv_cache"] == kv].sort_values("batch")
        ax.plot(g["batch"], g["updates_h"], "o-", color=COLORS.get(kv), label=LABELS.get(kv, kv))
        if kv != REFERENCE:
            x = np.arange(len(batches)) + (i - 1 - (len(caches) - 2) / 2) * width
            r = g.set_index("batch")["updates_h"].reindex(batches) / ref.reindex(batches)
            axr.bar(x, r, width * 0.9, color=COLORS.get(kv), label=LABELS.get(kv, kv))
            for xi, ri in zip(x, r):
                axr.text(xi, ri, f"{ri:.2f}", ha="center", va="bottom", fontsize=4.5)
    ax.set_xscale(plotmath.LOG, base=2)
    ax.set_xlabel("responses per step")
    ax.set_ylabel("optimizer updates per hour\n(derived: 3600 s / generation s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"measured generation time; the budget holds {fit} BF16 sequences;\nnumbers: waves, where a "
                 "step does not fit in one", fontsize=5.5)
    report.panel_legend(ax, loc="upper right")
    many = mb[mb["waves"] > 1]
    report.label_points(ax, list(many["batch"]), list(many["updates_h"]), [f"{w}" for w in many["waves"]],
                        [COLORS.get(kv) for kv in many["kv_cache"]])
    axr.axhline(1, color=COLORS[REFERENCE], lw=0.6, ls="--", label=f"{LABELS[REFERENCE]} (= 1)")
    axr.set_xticks(np.arange(len(batches)), [str(b) for b in batches])
    axr.set_xlabel("responses per step")
    axr.set_ylabel(f"updates per hour vs {LABELS[REFERENCE]}")
    axr.set_ylim(0, max(1.0, float(np.nanmax(mb["updates_h"] / mb["batch"].map(ref)))) * 1.35)
    axr.set_title("relative to BF16 (generation only: an upper\nbound on the updates a whole step allows)",
                  fontsize=5.5)
    report.panel_legend(axr, loc="upper left")
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
