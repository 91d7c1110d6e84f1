"""Paper Fig. 8: RL and OPD under the same engines. RL's held-out accuracy per algorithm, and OPD's
held-out KL under the engines RL was given."""
from opd import report, scripts, store

ENGINE_COLORS = ["#000000", "#e08214", "#2166ac", "#b2182b", "#5aae61", "#762a83"]


def main(inp, out, params):
    rl = store.read_table(inp[0])
    held = store.read_table(inp[1])
    rl = rl[rl["student"] == params.primary]
    curves = held.groupby(["student", "config", "step"])[["kl", "correct"]].mean().reset_index()
    curves = curves[curves["student"] == params.primary]
    algos = sorted(rl["algorithm"].unique())
    fig, axes = report.figure(width=report.COLUMN_WIDTH * 2, height=2.7, ncols=len(algos) + 1, squeeze=False)
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
        ax.legend(frameon=False, fontsize=4.8, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax = axes[-1]
    for eng in engines:
        c = curves[curves["config"] == eng]
        if len(c):
            ax.plot(c["step"], c["kl"], "-", marker="o", ms=2, color=color[eng], label=eng)
    ax.set_title("OPD under the same engines: held-out KL")
    ax.set_xlabel("step")
    ax.set_ylabel("KL(student‖teacher) per token")
    ax.legend(frameon=False, fontsize=4.8, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
