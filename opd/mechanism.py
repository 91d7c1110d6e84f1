"""Summaries of the mechanism's gradient probes (the table opd/backends/tiny/probes.py writes: one row per
probed run, step and probe seed), shared by the mechanism table (workflow/scripts/table_mechanism.py) and the
findings (opd.findings, opd.scorecard): small pure functions of that table, no formatting."""
import pandas as pd

LO, HI = 0.15, 0.325  # the paper's two noise levels


def ratio(a, b):
    return a / b if b else float("nan")


def at(t: pd.DataFrame, sigma: float, step: int, seed: int):
    """The probe row of noise sigma at a step and probe seed, or None."""
    g = t[(t["noise_sigma"] == sigma) & (t["step"] == step) & (t["probe_seed"] == seed)]
    return g.iloc[0] if len(g) else None


def growth_of(t: pd.DataFrame, term: str, step: int, space: str, seed: int):
    """term / U at LO and at HI for one probe seed (term: "T" or "S"), or None where either is not probed."""
    a, b = at(t, LO, step, seed), at(t, HI, step, seed)
    if a is None or b is None:
        return None
    return a[f"{term}_{space}"] / a[f"U_{space}"], b[f"{term}_{space}"] / b[f"U_{space}"]


def growths(t: pd.DataFrame, term: str, step: int, space: str) -> pd.Series:
    """The growth of term / U from LO to HI at a step, per probe seed (index) that probed both."""
    out = {}
    for seed in sorted(t["probe_seed"].unique()):
        got = growth_of(t, term, step, space, seed)
        if got is not None:
            out[int(seed)] = got[1] / got[0]
    return pd.Series(out, dtype=float)


def over_training(t: pd.DataFrame, space: str) -> pd.DataFrame:
    """Per noise row and probe seed: fixed-prefix error and update at the end over step 0, error/update at both,
    OPD's and REINFORCE's mean bias (absolute and per unit of mismatch) and the mismatch mean ||delta||_1 at the
    end over step 0."""
    last = int(t["step"].max())
    out = []
    for (sigma, seed), g in t[t["noise_sigma"] > 0].groupby(["noise_sigma", "probe_seed"]):
        s0, s1 = g[g["step"] == 0].iloc[0], g[g["step"] == last].iloc[0]
        e, u = f"err_fixed_{space}", f"upd_fixed_{space}"
        out.append({"sigma": sigma, "seed": seed, "err": s1[e] / s0[e], "upd": s1[u] / s0[u], "r0": s0[e] / s0[u],
                    "r1": s1[e] / s1[u], "opd_bias": s1["opd_bias_mean"] / s0["opd_bias_mean"],
                    "rl_bias": ratio(s1["rl_bias_mean"], s0["rl_bias_mean"]),
                    "opd_per": ratio(s1["opd_bias_mean"] / s1["delta_l1"], s0["opd_bias_mean"] / s0["delta_l1"]),
                    "rl_per": ratio(s1["rl_bias_mean"] / s1["delta_l1"], s0["rl_bias_mean"] / s0["delta_l1"]),
                    "delta": ratio(s1["delta_l1"], s0["delta_l1"])})
    return pd.DataFrame(out)


def n_prefixes_checked(t: pd.DataFrame) -> int:
    """Prefixes whose bias was checked against its bound: the engine's and the fixed ones of every probe."""
    return int(t["n_prefixes_q"].sum()) + int(t["n_prefixes_fixed"].sum())


def bound_max(t: pd.DataFrame) -> pd.Series:
    """The largest ||g_bias||_1 / bound over every prefix, for OPD ("opd") and REINFORCE ("rl")."""
    return pd.Series({k: float(t[f"{k}_bias_bound_max_l1"].max()) for k in ("opd", "rl")})
