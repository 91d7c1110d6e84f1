"""Paper Table 1: the empirical budget B_emp(tau) for several tau."""
from opd import report, scripts, store


def main(inp, out, params):
    b = store.read_table(inp[0])
    t = b.rename(columns={"lo": "max D (pass)", "hi": "min D (fail)", "n_pass": "passes", "n_fail": "fails",
                          "n_unjudged": "unjudged"})
    report.save_table(t, out.md, out.tex, inp, caption="Empirical mismatch budget per student, rule and τ", digits=4,
                      notes="consistent: every passing configuration has less mismatch than every failing one. "
                      "rule paper: the pre-registered rule, fail iff Δ ≥ τ and the 95% interval from resampling "
                      "problems excludes 0. rule seeds: the same rule with an interval that also covers the seeds run "
                      "(opd.stats.seed_bootstrap); unjudged: too few seeds for it.")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
