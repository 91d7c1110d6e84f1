"""Paper Fig. 4: the offline estimate D_hat (± its bootstrap standard error over prompts) against the
in-training D, and the admission line. Where the step-0 statistics exist (tiny backend: rule predictors), a second
panel: the fitted rule's statistic against Delta, with its cut, each candidate marked by its held-out decision."""
import json

import numpy as np

from opd import plotmath, report, scripts, stats, store


def paper_panel(ax, rec, summary) -> None:
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
    ax.set_title(f"The paper's rule: {summary['n_agree']}/{summary['n_decisions']} candidate decisions match training\n"
                 f"(admit everything: {summary['n_admit_all_agree']}/{summary['n_decisions']}); "
                 f"implied α = {summary['alpha_implied']:.2f}", fontsize=6)
    report.panel_legend(ax, loc="upper left")


RING_COLORS = ("#000000", "#7a3e9d", "#b8860b")  # one per frozen rule, in config.yaml's order (cycled)


def fitted_panel(ax, step0, rule: stats.FittedRule, tau: float, frozen=()) -> None:
    """The fitted rule's statistic (x) against Delta (y) for every candidate with an outcome: colour the training
    outcome, marker the held-out decision (o admitted, s rejected), the cut as a vertical line. Where config.yaml
    freezes rules (`frozen`: their prospective tests), each candidate is ringed in the colour of every rule that
    decided before its runs, one ring per rule (later rules' rings larger, so a candidate prospective for two rules
    wears both); each rule's record is in the title, and its cut is drawn (dotted, in its colour) where it decides on
    the panel's statistic."""
    t = step0[step0["outcome"].isin(["pass", "fail"])]
    x = t[rule.statistic].to_numpy(dtype=float)
    for outcome, color in (("pass", report.PASS_COLOR), ("fail", report.FAIL_COLOR)):
        for admitted, marker in ((1.0, "o"), (0.0, "s")):
            m = ((t["outcome"] == outcome) & (t["fitted_admit"] == admitted)).to_numpy()
            if m.any():
                ax.scatter(x[m], 100 * t["delta"].to_numpy(dtype=float)[m], marker=marker, s=11, color=color,
                           zorder=3, label=f"trained: {outcome}, {'admitted' if admitted else 'rejected'} (held out)")
    for i, test in enumerate(frozen):
        color = RING_COLORS[i % len(RING_COLORS)]
        col = f"prospective.{test.name}"
        m = t[col].fillna(False).to_numpy(dtype=bool) if col in t else np.zeros(len(t), dtype=bool)
        if m.any():
            ax.scatter(x[m], 100 * t["delta"].to_numpy(dtype=float)[m], marker="o", s=42 + 36 * i,
                       facecolors="none", edgecolors=color, linewidths=0.6, zorder=4,
                       label=f"prospective for {test.name}")
        if test.statistic == rule.statistic and test.threshold.sign == rule.sign \
                and test.threshold.t != rule.threshold:
            ax.axvline(test.threshold.sign * test.threshold.t, color=color, ls=":", lw=0.7,
                       label=f"frozen {test.name}: admit iff {test.label}")
    ax.axvline(rule.sign * rule.threshold, color=report.NEUTRAL, ls="--", lw=0.7, label=f"admit iff {rule.label}")
    ax.axhline(100 * tau, color="#bbbbbb", lw=0.6, ls=":", label=f"τ = {tau:.0%}")
    if (x[np.isfinite(x)] > 0).all():
        ax.set_xscale("log")
    else:
        ax.set_xscale(plotmath.SYMLOG, linthresh=1e-2, linscale=0.5)
    report.delta_axis(ax, 100 * t["delta"].to_numpy(dtype=float))
    ax.set_xlabel(f"{stats.PREDICTORS.get(rule.statistic, rule.statistic)} at the step-0 student")
    ax.set_ylabel("Δ, paper's estimate (%)")
    ax.set_title(f"A fitted rule (beyond the paper): {rule.n_agree_held_out}/{rule.n_held_out} decisions match "
                 f"training\nheld out (each fitted without its candidate); {rule.n_agree}/{rule.n} in sample"
                 + "".join(f"\nfrozen {f.name} ({f.label}):\n{f.n_agree}/{f.n} prospective "
                           f"(paper's rule {f.n_agree_paper}/{f.n}, admit all {f.n_agree_all}/{f.n})"
                           for f in frozen if f.n), fontsize=6)
    report.panel_legend(ax, loc="upper left")


def main(inp, out, params):
    rec = store.read_table(inp.admission).dropna(subset=["D"])
    summary = json.loads(open(inp.admission_summary).read())
    record = store.read_table(inp.predictors) if hasattr(inp, "predictors") else None
    rule = stats.fitted_rule_of(record) if record is not None else None
    frozen = stats.prospective_tests_of(record) if rule is not None else ()
    if rule is None:
        fig, ax = report.figure(height=2.5)
        paper_panel(ax, rec, summary)
    else:
        fig, (a1, a2) = report.figure(width=report.COLUMN_WIDTH * 2, height=2.7 + 0.2 * len(frozen), ncols=2)
        paper_panel(a1, rec, summary)
        fitted_panel(a2, store.read_table(inp.predictor_stats), rule, params.tau, frozen)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
