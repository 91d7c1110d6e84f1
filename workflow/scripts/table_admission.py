"""Paper Table 7: the admission record: offline decision (D_hat ± its bootstrap SE over prompts) against
training outcome; the standard engine is listed but is not a decision."""
import json

from opd import report, scripts, store


def main(inp, out, params):
    rec = store.read_table(inp[0])
    s = json.loads(open(inp[1]).read())
    t = rec.assign(engine=rec["candidate"].map({True: "candidate", False: "standard (not a decision)"}))
    t = t[["student", "config", "engine", "d_hat", "se", "n_prompts", "n_sequences", "admit", "D", "ratio", "outcome",
           "agrees"]].rename(columns={"d_hat": "offline D̂", "se": "SE of D̂", "n_prompts": "prompts",
                                      "n_sequences": "sequences", "D": "in-training D", "ratio": "D / D̂"})
    a, L = rec["alpha"].iloc[0], rec["L"].iloc[0]
    n = s["n_decisions"]
    notes = (f"Admit iff {a:g} × D̂ < {L:g}. {s['n_agree']} of {n} candidate decisions match the training outcome "
             f"({s['n_agree'] / n:.0%}); admitting every candidate would match {s['n_admit_all_agree']} of {n} "
             f"({s['n_admit_all_agree'] / n:.0%}). The standard engine ({s['n_baseline']} rows) is not a decision. "
             f"SE: bootstrap over prompts; among candidates with D̂ ≥ {s['ratio_floor']:g} it is "
             f"{s['se_relative_min']:.0%}-{s['se_relative_max']:.0%} of D̂. Implied α (largest D/D̂ with "
             f"D̂ ≥ {s['ratio_floor']:g}): {s['alpha_implied']:.3g}; retrospective L (largest passing D): "
             f"{s['L_retrospective']:.3g}.") if n else "No candidate engine has a training outcome."
    report.save_table(t, out.md, out.tex, inp, caption="Admission record", digits=4, notes=notes)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
