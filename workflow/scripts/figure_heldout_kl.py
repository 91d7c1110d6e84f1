"""Held-out KL(student || teacher) during training for every OPD row of the primary student,
coloured by its verdict."""
import numpy as np

from opd import report, scripts, store


def main(inp, out, params):
    held = store.read_table(inp[0])
    rows = report.rows_frame(inp[1])
    v = store.read_table(inp[2])
    v = v[v["student"] == params.primary].set_index("config")
    names = rows.loc[rows["in_budget"], "name"]
    curves = held[(held["student"] == params.primary) & held["config"].isin(names)]
    curves = curves.groupby(["config", "step"])["kl"].mean().reset_index()
    fig, ax = report.figure(height=2.5)
    labelled = []
    for cfg, c in curves.sort_values("step").groupby("config"):
        if cfg == params.baseline:
            continue
        fail = v["verdict"].get(cfg) == "fail"
        ax.plot(c["step"], c["kl"], "-", lw=0.9 if fail else 0.6, alpha=0.95 if fail else 0.5,
                color=report.FAIL_COLOR if fail else report.PASS_COLOR)
        end = c["kl"].iloc[-1]
        if fail and all(abs(np.log(end / y)) > 0.12 for y in labelled):  # label fails that do not overlap
            labelled.append(end)
            ax.annotate(cfg, (c["step"].iloc[-1], end), fontsize=5, color=report.FAIL_COLOR,
                        textcoords="offset points", xytext=(2, 0), va="center")
    b = curves[curves["config"] == params.baseline]
    ax.plot(b["step"], b["kl"], "k-", lw=1.4, label=f"{params.baseline} (standard engine)")
    ax.plot([], [], color=report.PASS_COLOR, label="pass")
    ax.plot([], [], color=report.FAIL_COLOR, label="fail")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("held-out KL(student‖teacher) per token (log)")
    ax.legend(frameon=False)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
