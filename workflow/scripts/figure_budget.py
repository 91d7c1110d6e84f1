"""Paper Fig. 3: quality change Delta against run mismatch D, with the fail line and the budget band."""
import numpy as np

from opd import report, store

D_FLOOR = 1e-6  # a run whose mean log-ratio is at or below zero is drawn here on the log axis


def main(inp, out, params):
    v = store.read_table(inp[0])
    budget = store.read_table(inp[1])
    rows = report.rows_frame(inp[2])
    engines = rows[(rows["algorithm"] == "opd") & (rows["variant"] == "none")][["name", "family"]]
    v = v.merge(engines, left_on="config", right_on="name")
    students = [params.primary] + sorted(set(v["student"]) - {params.primary})
    fig, axes = report.figure(width=report.COLUMN_WIDTH * (1 + 0.6 * (len(students) - 1)), height=2.4,
                              ncols=len(students), sharey=True, squeeze=False,
                              gridspec_kw={"width_ratios": [1.6] + [1] * (len(students) - 1)})
    for ax, student in zip(axes[0], students):
        s = v[v["student"] == student]
        b = budget[(budget["student"] == student) & np.isclose(budget["tau"], params.tau)]
        if len(b) and np.isfinite(b["lo"].iloc[0]) and np.isfinite(b["hi"].iloc[0]):
            ax.axvspan(b["lo"].iloc[0], b["hi"].iloc[0], color="#fee08b", alpha=0.6, lw=0,
                       label=f"budget [{b['lo'].iloc[0]:.3g}, {b['hi'].iloc[0]:.3g}]")
        ax.axhline(100 * params.tau, color=report.NEUTRAL, ls="--", lw=0.7, label=f"τ = {params.tau:.0%}")
        ax.axhline(0, color="#bbbbbb", lw=0.5)
        for fam, g in s.groupby("family"):
            for verdict, marker in (("pass", "o"), ("fail", "X")):
                gg = g[g["verdict"] == verdict]
                if not len(gg):
                    continue
                ax.errorbar(gg["D"].clip(lower=D_FLOOR), 100 * gg["delta"],
                            yerr=[100 * (gg["delta"] - gg["ci_lo"]), 100 * (gg["ci_hi"] - gg["delta"])],
                            fmt=marker, color=report.FAMILY_COLORS[fam], ms=4 if marker == "X" else 3.5,
                            elinewidth=0.6, capsize=1.2, label=f"{fam} ({verdict})")
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=100, linscale=1.5)  # linear up to +-100%, logarithmic beyond
        ax.set_xlabel("run mismatch D (nats/token, log)")
        ax.set_title(f"student {student}")
    axes[0][0].set_ylabel("Δ held-out KL vs standard engine (%, symlog)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    keep = dict(zip(labels, handles))
    axes[0][0].legend(keep.values(), keep.keys(), loc="upper left", frameon=False, ncol=1)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    main(snakemake.input, snakemake.output, snakemake.params)  # noqa: F821
