"""Paper Table 12: OPD update variants (score centering, advantage offset, truncated importance
sampling) next to plain OPD under the same engine."""
import pandas as pd

from opd import report, scripts, store


def main(inp, out, params):
    v = store.read_table(inp[0])
    rows = report.rows_frame(inp[1])
    opd = rows[rows["algorithm"] == "opd"]
    opd = opd.assign(key=opd["engine_key"])
    variants = opd[opd["variant"] != "none"]
    out_rows = []
    for r in variants.to_dict("records"):
        same = opd[(opd["variant"] == "none") & (opd["key"] == r["key"])]
        plain = same["name"].iloc[0] if len(same) else None
        for name, variant in ((plain, "none"), (r["name"], r["variant"])):
            if name is None:
                continue
            for x in v[v["config"] == name].to_dict("records"):
                out_rows.append({"student": x["student"], "engine": plain or r["name"], "variant": variant,
                                 "config": name, "D": x["D"], "Δ %": 100 * x["delta"], "CI lo %": 100 * x["ci_lo"],
                                 "CI hi %": 100 * x["ci_hi"], "verdict": x["verdict"]})
    t = pd.DataFrame(out_rows).drop_duplicates(["student", "config"]) if out_rows else pd.DataFrame(
        columns=["student", "engine", "variant", "config", "D", "Δ %", "CI lo %", "CI hi %", "verdict"])
    report.save_table(t, out.md, out.tex, inp, digits=3, caption="OPD update variants under the same engine")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
