"""Paper Fig. 3: quality change Delta against run mismatch D, with the fail line and the budget band.

One panel per student, each with its own legend. Where a student's configurations have seeds enough for
the seed-aware rule, markers, error bars and the band follow that rule (the paper's rule otherwise; the
panel title says which). A budget whose passes and fails overlap is drawn as an inconsistent range. Guarded
rows are drawn beside it, hollow, each with an arrow from its unguarded row: the guard's effect. The rows at the
budget's edge are named (the largest pass and the smallest fail; where passes and fails overlap, every row
between them), and so is every row `--config highlight=ROW` names (edge_rows, highlighted)."""
import numpy as np
import pandas as pd

from opd import plotmath, report, scripts, stats, store
from opd.rows import Row

D_FLOOR = 1e-6  # a run whose mean log-ratio is at or below zero is drawn here on the log axis


def guarded_points(ax, g, v, cols, tau: float):
    """Guarded rows (opd.guard) beside the budget, not in it (a guarded run mixes engines): a hollow marker
    at the guarded run's D and Delta, with an arrow from its unguarded row (Row.unguarded_in)."""
    lo_col, hi_col, verdict_col = cols
    for i, (_, r) in enumerate(g.iterrows()):
        err = [[100 * max(r["delta"] - r[lo_col], 0)], [100 * max(r[hi_col] - r["delta"], 0)]]
        ax.errorbar([max(r["D"], D_FLOOR)], [100 * r["delta"]], yerr=err, fmt="D", mfc="white",
                    color=report.FAMILY_COLORS[r["family"]], ms=3.5, elinewidth=0.6, capsize=1.2,
                    label=(f"guarded rows ({(g[verdict_col] == 'pass').sum()} of {len(g)} pass; arrow from\n"
                           f"the unguarded row), not in the budget") if i == 0 else None)
        u = v[v["config"] == r["unguarded"]]
        if len(u):
            ax.annotate("", xy=(max(r["D"], D_FLOOR), 100 * r["delta"]),
                        xytext=(max(u["D"].iloc[0], D_FLOOR), 100 * u["delta"].iloc[0]),
                        arrowprops=dict(arrowstyle="->", color=report.NEUTRAL, lw=0.5, alpha=0.7))


def edge_rows(v, verdict_col: str, lo: float, hi: float) -> list[str]:
    """The rows that bound a budget's edge: the largest passing D and the smallest failing D, and where a fail
    lies below a pass (no budget), every row from the smallest fail to the largest pass."""
    if np.isfinite(lo) and np.isfinite(hi) and hi < lo:
        return v.loc[(v["D"] >= hi) & (v["D"] <= lo), "config"].tolist()
    return v.loc[((v[verdict_col] == "pass") & (v["D"] == lo)) | ((v[verdict_col] == "fail") & (v["D"] == hi)),
                 "config"].tolist()


def label_rows(ax, frame, names, highlighted):
    """Each named row's name beside its point (highlighted rows in bold), spread apart so none overlaps."""
    pts = frame[frame["config"].isin(names)].drop_duplicates("config").sort_values("D")
    if not len(pts):
        return
    texts = report.label_points(ax, list(pts["D"].clip(lower=D_FLOOR)), list(100 * pts["delta"]), list(pts["config"]),
                                [report.FAMILY_COLORS[f] for f in pts["family"]], together=True)
    for t, name in zip(texts, pts["config"]):
        t.set_bbox({"facecolor": "white", "alpha": 0.75, "lw": 0, "pad": 0.4})  # readable over bars and the band
        if name in highlighted:
            t.set_fontweight("bold")


def panel(ax, v, budget, tau: float, student: str, guarded=None, highlight=()):
    b = budget[budget["student"] == student]
    seeds_ok = len(b) and (b.loc[b["rule"] == "seeds", "n_unjudged"] == 0).all() and (b["rule"] == "seeds").any()
    rule = "seeds" if seeds_ok else "paper"
    lo_col, hi_col, verdict_col = stats.RULE_COLUMNS[rule]
    bt = b[(b["rule"] == rule) & np.isclose(b["tau"], tau)]
    if len(bt) and np.isfinite(bt["lo"].iloc[0]) and np.isfinite(bt["hi"].iloc[0]):
        lo, hi = bt["lo"].iloc[0], bt["hi"].iloc[0]
        if bt["consistent"].iloc[0]:
            ax.axvspan(lo, hi, color="#fee08b", alpha=0.6, lw=0, label=f"budget [{lo:.3g}, {hi:.3g}]")
        else:
            ax.axvspan(hi, lo, facecolor="none", edgecolor=report.FAIL_COLOR, hatch="////", lw=0, alpha=0.5,
                       label=f"no budget: a fail at D={hi:.3g}\nbelow a pass at D={lo:.3g}")
    ax.axhline(100 * tau, color=report.NEUTRAL, ls="--", lw=0.7, label=f"τ = {tau:.0%}")
    ax.axhline(0, color="#bbbbbb", lw=0.5)
    for fam, g in v.groupby("family"):
        for verdict, marker in (("pass", "o"), ("fail", "X")):
            gg = g[g[verdict_col] == verdict]
            if not len(gg):
                continue
            err = [100 * (gg["delta"] - gg[lo_col]).clip(lower=0), 100 * (gg[hi_col] - gg["delta"]).clip(lower=0)]
            ax.errorbar(gg["D"].clip(lower=D_FLOOR), 100 * gg["delta"], yerr=err, fmt=marker,
                        color=report.FAMILY_COLORS[fam], ms=4 if marker == "X" else 3.5, elinewidth=0.6, capsize=1.2,
                        label=f"{fam} ({verdict})")
    if guarded is not None and len(guarded):
        guarded_points(ax, guarded, v, (lo_col, hi_col, verdict_col), tau)
        v_axis = np.concatenate([v[c] for c in (lo_col, hi_col, "delta")] + [guarded[c] for c in (lo_col, hi_col, "delta")])
    else:
        v_axis = np.concatenate([v[lo_col], v[hi_col], v["delta"]])
    ax.set_xscale(plotmath.LOG)
    report.delta_axis(ax, 100 * v_axis)
    ax.set_xlabel("run mismatch D (nats/token, log)")
    ax.set_ylabel("Δ held-out KL vs standard engine (%)")
    named = edge_rows(v, verdict_col, *((bt["lo"].iloc[0], bt["hi"].iloc[0]) if len(bt) else (np.nan, np.nan)))
    shown = v if guarded is None else pd.concat([v, guarded[[c for c in v.columns if c in guarded.columns]]])
    label_rows(ax, shown, named + [h for h in highlight if h not in named], set(highlight))
    n_runs = f"{int(v['n_runs'].min())}-{int(v['n_runs'].max())}" if len(v) else "0"
    ax.set_title(f"student {student}: {stats.RULE_NAMES[rule]}, {n_runs} seeds per row")
    # beside the panel, not on it: the labelled rows near the edge fill the panel's upper half
    report.panel_legend(ax, loc="upper left", bbox_to_anchor=(1.02, 1.0), ncol=1, fontsize=5)


def main(inp, out, params):
    v = store.read_table(inp[0])
    budget = store.read_table(inp[1])
    rows = report.rows_frame(inp[2])
    engines = rows[rows["in_budget"]]
    R = [Row.of(r) for r in store.read_table(inp[2]).to_dict("records")]
    plain = {r.name: (r.unguarded_in(R).name if r.unguarded_in(R) else None) for r in R if r.guard is not None}
    guarded = v.merge(rows[rows["name"].isin(list(plain))][["name", "family"]], left_on="config", right_on="name")
    guarded["unguarded"] = guarded["config"].map(plain)
    v = v.merge(engines[["name", "family"]], left_on="config", right_on="name")
    students = [params.primary] + sorted(set(v["student"]) - {params.primary})
    fig, axes = report.figure(width=report.COLUMN_WIDTH * 2, height=2.6 * len(students), nrows=len(students),
                              squeeze=False)
    for ax, student in zip(axes[:, 0], students):
        panel(ax, v[v["student"] == student], budget, params.tau, student, guarded[guarded["student"] == student],
              highlight=tuple(getattr(params, "highlight", ()) or ()))
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
