"""The pre-registered fail rule and the verdict tables: each configuration against its reference with both
intervals (the paper's and the seed-aware one), per draw, and two verdict tables of one experiment compared."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from opd.stats.bootstrap import paired_bootstrap
from opd.stats.seeds import DrawVariance, draw_of, draw_variance, enough_seeds, pool_draw_variance, seed_bootstrap


def fails(delta, ci_lo, ci_hi, tau: float):
    """The pre-registered rule: fail iff Delta >= tau and the interval excludes zero."""
    delta, ci_lo, ci_hi = (np.asarray(x, dtype=float) for x in (delta, ci_lo, ci_hi))
    return (delta >= tau) & ((ci_lo > 0) | (ci_hi < 0))


def verdict_of(delta, ci_lo, ci_hi, tau: float):
    """The verdict the pre-registered rule (fails) gives: "fail" or "pass"; a str for one comparison, an array
    for several. The one home of the pass/fail decision."""
    v = np.where(fails(delta, ci_lo, ci_hi, tau), "fail", "pass")
    return str(v) if v.ndim == 0 else v


def final_heldout(heldout: pd.DataFrame) -> pd.DataFrame:
    """Each run's rows at its last evaluation step."""
    last = heldout.groupby("run_id")["step"].transform("max")
    return heldout[heldout["step"] == last]


def run_mismatch(steps: pd.DataFrame) -> pd.DataFrame:
    """D per configuration and student: the mean of d_n over each run's steps, averaged over seeds."""
    per_run = steps.groupby(["student", "config", "run_id"], as_index=False)["d_n"].mean()
    return per_run.groupby(["student", "config"], as_index=False).agg(D=("d_n", "mean"), n_runs=("run_id", "nunique"))


class Comparison(NamedTuple):
    """A candidate against its reference: Delta; the paper's problem-only interval (ci_lo, ci_hi); the
    seed-aware interval (ci_lo_seeds, ci_hi_seeds; NaN with too few runs), which also covers the seeds and,
    with several base-model draws, the draws; the runs on each side and the draws compared on."""
    delta: float
    ci_lo: float
    ci_hi: float
    ci_lo_seeds: float
    ci_hi_seeds: float
    n_runs: int
    n_runs_reference: int
    n_draws: int


def shared_draws(k_ref, seeds_ref, seeds_cand, n_draws: int):
    """The reference's runs (k_ref (..., S, n), with run seeds seeds_ref) on the base-model draws the
    candidate's seeds use: (k_ref, seeds_ref) restricted (all of them with one draw)."""
    seeds_ref = np.asarray(seeds_ref)
    keep = np.isin(draw_of(seeds_ref, n_draws), draw_of(np.asarray(seeds_cand), n_draws))
    return np.asarray(k_ref)[..., keep, :], seeds_ref[keep]


def compare(k_cand, k_ref, *, seeds_cand, seeds_ref, n_draws: int = 1, n_boot: int = 10_000, ci: float = 0.95,
            seed: int = 0, draw_var: DrawVariance | None = None, one_seed_ratio: float = 1.0) -> Comparison:
    """Both intervals of one comparison: k_cand (S_c, n), k_ref (S_0, n) per run and problem, run seeds
    seeds_cand, seeds_ref; run s uses base-model draw s % n_draws and is compared with the reference's runs
    on the same draws. The paper's interval: paired_bootstrap of the draw-balanced mean K_x (the seed
    means with one draw); the seed-aware one: seed_bootstrap (two-level over draws where the candidate has
    runs on two draws or more)."""
    kc = np.atleast_2d(np.asarray(k_cand, dtype=float))
    kr, sr = shared_draws(np.atleast_2d(np.asarray(k_ref, dtype=float)), seeds_ref, seeds_cand, n_draws)
    dc, dr = draw_of(np.asarray(seeds_cand), n_draws), draw_of(sr, n_draws)
    draws = np.unique(dc)
    mc = np.mean([kc[dc == d].mean(0) for d in draws], 0)
    mr = np.mean([kr[dr == d].mean(0) for d in draws], 0)
    delta, lo, hi = paired_bootstrap(mc, mr, n_boot=n_boot, ci=ci, seed=seed)
    lo_s = hi_s = float("nan")
    if len(draws) > 1 or enough_seeds(len(kc), len(kr)):
        _, lo_s, hi_s = seed_bootstrap(kc, kr, n_boot=n_boot, ci=ci, seed=seed, draws_cand=dc, draws_base=dr,
                                       draw_var=draw_var if len(draws) > 1 else None, one_seed_ratio=one_seed_ratio)
    return Comparison(delta, lo, hi, lo_s, hi_s, len(kc), len(kr), len(draws))


def final_pairs(heldout: pd.DataFrame, baseline: str, references: dict):
    """Each student's comparisons at the final evaluation: (student, config, reference, k_cand, k_ref,
    seeds_cand, seeds_ref, accuracy change in points), on the problems both sides scored."""
    fin = final_heldout(heldout)
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
            yield (student, config, ref, both[config].to_numpy().T, both[ref].to_numpy().T,
                   np.asarray(both[config].columns), np.asarray(both[ref].columns),
                   100 * (acc.loc[config].mean() - acc.loc[ref].mean()))


def pooled_draw_variances(pairs, n_draws: int) -> dict[str, DrawVariance]:
    """Per student, the draw x configuration interaction variance pooled over its comparisons that ran on two
    draws or more (pairs: final_pairs' tuples; run seed s on draw s % n_draws)."""
    est = {}
    for student, config, ref, kc, kr, sc, sr, _ in pairs:
        kr2, sr2 = shared_draws(kr, sr, sc, n_draws)
        if config != ref and len(np.unique(draw_of(sc, n_draws))) > 1:
            est.setdefault(student, []).append(draw_variance(kc, kr2, draws_cand=draw_of(sc, n_draws),
                                                             draws_base=draw_of(sr2, n_draws)))
    return {s: pool_draw_variance(e) for s, e in est.items()}


def verdicts(heldout: pd.DataFrame, steps: pd.DataFrame, baseline: str, *, tau: float, n_boot: int = 10_000,
             ci: float = 0.95, seed: int = 0, references: dict | None = None, n_draws: int = 1,
             pool_draws: bool = False, one_seed_ratio: float = 1.0) -> pd.DataFrame:
    """One row per (student, configuration): D, Delta against its reference configuration of the same
    student (the baseline unless `references` names another, e.g. the same training settings without
    the mismatch), the accuracy change (points) and two verdicts:
    - `verdict`, the paper's pre-registered rule on the problem-only paired-bootstrap interval
      (ci_lo, ci_hi) of the seed-averaged K_x;
    - `verdict_seeds`, the same rule on the interval of `seed_bootstrap` (ci_lo_seeds, ci_hi_seeds),
      which also covers the seeds run and, with n_draws > 1 (run seed s on base-model draw s % n_draws,
      each comparison on the same draws), the base-model draws: each row's own between-draw spread, or
      with pool_draws the draw x configuration variance pooled over the student's rows (assumes it is
      the same for all of them); missing (None, NaN bounds) where there are too few runs to estimate the
      run-to-run variance. A reference configuration itself has Delta = 0 and passes.
    n_draws: the draws the row was compared on. Every comparison resamples the same problems (the same
    bootstrap seed). one_seed_ratio: a one-seed side's run-to-run variance is taken as at most its square times the
    other side's (seed_bootstrap; an experiment's `sequential.one_seed_ratio`, 1 without one)."""
    references = references or {}
    pairs = list(final_pairs(heldout, baseline, references))
    pooled = pooled_draw_variances(pairs, n_draws) if pool_draws and n_draws > 1 else {}
    out = []
    for student, config, ref, kc, kr, sc, sr, acc in pairs:
        c = compare(kc, kr, seeds_cand=sc, seeds_ref=sr, n_draws=n_draws, n_boot=n_boot, ci=ci, seed=seed,
                    draw_var=pooled.get(student), one_seed_ratio=one_seed_ratio)
        c = c._replace(ci_lo_seeds=0.0, ci_hi_seeds=0.0) if config == ref else c
        out.append({"student": student, "config": config, "reference": ref, **c._asdict(), "accuracy_change": acc})
    res = pd.DataFrame(out).merge(run_mismatch(steps)[["student", "config", "D"]], on=["student", "config"], how="left")
    res["verdict"] = verdict_of(res["delta"], res["ci_lo"], res["ci_hi"], tau)
    seeds_known = res["ci_lo_seeds"].notna()
    res["verdict_seeds"] = np.where(seeds_known, verdict_of(res["delta"], res["ci_lo_seeds"], res["ci_hi_seeds"], tau),
                                    None)
    cols = ["student", "config", "reference", "D", "delta", "ci_lo", "ci_hi", "accuracy_change", "verdict", "n_runs",
            "ci_lo_seeds", "ci_hi_seeds", "verdict_seeds", "n_runs_reference", "n_draws"]
    return res[cols].sort_values(["student", "D"], ignore_index=True)


def draw_verdicts(heldout: pd.DataFrame, baseline: str, *, tau: float, n_draws: int, n_boot: int = 10_000,
                  ci: float = 0.95, seed: int = 0, references: dict | None = None,
                  one_seed_ratio: float = 1.0) -> pd.DataFrame:
    """Per student, configuration and base-model draw (run seed s on draw s % n_draws): Delta on that draw
    alone against the reference's runs on it, both intervals (the seed-aware one on that draw's seeds:
    NaN with too few; a one-seed side's run variance at most one_seed_ratio^2 x the other's), both verdicts
    at tau, n_runs, n_runs_reference. A configuration that is its own reference is left out."""
    out = []
    for student, config, ref, kc, kr, sc, sr, _ in final_pairs(heldout, baseline, references or {}):
        if config == ref:
            continue
        for d in np.unique(draw_of(sc, n_draws)):
            on = draw_of(sc, n_draws) == d
            c = compare(kc[on], kr, seeds_cand=sc[on], seeds_ref=sr, n_draws=n_draws, n_boot=n_boot, ci=ci,
                        seed=seed, one_seed_ratio=one_seed_ratio)
            out.append({"student": student, "config": config, "reference": ref, "draw": int(d),
                        **c._asdict()})
    cols = ["student", "config", "reference", "draw", "delta", "ci_lo", "ci_hi", "ci_lo_seeds", "ci_hi_seeds",
            "verdict", "verdict_seeds", "n_runs", "n_runs_reference"]
    res = pd.DataFrame(out, columns=[c for c in cols if not c.startswith("verdict")])
    res["verdict"] = verdict_of(res["delta"], res["ci_lo"], res["ci_hi"], tau)
    res["verdict_seeds"] = np.where(res["ci_lo_seeds"].notna(),
                                    verdict_of(res["delta"], res["ci_lo_seeds"], res["ci_hi_seeds"], tau), None)
    return res[cols].sort_values(["student", "config", "draw"], ignore_index=True)


# rule -> the verdict table's columns of its interval and its verdict (opd.stats.verdicts), and its name
RULE_COLUMNS = {"paper": ("ci_lo", "ci_hi", "verdict"), "seeds": ("ci_lo_seeds", "ci_hi_seeds", "verdict_seeds")}
RULE_NAMES = {"paper": "paper's rule (problems only)", "seeds": "seed-aware rule"}
Z95 = 1.959964  # the standard normal's 97.5% point: a 95% interval is +- Z95 standard errors


def regeneration_agreement(first: pd.DataFrame, second: pd.DataFrame, rule: str = "seeds") -> pd.DataFrame:
    """Two verdict tables of one experiment (opd.stats.verdicts: the committed results and a regeneration,
    say), row by row: per (student, config) both Delta and both verdicts under `rule`, `within` (the second Delta
    lies inside the first's interval: the regeneration reproduced the result within what the first stated), and
    `ci_lo_1`, `ci_hi_1` (the first's interval), `z`, the change in log(1 + Delta) over the root sum of squares of both standard errors, each read from its 95%
    interval on that scale (half its width / 1.96). Where both are independent draws of one result, |z| > 1.96 on
    about 5% of rows. Reference rows (Delta is 0 by definition) are left out; a row one table lacks is left out
    (the caller names it); `within` and `z` are NaN where an interval is missing."""
    lo, hi, verdict = RULE_COLUMNS[rule]
    cols = ["student", "config", "delta", lo, hi, verdict]
    own = [f[f["config"] != f["reference"]][cols] for f in (first, second)]
    t = own[0].merge(own[1], on=["student", "config"], suffixes=("_1", "_2"))

    def se(x):
        return (np.log1p(t[f"{hi}_{x}"].to_numpy(float)) - np.log1p(t[f"{lo}_{x}"].to_numpy(float))) / (2 * Z95)

    d1, d2 = t["delta_1"].to_numpy(float), t["delta_2"].to_numpy(float)
    known = t[f"{lo}_1"].notna().to_numpy()
    within = (d2 >= t[f"{lo}_1"].to_numpy(float)) & (d2 <= t[f"{hi}_1"].to_numpy(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (np.log1p(d2) - np.log1p(d1)) / np.hypot(se(1), se(2))
    return pd.DataFrame({"student": t["student"], "config": t["config"], "delta_1": d1, "delta_2": d2,
                         "ci_lo_1": t[f"{lo}_1"].to_numpy(float), "ci_hi_1": t[f"{hi}_1"].to_numpy(float),
                         "verdict_1": t[f"{verdict}_1"], "verdict_2": t[f"{verdict}_2"],
                         "within": pd.array(np.where(known, within, pd.NA), dtype="boolean"), "z": z})


def rule_fails(verdicts: pd.DataFrame, tau: float, rule: str = "paper") -> pd.Series:
    """Re-apply the fail rule at tau with one rule's interval: True / False, and NA where that rule has no
    interval (the seed-aware rule without enough seeds)."""
    lo, hi, _ = RULE_COLUMNS[rule]
    f = pd.Series(fails(verdicts["delta"], verdicts[lo], verdicts[hi], tau), index=verdicts.index, dtype="boolean")
    return f.mask(verdicts[lo].isna())
