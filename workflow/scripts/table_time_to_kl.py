"""Paper Table 11: steps and wall seconds to reach the baseline's final held-out KL, and to 90% of its
improvement, for every OPD row (linear interpolation between evaluations)."""
import pandas as pd

from opd import report, stats, store


def main(inp, out, params):
    held = store.read_table(inp[0])
    st = store.read_table(inp[1])
    rows = report.rows_frame(inp[2])
    names = rows.loc[rows["in_budget"], "name"]
    held = held[held["config"].isin(names)]
    kl = held.groupby(["student", "config", "step"])["kl"].mean().reset_index()
    secs = st.groupby(["student", "config", "step"])["step_s"].mean().groupby(level=[0, 1]).cumsum()
    out_rows = []
    for student, k in kl.groupby("student"):
        base = k[k["config"] == params.baseline].sort_values("step")
        final, start = base["kl"].iloc[-1], base["kl"].iloc[0]
        target90 = start - 0.9 * (start - final)
        base_t = {}
        for cfg, c in k.groupby("config"):
            c = c.sort_values("step")
            # wall seconds at an evaluation step = sum of step_s of the steps before it
            s = secs.loc[(student, cfg)].reindex(range(int(c["step"].max()) + 1)).ffill()
            wall = [0.0 if n == 0 else float(s.iloc[n - 1]) for n in c["step"]]
            res = {"student": student, "config": cfg}
            for label, target in (("final", final), ("90%", target90)):
                res[f"steps to {label}"] = stats.time_to_target(c.assign(x=c["step"]), target)
                res[f"s to {label}"] = stats.time_to_target(c.assign(x=wall), target)
            out_rows.append(res)
            if cfg == params.baseline:
                base_t = res
        for res in out_rows:
            if res["student"] == student:
                for label in ("final", "90%"):
                    res[f"speed-up to {label}"] = base_t[f"s to {label}"] / res[f"s to {label}"]
    t = pd.DataFrame(out_rows).sort_values(["student", "config"])
    report.save_table(t, out.md, out.tex, inp, digits=3,
                      caption="Time to the standard engine's final held-out KL and to 90% of its improvement",
                      notes="Speed-up is in measured wall seconds against the standard-engine run; '–' = never reached.")


if "snakemake" in globals():
    main(snakemake.input, snakemake.output, snakemake.params)  # noqa: F821
