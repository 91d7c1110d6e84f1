"""The gradient probes per probed run and step (opd/backends/tiny/probes.py): mismatch, T and S against the
ideal update in logit and parameter space, the error/update ratio on fixed prefixes, and OPD's and
REINFORCE's mean bias."""
from opd import report, scripts, store


def main(inp, out, params):
    t = store.read_table(inp[0])
    t = t[t["main"]].sort_values(["staleness", "noise_sigma", "step"])
    d = t.assign(**{
        "σ": t["noise_sigma"].map(lambda v: f"{v:g}"), "k": t["staleness"], "engine v.": t["engine_version"], "d (nats/tok)": t["d"],
        "KL(p‖p_T)": t["kl_pt"],
        "T/U": t["T_logit"] / t["U_logit"], "S/U": t["S_logit"] / t["U_logit"], "S/T": t["S_logit"] / t["T_logit"],
        "T/U param": t["T_param"] / t["U_param"], "S/U param": t["S_param"] / t["U_param"],
        "err/upd fixed": t["err_fixed_logit"] / t["upd_fixed_logit"],
        "err/upd fixed param": t["err_fixed_param"] / t["upd_fixed_param"],
        "OPD bias": t["opd_bias_mean"], "REINFORCE bias": t["rl_bias_mean"],
    })
    cols = ["config", "σ", "k", "step", "engine v.", "d (nats/tok)", "KL(p‖p_T)", "T/U", "S/U", "S/T", "T/U param",
            "S/U param", "err/upd fixed", "err/upd fixed param", "OPD bias", "REINFORCE bias"]
    report.save_table(d[cols], out.md, out.tex, inp, digits=3,
                      caption="Gradient probes per run and step (primary student, first seed)",
                      notes="d: the d_n formula on the engine's prefixes; KL(p‖p_T): the student's exact per-token KL to "
                      "the teacher on its own prefixes; T, S, U: per-token error, prefix shift and ideal update (norms "
                      "of prefix means, logit space unless marked param); err/upd fixed: the same error and update on "
                      "the step-0 student's own prefixes; bias: mean per-prefix ‖g_bias‖₂. Every step's weights are the "
                      "run's own, kept by its training job for the probes.")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
