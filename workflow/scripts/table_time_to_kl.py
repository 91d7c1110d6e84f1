"""Paper Table 11: steps and wall seconds to reach the baseline's final held-out KL, and to 90% of its
improvement, for every budget row (computed by the analysis: analysis.time_to_kl)."""
from opd import report, scripts, store


def main(inp, out, params):
    t = store.read_table(inp[0])
    report.save_table(t, out.md, out.tex, inp, digits=3,
                      caption="Time to the standard engine's final held-out KL and to 90% of its improvement",
                      notes="Speed-up is in measured wall seconds against the standard-engine run; '–' = never reached.")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
