"""The mismatch guard: each guarded row against the same engine unguarded (analysis/guard.parquet)."""
import pandas as pd

from opd import report, scripts, store


def interval(r, prefix):
    lo, hi = r[f"{prefix}ci_lo_seeds"], r[f"{prefix}ci_hi_seeds"]
    if pd.isna(r[f"{prefix}delta"]):
        return "–"
    return f"{100 * r[f'{prefix}delta']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] {r[f'{prefix}verdict_seeds']}"


def main(inp, out, params):
    g = store.read_table(inp[0])
    t = pd.DataFrame({
        "student": g["student"], "guarded row": g["config"], "action": g["action"],
        "d_max": [f"{x:g}" for x in g["d_max"]],
        "Δ guarded % [seed interval]": [interval(r, "") for _, r in g.iterrows()],
        "unguarded row": g["unguarded"],
        "Δ unguarded % [seed interval]": [interval(r, "unguarded_") for _, r in g.iterrows()],
        "steps on the cheap engine %": 100 * g["cheap_share"],
        "batches rejected per run": g["rejected"] if "rejected" in g else 0.0,
        "activations per run (max)": [f"{a:.1f} ({m})" for a, m in zip(g["activations"], g["activations_max"])],
        "in-run tokens/s: guarded / fallback": g["run_over_fallback"],
        "in-run tokens/s: cheap / fallback": g["cheap_over_fallback"],
        "fallback is BF16 sync": g["fallback_is_standard"],
        "false alarms on BF16 runs": [f"{a} of {n} runs" for a, n in zip(g["baseline_alarms"], g["baseline_runs"])],
    })
    report.save_table(t, out.md, out.tex, inp, digits=2,
                      caption="The mismatch guard: guarded rows against the same engine unguarded",
                      notes="Δ against the standard engine with the seed-aware interval and verdict. Cheap engine: "
                            "the row's own; the guard falls back for `cooldown` steps (doubling on each re-trigger) "
                            "when the mean d_n of `window` steps passes d_max; with `reject`, the batch that crosses is "
                            "discarded and sampled again by the fallback (batches rejected: a mean per run). In-run (measured in one job): trained "
                            "tokens per wall second of the guarded run, and of its steps on the cheap engine, over its "
                            "steps on the fallback, a ratio to the standard engine where the fallback is BF16 and "
                            "synchronous. No column compares tokens/s across jobs: runs trained at different times "
                            "under different machine load measure the load as much as the engine. False alarms: each guard "
                            "replayed over every standard-engine run of the student.")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
