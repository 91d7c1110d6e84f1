"""The mismatch guard: (a) d_n per step of each guarded row's first seed, its activations shaded and the batches
it rejected marked, beside the same engine unguarded and the guard's line; (b) Delta against trained tokens/s
(ratio to the standard engine) for guarded, unguarded and the standard engine, an arrow from each unguarded row to
its guarded one.
Throughput in (b) is measured inside the guarded runs (one job): the whole run's and its cheap-engine steps'
tokens/s over its fallback steps', so (b) shows the rows whose fallback is the standard engine. The open marker
(unguarded) is the unguarded row's Delta at the tokens/s its engine reached inside the guarded run (the guarded
run's own cheap-engine steps), not a throughput measured in the unguarded run's job; a guarded run that trained
on no batch of its own engine (every one rejected) measured none, and has no open marker."""
import numpy as np

from opd import report, scripts, store


def spans(active: np.ndarray, steps: np.ndarray):
    """[first, last + 1) steps of each run of True."""
    edges = np.flatnonzero(np.diff(np.r_[0, active.astype(int), 0]))
    return [(steps[a], steps[b - 1] + 1) for a, b in zip(edges[::2], edges[1::2])]


def main(inp, out, params):
    g = store.read_table(inp[0])
    st = store.read_table(inp[1])
    rows = list(g.itertuples(index=False))
    n = len(rows)
    fig, axes = report.figure(width=report.COLUMN_WIDTH * 2, height=1.25 * ((n + 1) // 2 + 1.6),
                              nrows=(n + 1) // 2 + 1, ncols=2, squeeze=False)
    for ax, r in zip(axes[:-1].ravel(), rows):
        seed = st.loc[(st["config"] == r.config) & (st["student"] == r.student), "seed"].min()
        mine = st[(st["config"] == r.config) & (st["student"] == r.student) & (st["seed"] == seed)].sort_values("step")
        plain = st[(st["config"] == r.unguarded) & (st["student"] == r.student) & (st["seed"] == seed)].sort_values("step")
        for j, (a, b) in enumerate(spans(mine["guard_active"].to_numpy(bool), mine["step"].to_numpy())):
            ax.axvspan(a - 0.5, b - 0.5, color="#fdd49e", lw=0, label=None if j else "guard active")
        if len(plain):
            ax.plot(plain["step"], plain["d_n"], color="#bbbbbb", lw=0.7, label="the same engine unguarded")
        ax.plot(mine["step"], mine["d_n"], color=report.SERIES_COLORS[0], lw=0.8, label="guarded run")
        rejected = mine[mine["rejected_d_n"].notna()]
        if len(rejected):  # the row engine's batches that crossed, discarded (reject): not trained on
            ax.scatter(rejected["step"], rejected["rejected_d_n"], marker="x", s=8, lw=0.6, color=report.FAIL_COLOR,
                       label="batch rejected (not trained on)", zorder=3)
        ax.axhline(r.d_max, color=report.FAIL_COLOR, ls="--", lw=0.6, label="the guard's line d_max")
        report.include_reference(ax, 0.0)
        ax.set_title(f"{r.config}, {r.student} s{seed}: {r.action}, {r.cheap_share:.0%} cheap", fontsize=6.5)
        ax.annotate(f"d_max {r.d_max:g}", (1, r.d_max), xycoords=("axes fraction", "data"), ha="right", va="bottom",
                    fontsize=5, color=report.FAIL_COLOR)
        ax.set_xlabel("step")
        ax.set_ylabel("d_n (nats/token)")
    spare = axes[:-1].ravel()[n:]
    for ax in spare:  # one legend for these panels (same encoding): in a spare cell, else above them
        ax.axis("off")
    if len(spare):
        spare[0].legend(*axes[0, 0].get_legend_handles_labels(), loc="center", **report.LEGEND)
    else:
        fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside upper center", ncol=3, **report.LEGEND)
    gs = axes[-1, 0].get_gridspec()
    for ax in axes[-1]:
        ax.remove()
    ax = fig.add_subplot(gs[-1, :])
    ax.scatter([1.0], [0.0], color="#000000", marker="s", s=18, label="standard engine (BF16)", zorder=3)
    for i, r in enumerate(r for r in rows if r.fallback_is_standard):
        c = report.SERIES_COLORS[i % len(report.SERIES_COLORS)]
        gx, gy = r.run_over_fallback, 100 * r.delta
        ax.scatter([gx], [gy], color=c, marker="o", s=16, zorder=3, label=f"{r.config} ({r.verdict_seeds})")
        ux = r.cheap_over_fallback  # NaN where the guarded run trained on no batch of its own engine (reject)
        if r.unguarded is not None and np.isfinite(r.unguarded_delta) and np.isfinite(ux) and np.isfinite(gx):
            uy = 100 * r.unguarded_delta
            ax.scatter([ux], [uy], facecolors="none", edgecolors=c, marker="o", s=16, zorder=3)
            ax.annotate("", xy=(gx, gy), xytext=(ux, uy), arrowprops={"arrowstyle": "->", "color": c, "lw": 0.6})
        ax.errorbar([gx], [gy], yerr=[[100 * (r.delta - r.ci_lo_seeds)], [100 * (r.ci_hi_seeds - r.delta)]],
                    color=c, lw=0.6, capsize=1.5)
    ax.axhline(100 * params.tau, color=report.NEUTRAL, ls="--", lw=0.7, label=f"τ = {params.tau:.0%}")
    ax.axhline(0, color="#bbbbbb", lw=0.5)
    ax.axvline(1, color="#bbbbbb", lw=0.5)
    shown = 100 * np.r_[g["delta"], g["unguarded_delta"].astype(float), g["ci_hi_seeds"]]
    report.delta_axis(ax, shown)
    if np.isfinite(shown).any() and np.nanmax(shown) > 100:  # the largest marker inside the axis, not on its edge
        ax.set_ylim(top=1.5 * np.nanmax(shown))
    ax.set_xlabel("trained tokens/s over the fallback's (BF16) steps, measured inside each guarded run; filled: the whole "
                  "guarded run,\nopen: the unguarded row's Δ at the tokens/s its engine reached inside the guarded run")
    ax.set_ylabel("Δ vs standard engine (%)")
    ax.set_title("Δ against throughput, rows whose fallback is BF16 synchronous (arrows: unguarded → guarded)",
                 fontsize=6.5)
    report.panel_legend(ax, loc="center left", bbox_to_anchor=(1.01, 0.5))
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
