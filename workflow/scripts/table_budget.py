"""Paper Table 1: the empirical budget B_emp(tau) for several tau."""
from opd import report, store


def main(inp, out, params):
    b = store.read_table(inp[0])
    t = b.rename(columns={"lo": "max D (pass)", "hi": "min D (fail)", "n_pass": "passes", "n_fail": "fails"})
    report.save_table(t, out.md, out.tex, inp, caption="Empirical mismatch budget per student and τ", digits=4,
                      notes="consistent: every passing configuration has less mismatch than every failing one.")


if "snakemake" in globals():
    main(snakemake.input, snakemake.output, snakemake.params)  # noqa: F821
