"""Paper Fig. 4: the offline estimate D_hat (± its bootstrap standard error over prompts) against the
in-training D, and the admission line."""
import json

import numpy as np

from opd import plotmath, report, scripts, store


def main(inp, out, params):
    rec = store.read_table(inp[0]).dropna(subset=["D"])
    summary = json.loads(open(inp[1]).read())
    fig, ax = report.figure(height=2.5)
    alpha, L = rec["alpha"].iloc[0], rec["L"].iloc[0]
    lim = max(1e-3, float(np.nanmax(np.abs(rec[["d_hat", "D"]].to_numpy()))) * 2)
    x = np.geomspace(1e-4, lim, 50)
    ax.plot(x, x, color="#bbbbbb", lw=0.6, label="D = D̂")
    ax.plot(x, alpha * x, color=report.NEUTRAL, lw=0.6, ls=":", label=f"D = {alpha:g} D̂ (α)")
    ax.axvline(L / alpha, color=report.NEUTRAL, ls="--", lw=0.7, label=f"admit iff D̂ < L/α = {L / alpha:.3g}")
    for outcome, color in (("pass", report.PASS_COLOR), ("fail", report.FAIL_COLOR)):
        g = rec[rec["outcome"] == outcome]
        for admitted, marker in ((True, "o"), (False, "s")):
            gg = g[(g["admit"] == admitted) & g["candidate"]]
            if len(gg):
                ax.errorbar(gg["d_hat"], gg["D"], xerr=gg["se"], fmt=marker, color=color, ms=3.5, elinewidth=0.6,
                            capsize=1.2, zorder=3, label=f"trained: {outcome}, {'admitted' if admitted else 'rejected'}")
    base = rec[~rec["candidate"]]
    if len(base):
        ax.errorbar(base["d_hat"], base["D"], xerr=base["se"], fmt="D", color="#000000", mfc="none", ms=3.5,
                    elinewidth=0.6, capsize=1.2, zorder=3, label="standard engine (not a decision)")
    ax.set_xscale(plotmath.SYMLOG, linthresh=1e-3, linscale=0.5)
    ax.set_yscale(plotmath.SYMLOG, linthresh=1e-3, linscale=0.5)
    ax.set_xlabel("offline estimate D̂ ± SE (nats/token)")
    ax.set_ylabel("in-training D (nats/token)")
    ax.set_title(f"{summary['n_agree']}/{summary['n_decisions']} candidate decisions match training "
                 f"(admit everything: {summary['n_admit_all_agree']}/{summary['n_decisions']}); "
                 f"implied α = {summary['alpha_implied']:.2f}", fontsize=6)
    ax.legend(frameon=False, loc="upper left")
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
