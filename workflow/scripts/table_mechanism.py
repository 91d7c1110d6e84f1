"""The mechanism's numbers beside the paper's (its "Mechanism" section): how T and S grow with the noise,
the error and the update on fixed prefixes over training, the bias bound, and OPD's bias against
REINFORCE's. Every toy number is read from the probes' table (opd/backends/tiny/probes.py)."""
import pandas as pd

from opd import report, scripts, store
from opd.mechanism import HI, LO, growth_of, n_prefixes_checked, over_training
from opd.scorecard import PAPER_FIXED_ERROR, PAPER_FIXED_RATIO, paper_growth

SPACES = (("logit", "toy, logit space"), ("param", "toy, parameter space"))


def growth(t, term, step, space):
    """The probe seed's growth of term / U from LO to HI, and its range over every probe seed."""
    main = int(t.loc[t["main"], "probe_seed"].iloc[0])
    got = growth_of(t, term, step, space, main)
    if got is None:
        return "–"
    x, y = got
    text = f"{y / x:.1f}x ({x:.3g} → {y:.3g})"
    others = [g for g in (growth_of(t, term, step, space, s) for s in sorted(t["probe_seed"].unique())) if g]
    if len(others) > 1:
        text += f"; {span([b / a for a, b in others], '{:.1f}')}x over {len(others)} probe seeds"
    return text


def span(values, fmt="{:.2f}"):
    v = pd.Series(values).dropna()
    if v.empty:
        return "–"
    lo, hi = fmt.format(v.min()), fmt.format(v.max())
    return lo if lo == hi else f"{lo}–{hi}"


def times(text):
    """A ratio's range as "<range>x" ("–" where there is none)."""
    return text if text == "–" else text + "x"


def main(inp, out, params):
    t = store.read_table(inp[0])
    last = int(t["step"].max())
    rows = [
        {"quantity": f"S / U from σ = {LO} to {HI}, step 0", "paper": paper_growth("S")},
        {"quantity": f"S / U from σ = {LO} to {HI}, step {last} (end)", "paper": paper_growth("S")},
        {"quantity": f"T / U from σ = {LO} to {HI}, step 0", "paper": paper_growth("T")},
        {"quantity": f"T / U from σ = {LO} to {HI}, step {last} (end)", "paper": paper_growth("T")},
        {"quantity": "fixed prefixes: error at the end / at step 0 (noise rows × probe seeds)",
         "paper": "–".join(map(str, PAPER_FIXED_ERROR)) + "x"},
        {"quantity": "fixed prefixes: update at the end / at step 0 (noise rows × probe seeds)", "paper": "below the error's (shrinks faster)"},
        {"quantity": "fixed prefixes: error / update at step 0 (noise rows × probe seeds)", "paper": str(PAPER_FIXED_RATIO[0])},
        {"quantity": "fixed prefixes: error / update at the end (noise rows × probe seeds)", "paper": str(PAPER_FIXED_RATIO[1])},
        {"quantity": "OPD bias (mean per prefix) at the end / at step 0 (noise rows × probe seeds)", "paper": "vanishes as A → 0"},
        {"quantity": "REINFORCE bias R δ at the end / at step 0 (noise rows × probe seeds)", "paper": "does not vanish"},
        {"quantity": "OPD bias per unit of mismatch (mean ‖g‖₂ / mean ‖δ‖₁), end / step 0 (noise rows × probe seeds)",
         "paper": "vanishes as A → 0"},
        {"quantity": "REINFORCE bias per unit of mismatch, end / step 0 (noise rows × probe seeds)",
         "paper": "does not vanish"},
        {"quantity": "max over prefixes of ‖g_bias‖₁ / (2 ‖δ‖₁ ‖A‖∞), OPD and REINFORCE", "paper": "≤ 1 (a bound)"},
    ]
    n_prefixes = n_prefixes_checked(t)
    for space, col in SPACES:
        ot = over_training(t, space)  # empty where no noise row is probed: those cells are "–"
        ot = ot if not ot.empty else pd.DataFrame(columns=["err", "upd", "r0", "r1", "opd_bias", "rl_bias", "opd_per",
                                                           "rl_per"], dtype=float)
        vals = [growth(t, "S", 0, space), growth(t, "S", last, space), growth(t, "T", 0, space),
                growth(t, "T", last, space), times(span(ot["err"])), times(span(ot["upd"])), span(ot["r0"]),
                span(ot["r1"]), times(span(ot["opd_bias"])), times(span(ot["rl_bias"])), times(span(ot["opd_per"])),
                times(span(ot["rl_per"])),
                f"{t[['opd_bias_bound_max_l1', 'rl_bias_bound_max_l1']].max().max():.2f} (checked on {n_prefixes} prefixes)"]
        if space == "param":  # the last five do not depend on the space
            vals[-5:] = ["– (per prefix)"] * 5
        for r, v in zip(rows, vals):
            r[col] = v
    n_seeds = t["probe_seed"].nunique()
    sigmas = ", ".join(f"{s:g}" for s in sorted(t.loc[t["noise_sigma"] > 0, "noise_sigma"].unique()))
    report.save_table(pd.DataFrame(rows), out.md, out.tex, inp,
                      caption="The mechanism: the toy's gradient probes beside the paper's numbers",
                      notes=f"Primary student, first seed of each row, probed at steps {', '.join(str(int(s)) for s in sorted(t['step'].unique()))} "
                      f"(opd/backends/tiny/probes.py). T: per-token error, S: prefix shift, U: the ideal update, all "
                      "norms of means over prefixes (exact sums over the vocabulary); the paper's T and S are read as "
                      "relative to the ideal update, and the paper does not say at which step it measured them. "
                      f"Ranges are over the noise rows (σ = {sigmas}) and the probe seeds ({n_seeds}: other prompts and draws, "
                      "at the first and last step): the probes sample prefixes, so T and S are estimates. "
                      "Per row and step: the mechanism_runs table.")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
