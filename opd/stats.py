"""The paper's statistics: paired bootstrap of the quality change, the fail rule, the mismatch budget
and the admission check. Small pure functions of arrays and DataFrames; vectorised over resamples."""
from __future__ import annotations

import numpy as np
import pandas as pd


BOOT_CHUNK = 1000  # resamples drawn at a time


def paired_bootstrap(k_cand, k_base, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0):
    """Delta = sum(k_cand) / sum(k_base) - 1 with a percentile interval from resampling problems.

    k_cand: (n,) or (n, C) per-problem held-out KL of the candidate(s); k_base: (n,) of the baseline.
    Each resample draws the same problems for candidate and baseline (and for every configuration).
    Returns (delta, lo, hi): scalars for (n,) input, arrays of shape (C,) for (n, C)."""
    kc = np.asarray(k_cand, dtype=float)
    kb = np.asarray(k_base, dtype=float)
    scalar = kc.ndim == 1
    kc = kc.reshape(len(kc), -1)
    if kb.ndim != 1 or len(kb) != len(kc):
        raise ValueError(f"k_base must have shape ({len(kc)},), got {kb.shape}")
    n = len(kb)
    rng = np.random.default_rng(seed)
    both = np.column_stack([kc, kb])  # one matrix product gives every candidate's and the baseline's sums
    sums = np.empty((n_boot, both.shape[1]))
    offsets = (np.arange(BOOT_CHUNK, dtype=np.int64) * n)[:, None]
    for start in range(0, n_boot, BOOT_CHUNK):  # chunks keep the per-resample counts in cache
        m = min(BOOT_CHUNK, n_boot - start)
        draws = rng.integers(0, n, size=(m, n)) + offsets[:m]  # problem indices, offset per resample
        counts = np.bincount(draws.ravel(), minlength=m * n).reshape(m, n)  # how often each problem is drawn
        sums[start:start + m] = counts @ both
    boot = sums[:, :-1] / sums[:, -1:] - 1.0
    delta = kc.sum(0) / kb.sum() - 1.0
    lo, hi = np.percentile(boot, [50 * (1 - ci), 50 * (1 + ci)], axis=0)
    if scalar:
        return float(delta[0]), float(lo[0]), float(hi[0])
    return delta, lo, hi


def fails(delta, ci_lo, ci_hi, tau: float):
    """The pre-registered rule: fail iff Delta >= tau and the interval excludes zero."""
    delta, ci_lo, ci_hi = (np.asarray(x, dtype=float) for x in (delta, ci_lo, ci_hi))
    return (delta >= tau) & ((ci_lo > 0) | (ci_hi < 0))


def final_heldout(heldout: pd.DataFrame) -> pd.DataFrame:
    """Each run's rows at its last evaluation step."""
    last = heldout.groupby("run_id")["step"].transform("max")
    return heldout[heldout["step"] == last]


def run_mismatch(steps: pd.DataFrame) -> pd.DataFrame:
    """D per configuration and student: the mean of d_n over each run's steps, averaged over seeds."""
    per_run = steps.groupby(["student", "config", "run_id"], as_index=False)["d_n"].mean()
    return per_run.groupby(["student", "config"], as_index=False).agg(D=("d_n", "mean"), n_runs=("run_id", "nunique"))


def verdicts(heldout: pd.DataFrame, steps: pd.DataFrame, baseline: str, tau: float = 0.20, n_boot: int = 10_000,
             ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """One row per (student, configuration): D, Delta with its paired-bootstrap interval against the
    baseline configuration of the same student, the accuracy change (points) and the verdict.
    Several seeds of a configuration average K_x per problem first."""
    fin = final_heldout(heldout)
    k = fin.groupby(["student", "config", "prompt_id"])[["kl", "correct"]].mean().reset_index()
    D = run_mismatch(steps)
    out = []
    for student, ks in k.groupby("student"):
        kl = ks.pivot(index="prompt_id", columns="config", values="kl")
        acc = ks.pivot(index="prompt_id", columns="config", values="correct")
        if baseline not in kl:
            raise ValueError(f"no held-out results for baseline {baseline!r} on student {student!r}")
        kl = kl.dropna()
        configs = list(kl.columns)
        delta, lo, hi = paired_bootstrap(kl[configs].to_numpy(), kl[baseline].to_numpy(), n_boot, ci, seed)
        out.append(pd.DataFrame({"student": student, "config": configs, "delta": delta, "ci_lo": lo, "ci_hi": hi,
                                 "accuracy_change": 100 * (acc[configs].mean() - acc[baseline].mean()).to_numpy()}))
    res = pd.concat(out, ignore_index=True).merge(D, on=["student", "config"], how="left")
    res["verdict"] = np.where(fails(res["delta"], res["ci_lo"], res["ci_hi"], tau), "fail", "pass")
    cols = ["student", "config", "D", "delta", "ci_lo", "ci_hi", "accuracy_change", "verdict", "n_runs"]
    return res[cols].sort_values(["student", "D"], ignore_index=True)


def budget_interval(verdicts: pd.DataFrame, tau: float) -> tuple[float, float]:
    """B_emp(tau) = [max D over passes, min D over fails], re-applying the rule at tau; NaN for an empty side."""
    f = fails(verdicts["delta"], verdicts["ci_lo"], verdicts["ci_hi"], tau)
    D = verdicts["D"].to_numpy(dtype=float)
    lo = float(D[~f].max()) if (~f).any() else float("nan")
    hi = float(D[f].min()) if f.any() else float("nan")
    return lo, hi


def is_consistent(lo: float, hi: float) -> bool:
    """A budget is consistent when every pass has less mismatch than every fail (lo < hi); with an empty
    side there is nothing to contradict."""
    return bool(np.isnan(lo) or np.isnan(hi) or lo < hi)


def budget_table(verdicts: pd.DataFrame, taus) -> pd.DataFrame:
    rows = []
    for student, v in verdicts.groupby("student"):
        for tau in taus:
            lo, hi = budget_interval(v, tau)
            f = fails(v["delta"], v["ci_lo"], v["ci_hi"], tau)
            rows.append({"student": student, "tau": float(tau), "lo": lo, "hi": hi, "consistent": is_consistent(lo, hi),
                         "n_pass": int((~f).sum()), "n_fail": int(f.sum())})
    return pd.DataFrame(rows)


def admit(d_hat: float, alpha: float = 1.5, L: float = 0.41) -> bool:
    """Admit a candidate engine iff alpha * D_hat < L."""
    return bool(alpha * d_hat < L)


def admission_record(admission: pd.DataFrame, verdicts: pd.DataFrame, alpha: float, L: float) -> pd.DataFrame:
    """Each candidate's offline decision against its training outcome: admit, D (in training), the
    in-training / offline ratio, the verdict, and whether the decision agreed with it."""
    rec = admission.merge(verdicts[["student", "config", "D", "verdict"]], on=["student", "config"], how="left")
    rec["alpha"], rec["L"] = float(alpha), float(L)
    rec["admit"] = alpha * rec["d_hat"] < L
    rec["ratio"] = np.where(rec["d_hat"] > 0, rec["D"] / rec["d_hat"].where(rec["d_hat"] > 0), np.nan)
    rec["outcome"] = rec["verdict"]
    rec["agrees"] = np.where(rec["outcome"].isna(), np.nan, rec["admit"] == (rec["outcome"] == "pass"))
    cols = ["student", "config", "d_hat", "alpha", "L", "admit", "D", "ratio", "outcome", "agrees"]
    return rec[cols].sort_values(["student", "d_hat"], ignore_index=True)


def admission_summary(record: pd.DataFrame, ratio_floor: float) -> dict:
    """What the record implies: the alpha a pilot would set (the largest in-training/offline ratio among
    candidates whose offline estimate is at least ratio_floor, below which the ratio is sampling noise),
    and the retrospective L (the largest D that passed)."""
    r = record[(record["d_hat"] >= ratio_floor) & record["ratio"].notna()]
    passed = record[record["outcome"] == "pass"]
    known = record["agrees"].notna()
    return {"alpha_implied": float(r["ratio"].max()) if len(r) else float("nan"),
            "L_retrospective": float(passed["D"].max()) if len(passed) else float("nan"),
            "n_decisions": int(known.sum()), "n_agree": int(record.loc[known, "agrees"].astype(bool).sum()),
            "ratio_floor": float(ratio_floor)}


def time_to_target(curve: pd.DataFrame, target: float) -> float:
    """First x at which a held-out KL curve (columns x, kl, sorted by x) is at or below target, linearly
    interpolated between evaluations; NaN if never reached."""
    x, y = curve["x"].to_numpy(float), curve["kl"].to_numpy(float)
    hit = np.nonzero(y <= target)[0]
    if not len(hit):
        return float("nan")
    i = hit[0]
    if i == 0:
        return float(x[0])
    return float(x[i - 1] + (target - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1]))
