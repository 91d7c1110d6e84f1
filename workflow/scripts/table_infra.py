"""Infra table in the columns of poor-rl's infra history: steps, median step seconds, throughput over a
fixed window of steps, its ratio to the baseline, rollout wait, an MFU estimate and the first-step
difference."""

from opd import report, store


def train_flops_per_token(student_spec: dict, backend: str) -> float:
    """Forward+backward FLOPs per trained token: 3 x the forward FLOPs of the student (tiny: counted
    from the architecture at the task's sequence length; verl: 2 x n_params from the student's spec)."""
    if backend == "tiny":
        from opd.backends.tiny.base import model_config
        from opd.backends.tiny.model import flops_per_token
        from opd.backends.tiny.task import PROMPT_LEN, RESPONSE_LEN
        return 3 * flops_per_token(model_config(student_spec), PROMPT_LEN + RESPONSE_LEN)
    return 3 * 2 * float(student_spec["n_params"])


def main(inp, out, params):
    st = store.read_table(inp[0])
    lo, hi = params.infra.get("window", [0, 10**9])
    peak = params.infra.get("peak_flops")
    w = st[(st["step"] >= lo) & (st["step"] < hi)]
    g = w.groupby(["student", "config"]).agg(
        steps=("step", "nunique"), median_step_s=("step_s", "median"), tokens=("trained_tokens", "sum"),
        seconds=("step_s", "sum"), wait=("wait_s", "sum")).reset_index()
    g["tokens/s"] = g["tokens"] / g["seconds"]
    base = g[g["config"] == params.baseline].set_index("student")["tokens/s"]
    g["ratio"] = g["tokens/s"] / g["student"].map(base)
    g["rollout wait %"] = 100 * g["wait"] / g["seconds"]
    fpt = {s: train_flops_per_token(params.students[s], params.backend) for s in g["student"].unique()}
    g["MFU % (est.)"] = 100 * g["tokens/s"] * g["student"].map(fpt) / peak if peak else float("nan")
    first = st.sort_values("step").groupby(["student", "config"])["seq_logratio_p90"].first()
    g = g.merge(first.rename("first-step diff").reset_index(), on=["student", "config"])
    t = g[["student", "config", "steps", "median_step_s", "tokens/s", "ratio", "rollout wait %", "MFU % (est.)",
           "first-step diff"]].sort_values(["student", "config"])
    notes = (f"Window: steps [{lo}, {hi}). tokens/s = sum of trained tokens / sum of step wall seconds (including "
             f"the wait for rollouts and weight sync). MFU is an estimate: 3 x forward FLOPs per trained token x "
             f"tokens/s / peak FLOP/s of one device ({peak:g}, set in config infra.peak_flops); it counts training "
             f"FLOPs only. First-step diff: p90 over the first step's sequences of |sequence-mean log q - log p|. "
             f"Times are measured with two jobs sharing the machine, so ratios are noisy at toy scale.")
    report.save_table(t, out.md, out.tex, inp, digits=3, caption="Training infrastructure per configuration",
                      notes=notes)


if "snakemake" in globals():
    main(snakemake.input, snakemake.output, snakemake.params)  # noqa: F821
