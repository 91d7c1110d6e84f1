"""Staleness against the learning rate: Delta (against k = 0 at the same lr) and D for each k, one
line per learning rate, on the primary student. Error bars: the seed-aware interval where seeds allow,
else the paper's."""
import numpy as np

from opd import plotmath, report, scripts, store


def main(inp, out, params):
    t = store.read_table(inp[0])
    fig, (a_delta, a_d) = report.figure(width=report.COLUMN_WIDTH * 1.6, height=2.2, ncols=2)
    ks = sorted(t["k"].unique())
    pos = {k: i for i, k in enumerate(ks)}
    colors = {lr: report.SERIES_COLORS[i % len(report.SERIES_COLORS)] for i, lr in enumerate(sorted(t["lr"].unique()))}
    for j, (lr, g) in enumerate(t.groupby("lr")):
        g = g.sort_values("k")
        x = np.array([pos[k] for k in g["k"]]) + 0.08 * (j - 0.5)
        seeds = g["ci_lo_seeds"].notna()
        lo = np.where(seeds, g["ci_lo_seeds"], g["ci_lo"])
        hi = np.where(seeds, g["ci_hi_seeds"], g["ci_hi"])
        verdict = np.where(seeds, g["verdict_seeds"], g["verdict"])
        a_delta.errorbar(x, 100 * g["delta"], yerr=[100 * np.clip(g["delta"] - lo, 0, None),
                                                    100 * np.clip(hi - g["delta"], 0, None)],
                         color=colors[lr], marker="o", ms=3, lw=0.8, capsize=1.5, label=f"lr {lr:.0e}")
        fail = verdict == "fail"
        a_delta.scatter(x[fail], 100 * g["delta"][fail], marker="X", s=30, color=colors[lr], zorder=3)
        a_d.plot(x, g["D"].clip(lower=1e-6), color=colors[lr], marker="o", ms=3, lw=0.8, label=f"lr {lr:.0e}")
    a_delta.axhline(100 * params.tau, color=report.NEUTRAL, ls="--", lw=0.7, label=f"τ = {params.tau:.0%}")
    a_delta.axhline(0, color="#bbbbbb", lw=0.5)
    report.delta_axis(a_delta, 100 * np.concatenate([t["ci_lo"], t["ci_hi"], t["ci_lo_seeds"], t["ci_hi_seeds"]]))
    a_delta.set_ylabel("Δ vs k = 0 at the same lr (%)")
    a_delta.set_title("quality change (X: fails the rule)")
    a_d.set_yscale(plotmath.LOG)
    a_d.set_ylabel("run mismatch D (nats/token)")
    a_d.set_title("mismatch")
    for ax in (a_delta, a_d):
        ax.set_xticks(range(len(ks)), [str(k) for k in ks])
        ax.set_xlabel("staleness k (optimizer steps)")
        ax.legend(frameon=False, loc="upper left")
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
