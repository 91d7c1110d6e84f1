"""Paper Fig. 7: generation throughput when a step asks for more responses than the KV-cache budget
holds in BF16; an FP8 cache holds twice as many per wave."""
from opd import report, scripts, store

COLORS = {"none": "#000000", "fp8_e4m3": "#b2182b", "fp8_e4m3-l0": "#2166ac"}
LABELS = {"none": "BF16 cache", "fp8_e4m3": "FP8 E4M3 cache", "fp8_e4m3-l0": "FP8 cache, layer 0 BF16"}


def main(inp, out, params):
    mb = store.read_table(inp[0])
    fig, ax = report.figure(height=2.1)
    for kv, g in mb.groupby("kv_cache"):
        g = g.sort_values("batch")
        ax.plot(g["batch"], g["tokens_per_s"], "o-", color=COLORS.get(kv), label=LABELS.get(kv, kv))
        for b, t, w in zip(g["batch"], g["tokens_per_s"], g["waves"]):
            if w > 1:
                ax.annotate(f"{w}", (b, t), textcoords="offset points", xytext=(0, 3), fontsize=5,
                            color=COLORS.get(kv), ha="center")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("responses per step")
    ax.set_ylabel("generated tokens/s")
    ax.set_title("KV-cache budget fixed; numbers = waves when the batch does not fit", fontsize=6.5)
    ax.legend(frameon=False)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
