"""d_n per training step for every OPD row of the primary student (or, where no engine row runs it, of the first
student one runs), one panel per mismatch source. Guarded rows
are left out: their steps mix the row's engine and the guard's action, so a line of theirs is no one engine's
d_n (figure_guard draws them, with the guard's activations shaded)."""
from opd import plotmath, report, scripts, store

SMOOTH = 5  # steps in the centred rolling mean drawn over the raw points


def main(inp, out, params):
    st = store.read_table(inp[0])
    rows = report.rows_frame(inp[1])
    rows = rows[(rows["algorithm"] == "opd") & ~rows["guarded"]]
    st = st.merge(rows[["name", "family", "variant"]], left_on="config", right_on="name")
    # the primary student, or where no engine row runs it, the first student one runs (in the config's order)
    engines = st[~st["family"].isin(("baseline", "rl"))]
    ran = [s for s in [params.primary, *params.students] if s in set(engines["student"])]
    student = ran[0] if ran else params.primary
    st = st[st["student"] == student]
    fams = [f for f in report.FAMILY_COLORS if f not in ("baseline", "rl") and f in set(st["family"])]
    fig, axes = report.figure(width=report.COLUMN_WIDTH * 2, height=2.6, ncols=len(fams), sharey=True, squeeze=False)
    base = st[st["config"] == params.baseline].groupby("step")["d_n"].mean()
    for ax, fam in zip(axes[0], fams):
        ax.plot(base.index, base.rolling(SMOOTH, center=True, min_periods=1).mean(), color="black", lw=0.8,
                label=params.baseline)
        for cfg, g in st[(st["family"] == fam)].groupby("config"):
            d = g.groupby("step")["d_n"].mean()
            line, = ax.plot(d.index, d.rolling(SMOOTH, center=True, min_periods=1).mean(), lw=0.8, label=cfg)
            ax.scatter(d.index, d, s=0.5, color=line.get_color(), alpha=0.4)
        ax.set_yscale(plotmath.SYMLOG, linthresh=1e-3, linscale=0.5)
        ax.set_title(fam)
        ax.set_xlabel("step")
        report.panel_legend(ax, below=True, fontsize=4.5, bbox_to_anchor=(0.5, -0.5))
    axes[0][0].set_ylabel("d_n (nats/token)")
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
