"""The paper's statistics: paired bootstrap of the quality change, the fail rule, the mismatch budget
and the admission check. Small pure functions of arrays and DataFrames; vectorised over resamples."""
from __future__ import annotations

import numpy as np
import pandas as pd


BOOT_CHUNK = 1000  # resamples drawn at a time


def problem_resamples(k_cand, k_base, n_boot: int, seed: int) -> np.ndarray:
    """Resampled Delta (n_boot, C): each resample draws n problems with replacement, the same problems
    for every candidate column of k_cand (n, C) and for the baseline k_base (n,)."""
    n = len(k_base)
    rng = np.random.default_rng(seed)
    both = np.column_stack([k_cand, k_base])  # one matrix product gives every candidate's and the baseline's sums
    sums = np.empty((n_boot, both.shape[1]))
    offsets = (np.arange(BOOT_CHUNK, dtype=np.int64) * n)[:, None]
    for start in range(0, n_boot, BOOT_CHUNK):  # chunks keep the per-resample counts in cache
        m = min(BOOT_CHUNK, n_boot - start)
        draws = rng.integers(0, n, size=(m, n)) + offsets[:m]  # problem indices, offset per resample
        counts = np.bincount(draws.ravel(), minlength=m * n).reshape(m, n)  # how often each problem is drawn
        sums[start:start + m] = counts @ both
    return sums[:, :-1] / sums[:, -1:] - 1.0


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
    boot = problem_resamples(kc, kb, n_boot, seed)
    delta = kc.sum(0) / kb.sum() - 1.0
    lo, hi = np.percentile(boot, [50 * (1 - ci), 50 * (1 + ci)], axis=0)
    if scalar:
        return float(delta[0]), float(lo[0]), float(hi[0])
    return delta, lo, hi


MIN_SEED_DF = 2  # degrees of freedom the run-to-run variance needs: S_cand + S_base - 2


def enough_seeds(s_cand: int, s_base: int) -> bool:
    """Whether seed_bootstrap can estimate the run-to-run variance from this many seeds on each side."""
    return s_cand + s_base - 2 >= MIN_SEED_DF


def seed_variance(k_cand, k_base) -> tuple[float, float]:
    """The run-to-run variance of the difference of the two sides' mean log(sum_x K_x), and its degrees
    of freedom. With at least two seeds on each side, each side has its own variance (Welch, with the
    Welch-Satterthwaite degrees of freedom); with one seed on a side, that side borrows the other's
    (pooled, S_cand + S_base - 2 degrees of freedom: the equal-variance assumption)."""
    logs = [np.log(np.asarray(k, dtype=float).sum(1)) for k in (k_cand, k_base)]
    n = [len(x) for x in logs]
    if min(n) >= 2:
        parts = [float(np.var(x, ddof=1)) / len(x) for x in logs]
        return sum(parts), sum(parts) ** 2 / sum(p ** 2 / (m - 1) for p, m in zip(parts, n))
    df = sum(n) - 2
    if df <= 0:
        return float("nan"), df
    pooled = sum(float(((x - x.mean()) ** 2).sum()) for x in logs) / df
    return pooled * (1 / n[0] + 1 / n[1]), df


def seed_bootstrap(k_cand, k_base, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0):
    """Delta with an interval that covers both the problems drawn and the seeds run.

    k_cand: (S_c, n), k_base: (S_0, n): per seed, per problem held-out KL, the same problems in the same
    order on both sides. Delta = sum_x mean_s K(c) / sum_x mean_s K(0) - 1.

    Method (a hybrid bootstrap on the log ratio r = log(1 + Delta)):
    - problems: the paired problem bootstrap of the seed-averaged K gives r's problem-level spread;
    - seeds: each run's log total carries independent run-to-run noise, so the two seed means add
      s_c^2 / S_c + s_0^2 / S_0 to r (`seed_variance`: each side's own variance when both have two
      seeds or more, Welch; else the one-seed side borrows the other's); each resample adds a Student-t
      draw with the matching degrees of freedom scaled to that variance (t, not normal: the variances
      are estimated from few runs).
    Assumes run effects independent of the problem effects, enough problems for the problem bootstrap,
    and, for a one-seed side only, the same run-to-run variance as the other side. Raises ValueError
    with fewer than MIN_SEED_DF + 2 runs in all.
    Returns (delta, lo, hi)."""
    kc = np.atleast_2d(np.asarray(k_cand, dtype=float))
    kb = np.atleast_2d(np.asarray(k_base, dtype=float))
    if kc.shape[1] != kb.shape[1]:
        raise ValueError(f"k_cand and k_base must score the same problems: {kc.shape} vs {kb.shape}")
    var, df = seed_variance(kc, kb)
    if not enough_seeds(len(kc), len(kb)):
        raise ValueError(f"seed_bootstrap needs at least {MIN_SEED_DF + 2} runs in all to estimate the run-to-run "
                         f"variance (got {len(kc)} candidate + {len(kb)} baseline seeds)")
    mc, mb = kc.mean(0), kb.mean(0)
    delta = mc.sum() / mb.sum() - 1.0
    log_boot = np.log1p(problem_resamples(mc[:, None], mb, n_boot, seed)[:, 0])
    rng = np.random.default_rng([seed, 1])
    noise = np.sqrt(var) * rng.standard_t(df, n_boot)
    lo, hi = np.expm1(np.percentile(log_boot + noise, [50 * (1 - ci), 50 * (1 + ci)]))
    return float(delta), float(lo), float(hi)


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
             ci: float = 0.95, seed: int = 0, references: dict | None = None) -> pd.DataFrame:
    """One row per (student, configuration): D, Delta against its reference configuration of the same
    student (the baseline unless `references` names another, e.g. the same training settings without
    the mismatch), the accuracy change (points) and two verdicts:
    - `verdict`, the paper's pre-registered rule on the problem-only paired-bootstrap interval
      (ci_lo, ci_hi) of the seed-averaged K_x;
    - `verdict_seeds`, the same rule on the interval of `seed_bootstrap` (ci_lo_seeds, ci_hi_seeds),
      which also covers the seeds run; missing (None, NaN bounds) where there are too few seeds to
      estimate the run-to-run variance. A reference configuration itself has Delta = 0 and passes.
    Every comparison resamples the same problems (the same bootstrap seed)."""
    references = references or {}
    fin = final_heldout(heldout)
    D = run_mismatch(steps)
    out = []
    for student, fs in fin.groupby("student"):
        kl = fs.pivot_table(index="prompt_id", columns=["config", "seed"], values="kl")
        acc = fs.groupby(["config", "prompt_id"])["correct"].mean().unstack("prompt_id")
        configs = list(dict.fromkeys(kl.columns.get_level_values(0)))
        if baseline not in configs:
            raise ValueError(f"no held-out results for baseline {baseline!r} on student {student!r}")
        for config in configs:
            ref = references.get(config) or baseline
            if ref not in configs:
                raise ValueError(f"no held-out results for {ref!r}, the reference of {config!r}, on student {student!r}")
            both = kl[list(dict.fromkeys([config, ref]))].dropna()  # the problems both sides scored
            kc, kr = both[config].to_numpy().T, both[ref].to_numpy().T  # (seeds, problems)
            delta, lo, hi = paired_bootstrap(kc.mean(0), kr.mean(0), n_boot, ci, seed)
            lo_s = hi_s = float("nan")
            if config == ref:
                lo_s = hi_s = 0.0
            elif enough_seeds(len(kc), len(kr)):
                _, lo_s, hi_s = seed_bootstrap(kc, kr, n_boot, ci, seed)
            out.append({"student": student, "config": config, "reference": ref, "delta": delta, "ci_lo": lo,
                        "ci_hi": hi, "ci_lo_seeds": lo_s, "ci_hi_seeds": hi_s,
                        "accuracy_change": 100 * (acc.loc[config].mean() - acc.loc[ref].mean()),
                        "n_runs_reference": len(kr)})
    res = pd.DataFrame(out).merge(D, on=["student", "config"], how="left")
    res["verdict"] = np.where(fails(res["delta"], res["ci_lo"], res["ci_hi"], tau), "fail", "pass")
    seeds_known = res["ci_lo_seeds"].notna()
    res["verdict_seeds"] = np.where(seeds_known, np.where(
        fails(res["delta"], res["ci_lo_seeds"], res["ci_hi_seeds"], tau), "fail", "pass"), None)
    cols = ["student", "config", "reference", "D", "delta", "ci_lo", "ci_hi", "accuracy_change", "verdict", "n_runs",
            "ci_lo_seeds", "ci_hi_seeds", "verdict_seeds", "n_runs_reference"]
    return res[cols].sort_values(["student", "D"], ignore_index=True)


RULES = {"paper": ("ci_lo", "ci_hi"), "seeds": ("ci_lo_seeds", "ci_hi_seeds")}  # rule -> its interval's columns


def rule_fails(verdicts: pd.DataFrame, tau: float, rule: str = "paper") -> pd.Series:
    """Re-apply the fail rule at tau with one rule's interval: True / False, and NA where that rule has no
    interval (the seed-aware rule without enough seeds)."""
    lo, hi = RULES[rule]
    f = pd.Series(fails(verdicts["delta"], verdicts[lo], verdicts[hi], tau), index=verdicts.index, dtype="boolean")
    return f.mask(verdicts[lo].isna())


def budget_interval(verdicts: pd.DataFrame, tau: float, rule: str = "paper") -> tuple[float, float]:
    """B_emp(tau) = [max D over passes, min D over fails], re-applying the rule at tau with the given
    rule's interval; NaN for an empty side. Configurations the rule cannot judge are left out."""
    f = rule_fails(verdicts, tau, rule)
    D = verdicts["D"].to_numpy(dtype=float)
    known = f.notna().to_numpy()
    f = f.fillna(False).to_numpy(dtype=bool)
    lo = float(D[known & ~f].max()) if (known & ~f).any() else float("nan")
    hi = float(D[f].min()) if f.any() else float("nan")
    return lo, hi


def is_consistent(lo: float, hi: float) -> bool:
    """A budget is consistent when every pass has less mismatch than every fail (lo < hi); with an empty
    side there is nothing to contradict."""
    return bool(np.isnan(lo) or np.isnan(hi) or lo < hi)


def budget_table(verdicts: pd.DataFrame, taus) -> pd.DataFrame:
    """Per student, tau and rule (the paper's and the seed-aware one): the budget interval, whether it is
    consistent, and how many configurations pass, fail, or cannot be judged by that rule."""
    rows = []
    for student, v in verdicts.groupby("student"):
        for rule in RULES:
            for tau in taus:
                lo, hi = budget_interval(v, tau, rule)
                f = rule_fails(v, tau, rule)
                rows.append({"student": student, "rule": rule, "tau": float(tau), "lo": lo, "hi": hi,
                             "consistent": is_consistent(lo, hi), "n_pass": int((f == False).sum()),  # noqa: E712
                             "n_fail": int((f == True).sum()), "n_unjudged": int(f.isna().sum())})  # noqa: E712
    return pd.DataFrame(rows)


def seed_noise(heldout: pd.DataFrame, config: str, n_boot: int = 2000, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The instrument's null distribution from several seeds of one configuration (the baseline), per
    student: every ordered pair of its seeds gives a seed-vs-seed Delta (same engine, so the true Delta
    is 0). Returns (pairs: student, seed_a, seed_b, delta; summary per student: n_seeds, sd_single (SD
    of one seed-vs-seed Delta), sd_run (SD of a run's log sum_x K_x), se_problem (the problem-only
    bootstrap SE of one seed-vs-seed Delta, averaged over consecutive pairs))."""
    fin = final_heldout(heldout[heldout["config"] == config])
    pairs, summary = [], []
    for student, fs in fin.groupby("student"):
        k = fs.pivot_table(index="seed", columns="prompt_id", values="kl").dropna(axis=1)
        seeds, K = list(k.index), k.to_numpy()
        if len(seeds) < 2:
            continue
        tot = K.sum(1)
        d = [(student, seeds[i], seeds[j], tot[i] / tot[j] - 1)
             for i in range(len(seeds)) for j in range(len(seeds)) if i != j]
        pairs += d
        se = [np.std(problem_resamples(K[i][:, None], K[i + 1], n_boot, seed)[:, 0], ddof=1)
              for i in range(len(seeds) - 1)]
        summary.append({"student": student, "config": config, "n_seeds": len(seeds),
                        "sd_single": float(np.std([x[3] for x in d], ddof=1)),
                        "sd_run": float(np.std(np.log(tot), ddof=1)), "se_problem": float(np.mean(se))})
    return (pd.DataFrame(pairs, columns=["student", "seed_a", "seed_b", "delta"]),
            pd.DataFrame(summary, columns=["student", "config", "n_seeds", "sd_single", "sd_run", "se_problem"]))


def ratio_se(num, den, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A ratio of sums over units, sum(num) / sum(den), and its bootstrap standard error from resampling
    the units with replacement (the SD of the resampled ratios; NaN with fewer than two units). For the
    offline estimate D_hat the units are prompts: num = each prompt's summed log-ratio over its
    responses' tokens, den = its token count."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    est = float(num.sum() / den.sum())
    if len(num) < 2:
        return est, float("nan")
    boot = problem_resamples(num[:, None], den, n_boot, seed)[:, 0] + 1.0
    return est, float(np.std(boot, ddof=1))


def sequence_frame(sums, tokens, n_responses: int, **keys) -> pd.DataFrame:
    """The sequences of an offline estimate as both backends write them: one row per sequence, prompts in
    order with n_responses consecutive sequences each; columns: the keys, prompt, response, logratio_sum
    (sum over the response's tokens of log q - log p), n_tokens."""
    i = np.arange(len(sums))
    return pd.DataFrame({**keys, "prompt": i // n_responses, "response": i % n_responses,
                         "logratio_sum": np.asarray(sums, dtype=float), "n_tokens": np.asarray(tokens, dtype=np.int64)})


def share_se(num_a, den_a, num_b, den_b, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """The share (sum(num_a) / sum(den_a)) / (sum(num_b) / sum(den_b)) of two ratio estimates on the same
    units (a part of an effect against the whole, e.g. keys-only D_hat over keys-and-values D_hat on the
    same prompts), and its paired bootstrap SE: each resample draws the same units for both."""
    cols = np.column_stack([np.asarray(x, dtype=float) for x in (num_a, den_a, num_b)])
    den_b = np.asarray(den_b, dtype=float)
    est = float((cols[:, 0].sum() / cols[:, 1].sum()) / (cols[:, 2].sum() / den_b.sum()))
    if len(den_b) < 2:
        return est, float("nan")
    r = problem_resamples(cols, den_b, n_boot, seed) + 1.0  # each column's sum over den_b's
    return est, float(np.std(r[:, 0] / r[:, 1] / r[:, 2], ddof=1))


def offline_estimates(seqs: pd.DataFrame, keys: list[str], n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """D_hat with its bootstrap standard error over prompts, per group of `keys`. `seqs` holds one row per
    sampled sequence: the keys, `prompt`, `logratio_sum` (sum over the response's tokens of log q - log p)
    and `n_tokens`. D_hat = sum of log-ratios / sum of tokens (the d_n formula); the bootstrap resamples
    prompts, each with all its responses. Returns keys, d_hat, se, n_prompts, n_sequences, n_tokens."""
    out = []
    for key, g in seqs.groupby(keys, sort=False):
        per = g.groupby("prompt")[["logratio_sum", "n_tokens"]].sum()
        d, se = ratio_se(per["logratio_sum"], per["n_tokens"], n_boot, seed)
        out.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))), "d_hat": d, "se": se,
                    "n_prompts": len(per), "n_sequences": len(g), "n_tokens": int(g["n_tokens"].sum())})
    return pd.DataFrame(out, columns=[*keys, "d_hat", "se", "n_prompts", "n_sequences", "n_tokens"])


def prompts_for_relative_se(num, den, ns, target: float = 1 / 3, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The standard error of D_hat from the first n prompts, for each n in `ns` (num, den per prompt as in
    ratio_se), against `target` x the D_hat of all prompts: columns n, d_hat (first n), se, relative
    (se / D_hat of all prompts), meets (relative <= target)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    full = num.sum() / den.sum()
    rows = []
    for n in ns:
        d, se = ratio_se(num[:n], den[:n], n_boot, seed)
        rows.append({"n": int(n), "d_hat": d, "se": se, "relative": se / full, "meets": bool(se <= target * full)})
    return pd.DataFrame(rows)


def prompts_needed(se, n_prompts, d_hat, ratio: float = 3.0):
    """The prompts that would bring D_hat's standard error to d_hat / ratio, from an SE measured on
    n_prompts (the SE of a mean of prompts shrinks as 1 / sqrt(n)): ceil(n (ratio SE / D_hat)^2)."""
    se, n, d = (np.asarray(x, dtype=float) for x in (se, n_prompts, d_hat))
    return np.ceil(n * (ratio * se / d) ** 2)


def admit(d_hat: float, alpha: float = 1.5, L: float = 0.41) -> bool:
    """Admit a candidate engine iff alpha * D_hat < L."""
    return bool(alpha * d_hat < L)


def admission_record(admission: pd.DataFrame, verdicts: pd.DataFrame, alpha: float, L: float,
                     baselines=()) -> pd.DataFrame:
    """Each engine's offline decision against its training outcome: D_hat and its standard error (from
    `offline_estimates`), admit, D (in training), the in-training / offline ratio, the verdict, whether
    the decision agreed with it, and whether the engine is a `candidate` (not one of `baselines`, the
    standard engine every other is compared with: its decision is not a decision)."""
    rec = admission.merge(verdicts[["student", "config", "D", "verdict"]], on=["student", "config"], how="left")
    rec["alpha"], rec["L"] = float(alpha), float(L)
    rec["admit"] = alpha * rec["d_hat"] < L
    rec["ratio"] = np.where(rec["d_hat"] > 0, rec["D"] / rec["d_hat"].where(rec["d_hat"] > 0), np.nan)
    rec["outcome"] = rec["verdict"]
    rec["agrees"] = np.where(rec["outcome"].isna(), np.nan, rec["admit"] == (rec["outcome"] == "pass"))
    rec["candidate"] = ~rec["config"].isin(list(baselines))
    cols = ["student", "config", "candidate", "d_hat", "se", "n_prompts", "n_sequences", "alpha", "L", "admit", "D",
            "ratio", "outcome", "agrees"]
    return rec[cols].sort_values(["student", "d_hat"], ignore_index=True)


def admission_summary(record: pd.DataFrame, ratio_floor: float) -> dict:
    """What the record implies, over candidate engines only (a baseline is not a decision): how many
    decisions have a training outcome and how many agree with it, how many "admit everything" would get
    right (the candidates that passed), the alpha a pilot would set (the largest in-training/offline
    ratio among candidates whose offline estimate is at least ratio_floor, below which the ratio is
    sampling noise), the retrospective L (the largest D that passed), and the range of D_hat's standard
    error relative to D_hat among candidates with D_hat >= ratio_floor, and the most prompts any of them
    needs for an SE of at most a third of D_hat (prompts_needed)."""
    c = record[record["candidate"].astype(bool)]
    known = c[c["agrees"].notna()]
    r = c[(c["d_hat"] >= ratio_floor) & c["ratio"].notna()]
    passed = c[c["outcome"] == "pass"]
    big = c[c["d_hat"] >= ratio_floor]
    rel = big["se"] / big["d_hat"]
    need = prompts_needed(big["se"], big["n_prompts"], big["d_hat"])
    return {"alpha_implied": float(r["ratio"].max()) if len(r) else float("nan"),
            "L_retrospective": float(passed["D"].max()) if len(passed) else float("nan"),
            "n_decisions": int(len(known)), "n_agree": int(known["agrees"].astype(bool).sum()),
            "n_admit_all_agree": int((known["outcome"] == "pass").sum()),
            "n_baseline": int((~record["candidate"].astype(bool)).sum()),
            "se_relative_min": float(rel.min()) if len(rel) else float("nan"),
            "se_relative_max": float(rel.max()) if len(rel) else float("nan"),
            "prompts_for_se_third": float(need.max()) if len(need) else float("nan"),
            "n_prompts": int(c["n_prompts"].max()) if len(c) else 0,
            "ratio_floor": float(ratio_floor)}


COLLAPSE_CRITERIA = ("accuracy", "entropy", "length")
RL_COLLAPSE_DEFAULTS = {"accuracy_points": 5.0, "entropy_factor": 1.5, "length_factor": 1.2}  # config: rl_collapse


def rl_collapse(table: pd.DataFrame, accuracy_points: float, entropy_factor: float, length_factor: float) -> pd.DataFrame:
    """The paper's RL collapse rule, thresholds fixed in advance, each criterion on held-out against the same
    algorithm on the standard engine at the final evaluation: accuracy at least `accuracy_points` below
    (`accuracy_change`, points), or the mean per-token entropy of the policy on its held-out responses
    (`entropy_ratio`) or the mean held-out response length (`length_ratio`) off by at least the factor
    either way (a collapsed policy degenerates into a few tokens or into noise). A ratio that is
    missing (not measured) does not fire. Adds one boolean column per criterion (collapse_<name>),
    `collapsed` (any) and `collapse_criteria` (the names that fired, joined by '+'; '' when none)."""
    t = table.copy()

    def off(ratio, factor):
        r = pd.to_numeric(ratio, errors="coerce").to_numpy(dtype=float)
        return np.isfinite(r) & ((r <= 1 / factor) | (r >= factor))
    fired = {"accuracy": (pd.to_numeric(t["accuracy_change"]).to_numpy(dtype=float) <= -accuracy_points),
             "entropy": off(t["entropy_ratio"], entropy_factor), "length": off(t["length_ratio"], length_factor)}
    for name in COLLAPSE_CRITERIA:
        t[f"collapse_{name}"] = fired[name].astype(bool)
    t["collapsed"] = np.logical_or.reduce([fired[n] for n in COLLAPSE_CRITERIA])
    t["collapse_criteria"] = ["+".join(n for n in COLLAPSE_CRITERIA if fired[n][i]) for i in range(len(t))]
    return t


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
