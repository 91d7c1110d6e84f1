"""The RL contrast: REINFORCE and GRPO under the engines OPD tolerated, with collapse fixed in advance
(held-out accuracy at least 5 points below the same algorithm on the standard engine)."""
from opd import report, scripts, store


def main(inp, out, params):
    rl = store.read_table(inp[0])
    t = rl.rename(columns={"accuracy_initial": "acc. start %", "accuracy_final": "acc. end %",
                           "accuracy_change": "vs standard (pts)", "entropy_ratio": "entropy end/start",
                           "opd_delta": "OPD Δ", "opd_verdict": "OPD verdict"})
    report.save_table(t, out.md, out.tex, inp, digits=3, caption="RL against OPD under the same engines")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
