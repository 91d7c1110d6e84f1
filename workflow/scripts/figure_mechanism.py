"""The mechanism's gradient probes (opd/backends/tiny/probes.py) on the primary student: the per-token error
T and the prefix shift S against the noise sigma, at step 0 and at the end of training, in logit and in
parameter space; every sampled prefix's OPD and REINFORCE bias against its bound; the error/update ratio on
fixed prefixes against the training step; and the mean per-prefix bias of OPD against REINFORCE."""
import numpy as np
from matplotlib.colors import to_rgb

from opd import plotmath, report, scripts, store


SPACE = {"logit": "logit space", "param": "parameter space"}


def noise_and_baseline(t, baseline):
    return t[(t["noise_sigma"] > 0) | (t["config"] == baseline)].sort_values(["noise_sigma", "step"])


def main(inp, out, params):
    t = store.read_table(inp[0])
    t = t[t["main"]]  # the probe seed's rows (the extra seeds' spread is in the mechanism table)
    pre = store.read_table(inp[1])
    last = int(t["step"].max())
    fig, axes = report.figure(width=report.COLUMN_WIDTH * 2, height=5.0, ncols=3, nrows=2)
    n = noise_and_baseline(t, params.baseline)
    colors = {"T": report.SERIES_COLORS[1], "S": report.SERIES_COLORS[0]}
    for ax, space in ((axes[0, 0], "logit"), (axes[0, 1], "param")):
        for step, ls, mk in ((0, "--", "o"), (last, "-", "s")):
            g = n[n["step"] == step]
            for term in ("T", "S"):
                ax.plot(g["noise_sigma"], g[f"{term}_{space}"] / g[f"U_{space}"], ls=ls, marker=mk, ms=3,
                        color=colors[term], label=f"{term} / U, step {step}")
        ax.set_yscale(plotmath.LOG)
        ax.set_xlabel("engine weight noise σ")
        ax.set_ylabel("relative to the ideal update U")
        ax.set_title(f"({'a' if space == 'logit' else 'b'}) T and S / U, {SPACE[space]}")
        ax.axhline(1, color="#bbbbbb", lw=0.5)
    axes[0, 0].legend(frameon=False, loc="upper left")

    ax = axes[0, 2]
    for name, color in (("opd", report.SERIES_COLORS[0]), ("rl", report.SERIES_COLORS[1])):
        ok = pre[f"{name}_bound"] > 0
        ax.scatter(pre.loc[ok, f"{name}_bound"], pre.loc[ok, f"{name}_bias"], s=2, alpha=0.35, color=color,
                   lw=0, label={"opd": "OPD: δ⊙A − p(δᵀA)", "rl": "REINFORCE: Rδ"}[name])
    lo = max(1e-8, float(np.nanmin(pre[["opd_bound", "rl_bound"]].where(pre[["opd_bound", "rl_bound"]] > 0))))
    hi = float(np.nanmax(pre[["opd_bound", "rl_bound"]]))
    worst = t[["opd_bias_bound_max_l1", "rl_bias_bound_max_l1"]].max().max()
    ax.plot([lo, hi], [lo, hi], color=report.NEUTRAL, lw=0.7, ls="--",
            label=f"bound (max ‖g‖₁/bound {worst:.2f})")
    ax.set_xscale(plotmath.LOG)
    ax.set_yscale(plotmath.LOG)
    ax.set_xlabel("bound 2 ‖δ‖₁ ‖A‖∞ per prefix")
    ax.set_ylabel("‖g_bias‖₂ per prefix")
    ax.set_title("(c) bias against its bound, per prefix")
    ax.legend(frameon=False, loc="upper left", markerscale=3)

    rows = t[(t["noise_sigma"] > 0) | (t["staleness"] > 0)]
    palette = {}
    for fam, col, key in (("noise", "noise_sigma", "σ"), ("staleness", "staleness", "k")):
        sub = sorted(rows.loc[rows[col] > 0, col].unique())
        for i, v in enumerate(sub):
            shade = 0.35 + 0.65 * (i + 1) / len(sub)
            base = np.array(to_rgb(report.FAMILY_COLORS[fam]))
            palette[(col, v)] = (tuple(1 - shade * (1 - base)), f"{key} = {v:g}")
    for ax, space in ((axes[1, 0], "logit"), (axes[1, 1], "param")):
        for (col, v), (color, label) in palette.items():
            g = rows[rows[col] == v].sort_values("step")
            if col == "staleness":
                g = g[g["noise_sigma"] == 0]
            ax.plot(g["step"], g[f"err_fixed_{space}"] / g[f"upd_fixed_{space}"], marker="o", ms=2.5, color=color,
                    ls="-" if col == "noise_sigma" else ":", label=label)
        ax.set_yscale(plotmath.LOG)
        ax.axhline(1, color="#bbbbbb", lw=0.5)
        ax.set_xlabel("training step")
        ax.set_ylabel("error / update on fixed prefixes")
        ax.set_title(f"({'d' if space == 'logit' else 'e'}) fixed prefixes, {SPACE[space]}")

    ax = axes[1, 2]
    for v in sorted(n["noise_sigma"].unique()):
        if v == 0:
            continue
        g = n[n["noise_sigma"] == v].sort_values("step")
        color = palette[("noise_sigma", v)][0]
        ax.plot(g["step"], g["opd_bias_mean"], color=color, marker="o", ms=2.5, label=f"σ = {v:g}")
        ax.plot(g["step"], g["rl_bias_mean"], color=color, marker="x", ms=3, ls="--")
    ax.plot([], [], color=report.NEUTRAL, marker="o", ms=2.5, label="OPD")
    ax.plot([], [], color=report.NEUTRAL, marker="x", ms=3, ls="--", label="REINFORCE")
    ax.set_yscale(plotmath.LOG)
    ax.set_xlabel("training step")
    ax.set_ylabel("mean ‖g_bias‖₂ per engine prefix")
    ax.set_title("(f) bias: OPD against REINFORCE")
    handles, labels = axes[1, 0].get_legend_handles_labels()
    h2, l2 = ax.get_legend_handles_labels()
    keep = [i for i, lab in enumerate(l2) if lab in ("OPD", "REINFORCE")]
    fig.legend(handles + [h2[i] for i in keep], labels + [l2[i] for i in keep], loc="outside lower center",
               ncol=10, frameon=False)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
