"""Infra table in the columns of poor-rl's infra history (computed by the analysis: analysis.infra): steps,
median step seconds, throughput over a fixed window of steps, its ratio to the baseline, rollout wait, an
MFU estimate and the first-step difference."""
from opd import report, scripts, store


def main(inp, out, params):
    t = store.read_table(inp[0])
    lo, hi = params.infra.get("window", [0, 10**9])
    peak = params.infra.get("peak_flops")
    notes = (f"Window: steps [{lo}, {hi}). tokens/s = sum of trained tokens / sum of step wall seconds (including "
             f"the wait for rollouts and weight sync). MFU is an estimate: 3 x forward FLOPs per trained token x "
             f"tokens/s / peak FLOP/s of one device ({peak:g}, set in config infra.peak_flops); it counts training "
             f"FLOPs only. First-step diff: p90 over the first step's sequences of |sequence-mean log q - log p|. "
             f"Times are measured with two jobs sharing the machine, so ratios are noisy at toy scale.")
    report.save_table(t, out.md, out.tex, inp, digits=3, caption="Training infrastructure per configuration",
                      notes=notes)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
