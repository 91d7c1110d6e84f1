"""Paper Table 7: the admission record: offline decision against training outcome."""
import json

from opd import report, scripts, store


def main(inp, out, params):
    rec = store.read_table(inp[0])
    s = json.loads(open(inp[1]).read())
    t = rec[["student", "config", "d_hat", "admit", "D", "ratio", "outcome", "agrees"]].rename(
        columns={"d_hat": "offline D̂", "D": "in-training D", "ratio": "D / D̂"})
    a, L = rec["alpha"].iloc[0], rec["L"].iloc[0]
    notes = (f"Admit iff {a:g} × D̂ < {L:g}. {s['n_agree']} of {s['n_decisions']} decisions match the training "
             f"outcome. Implied α (largest D/D̂ with D̂ ≥ {s['ratio_floor']:g}): {s['alpha_implied']:.3g}; "
             f"retrospective L (largest passing D): {s['L_retrospective']:.3g}.")
    report.save_table(t, out.md, out.tex, inp, caption="Admission record", digits=4, notes=notes)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
