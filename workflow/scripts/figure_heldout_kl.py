"""Held-out KL(student || teacher) during training for every OPD row of the primary student, coloured by
its verdict (opd.report.verdict); every failing row labelled at its line's end, the labels spread apart."""
from opd import plotmath, report, scripts, store


def main(inp, out, params):
    held = store.read_table(inp[0])
    rows = report.rows_frame(inp[1])
    v = store.read_table(inp[2])
    v = v[v["student"] == params.primary].set_index("config")
    verdict = report.verdict(v)
    names = rows.loc[rows["in_budget"], "name"]
    curves = held[(held["student"] == params.primary) & held["config"].isin(names)]
    curves = curves.groupby(["config", "step"])["kl"].mean().reset_index()
    fig, ax = report.figure(width=report.COLUMN_WIDTH * 1.15, height=2.6)
    failing = []
    for cfg, c in curves.sort_values("step").groupby("config"):
        if cfg == params.baseline:
            continue
        fail = verdict.get(cfg) == "fail"
        (line,) = ax.plot(c["step"], c["kl"], "-", lw=0.9 if fail else 0.6, alpha=0.95 if fail else 0.5,
                          color=report.FAIL_COLOR if fail else report.PASS_COLOR)
        if fail:
            failing.append((line, cfg))
    b = curves[curves["config"] == params.baseline].sort_values("step")
    ax.plot(b["step"], b["kl"], "k-", lw=1.4, label=f"{params.baseline} (standard engine)")
    n_pass = int(sum(verdict.get(c) == "pass" for c in set(curves["config"]) - {params.baseline}))
    ax.plot([], [], color=report.PASS_COLOR, label=f"pass ({n_pass} rows)")
    ax.plot([], [], color=report.FAIL_COLOR, label=f"fail ({len(failing)} rows, labelled)")
    ax.set_yscale(plotmath.LOG)
    ax.set_xlabel("step")
    ax.set_ylabel("held-out KL(student‖teacher) per token (log)")
    ax.set_title(f"student {params.primary}; verdicts: {report.VERDICT_RULE}", fontsize=6)
    report.panel_legend(ax, loc="upper right")
    report.label_lines(ax, [ln for ln, _ in failing], [cfg for _, cfg in failing])
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
