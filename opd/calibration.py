"""Calibrating the seed-aware rule: the toy's noise sizes measured from its runs, a simulator of held-out KL at
those sizes (coverage, power and error rates of the rules in opd.stats), and the sequential-seeds rule that
gives a row another seed only while its verdict is undecided. Pure functions of arrays and DataFrames."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from opd import stats

# ---------------------------------------------------------------- the noise sizes, measured


def _log_residuals(k):
    """Two-way residuals of log K (S, n): log K less its seed and problem means."""
    lk = np.log(k)
    return lk - lk.mean(0) - lk.mean(1, keepdims=True) + lk.mean()


def measure_noise(heldout: pd.DataFrame, baseline: str, *, shuffles: int = 200, seed: int = 0,
                  n_draws: int = 1) -> pd.DataFrame:
    """The noise sizes of each student's runs at their final evaluation, from the baseline's seeds and the
    other rows with two seeds or more. One row per student:
    - n_problems, n_seeds (the baseline's);
    - sd_run_total: the SD over the baseline's seeds of log sum_x K_x;
    - sd_run_interaction: the part of it the seed x problem interaction makes (sqrt of sum_x var_s(K_sx /
      sum_x K_sx), as seed_bootstrap subtracts it), and sd_run_shuffled, the same by a shuffle test (each
      problem's K_x permuted over seeds: run effects gone, the interaction kept; RMS over `shuffles`);
    - sd_run: the pure run effect, sqrt(sd_run_total^2 - sd_run_interaction^2) (0 if negative);
    - sd_interaction, interaction_excess_kurtosis: the SD and excess kurtosis of the two-way residuals of
      log K_sx (seed x problem);
    - kx_sd_log, kx_excess_kurtosis: of the baseline's seed-mean K_x over problems;
    - n_rows: rows with two seeds or more; their run_ratio_median / run_ratio_max (a row's sd_run_total
      over the baseline's), interaction_ratio_max (its sd_interaction over the baseline's), and
      sd_effect_median / sd_effect_max: the SD over problems of a row's true per-problem effect, log
      (mean_s K_c / mean_s K_0) less what the interaction puts into it (0 if negative).
    With n_draws > 1 base-model draws, the runs of draw 0 only (run seed s on draw s % n_draws): the seeds'
    noise on one base model, which is what the simulator's run and interaction terms model."""
    from scipy import stats as sps  # here, not at import: the DAG's plan (opd.plan) imports this module
    if n_draws > 1:  # the OPD seeds' noise on one base model: draw 0's runs (run seed s on draw s % n_draws)
        heldout = heldout[stats.draw_of(heldout["seed"].to_numpy(), n_draws) == 0]
    fin = stats.final_heldout(heldout)
    rng = np.random.default_rng(seed)
    out = []
    for student, fs in fin.groupby("student"):
        kl = fs.pivot_table(index="prompt_id", columns=["config", "seed"], values="kl").dropna()
        if baseline not in kl.columns.get_level_values(0):
            raise ValueError(f"no held-out results for baseline {baseline!r} on student {student!r}")
        B = kl[baseline].to_numpy().T
        if len(B) < 2:
            continue
        total = float(np.std(np.log(B.sum(1)), ddof=1))
        inter = float(np.sqrt(np.var(B / B.sum(1, keepdims=True), axis=0, ddof=1).sum()))
        shuffled = [np.var(np.log(np.take_along_axis(B, np.argsort(rng.random(B.shape), axis=0), 0).sum(1)), ddof=1)
                    for _ in range(shuffles)]
        res = _log_residuals(B)
        sd_int = float(np.sqrt((res ** 2).sum() / ((B.shape[0] - 1) * (B.shape[1] - 1))))
        mb = B.mean(0)
        ratios, int_ratios, effects = [], [], []
        for config in dict.fromkeys(kl.columns.get_level_values(0)):
            C = kl[config].to_numpy().T
            if config == baseline or len(C) < 2:
                continue
            ratios.append(np.std(np.log(C.sum(1)), ddof=1) / total)
            rc = _log_residuals(C)
            si = np.sqrt((rc ** 2).sum() / ((C.shape[0] - 1) * (C.shape[1] - 1)))
            int_ratios.append(si / sd_int)
            het = np.var(np.log(C.mean(0) / mb), ddof=1) - si ** 2 / len(C) - sd_int ** 2 / len(B)
            effects.append(np.sqrt(max(het, 0.0)))
        out.append({"student": student, "n_problems": B.shape[1], "n_seeds": len(B), "sd_run_total": total,
                    "sd_run_interaction": inter, "sd_run_shuffled": float(np.sqrt(np.mean(shuffled))),
                    "sd_run": float(np.sqrt(max(total ** 2 - inter ** 2, 0.0))), "sd_interaction": sd_int,
                    "interaction_excess_kurtosis": float(sps.kurtosis(res.ravel())),
                    "kx_sd_log": float(np.std(np.log(mb))), "kx_excess_kurtosis": float(sps.kurtosis(mb)),
                    "n_rows": len(ratios),
                    "run_ratio_median": float(np.median(ratios)) if ratios else np.nan,
                    "run_ratio_max": float(np.max(ratios)) if ratios else np.nan,
                    "interaction_ratio_max": float(np.max(int_ratios)) if int_ratios else np.nan,
                    "sd_effect_median": float(np.median(effects)) if effects else np.nan,
                    "sd_effect_max": float(np.max(effects)) if effects else np.nan})
    return pd.DataFrame(out)


# ---------------------------------------------------------------- a simulator at those sizes

HEAVY_SHARE, HEAVY_SCALE = 0.1, 3.0  # heavy tails: one draw in ten from a 3x wider normal (excess kurtosis 5.3)


class NoiseModel(NamedTuple):
    """The sizes a simulated experiment draws its held-out KL from (logs, natural units):
    K_{s,x} = mu_x * f_x * (1 + Delta) * exp(u_s) * exp(e_{s,x}) on the candidate, without f_x and Delta on
    the baseline, each factor with mean 1. mu_x: the problems' KL, log mu ~ kx_sd_log x a standardised
    Student-t with kx_tail_df degrees of freedom (inf: normal); f_x: the engine's per-problem effect
    (sd_effect); u_s: a run's seed effect (sd_run); e_sx: the seed x problem interaction (sd_interaction).
    With several base-model draws, run s uses draw s % n_draws; each draw scales both sides' K_x by a
    common factor (draw_scale_sd overall, draw_problem_sd per problem: a retrained base model finds other
    problems hard), and the candidate's by exp(g_d), the draw x configuration interaction (sd_draw)."""
    n_problems: int
    kx_sd_log: float
    kx_tail_df: float
    sd_run: float
    sd_interaction: float
    sd_effect: float
    sd_draw: float = 0.0
    draw_scale_sd: float = 0.0
    draw_problem_sd: float = 0.0


def _standard(rng, shape, tails: str):
    """Standardised draws (SD 1): normal, or `heavy` (a contaminated normal, finite moments of every order)."""
    x = rng.standard_normal(shape)
    if tails == "normal":
        return x
    if tails != "heavy":
        raise ValueError(f"tails must be 'normal' or 'heavy', got {tails!r}")
    wide = rng.random(shape) < HEAVY_SHARE
    return x * np.where(wide, HEAVY_SCALE, 1.0) / np.sqrt(1 - HEAVY_SHARE + HEAVY_SHARE * HEAVY_SCALE ** 2)


def _log_mean_exp(sd, tails: str):
    """log E exp(sd x) for x ~ _standard(tails): subtracted so that each factor has mean 1."""
    if tails == "normal":
        return sd ** 2 / 2
    v = 1 - HEAVY_SHARE + HEAVY_SHARE * HEAVY_SCALE ** 2
    return np.log((1 - HEAVY_SHARE) * np.exp(sd ** 2 / (2 * v))
                  + HEAVY_SHARE * np.exp(HEAVY_SCALE ** 2 * sd ** 2 / (2 * v)))


def _factor(rng, shape, sd, tails):
    return np.exp(sd * _standard(rng, shape, tails) - _log_mean_exp(sd, tails))


def problem_profile(rng, n_exp: int, n: int, sd_log: float, tail_df: float) -> np.ndarray:
    """(n_exp, n) problems' KL: exp(sd_log x t), t a standardised Student-t (normal when tail_df is inf)."""
    if np.isinf(tail_df):
        t = rng.standard_normal((n_exp, n))
    else:
        t = rng.standard_t(tail_df, (n_exp, n)) / np.sqrt(tail_df / (tail_df - 2))
    return 0.05 * np.exp(sd_log * t)


def tail_df_for(kurtosis: float, sd_log: float, n: int, seed: int = 0) -> float:
    """The Student-t degrees of freedom of log K_x (from inf, 30, 16, 12, 10, 8, 7, 6, 5) whose profile's
    median sample excess kurtosis over n problems is nearest `kurtosis` (at the given SD of log K_x)."""
    from scipy import stats as sps
    rng = np.random.default_rng(seed)
    grid = [np.inf, 30, 16, 12, 10, 8, 7, 6, 5]
    med = [np.median(sps.kurtosis(problem_profile(rng, 400, n, sd_log, g), axis=1)) for g in grid]
    return float(grid[int(np.argmin(np.abs(np.log(np.array(med)) - np.log(max(kurtosis, 1e-3)))))])


class Runs(NamedTuple):
    """Simulated runs: k_cand (E, S_c, n), k_base (E, S_0, n) and each run's base-model draw."""
    k_cand: np.ndarray
    k_base: np.ndarray
    draws_cand: np.ndarray
    draws_base: np.ndarray


def simulate(rng, model: NoiseModel, *, n_exp: int, seeds_cand: int, seeds_base: int, delta: float,
             cand_run: float = 1.0, cand_interaction: float = 1.0, run_tails: str = "normal",
             interaction_tails: str = "heavy", draw_tails: str = "normal", n_draws: int = 1) -> Runs:
    """n_exp independent simulated comparisons (new problems each) of a candidate with population Delta
    `delta` against the baseline, at the sizes of `model`; the candidate's seed effect is cand_run x and
    its interaction cand_interaction x the baseline's; run_tails, interaction_tails, draw_tails: `normal` or
    `heavy` seed effects, seed x problem interaction (heavy by default: the toy's residuals of log K_sx have
    an excess kurtosis of 7-8, measure_noise) and draw x configuration effects."""
    n = model.n_problems
    mu = problem_profile(rng, n_exp, n, model.kx_sd_log, model.kx_tail_df)
    f = _factor(rng, (n_exp, n), model.sd_effect, "normal")
    dc, db = stats.draw_of(np.arange(seeds_cand), n_draws), stats.draw_of(np.arange(seeds_base), n_draws)
    common = (_factor(rng, (n_exp, n_draws, 1), model.draw_scale_sd, "normal")
              * _factor(rng, (n_exp, n_draws, n), model.draw_problem_sd, "normal"))
    g = _factor(rng, (n_exp, n_draws, 1), model.sd_draw, draw_tails)

    def runs(S, scale, draws, run_sd, int_sd):
        u = _factor(rng, (n_exp, S, 1), run_sd, run_tails)
        e = _factor(rng, (n_exp, S, n), int_sd, interaction_tails)
        return (mu * scale)[:, None] * common[:, draws] * u * e
    kc = runs(seeds_cand, f * (1 + delta), dc, model.sd_run * cand_run, model.sd_interaction * cand_interaction)
    kc = kc * g[:, dc]
    kb = runs(seeds_base, 1.0, db, model.sd_run, model.sd_interaction)
    return Runs(kc, kb, dc, db)


def simulated_intervals(rng, model: NoiseModel, *, n_exp: int, seeds_cand: int, seeds_base: int, delta: float,
                        n_boot: int, ci: float = 0.95, seed: int = 0, pooled_draw_var: bool = False,
                        one_seed_ratio: float = 1.0, **simulate_options) -> stats.Interval:
    """seed_bootstrap's intervals over n_exp simulated comparisons (simulate). With pooled_draw_var, each
    interval uses the draw x configuration variance pooled over the batch's comparisons (as if every one
    were a row of the same student, with the same interaction variance)."""
    runs = simulate(rng, model, n_exp=n_exp, seeds_cand=seeds_cand, seeds_base=seeds_base, delta=delta,
                    **simulate_options)
    draw_var = None
    if pooled_draw_var:
        est = stats.draw_variance(runs.k_cand, runs.k_base, draws_cand=runs.draws_cand, draws_base=runs.draws_base)
        draw_var = stats.pool_draw_variance(stats.DrawVariance(float(v), float(d)) for v, d in zip(*est))
    return stats.seed_bootstrap(runs.k_cand, runs.k_base, n_boot=n_boot, ci=ci, seed=seed, draws_cand=runs.draws_cand,
                                draws_base=runs.draws_base, draw_var=draw_var, one_seed_ratio=one_seed_ratio)


class Rates(NamedTuple):
    """Over simulated comparisons: how often the interval covered the true Delta, how often the pre-registered
    rule failed the candidate (stats.fails at tau), the median interval width, and how many comparisons."""
    coverage: float
    fail: float
    width: float
    n_exp: int


def rates(rng, model: NoiseModel, *, tau: float, delta: float, n_exp: int, seeds_cand: int, seeds_base: int,
          n_boot: int, ci: float = 0.95, seed: int = 0, pooled_draw_var: bool = False, one_seed_ratio: float = 1.0,
          **simulate_options) -> Rates:
    """Coverage, fail rate (the power where delta >= tau) and width of seed_bootstrap's interval over n_exp
    simulated comparisons at the sizes of `model` (simulate's options: cand_run, tails, n_draws, ...)."""
    iv = simulated_intervals(rng, model, n_exp=n_exp, seeds_cand=seeds_cand, seeds_base=seeds_base, delta=delta,
                             n_boot=n_boot, ci=ci, seed=seed, pooled_draw_var=pooled_draw_var,
                             one_seed_ratio=one_seed_ratio, **simulate_options)
    return Rates(float(np.mean((iv.ci_lo <= delta) & (delta <= iv.ci_hi))), float(np.mean(stats.fails(*iv, tau))),
                 float(np.median(iv.ci_hi - iv.ci_lo)), n_exp)


# ---------------------------------------------------------------- sequential seeds

class SequentialRule(NamedTuple):
    """The pre-registered sequential-seeds rule of one experiment. A row starts with `start_seeds` seeds
    (seeds 0, 1, ... in order) and gets the next seed while the seed-aware interval of its Delta against its
    reference straddles tau (ci_lo < tau <= ci_hi: the data cannot yet say on which side of tau Delta lies;
    this includes every interval that straddles 0 while Delta >= tau), up to `max_seeds`. The verdict is the
    seed-aware rule's (stats.fails) on the seeds run when it stops. The baseline and every reference row run
    their full design (their seeds are shared by every comparison). With n_draws > 1, run s uses base-model
    draw s % n_draws and a row starts with at least one seed per draw. While a row has one seed, its
    run-to-run variance is assumed at most one_seed_ratio^2 x its reference's (stats.seed_variance): set it
    to the largest run SD ratio measured between a row and the baseline (measure_noise) so that a one-seed
    stage does not stop a noisy row early."""
    tau: float
    max_seeds: int
    start_seeds: int = 1
    n_draws: int = 1
    one_seed_ratio: float = 1.0
    n_boot: int = 10_000
    ci: float = 0.95
    seed: int = 0

    def validate(self, base_seeds: int) -> None:
        """Raise ValueError when the rule cannot run against a reference with base_seeds seeds."""
        problem = stats.sequential_problem(self.start_seeds, self.max_seeds, base_seeds, self.n_draws)
        if problem:
            raise ValueError(f"sequential seeds: {problem}")


def straddles(ci_lo, ci_hi, tau: float):
    """Whether an interval leaves open on which side of tau Delta lies (the rule's `undecided`)."""
    return (np.asarray(ci_lo) < tau) & (tau <= np.asarray(ci_hi))


def interval_on_seeds(k_cand, k_base, rule: SequentialRule, *, seeds_cand=None, seeds_base=None) -> stats.Interval:
    """The seed-aware interval of the first seeds run (k_cand (S, n) or a batch (E, S, n); k_base likewise),
    run seed s on draw s % rule.n_draws (seeds_cand, seeds_base: the run seeds, default 0, 1, ...)."""
    sc = np.arange(np.shape(k_cand)[-2]) if seeds_cand is None else np.asarray(seeds_cand)
    sb = np.arange(np.shape(k_base)[-2]) if seeds_base is None else np.asarray(seeds_base)
    if rule.n_draws > 1:
        drawn = set(stats.draw_of(sc, rule.n_draws).tolist())  # the reference's runs on the draws the row has run
        keep = np.isin(stats.draw_of(sb, rule.n_draws), list(drawn))
        k_base, sb = np.asarray(k_base)[..., keep, :], sb[keep]
    return stats.seed_bootstrap(k_cand, k_base, n_boot=rule.n_boot, ci=rule.ci, seed=rule.seed,
                                draws_cand=stats.draw_of(sc, rule.n_draws), draws_base=stats.draw_of(sb, rule.n_draws),
                                one_seed_ratio=rule.one_seed_ratio)


def next_seeds(k_cand, k_base, rule: SequentialRule, *, seeds_base=None) -> list[int]:
    """Which seeds a row runs next, given its runs so far (k_cand (S, n): seeds 0 .. S-1, in order) and its
    reference's (k_base (S_0, n)): the seeds up to start_seeds first; then one more seed while the interval
    straddles tau and fewer than max_seeds have run; else none (decided). Deterministic: the same runs give
    the same answer."""
    k_cand = np.asarray(k_cand, dtype=float).reshape(-1, np.shape(k_base)[-1])
    s = len(k_cand)
    if s < rule.start_seeds:
        return list(range(s, rule.start_seeds))
    if s >= rule.max_seeds:
        return []
    iv = interval_on_seeds(k_cand, k_base, rule, seeds_base=seeds_base)
    return [s] if bool(straddles(iv.ci_lo, iv.ci_hi, rule.tau)) else []


class SequentialRates(NamedTuple):
    """Over simulated rows at one true Delta: how often the sequential verdict differs from the full design's
    (max_seeds seeds), how often each fails, and the mean seeds the sequential rule ran."""
    differ: float
    fail_sequential: float
    fail_full: float
    mean_seeds: float
    n_exp: int


def sequential_rates(rng, model: NoiseModel, rule: SequentialRule, *, delta: float, seeds_base: int, n_exp: int,
                     **simulate_options) -> SequentialRates:
    """The sequential rule replayed over n_exp simulated rows, each with max_seeds candidate runs drawn once
    (the full design), against the same runs of the full design."""
    rule.validate(seeds_base)
    runs = simulate(rng, model, n_exp=n_exp, seeds_cand=rule.max_seeds, seeds_base=seeds_base, delta=delta,
                    n_draws=rule.n_draws, **simulate_options)
    verdict = np.zeros(n_exp, dtype=bool)
    used = np.full(n_exp, rule.max_seeds)
    open_ = np.ones(n_exp, dtype=bool)
    full = None
    for s in range(rule.start_seeds, rule.max_seeds + 1):
        iv = interval_on_seeds(runs.k_cand[:, :s], runs.k_base, rule)
        f = stats.fails(*iv, rule.tau)
        stop = open_ & (~straddles(iv.ci_lo, iv.ci_hi, rule.tau) | (s == rule.max_seeds))
        verdict[stop], used[stop] = f[stop], s
        open_ &= ~stop
        full = f
    return SequentialRates(float(np.mean(verdict != full)), float(np.mean(verdict)), float(np.mean(full)),
                           float(np.mean(used)), n_exp)


def replay(heldout: pd.DataFrame, rule: SequentialRule, *, baseline: str,
           references: dict | None = None) -> pd.DataFrame:
    """The sequential rule replayed over a full design's runs (held-out KL at each run's final evaluation,
    the columns stats.final_pairs reads: run_id, student, config, seed, step, prompt_id, kl, correct; OPD rows only): for each student and row, which of its seeds the rule would have run, in order (seed
    0, 1, ... up to max_seeds or the seeds the full design has), its verdict then, and the full design's
    seed-aware verdict on every seed. The baseline and reference rows (`references` values) run their full
    design. One row per student and configuration: student, config, reference, role (baseline, reference
    or sequential), seeds_run ("0,1"), n_runs, n_runs_full, delta, ci_lo, ci_hi (the interval the rule
    stopped on), verdict, verdict_full, agree."""
    references = references or {}
    fixed = {baseline, *references.values()}
    out = []
    for student, config, ref, kc, kr, seeds, ref_seeds, _ in stats.final_pairs(heldout, baseline, references):
        seeds, ref_seeds = [int(x) for x in seeds], [int(x) for x in ref_seeds]
        row = {"student": student, "config": config, "reference": ref,
               "role": "baseline" if config == baseline else "reference" if config in fixed else "sequential"}
        if config == ref:
            out.append({**row, "seeds_run": ",".join(map(str, seeds)), "n_runs": len(seeds),
                        "n_runs_full": len(seeds), "delta": 0.0, "ci_lo": 0.0, "ci_hi": 0.0, "verdict": "pass",
                        "verdict_full": "pass", "agree": True})
            continue
        full = interval_on_seeds(kc, kr, rule, seeds_cand=seeds, seeds_base=ref_seeds)
        top = len(seeds) if config in fixed else min(rule.max_seeds, len(seeds))
        s = top if config in fixed else min(rule.start_seeds, top)
        while True:
            iv = interval_on_seeds(kc[:s], kr, rule, seeds_cand=seeds[:s], seeds_base=ref_seeds)
            if s >= top or not straddles(iv.ci_lo, iv.ci_hi, rule.tau):
                break
            s += 1
        verdict, verdict_full = stats.verdict_of(*iv, rule.tau), stats.verdict_of(*full, rule.tau)
        out.append({**row, "seeds_run": ",".join(map(str, seeds[:s])), "n_runs": s, "n_runs_full": len(seeds),
                    "delta": iv.delta, "ci_lo": iv.ci_lo, "ci_hi": iv.ci_hi, "verdict": verdict,
                    "verdict_full": verdict_full, "agree": verdict == verdict_full})
    return pd.DataFrame(out)


class ReplaySummary(NamedTuple):
    """One student's replay: runs the sequential rule used and the full design's, and of the rows judged
    (every row but the baseline), how many verdicts agree."""
    student: str
    runs_used: int
    runs_full: int
    verdicts_agree: int
    n_rows: int


def replay_summary(replayed: pd.DataFrame) -> list[ReplaySummary]:
    """Per student, the totals of a replay() table."""
    out = []
    for student, g in replayed.groupby("student"):
        judged = g[g["role"] != "baseline"]
        out.append(ReplaySummary(student, int(g["n_runs"].sum()), int(g["n_runs_full"].sum()),
                                 int(judged["agree"].sum()), len(judged)))
    return out
