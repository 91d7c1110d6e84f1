"""Paper Fig. 6: measured training throughput against staleness k, and the share of each step the
trainer waits for rollouts."""
import numpy as np

from opd import report, scripts, store

WARMUP = 3  # first steps excluded: thread start-up and the pipeline filling


def main(inp, out, params):
    st = store.read_table(inp[0])
    st = st[st["step"] >= WARMUP]
    g = st.groupby("k").agg(tokens=("trained_tokens", "sum"), seconds=("step_s", "sum"), wait=("wait_s", "sum"))
    g["tps"] = g["tokens"] / g["seconds"]
    g["ratio"] = g["tps"] / g.loc[0, "tps"]
    g["wait_pct"] = 100 * g["wait"] / g["seconds"]
    fig, ax = report.figure(height=2.1)
    x = np.arange(len(g))
    ax.bar(x, g["ratio"], 0.55, color="#5aae61")
    for xi, r in zip(x, g["ratio"]):
        ax.text(xi, r, f"{r:.2f}×", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x, [f"k={k}" for k in g.index])
    ax.set_ylabel("trained tokens/s vs synchronous")
    ax.set_ylim(0, max(g["ratio"]) * 1.18)
    ax2 = ax.twinx()
    ax2.plot(x, g["wait_pct"], "o-", color=report.NEUTRAL, label="trainer waiting (%)")
    ax2.set_ylabel("trainer waiting for rollout (% of step)")
    ax2.set_ylim(0, 100)
    ax2.spines["right"].set_visible(True)
    ax2.legend(frameon=False, loc="center right")
    ax.set_title("asynchronous rollout, measured (rollout and training in two threads)", fontsize=6.5)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
