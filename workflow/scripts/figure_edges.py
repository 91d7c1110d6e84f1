"""Each mechanism's Delta = tau edge in D (opd.stats.edge_tables, seed-aware resampling), per student: the point
where its rows' Delta, made monotone in log D, crosses tau, with its 95% interval from joint replicates; an
interval end beyond the rows' D (no crossing in more than 2.5% of the replicates) is an arrow, and an edge beyond
every row (no crossing at the point estimate) is an arrow from its one finite end. Behind them, the D the
mechanism's rows cover, the student's D(0), and the paper's B_emp(0.20) carried over in its two units (over the
standard engine's D, over the initial held-out KL: opd.scorecard's numbers)."""
import numpy as np

from opd import plotmath, report, scripts, store
from opd.rows import NOISE_FIXED, NOISE_REDRAWN, QUANT_ALPHA, STALENESS, Row, mechanism_order
from opd.scorecard import PAPER_D0_RATIO, PAPER_D0_WORDS, PAPER_KL0_RATIO

RULE = "seeds"  # the edges' own resampling (problems, seeds and base-model draws)


def style(mechanism: str) -> dict:
    """A mechanism's colour (its rows' family) and marker; hollow for the second mechanism of a family."""
    if mechanism.startswith(QUANT_ALPHA):
        w, a, kv = mechanism.removeprefix(QUANT_ALPHA).split("/")
        family, marker, hollow = Row("recipe", weights=w, activations=a, kv_cache=kv).family, "D", False
    elif mechanism in (NOISE_FIXED, NOISE_REDRAWN):
        family, marker, hollow = "noise", "o", mechanism == NOISE_REDRAWN
    else:
        family, marker, hollow = "staleness", "s", mechanism != STALENESS
    color = report.FAMILY_COLORS[family]
    return {"color": color, "marker": marker, "mfc": "white" if hollow else color}


def label(e) -> str:
    """The edge in words beside its marker: D with its interval and over D(0), or the side it is censored on."""
    g = lambda v: "0" if v == 0 else "∞" if np.isinf(v) else f"{v:.2g}"  # noqa: E731
    if np.isinf(e.D_edge):  # beyond its rows' largest D; the interval's finite end apart
        return f"above every row: D > {g(e.D_max)} (95% lower bound {g(e.D_lo)})"
    if e.D_edge == 0:
        return f"below every row: D < {g(e.D_min)} (95% upper bound {g(e.D_hi)})"
    return f"{g(e.D_edge)} [{g(e.D_lo)}, {g(e.D_hi)}], {e.edge_over_d0:.0f}x D(0)"


def arrow(ax, start: float, end: float, y: float, color: str):
    ax.annotate("", xy=(end, y), xytext=(start, y), annotation_clip=False,
                arrowprops=dict(arrowstyle="-|>", color=color, lw=0.9, mutation_scale=6, shrinkA=0, shrinkB=0))


def panel(ax, t, xlim):
    lo_x, hi_x = xlim
    d0, kl0 = float(t["d0"].iloc[0]), float(t["kl0"].iloc[0])
    ax.axvspan(PAPER_D0_RATIO[0] * d0, PAPER_D0_RATIO[1] * d0, color="#fee08b", alpha=0.7, lw=0, zorder=0,
               label=f"paper's B_emp(0.20) as {PAPER_D0_WORDS}")
    ax.axvspan(PAPER_KL0_RATIO[0] * kl0, PAPER_KL0_RATIO[1] * kl0, facecolor="none",
               edgecolor="#bf812d", hatch="////", lw=0, zorder=0,
               label=f"paper's B_emp(0.20) as {PAPER_KL0_RATIO[0]:.1f}–{PAPER_KL0_RATIO[1]:.1f}x "
                     "the initial held-out KL")
    ax.axvline(d0, color=report.NEUTRAL, ls=":", lw=0.7, label="D(0): the standard engine's own D")
    ax.plot([], [], "-o", color=report.NEUTRAL, ms=4, lw=1.0,
            label="edge (Δ = τ) and its 95% interval; |: the finite end of an edge beyond every row")
    for y, e in enumerate(t.itertuples()):
        s = style(e.mechanism)
        ax.plot([e.D_min, e.D_max], [y, y], color="#d9d9d9", lw=4, solid_capstyle="butt", zorder=1,
                label="D of the mechanism's rows" if y == 0 else None)
        finite = np.isfinite(e.D_edge) and e.D_edge > 0
        left = e.D_lo if e.D_lo > 0 else lo_x
        right = e.D_hi if np.isfinite(e.D_hi) else hi_x
        if finite:
            ax.plot([left, right], [y, y], color=s["color"], lw=1.0, zorder=2)
            ax.plot([e.D_edge], [y], ls="none", ms=4.5, mec=s["color"], zorder=3, **s)
        else:
            at = e.D_lo if np.isinf(e.D_edge) else e.D_hi
            ax.plot([at], [y], ls="none", marker="|", ms=7, color=s["color"], zorder=3)
        if e.censored_lo:
            arrow(ax, e.D_edge if finite else right, lo_x, y, s["color"])
        if e.censored_hi:
            arrow(ax, e.D_edge if finite else left, hi_x, y, s["color"])
        at = e.D_edge if finite else (left if np.isinf(e.D_edge) else right)
        # centred on its point, or inside the axes where the point is an end of them (an interval open on that side)
        ha = "left" if at <= lo_x else "right" if at >= hi_x else "center"
        ax.annotate(label(e), (at, y), xytext=(0, 4.5), textcoords="offset points", fontsize=5, ha=ha, va="bottom",
                    color=s["color"], bbox={"facecolor": "white", "alpha": 0.8, "lw": 0, "pad": 0.3})
    ax.set_yticks(range(len(t)), [f"{m}\n({n} rows, {r} runs)" for m, n, r in zip(t["mechanism"], t["n_rows"],
                                                                                  t["n_runs"])], fontsize=5.5)
    ax.set_ylim(-0.6, len(t) - 0.1)
    ax.invert_yaxis()
    ax.set_title(f"{t['student'].iloc[0]}: D(0) = {d0:.2g}, initial held-out KL {kl0:.3g}", fontsize=6.5)


def main(inp, out, params):
    t = store.read_table(inp[0])
    t = t[t["rule"] == RULE]
    students = [s for s in dict.fromkeys([params.primary, *sorted(t["student"])]) if s in set(t["student"])]
    ends = np.concatenate([t[c].to_numpy(float) for c in ("D_edge", "D_lo", "D_hi", "D_min", "D_max", "d0")]
                          + [PAPER_D0_RATIO[1] * t["d0"].to_numpy(float),
                             PAPER_KL0_RATIO[1] * t["kl0"].to_numpy(float)])
    ends = ends[np.isfinite(ends) & (ends > 0)]
    xlim = (ends.min() / 2.5, ends.max() * 2.5) if len(ends) else (1e-5, 1.0)
    heights = [max(2, (t["student"] == s).sum()) for s in students]
    fig, axes = report.figure(width=report.COLUMN_WIDTH * 2, height=0.45 * sum(heights) + 0.5 * len(students) + 0.7,
                              nrows=max(1, len(students)), sharex=True, squeeze=False,
                              gridspec_kw={"height_ratios": heights or [1]})
    for ax, student in zip(axes[:, 0], students):
        s = t[t["student"] == student]
        s = s.iloc[sorted(range(len(s)), key=lambda i: mechanism_order(s["mechanism"].iloc[i]))]
        ax.set_xscale(plotmath.LOG)
        ax.set_xlim(*xlim)
        panel(ax, s, xlim)
    axes[-1, 0].set_xlabel(f"run mismatch D (nats/token, log) where Δ crosses τ = {params.tau:.0%}: the edge with "
                           "its 95% interval (joint seed-aware replicates; arrow: beyond the rows' D)")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=2, **report.LEGEND)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
