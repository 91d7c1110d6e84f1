"""The bisected budget edges (opd.plan): per student, D of each value the bisection tried, in the order it tried
them, passing or failing under the seed-aware rule; the bracket [largest pass, smallest fail] after each value
narrowing towards the edge; and the same student's budget from the experiment's grid of rows, for comparison."""
import numpy as np

from opd import report, scripts, store


def main(inp, out, params):
    t = store.read_table(inp[0])
    students = [s for s in dict.fromkeys([params.primary, *t["student"]]) if s in set(t["student"])]
    fig, axes = report.figure(width=max(report.COLUMN_WIDTH, 2.2 * len(students)), height=2.4,
                              ncols=max(1, len(students)), squeeze=False)
    for ax, student in zip(axes[0], students):
        s = t[t["student"] == student].sort_values("order")
        x = s["order"].to_numpy() + 1
        ax.fill_between(x, s["D_lo_after"], s["D_hi_after"], step="mid", color="#fde0ef", lw=0,
                        label="bracket after each value")
        g = s.iloc[0]
        for y, ls in ((g["grid_lo"], ":"), (g["grid_hi"], "--")):
            if np.isfinite(y):
                ax.axhline(y, color=report.NEUTRAL, ls=ls, lw=0.7)
        for verdict, color, marker in (("pass", report.PASS_COLOR, "o"), ("fail", report.FAIL_COLOR, "x"),
                                       (None, "#999999", "s")):
            m = s["verdict"].isna() if verdict is None else s["verdict"] == verdict
            if m.any():
                ax.scatter(x[m.to_numpy()], s.loc[m, "D"].where(s.loc[m, "D"].notna(), np.nan), color=color,
                           marker=marker, s=14, lw=1, zorder=3, facecolors="none" if marker == "o" else color,
                           label={"pass": "passes", "fail": "fails", None: "undecided"}[verdict])
        for xi, (v, D, n) in zip(x, s[["value", "D", "n_seeds"]].itertuples(index=False)):
            if np.isfinite(D):
                ax.annotate(f"{v:.3g} ({n})", (xi, D), xytext=(0, 5), textcoords="offset points", fontsize=4.5,
                            ha="center", va="bottom")
        ax.set_yscale("log")
        ax.set_xticks(x)
        ax.set_xlim(0.5, x.max() + 0.9)
        ax.set_xlabel("value tried, in order\n(labels: σ (seeds run))")
        last = s.iloc[-1]
        edge = np.sqrt(last["D_lo_after"] * last["D_hi_after"])
        grid = (f"grid {g['grid_lo']:.2g}-{g['grid_hi']:.2g}" if np.isfinite(g["grid_edge"]) else
                "grid: no fail" if np.isnan(g["grid_hi"]) else "grid: no pass")
        ax.set_title(f"{student}: edge D {edge:.2g} ({len(s)} values, "
                     f"{int(s['n_seeds'].sum())} runs)\n{grid} ({int(g['grid_rows'])} rows, {int(g['grid_runs'])} runs)"
                     if np.isfinite(edge) else f"{student}: no bracket ({len(s)} values)\n{grid}", fontsize=6)
    axes[0][0].set_ylabel("in-training D (nats/token)")
    axes[0][0].plot([], [], color=report.NEUTRAL, ls=":", lw=0.7, label="grid's largest pass")
    axes[0][0].plot([], [], color=report.NEUTRAL, ls="--", lw=0.7, label="grid's smallest fail")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=3, **report.LEGEND)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
