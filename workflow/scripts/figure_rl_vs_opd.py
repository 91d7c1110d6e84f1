"""Paper Fig. 8: RL and OPD under the same engines. RL's held-out accuracy per algorithm (axis from 0), and
OPD's held-out KL under the engines RL was given (axis from 0), each engine with its verdict from the
analysis (opd.report.verdict) and the panel's title counting the engines that fail the rule."""
from opd import report, scripts, store

ENGINE_COLORS = ["#000000", "#e08214", "#2166ac", "#b2182b", "#5aae61", "#762a83"]


def main(inp, out, params):
    rl = store.read_table(inp[0])
    held = store.read_table(inp[1])
    rl = rl[rl["student"] == params.primary]
    curves = held.groupby(["student", "config", "step"])[["kl", "correct"]].mean().reset_index()
    curves = curves[curves["student"] == params.primary]
    algos = sorted(rl["algorithm"].unique())
    fig, axes = report.figure(width=report.COLUMN_WIDTH * 2, height=2.8, ncols=len(algos) + 1, squeeze=False)
    axes = axes[0]
    plain = rl[rl["variant"] == "none"]
    engines = list(dict.fromkeys(plain.sort_values("D")["opd_config"].fillna("")))
    color = {e: ENGINE_COLORS[i % len(ENGINE_COLORS)] for i, e in enumerate(engines)}
    for ax, algo in zip(axes, algos):
        for r in rl[rl["algorithm"] == algo].to_dict("records"):
            c = curves[curves["config"] == r["config"]]
            ls = "--" if r["variant"] != "none" else "-"
            ax.plot(c["step"], 100 * c["correct"], ls, marker="o", ms=2, color=color.get(r["opd_config"] or "", "#999"),
                    label=f"{r['config']}" + (" (collapsed)" if r["collapsed"] else ""))
        ax.set_title(f"{algo}: held-out accuracy")
        ax.set_xlabel("step")
        ax.set_ylabel("accuracy (%)")
        report.include_reference(ax, 0)
        report.panel_legend(ax, below=True)
    ax = axes[-1]
    # OPD's verdict on each engine, the primary student's (keyed by student and engine: RL rows on several
    # students carry each student's own OPD verdicts)
    opd = plain.drop_duplicates(["student", "opd_config"])
    opd = opd[opd["student"] == params.primary].set_index("opd_config")
    verdict = report.verdict(opd, prefix="opd_")
    judged = [e for e in engines if e != params.baseline and e in verdict.index]
    n_fail = sum(verdict[e] == "fail" for e in judged)
    for eng in engines:
        c = curves[curves["config"] == eng]
        if not len(c):
            continue
        what = ("standard engine" if eng == params.baseline
                else f"{verdict[eng]}, Δ = {opd.loc[eng, 'opd_delta']:+.0%}" if eng in verdict.index else "not judged")
        ax.plot(c["step"], c["kl"], "-", marker="X" if eng in judged and verdict[eng] == "fail" else "o", ms=2.5,
                color=color[eng], label=f"{eng} ({what})")
    ax.set_title(f"OPD under the same engines: held-out KL\n{n_fail} of {len(judged)} engines fail the rule "
                 f"(τ = {params.tau:.0%})")
    ax.set_xlabel("step")
    ax.set_ylabel("KL(student‖teacher) per token")
    report.include_reference(ax, 0)
    report.panel_legend(ax, below=True, title=f"verdict: {report.VERDICT_RULE}", title_fontsize=5)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
