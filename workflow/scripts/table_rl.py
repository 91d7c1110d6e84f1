"""The RL contrast: REINFORCE and GRPO under the engines OPD tolerated, with the paper's collapse rule fixed
in advance (config rl_collapse): against the same algorithm on the standard engine at the final held-out
evaluation, accuracy at least N points lower, or held-out entropy or response length off by a factor."""
from opd import report, scripts, store


def main(inp, out, params):
    rl = store.read_table(inp[0])
    t = rl.assign(**{"collapse: fired": rl["collapse_criteria"].replace("", "none")})
    t = t[["student", "config", "algorithm", "variant", "reference", "D", "accuracy_initial", "accuracy_final",
           "accuracy_change", "accuracy_change_se", "n_seeds", "entropy_ratio", "length_ratio", "train_entropy_ratio", "collapsed", "collapse: fired",
           "opd_config", "opd_delta", "opd_verdict", "opd_verdict_seeds"]].rename(columns={
        "accuracy_initial": "acc. start %", "accuracy_final": "acc. end %", "accuracy_change": "vs standard (pts)",
        "accuracy_change_se": "± SE over seeds", "n_seeds": "seeds",
        "entropy_ratio": "held-out entropy / standard", "length_ratio": "held-out length / standard",
        "train_entropy_ratio": "train entropy end/start", "opd_delta": "OPD Δ", "opd_verdict": "OPD verdict"})
    notes = ""
    if len(rl):
        r = rl.iloc[0]
        notes = (f"Collapse (fixed before the runs, config rl_collapse), each against the same algorithm on the "
                 f"standard engine at the final held-out evaluation: accuracy down ≥ {r['accuracy_points']:g} points, "
                 f"or the policy's held-out entropy off by ≥ {r['entropy_factor']:g}x or its mean held-out response "
                 f"length by ≥ {r['length_factor']:g}x, either way. 'collapse: fired' names the criteria that fired.")
    report.save_table(t, out.md, out.tex, inp, digits=3, caption="RL against OPD under the same engines", notes=notes)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
