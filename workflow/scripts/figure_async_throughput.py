"""Paper Fig. 6: measured training throughput against staleness k, and the share of each step the
trainer waits for rollouts. The title says where the data come from: with the tiny backend a dedicated
measurement (rule `throughput`: a short OPD run per k, no evaluation), not the training runs; with verl the
staleness rows' own training runs. Step counts are read from the data."""
import numpy as np

from opd import report, scripts, store

WARMUP = 3  # first steps excluded: thread start-up and the pipeline filling
SOURCE = {"tiny": "a dedicated measurement, not the training runs: one {steps}-step OPD run per k, no evaluation",
          "verl": "the staleness rows' own training runs ({steps} steps each)"}


def main(inp, out, params):
    st = store.read_table(inp[0])
    n_steps = st.groupby("k")["step"].nunique()
    steps = f"{n_steps.min()}" if n_steps.min() == n_steps.max() else f"{n_steps.min()}-{n_steps.max()}"
    st = st[st["step"] >= WARMUP]
    g = st.groupby("k").agg(tokens=("trained_tokens", "sum"), seconds=("step_s", "sum"), wait=("wait_s", "sum"))
    g["tps"] = g["tokens"] / g["seconds"]
    g["ratio"] = g["tps"] / g.loc[0, "tps"]
    g["wait_pct"] = 100 * g["wait"] / g["seconds"]
    fig, ax = report.figure(height=2.3)
    x = np.arange(len(g))
    ax.bar(x, g["ratio"], 0.55, color=report.FAMILY_COLORS["staleness"], label="trained tokens/s, vs k = 0")
    for xi, r in zip(x, g["ratio"]):
        ax.text(xi, r, f"{r:.2f}×", ha="center", va="bottom", fontsize=6)
    ax.axhline(1, color=report.NEUTRAL, lw=0.5, ls=":")
    ax.set_xticks(x, [f"k={k}" for k in g.index])
    ax.set_ylabel("trained tokens/s vs synchronous")
    ax.set_ylim(0, max(g["ratio"]) * 1.3)
    ax2 = ax.twinx()
    ax2.plot(x, g["wait_pct"], "o-", color=report.NEUTRAL, label="trainer waiting (% of step, right axis)")
    ax2.set_ylabel("trainer waiting for rollout (% of step)")
    ax2.set_ylim(0, 100)
    ax2.spines["right"].set_visible(True)
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    report.panel_legend(ax2, handles=handles, loc="upper right")
    source = SOURCE.get(params.backend, "runs of {steps} steps").format(steps=steps)
    ax.set_title(f"data: {source};\nsteps {WARMUP}-{int(st['step'].max())} timed; rollout and training in two threads",
                 fontsize=5.5)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
