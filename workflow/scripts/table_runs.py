"""Paper Table 6: every OPD run: D, Delta with its 95% interval, accuracy change, verdict."""
from opd import report, store


def main(inp, out, params):
    v = store.read_table(inp[0])
    rows = report.rows_frame(inp[1])[["name", "family", "variant"]]
    v = v.merge(rows, left_on="config", right_on="name").drop(columns="name")
    t = v.assign(**{"Δ %": 100 * v["delta"], "CI lo %": 100 * v["ci_lo"], "CI hi %": 100 * v["ci_hi"],
                    "acc. change (pts)": v["accuracy_change"]})
    t = t[["student", "config", "family", "variant", "D", "Δ %", "CI lo %", "CI hi %", "acc. change (pts)",
           "verdict", "n_runs"]]
    report.save_table(t, out.md, out.tex, inp, caption=f"Every OPD run of experiment '{params.experiment}' "
                      f"(fail iff Δ ≥ τ and the 95% paired-bootstrap interval excludes 0)", digits=3)


if "snakemake" in globals():
    main(snakemake.input, snakemake.output, snakemake.params)  # noqa: F821
