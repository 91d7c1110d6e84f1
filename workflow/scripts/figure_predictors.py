"""Which offline statistic at the step-0 student predicts training: per statistic, the share of candidate engines
whose held-out threshold rule agrees with training (leaving out one candidate, or one whole student), against the
paper's fixed rule and admitting every candidate; and its Spearman correlation with Delta."""
import numpy as np

from opd import report, scripts, stats, store

SPLITS = (("row", "o", "leave one candidate out"), ("student", "s", "leave one student out"))


def main(inp, out, params):
    rec = store.read_table(inp[1])
    rec = rec[rec["student"] == "all"]
    fixed = rec[rec["split"] == "fixed"].set_index("statistic")
    fitted = rec[rec["split"].isin([split for split, _, _ in SPLITS])]  # not the frozen rules' records
    acc = fitted.pivot(index="statistic", columns="split", values="accuracy")
    rho = fitted.pivot(index="statistic", columns="split", values="spearman")
    order = [s for s in ["selected", *stats.PREDICTORS] if s in acc.index]
    order = sorted(order, key=lambda s: (s != "selected", -np.nan_to_num(acc.loc[s, "row"], nan=-1)))
    labels = ["chosen in each fold (nested)" if s == "selected" else stats.PREDICTORS[s] for s in order]
    y = np.arange(len(order))[::-1]
    fig, (a1, a2) = report.figure(width=report.COLUMN_WIDTH * 1.9, height=2.9, ncols=2, sharey=True)
    for (split, marker, label), dy, color in zip(SPLITS, (0.15, -0.15), report.SERIES_COLORS):
        a1.scatter(acc.loc[order, split], y + dy, marker=marker, s=12, color=color, label=label, zorder=3)
        a2.scatter(rho.loc[order, split], y + dy, marker=marker, s=12, color=color, zorder=3,
                   label="pooled over students" if split == "row" else "within the held-out student (mean)")
    n = int(fixed.loc["paper_rule", "n"])
    for name, ls, text in (("paper_rule", "--", "the paper's rule (α D̂ < L)"), ("admit_all", ":", "admit every candidate")):
        a1.axvline(fixed.loc[name, "accuracy"], color=report.NEUTRAL, ls=ls, lw=0.7,
                   label=f"{text}: {int(fixed.loc[name, 'n_agree'])}/{n}")
    a1.axvline(0.9, color="#dddddd", lw=2.5, zorder=0, label="goal: 90%")
    a1.set_yticks(y, labels)
    a1.set_xlim(0, 1.02)
    a1.set_xlabel(f"agreement with training, held out ({n} candidates)")
    a2.axvline(0, color="#bbbbbb", lw=0.6)
    a2.set_xlim(-1, 1)
    a2.set_xlabel("Spearman ρ of the statistic with Δ")
    a1.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, **report.LEGEND)
    a2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, **report.LEGEND)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
