"""The bisected budget edges (opd.plan): one panel per edge (rows) and student (columns), each with the in-training
D of every value the bisection tried, in the order it tried them, passing or failing under the seed-aware rule, the
bracket [largest pass, smallest fail] after each value narrowing towards the edge, and, where the experiment has a
grid of rows on the same axis, that grid's largest pass and smallest fail for comparison."""
import numpy as np

from opd import report, scripts, store

MARKS = (("pass", report.PASS_COLOR, "o", "passes"), ("fail", report.FAIL_COLOR, "x", "fails"),
         (None, "#999999", "s", "undecided"))


def title(edge: str, student: str, s) -> str:
    """A panel's title: the edge, the student and the bracket the last value left."""
    last = s.iloc[-1]
    lo, hi = last["D_lo_after"], last["D_hi_after"]
    bracket = (f"a pass at D {lo:.2g} above a fail at {hi:.2g}" if lo > hi else
               f"D in [{lo:.2g}, {hi:.2g}]" if np.isfinite(lo) and np.isfinite(hi) else
               f"D > {lo:.2g}: no fail" if np.isfinite(lo) else f"D < {hi:.2g}: no pass" if np.isfinite(hi) else
               "no bracket")
    return f"{edge} · {student}: {bracket}"


def panel(ax, s) -> None:
    x = s["order"].to_numpy() + 1
    ax.fill_between(x, s["D_lo_after"], s["D_hi_after"], step="mid", color="#fde0ef", lw=0,
                    label="bracket after each value")
    g = s.iloc[0]
    if g["grid_rows"] > 1:  # the experiment's own rows on this axis
        for y, ls in ((g["grid_lo"], ":"), (g["grid_hi"], "--")):
            if np.isfinite(y):
                ax.axhline(y, color=report.NEUTRAL, ls=ls, lw=0.7)
    for verdict, color, marker, label in MARKS:
        m = (s["verdict"].isna() if verdict is None else s["verdict"] == verdict).to_numpy()
        if m.any():
            ax.scatter(x[m], s["D"].to_numpy()[m], color=color, marker=marker, s=14, lw=1, zorder=3,
                       facecolors="none" if marker == "o" else color, label=label)
    for xi, (v, D, n) in zip(x, s[["value", "D", "n_seeds"]].itertuples(index=False)):
        if np.isfinite(D):
            ax.annotate(f"{v:.3g} ({n})", (xi, D), xytext=(4, 0), textcoords="offset points", fontsize=5,
                        ha="left", va="center")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xlim(0.6, x.max() + 1.0)


def main(inp, out, params):
    t = store.read_table(inp[0])
    edges = list(dict.fromkeys(t["edge"]))
    students = [s for s in dict.fromkeys([params.primary, *t["student"]]) if s in set(t["student"])]
    fig, axes = report.figure(width=max(report.COLUMN_WIDTH, 2.3 * len(students)), height=0.4 + 1.55 * len(edges),
                              ncols=len(students), nrows=len(edges), squeeze=False)
    for i, edge in enumerate(edges):
        for j, student in enumerate(students):
            ax, s = axes[i][j], t[(t["edge"] == edge) & (t["student"] == student)].sort_values("order")
            if s.empty:
                ax.set_axis_off()
                continue
            panel(ax, s)
            ax.set_title(title(edge, student, s), fontsize=6)
            if j == 0:
                ax.set_ylabel("D (nats/token)")
            if i == len(edges) - 1:
                ax.set_xlabel("value tried, in order")
    handles = {}
    for ax in axes.flat:
        handles.update(zip(*reversed(ax.get_legend_handles_labels())))
    if (t["grid_rows"] > 1).any():
        ax = axes[0][0]
        handles["grid's largest pass"] = ax.plot([], [], color=report.NEUTRAL, ls=":", lw=0.7)[0]
        handles["grid's smallest fail"] = ax.plot([], [], color=report.NEUTRAL, ls="--", lw=0.7)[0]
    fig.legend(list(handles.values()), [f"{k} (labels: value (seeds))" if k == "passes" else k for k in handles],
               loc="outside lower center", ncol=3, **report.LEGEND)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
