"""Paper Table 6: every OPD run: D, Delta with its 95% interval, accuracy change, verdict."""
from opd import report, scripts, store


def main(inp, out, params):
    v = store.read_table(inp[0])
    rows = report.rows_frame(inp[1])[["name", "family", "variant", "role"]]
    v = v.merge(rows, left_on="config", right_on="name").drop(columns="name")
    t = v.assign(**{"Δ %": 100 * v["delta"], "CI lo %": 100 * v["ci_lo"], "CI hi %": 100 * v["ci_hi"],
                    "seeds CI lo %": 100 * v["ci_lo_seeds"], "seeds CI hi %": 100 * v["ci_hi_seeds"],
                    "acc. change (pts)": v["accuracy_change"], "verdict (seeds)": v["verdict_seeds"].fillna("–"),
                    "vs": v["reference"]})
    t = t[["student", "config", "role", "family", "variant", "vs", "D", "Δ %", "CI lo %", "CI hi %", "verdict",
           "seeds CI lo %", "seeds CI hi %", "verdict (seeds)", "acc. change (pts)", "n_runs"]]
    report.save_table(t, out.md, out.tex, inp, caption=f"Every OPD configuration of experiment '{params.experiment}' "
                      f"(fail iff Δ ≥ τ and the 95% interval excludes 0)", digits=3,
                      notes="verdict: the paper's rule, its interval from resampling problems of the seed-averaged "
                      "K_x. verdict (seeds): the same rule with an interval that also covers the seeds run "
                      "(– where there are too few seeds). vs: the configuration Δ is measured against. role: budget, a mismatch "
                      "source the budget is measured on; reference, a reference row (its own learning rate or "
                      "reference: its verdict is not a mismatch's against the standard engine); guarded, variant: "
                      "the guard or an update variant on a budget engine; baseline: the standard engine.")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
