"""The instrument's noise per student: the baseline engine against itself over its seeds."""
from opd import report, scripts, store


def main(inp, out, params):
    n = store.read_table(inp[0])
    t = n.assign(**{"SD one seed vs one (%)": 100 * n["sd_single"], "SD as compared (%)": 100 * n["sd_used"],
                    "problem-only SE, one vs one (%)": 100 * n["se_problem"], "τ (%)": 100 * n["tau"]})
    t = t[["student", "config", "n_seeds", "n_seeds_row", "SD one seed vs one (%)", "SD as compared (%)",
           "problem-only SE, one vs one (%)", "τ (%)"]].rename(columns={"n_seeds": "baseline seeds", "n_seeds_row": "seeds per row"})
    report.save_table(t, out.md, out.tex, inp, caption="Run-to-run noise of Δ (the standard engine against itself)",
                      digits=2, notes="SD one seed vs one: the spread of Δ between two runs of the same engine; the problem-only "
                      "SE of that same comparison is what the paper's rule sees of it. SD as compared: the run-to-run "
                      "SD of Δ for a row with the typical seed count against the baseline's seeds (from the SD of a "
                      "run's log Σ_x K_x).")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
