"""The paper's statistics: paired bootstrap of the quality change, the fail rule, the mismatch budget
and the admission check, and this project's seed-aware interval (seeds and base-model draws). Small pure
functions of arrays and DataFrames, vectorised over resamples; results are named tuples (unpacking works
as for plain ones), options keyword-only, and the thresholds (tau, alpha, L) come from the experiment."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from opd import spec


BOOT_CHUNK = 1000  # resamples drawn at a time


class Interval(NamedTuple):
    """An estimate of Delta with its confidence interval: floats for one comparison, arrays for several."""
    delta: float
    ci_lo: float
    ci_hi: float


def resampled_sums(cols, n_boot: int, seed: int) -> np.ndarray:
    """Column sums of `cols` (n, M) over n_boot resamples of its n rows (problems) drawn with replacement,
    the same rows for every column: (n_boot, M)."""
    cols = np.asarray(cols, dtype=float)
    sums = np.empty((n_boot, cols.shape[1]))
    for start, counts in resample_counts(len(cols), n_boot, seed):
        sums[start:start + len(counts)] = counts @ cols  # one matrix product gives every column's sum
    return sums


# The resamples' counts depend on (n, n_boot, seed) alone, and every interval of an experiment resamples its n
# problems with the same seed: the DAG's plan (opd.plan) computes dozens on each parse, the analysis more. Drawn
# once per process and kept (as float64, what the product computes with: the same sums to the last bit) while they
# fit COUNTS_CACHE_ELEMENTS in all (28 MB for the toy's 359 problems); larger draws are not kept.
COUNTS_CACHE_ELEMENTS = 2**23
_COUNTS: dict[tuple[int, int, int], list[tuple[int, np.ndarray]]] = {}


def resample_counts(n: int, n_boot: int, seed) -> list[tuple[int, np.ndarray]]:
    """(first resample, counts (m, n)) per chunk of BOOT_CHUNK resamples: how often each of n problems is drawn in
    each resample, from numpy's default_rng(seed) (cached for an integer seed, see COUNTS_CACHE_ELEMENTS)."""
    key = (n, n_boot, int(seed)) if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) else None
    if key in _COUNTS:
        _COUNTS[key] = _COUNTS.pop(key)  # most recently used last
        return _COUNTS[key]
    rng = np.random.default_rng(seed)
    chunks = []
    offsets = (np.arange(BOOT_CHUNK, dtype=np.int64) * n)[:, None]
    for start in range(0, n_boot, BOOT_CHUNK):  # chunks keep the per-resample counts in cache
        m = min(BOOT_CHUNK, n_boot - start)
        draws = rng.integers(0, n, size=(m, n)) + offsets[:m]  # problem indices, offset per resample
        counts = np.bincount(draws.ravel(), minlength=m * n).reshape(m, n).astype(float)
        counts.setflags(write=False)
        chunks.append((start, counts))
    if key is not None and n * n_boot <= COUNTS_CACHE_ELEMENTS:
        while _COUNTS and sum(k[0] * k[1] for k in _COUNTS) + n * n_boot > COUNTS_CACHE_ELEMENTS:
            del _COUNTS[next(iter(_COUNTS))]  # the least recently used
        _COUNTS[key] = chunks
    return chunks


def problem_resamples(k_cand, k_base, n_boot: int, seed: int) -> np.ndarray:
    """Resampled Delta (n_boot, C): each resample draws n problems with replacement, the same problems
    for every candidate column of k_cand (n, C) and for the baseline k_base (n,)."""
    sums = resampled_sums(np.column_stack([k_cand, k_base]), n_boot, seed)
    return sums[:, :-1] / sums[:, -1:] - 1.0


def paired_bootstrap(k_cand, k_base, *, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0) -> Interval:
    """Delta = sum(k_cand) / sum(k_base) - 1 with a percentile interval from resampling problems.

    k_cand: (n,) or (n, C) per-problem held-out KL of the candidate(s); k_base: (n,) of the baseline.
    Each resample draws the same problems for candidate and baseline (and for every configuration).
    Returns Interval(delta, ci_lo, ci_hi): scalars for (n,) input, arrays of shape (C,) for (n, C)."""
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
        return Interval(float(delta[0]), float(lo[0]), float(hi[0]))
    return Interval(delta, lo, hi)


# ---------------------------------------------------------------- the seed-aware interval (seeds and draws)

MIN_SEED_DF = 2  # degrees of freedom the run-to-run variance needs: S_cand + S_base - 2


def enough_seeds(s_cand: int, s_base: int) -> bool:
    """Whether seed_bootstrap can estimate the run-to-run variance from this many seeds on each side
    (one base-model draw)."""
    return s_cand + s_base - 2 >= MIN_SEED_DF


def sequential_problem(start_seeds: int, max_seeds: int, base_seeds: int, n_draws: int = 1) -> str | None:
    """Why a sequential-seeds rule (opd.calibration.SequentialRule) cannot run against a reference with base_seeds
    seeds, or None."""
    if not 1 <= start_seeds <= max_seeds:
        return f"need 1 <= start_seeds ({start_seeds}) <= max_seeds ({max_seeds})"
    if n_draws > 1 and start_seeds < n_draws:
        return f"start_seeds ({start_seeds}) must give every one of the {n_draws} base-model draws a run"
    if n_draws == 1 and not enough_seeds(start_seeds, base_seeds):
        return (f"{start_seeds} candidate + {base_seeds} reference seeds are too few for the seed-aware interval "
                f"(at least {MIN_SEED_DF + 2} runs in all)")
    return None


def draw_of(seed, n_draws: int):
    """opd.spec.draw_of over an array of run seeds."""
    return spec.draw_of(np.asarray(seed), n_draws)


class SeedVariance(NamedTuple):
    """What the runs of a comparison say about its log ratio r = log(1 + Delta), beyond the problems drawn.
    var: the variance of r from unit to unit (seeds on one base model; base-model draws otherwise), with df
    degrees of freedom; overlap: the part of it the problem bootstrap already sees (the seed x problem or
    draw x problem interaction: noise that differs from problem to problem); n_units: seeds of the
    candidate + of the baseline on one draw, else the number of draws. Floats, or arrays for a batch."""
    var: float
    df: float
    overlap: float
    n_units: int


def _side_spread(k):
    """One side's runs (E, S, n) of one draw: the variance over its seeds of log sum_x K_x (ddof 1), and the
    interaction part of it, sum_x var_s(K_sx / sum_x K_sx) (a run's shares: its own scale removed).
    NaN with one seed."""
    if k.shape[1] < 2:
        nan = np.full(k.shape[0], np.nan)
        return nan, nan
    tot = k.sum(-1)
    return np.var(np.log(tot), axis=1, ddof=1), np.var(k / tot[..., None], axis=1, ddof=1).sum(-1)


def seed_variance(k_cand, k_base, *, one_seed_ratio: float = 1.0) -> SeedVariance:
    """The run-to-run variance of the difference of the two sides' mean log(sum_x K_x) on one base-model
    draw (k_cand (S_c, n) or a batch (E, S_c, n); k_base likewise) and its degrees of freedom. With at least
    two seeds on each side, each side has its own variance (Welch, with the Welch-Satterthwaite degrees of
    freedom); with one seed on a side, that side borrows the other's (pooled, S_c + S_b - 2 degrees of
    freedom: the equal-variance assumption, or one_seed_ratio^2 x the other's run-to-run variance, a
    pre-registered bound on how much noisier a one-seed side may be). `overlap` is the part of `var` the
    problem bootstrap sees (for a one-seed side, the other side's, unscaled)."""
    kc, kb = (np.asarray(k, dtype=float) for k in (k_cand, k_base))
    batch = kc.ndim == 3
    kc, kb = (k if batch else k[None] for k in (kc, kb))
    (sc, _), (sb, _) = kc.shape[1:], kb.shape[1:]
    (vc, ic), (vb, ib) = _side_spread(kc), _side_spread(kb)
    if min(sc, sb) >= 2:
        pc, pb = vc / sc, vb / sb
        var, overlap = pc + pb, ic / sc + ib / sb
        df = var ** 2 / (pc ** 2 / (sc - 1) + pb ** 2 / (sb - 1))
    else:
        df = sc + sb - 2
        if df <= 0:
            nan = np.full(len(kc), np.nan)
            return _unbatch(SeedVariance(nan, np.full(len(kc), float(df)), nan, sc + sb), batch)
        w = [(s - 1) / df for s in (sc, sb)]  # pooled: each side's squares weighted by its degrees of freedom
        pooled = sum(wi * np.nan_to_num(v) for wi, v in zip(w, (vc, vb)))
        pooled_i = sum(wi * np.nan_to_num(v) for wi, v in zip(w, (ic, ib)))
        rc, rb = (one_seed_ratio ** 2 if s == 1 else 1.0 for s in (sc, sb))
        var, overlap = pooled * (rc / sc + rb / sb), pooled_i * (1 / sc + 1 / sb)
        df = np.full(len(kc), float(df))
    return _unbatch(SeedVariance(var, df, overlap, sc + sb), batch)


def _unbatch(res, batch: bool):
    if batch:
        return res
    return type(res)(*(float(np.asarray(x).ravel()[0]) if np.ndim(x) else x for x in res))


def _by_draw(k, labels, draws):
    """Per draw, the seed-mean K_x: (E, S, n) runs with draw labels (S,) -> (E, D, n)."""
    return np.stack([k[:, labels == d].mean(1) for d in draws], 1)


class DrawVariance(NamedTuple):
    """The draw x configuration interaction variance of a comparison on the scale of sum_d z_d (see
    draw_variance), with its degrees of freedom: estimated from one row's draws, or pooled over a
    student's rows (pool_draw_variance). Floats, or (E,) arrays for a batch (one per comparison)."""
    var: float
    df: float


def _within_draw_seeds(k, labels, draws):
    """A side's within-draw run variance of log sum_x K_x, pooled over its draws (E,), and its degrees of
    freedom sum_d (S_d - 1)."""
    tot = np.log(k.sum(-1))  # (E, S)
    ss, df = np.zeros(len(k)), 0
    for d in draws:
        t = tot[:, labels == d]
        if t.shape[1] >= 2:
            ss = ss + ((t - t.mean(1, keepdims=True)) ** 2).sum(1)
            df += t.shape[1] - 1
    return (ss / df if df else np.full(len(k), np.nan)), df


def _draw_parts(kc, kb, dc, db):
    """The pieces of the two-level rule for a batch (E, S, n) of runs with draw labels dc, db. Returns
    (mc, mb, z, overlap, within, within_df): the draw-balanced mean K_x of each side (E, n); each draw's
    pseudo-value z_d = sum_x cbar_dx / C - sum_x bbar_dx / B (C, B: the means over draws of the draws'
    totals; r - r_true ~ mean_d z_d), (E, D); the part of mean_d z_d's variance the problem bootstrap sees,
    sum_x var_d(cbar_dx / C - bbar_dx / B) / D; and the variance of mean_d z_d that the within-draw seeds
    carry (each side's within-draw run variance, a side without two seeds on one draw borrowing the
    other's), with its degrees of freedom (Welch-Satterthwaite; (E,) arrays)."""
    draws = np.unique(np.concatenate([dc, db]))
    missing = [(side, int(d)) for side, lab in (("candidate", dc), ("reference", db)) for d in draws if d not in lab]
    if missing:
        raise ValueError("every base-model draw needs runs on both sides; missing: "
                         + ", ".join(f"{s} on draw {d}" for s, d in missing))
    cbar, bbar = _by_draw(kc, dc, draws), _by_draw(kb, db, draws)  # (E, D, n)
    ctot, btot = cbar.sum(-1), bbar.sum(-1)
    C, B = ctot.mean(1), btot.mean(1)
    z = ctot / C[:, None] - btot / B[:, None]
    D = len(draws)
    q = cbar / C[:, None, None] - bbar / B[:, None, None]
    overlap = np.var(q, axis=1, ddof=1).sum(-1) / D if D > 1 else np.full(len(kc), np.nan)
    (vc, fc), (vb, fb) = _within_draw_seeds(kc, dc, draws), _within_draw_seeds(kb, db, draws)
    if not fc and not fb:
        within, within_df = np.full(len(kc), np.nan), np.zeros(len(kc))
    else:
        vc, vb = (vc, vb) if fc and fb else ((vb, vb) if fb else (vc, vc))
        nc = np.array([(dc == d).sum() for d in draws])
        nb = np.array([(db == d).sum() for d in draws])
        phic, phib = ctot / C[:, None], btot / B[:, None]  # a draw's share of its side's total
        pc, pb = (phic ** 2 / nc).sum(1) * vc / D ** 2, (phib ** 2 / nb).sum(1) * vb / D ** 2
        within = pc + pb
        if fc and fb:  # Welch-Satterthwaite
            within_df = within ** 2 / (pc ** 2 / fc + pb ** 2 / fb)
        else:  # one variance for both sides
            within_df = np.full(len(kc), float(max(fc, fb)))
    return cbar.mean(1), bbar.mean(1), z, overlap, within, within_df


def draw_variance(k_cand, k_base, *, draws_cand, draws_base) -> DrawVariance:
    """One row's estimate of the draw x configuration interaction variance: the spread of the draws'
    pseudo-values z_d (var_d z, ddof 1) less what the within-draw seeds put into it (D x their share of
    the variance of mean_d z). Unbiased, so it can be negative (pool it: pool_draw_variance); D - 1 degrees
    of freedom. Needs two draws or more."""
    kc, kb, dc, db, batch = _batch_inputs(k_cand, k_base, draws_cand, draws_base)
    D = len(np.unique(dc))
    if D < 2:
        raise ValueError("draw_variance needs runs on two base-model draws or more")
    _, _, z, _, within, _ = _draw_parts(kc, kb, dc, db)
    res = DrawVariance(np.var(z, axis=1, ddof=1) - D * np.nan_to_num(within), np.full(len(kc), D - 1.0))
    return _unbatch(res, batch)


def pool_draw_variance(estimates) -> DrawVariance:
    """Pool rows' DrawVariance estimates (e.g. every row of one student): the degrees-of-freedom weighted
    mean, floored at 0, with the summed degrees of freedom. Assumes every pooled row has the same draw x
    configuration interaction variance."""
    est = [e for e in estimates if np.isfinite(e.var)]
    df = sum(e.df for e in est)
    if not df:
        return DrawVariance(float("nan"), 0.0)
    return DrawVariance(max(0.0, sum(e.var * e.df for e in est) / df), float(df))


def _batch_inputs(k_cand, k_base, draws_cand, draws_base):
    kc = np.asarray(k_cand, dtype=float)
    kb = np.asarray(k_base, dtype=float)
    batch = kc.ndim == 3
    kc, kb = (k if batch else np.atleast_2d(k)[None] for k in (kc, kb))
    if kc.shape[-1] != kb.shape[-1] or kc.shape[0] != kb.shape[0]:
        raise ValueError(f"k_cand and k_base must score the same problems: {kc.shape[-2:]} vs {kb.shape[-2:]}")
    dc = np.zeros(kc.shape[1], dtype=np.int64) if draws_cand is None else np.asarray(draws_cand)
    db = np.zeros(kb.shape[1], dtype=np.int64) if draws_base is None else np.asarray(draws_base)
    if len(dc) != kc.shape[1] or len(db) != kb.shape[1]:
        raise ValueError(f"one draw label per run: {len(dc)} labels for {kc.shape[1]} candidate runs, "
                         f"{len(db)} for {kb.shape[1]} reference runs")
    return kc, kb, dc, db, batch


def seed_bootstrap(k_cand, k_base, *, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0, draws_cand=None,
                   draws_base=None, draw_var: DrawVariance | None = None, one_seed_ratio: float = 1.0) -> Interval:
    """Delta with an interval that covers the problems drawn, the seeds run and, where the runs use several
    base models, the base-model draws.

    k_cand: (S_c, n), k_base: (S_0, n): per run, per problem held-out KL, the same problems in the same
    order on both sides; or batches (E, S_c, n), (E, S_0, n) of independent comparisons (simulations),
    resampled with the same problem draws. draws_cand, draws_base: each run's base-model draw (draw_of);
    None: one draw. Delta = sum_x Mc_x / sum_x Mb_x - 1, M_x the mean over draws of a draw's seed-mean K_x
    (with one draw, or as many seeds on every draw, the seed-mean K_x).

    Method, on the log ratio r = log(1 + Delta) (a hybrid bootstrap):
    - units: what varies from run to run is measured on the units that carry it: with one draw, each side's
      seeds (each run's log sum_x K_x carries its seed effect: the two seed means add s_c^2 / S_c +
      s_0^2 / S_0 to r, `seed_variance`: Welch with two seeds or more on each side, else the one-seed side
      borrows the other's); with several draws, the draws (each comparison pairs the two sides on one
      draw, and the spread of the draws' pseudo-values z_d covers the draw x configuration interaction
      and the seeds within them; or, given `draw_var`, a pooled interaction variance plus the within-draw
      seeds: each its own Student-t draw, t not normal: the variances are estimated from few units);
    - problems: the paired problem bootstrap of M gives r's problem-level spread, but part of that spread
      is the units' own noise from problem to problem (the seed x problem interaction), which the unit
      spread already holds: the bootstrap deviations are scaled by sqrt(1 - overlap / their variance), so
      that only the per-problem spread of the engine's effect is added to the units' spread (counted
      once, not twice; the same correction as for the two-way crossed bootstrap, Owen 2007).
    Assumes run (and draw) effects independent of the problem effects, enough problems for the problem
    bootstrap, for a one-seed side the other side's run-to-run variance (times one_seed_ratio^2; with
    one draw only), and with `draw_var` the pooled interaction variance (the same for every row pooled).
    Coverage at the toy's measured noise sizes: benchmarks/bootstrap.py and tests/test_stats.py. Raises
    ValueError with too few runs to estimate the unit spread (fewer than
    MIN_SEED_DF + 2 runs on one draw). Returns Interval(delta, ci_lo, ci_hi) (arrays (E,) for a batch)."""
    kc, kb, dc, db, batch = _batch_inputs(k_cand, k_base, draws_cand, draws_base)
    D = len(np.unique(np.concatenate([dc, db])))
    E = len(kc)
    rng = np.random.default_rng([seed, 1])
    if D == 1:
        if not enough_seeds(kc.shape[1], kb.shape[1]):
            raise ValueError(f"seed_bootstrap needs at least {MIN_SEED_DF + 2} runs in all to estimate the run-to-run "
                             f"variance (got {kc.shape[1]} candidate + {kb.shape[1]} baseline seeds)")
        mc, mb = kc.mean(1), kb.mean(1)
        sv = seed_variance(kc, kb, one_seed_ratio=one_seed_ratio)
        noise = np.sqrt(sv.var) * rng.standard_t(sv.df, (n_boot, E))
        overlap = sv.overlap
    else:
        mc, mb, z, overlap, within, within_df = _draw_parts(kc, kb, dc, db)
        if draw_var is None:
            noise = np.sqrt(np.var(z, axis=1, ddof=1) / D) * rng.standard_t(D - 1, (n_boot, E))
        else:
            if not within_df.all():
                raise ValueError("a pooled draw variance needs two runs on one draw on at least one side, for the "
                                 "within-draw run-to-run variance")
            if not np.all(np.asarray(draw_var.df) > 0):
                raise ValueError("draw_var has no degrees of freedom")
            noise = (np.sqrt(draw_var.var / D) * rng.standard_t(draw_var.df, (n_boot, E))
                     + np.sqrt(within) * rng.standard_t(within_df, (n_boot, E)))
    delta = mc.sum(-1) / mb.sum(-1) - 1.0
    r = np.log1p(delta)
    sums = resampled_sums(np.concatenate([mc, mb]).T, n_boot, seed)
    log_boot = np.log(sums[:, :E] / sums[:, E:])
    v_boot = np.var(log_boot, axis=0, ddof=1)
    keep = np.sqrt(np.clip(1 - overlap / np.where(v_boot > 0, v_boot, np.inf), 0, 1))
    lo, hi = np.expm1(np.percentile(r + keep * (log_boot - r) + noise, [50 * (1 - ci), 50 * (1 + ci)], axis=0))
    return _unbatch(Interval(delta, lo, hi), batch)


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
    res["verdict"] = np.where(fails(res["delta"], res["ci_lo"], res["ci_hi"], tau), "fail", "pass")
    seeds_known = res["ci_lo_seeds"].notna()
    res["verdict_seeds"] = np.where(seeds_known, np.where(
        fails(res["delta"], res["ci_lo_seeds"], res["ci_hi_seeds"], tau), "fail", "pass"), None)
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
    res["verdict"] = np.where(fails(res["delta"], res["ci_lo"], res["ci_hi"], tau), "fail", "pass")
    res["verdict_seeds"] = np.where(res["ci_lo_seeds"].notna(), np.where(
        fails(res["delta"], res["ci_lo_seeds"], res["ci_hi_seeds"], tau), "fail", "pass"), None)
    return res[cols].sort_values(["student", "config", "draw"], ignore_index=True)


# rule -> the verdict table's columns of its interval and its verdict (opd.stats.verdict_table), and its name
RULE_COLUMNS = {"paper": ("ci_lo", "ci_hi", "verdict"), "seeds": ("ci_lo_seeds", "ci_hi_seeds", "verdict_seeds")}
RULE_NAMES = {"paper": "paper's rule (problems only)", "seeds": "seed-aware rule"}
Z95 = 1.959964  # the standard normal's 97.5% point: a 95% interval is +- Z95 standard errors


def regeneration_agreement(first: pd.DataFrame, second: pd.DataFrame, rule: str = "seeds") -> pd.DataFrame:
    """Two verdict tables of one experiment (opd.stats.verdict_table: the committed results and a regeneration,
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


class Budget(NamedTuple):
    """A mismatch budget B_emp(tau) = [lo, hi]: the largest D that passed and the smallest that failed."""
    lo: float
    hi: float


def budget_interval(verdicts: pd.DataFrame, tau: float, rule: str = "paper") -> Budget:
    """B_emp(tau) = [max D over passes, min D over fails], re-applying the rule at tau with the given
    rule's interval; NaN for an empty side. Configurations the rule cannot judge are left out."""
    f = rule_fails(verdicts, tau, rule)
    D = verdicts["D"].to_numpy(dtype=float)
    known = f.notna().to_numpy()
    f = f.fillna(False).to_numpy(dtype=bool)
    lo = float(D[known & ~f].max()) if (known & ~f).any() else float("nan")
    hi = float(D[f].min()) if f.any() else float("nan")
    return Budget(lo, hi)


def is_consistent(lo: float, hi: float) -> bool:
    """A budget is consistent when every pass has less mismatch than every fail (lo < hi); with an empty
    side there is nothing to contradict."""
    return bool(np.isnan(lo) or np.isnan(hi) or lo < hi)


def budget_table(verdicts: pd.DataFrame, taus) -> pd.DataFrame:
    """Per student, tau and rule (the paper's and the seed-aware one): the budget interval, whether it is
    consistent, and how many configurations pass, fail, or cannot be judged by that rule."""
    rows = []
    for student, v in verdicts.groupby("student"):
        for rule in RULE_COLUMNS:
            for tau in taus:
                lo, hi = budget_interval(v, tau, rule)
                f = rule_fails(v, tau, rule)
                rows.append({"student": student, "rule": rule, "tau": float(tau), "lo": lo, "hi": hi,
                             "consistent": is_consistent(lo, hi), "n_pass": int((f == False).sum()),  # noqa: E712
                             "n_fail": int((f == True).sum()), "n_unjudged": int(f.isna().sum())})  # noqa: E712
    return pd.DataFrame(rows)


class NoiseTables(NamedTuple):
    """seed_noise's tables: every seed-vs-seed Delta, and a summary per student."""
    pairs: pd.DataFrame
    summary: pd.DataFrame


def seed_noise(heldout: pd.DataFrame, config: str, *, n_boot: int = 2000, seed: int = 0,
               n_draws: int = 1) -> NoiseTables:
    """The instrument's null distribution from several seeds of one configuration (the baseline), per
    student: every ordered pair of its seeds on the same base-model draw (run seed s on draw s % n_draws)
    gives a seed-vs-seed Delta (same engine, same base model, so the true Delta is 0). Returns (pairs:
    student, seed_a, seed_b, delta; summary per student: n_seeds, sd_single (SD of one seed-vs-seed Delta),
    sd_run (SD of a run's log sum_x K_x within a draw, pooled over draws), se_problem (the problem-only
    bootstrap SE of one seed-vs-seed Delta, averaged over consecutive pairs on one draw), n_draws and
    sd_draw: the SD over draws of a draw's seed-mean log sum_x K_x (how far the base model alone moves the
    configuration's held-out KL; NaN with one draw))."""
    fin = final_heldout(heldout[heldout["config"] == config])
    pairs, summary = [], []
    for student, fs in fin.groupby("student"):
        k = fs.pivot_table(index="seed", columns="prompt_id", values="kl").dropna(axis=1)
        seeds, K = np.asarray(k.index), k.to_numpy()
        draw = draw_of(seeds, n_draws)
        logt = np.log(K.sum(1))
        on = [np.flatnonzero(draw == d) for d in np.unique(draw)]
        on = [i for i in on if len(i) >= 2]
        if not on:
            continue
        tot = K.sum(1)
        d = [(student, int(seeds[i]), int(seeds[j]), tot[i] / tot[j] - 1)
             for idx in on for i in idx for j in idx if i != j]
        pairs += d
        ss = sum(((logt[i] - logt[i].mean()) ** 2).sum() for i in on)
        se = [np.std(problem_resamples(K[a][:, None], K[b], n_boot, seed)[:, 0], ddof=1)
              for idx in on for a, b in zip(idx[:-1], idx[1:])]
        means = [logt[draw == x].mean() for x in np.unique(draw)]
        summary.append({"student": student, "config": config, "n_seeds": len(seeds),
                        "sd_single": float(np.std([x[3] for x in d], ddof=1)),
                        "sd_run": float(np.sqrt(ss / sum(len(i) - 1 for i in on))), "se_problem": float(np.mean(se)),
                        "n_draws": len(means), "sd_draw": float(np.std(means, ddof=1)) if len(means) > 1 else np.nan})
    return NoiseTables(pd.DataFrame(pairs, columns=["student", "seed_a", "seed_b", "delta"]),
                       pd.DataFrame(summary, columns=["student", "config", "n_seeds", "sd_single", "sd_run",
                                                      "se_problem", "n_draws", "sd_draw"]))


class Estimate(NamedTuple):
    """An estimate and its bootstrap standard error."""
    estimate: float
    se: float


def ratio_se(num, den, *, n_boot: int = 2000, seed: int = 0) -> Estimate:
    """A ratio of sums over units, sum(num) / sum(den), and its bootstrap standard error from resampling
    the units with replacement (the SD of the resampled ratios; NaN with fewer than two units). For the
    offline estimate D_hat the units are prompts: num = each prompt's summed log-ratio over its
    responses' tokens, den = its token count."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    est = float(num.sum() / den.sum())
    if len(num) < 2:
        return Estimate(est, float("nan"))
    boot = problem_resamples(num[:, None], den, n_boot, seed)[:, 0] + 1.0
    return Estimate(est, float(np.std(boot, ddof=1)))


def sequence_frame(sums, tokens, n_responses: int, **keys) -> pd.DataFrame:
    """The sequences of an offline estimate as both backends write them: one row per sequence, prompts in
    order with n_responses consecutive sequences each; columns: the keys, prompt, response, logratio_sum
    (sum over the response's tokens of log q - log p), n_tokens."""
    i = np.arange(len(sums))
    return pd.DataFrame({**keys, "prompt": i // n_responses, "response": i % n_responses,
                         "logratio_sum": np.asarray(sums, dtype=float), "n_tokens": np.asarray(tokens, dtype=np.int64)})


def share_se(num_a, den_a, num_b, den_b, *, n_boot: int = 2000, seed: int = 0) -> Estimate:
    """The share (sum(num_a) / sum(den_a)) / (sum(num_b) / sum(den_b)) of two ratio estimates on the same
    units (a part of an effect against the whole, e.g. keys-only D_hat over keys-and-values D_hat on the
    same prompts), and its paired bootstrap SE: each resample draws the same units for both."""
    cols = np.column_stack([np.asarray(x, dtype=float) for x in (num_a, den_a, num_b)])
    den_b = np.asarray(den_b, dtype=float)
    est = float((cols[:, 0].sum() / cols[:, 1].sum()) / (cols[:, 2].sum() / den_b.sum()))
    if len(den_b) < 2:
        return Estimate(est, float("nan"))
    r = problem_resamples(cols, den_b, n_boot, seed) + 1.0  # each column's sum over den_b's
    return Estimate(est, float(np.std(r[:, 0] / r[:, 1] / r[:, 2], ddof=1)))


def offline_estimates(seqs: pd.DataFrame, keys: list[str], *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """D_hat with its bootstrap standard error over prompts, per group of `keys`. `seqs` holds one row per
    sampled sequence: the keys, `prompt`, `logratio_sum` (sum over the response's tokens of log q - log p)
    and `n_tokens`. D_hat = sum of log-ratios / sum of tokens (the d_n formula); the bootstrap resamples
    prompts, each with all its responses. Returns keys, d_hat, se, n_prompts, n_sequences, n_tokens."""
    out = []
    for key, g in seqs.groupby(keys, sort=False):
        per = g.groupby("prompt")[["logratio_sum", "n_tokens"]].sum()
        d, se = ratio_se(per["logratio_sum"], per["n_tokens"], n_boot=n_boot, seed=seed)
        out.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))), "d_hat": d, "se": se,
                    "n_prompts": len(per), "n_sequences": len(g), "n_tokens": int(g["n_tokens"].sum())})
    return pd.DataFrame(out, columns=[*keys, "d_hat", "se", "n_prompts", "n_sequences", "n_tokens"])


def prompts_for_relative_se(num, den, ns, target: float = 1 / 3, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The standard error of D_hat from the first n prompts, for each n in `ns` (num, den per prompt as in
    ratio_se), against `target` x the D_hat of all prompts: columns n, d_hat (first n), se, relative
    (se / D_hat of all prompts), meets (relative <= target)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    full = num.sum() / den.sum()
    rows = []
    for n in ns:
        d, se = ratio_se(num[:n], den[:n], n_boot=n_boot, seed=seed)
        rows.append({"n": int(n), "d_hat": d, "se": se, "relative": se / full, "meets": bool(se <= target * full)})
    return pd.DataFrame(rows)


def prompts_needed(se, n_prompts, d_hat, ratio: float = 3.0):
    """The prompts that would bring D_hat's standard error to d_hat / ratio, from an SE measured on
    n_prompts (the SE of a mean of prompts shrinks as 1 / sqrt(n)): ceil(n (ratio SE / D_hat)^2)."""
    se, n, d = (np.asarray(x, dtype=float) for x in (se, n_prompts, d_hat))
    return np.ceil(n * (ratio * se / d) ** 2)


def admit(d_hat: float, *, alpha: float, L: float) -> bool:
    """Admit a candidate engine iff alpha * D_hat < L (alpha and L: the experiment's admission settings)."""
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


RATIO_FLOOR = 0.01  # D_hat below which the in-training / offline ratio is sampling noise (admission_summary)


def admission_summary(record: pd.DataFrame, *, ratio_floor: float = RATIO_FLOOR) -> dict:
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


# ---------------------------------------------------------------- what decides: rank agreement of D with Delta

class RankAgreement(NamedTuple):
    """How well D orders Delta over a student's sources: Spearman's rho with its bootstrap interval (resampling
    the sources), the pairs compared and the inversions among them (a larger D with a smaller Delta)."""
    n: int
    rho: float
    ci_lo: float
    ci_hi: float
    n_pairs: int
    n_inversions: int


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho (average ranks for ties) of each row of x against the same row of y; NaN where a row is
    constant."""
    from scipy.stats import rankdata
    rx, ry = rankdata(x, axis=-1), rankdata(y, axis=-1)
    rx, ry = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    den = np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(-1) / np.where(den > 0, den, 1), np.nan)


def rank_agreement(D, delta, *, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0) -> RankAgreement:
    """Spearman's rho of D with Delta over sources (one value each), its percentile interval from resampling
    the sources with replacement (resamples where either side is constant are dropped), and the inversions:
    pairs whose larger D has the smaller Delta, out of the pairs with different D."""
    D, delta = np.asarray(D, dtype=float), np.asarray(delta, dtype=float)
    n = len(D)
    if n < 3:
        return RankAgreement(n, float("nan"), float("nan"), float("nan"), 0, 0)
    rho = float(_spearman_rows(D[None], delta[None])[0])
    rng = np.random.default_rng(seed)
    boot = np.concatenate([_spearman_rows(D[i], delta[i]) for i in
                           (rng.integers(0, n, (min(BOOT_CHUNK, n_boot - s), n)) for s in range(0, n_boot, BOOT_CHUNK))])
    boot = boot[~np.isnan(boot)]
    lo, hi = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2]) if len(boot) else (np.nan, np.nan)
    i, j = np.triu_indices(n, 1)
    differ = D[i] != D[j]
    larger_d_smaller_delta = np.sign(D[i] - D[j]) * np.sign(delta[i] - delta[j]) < 0
    return RankAgreement(n, rho, float(lo), float(hi), int(differ.sum()), int((differ & larger_d_smaller_delta).sum()))


def significant_inversions(v: pd.DataFrame) -> list[tuple[str, str]]:
    """Pairs (smaller-D configuration, larger-D configuration) whose seed-aware intervals of Delta do not overlap and
    put the smaller D's Delta above the larger one's: inversions the seeds run cannot explain."""
    v = v[v["ci_lo_seeds"].notna()].sort_values("D")
    r = list(v.itertuples())
    return [(a.config, b.config) for i, a in enumerate(r) for b in r[i + 1:]
            if a.D < b.D and a.ci_lo_seeds > b.ci_hi_seeds]


def rank_table(verdicts: pd.DataFrame, sources, *, n_boot: int = 10_000, ci: float = 0.95,
               seed: int = 0) -> pd.DataFrame:
    """Per student: rank_agreement of D with Delta over its `sources` (configuration names: the OPD sources,
    the baseline left out), the significant inversions among them (significant_inversions: their count, and the
    pairs as "smaller-D > larger-D"), and the sources' names."""
    out = []
    for student, v in verdicts[verdicts["config"].isin(list(sources))].groupby("student"):
        v = v.sort_values("D")
        r = rank_agreement(v["D"], v["delta"], n_boot=n_boot, ci=ci, seed=seed)
        sig = significant_inversions(v)
        out.append({"student": student, **r._asdict(), "n_significant": len(sig),
                    "significant": "; ".join(f"{a} > {b}" for a, b in sig), "configs": ", ".join(v["config"])})
    return pd.DataFrame(out, columns=["student", *RankAgreement._fields, "n_significant", "significant", "configs"])


def budget_edge(budget: pd.DataFrame, verdicts: pd.DataFrame, heldout: pd.DataFrame, baseline: str, tau: float,
                rule: str = "seeds") -> pd.DataFrame:
    """Per student, the budget's edge at tau under `rule` in three units: D (nats/token: the largest passing D `lo`,
    the smallest failing D `hi`, and their geometric mean `edge`, where both exist), the same over the standard
    engine's own D (`d0`), and as a share of the student's initial held-out KL (`kl0`: the standard engine's runs
    at step 0, the mean over seeds)."""
    b = budget[(budget["rule"] == rule) & np.isclose(budget["tau"], tau)]
    d0 = verdicts[verdicts["config"] == baseline].set_index("student")["D"]
    h = heldout[(heldout["config"] == baseline)]
    h = h[h["step"] == h["step"].min()]
    kl0 = h.groupby(["student", "seed"])["kl"].mean().groupby("student").mean()
    out = []
    for r in b.itertuples():
        edge = edge_point(r.lo, r.hi)
        out.append({"student": r.student, "rule": rule, "tau": float(tau), "lo": r.lo, "hi": r.hi, "edge": edge,
                    "consistent": bool(r.consistent), "n_pass": r.n_pass, "n_fail": r.n_fail,
                    "d0": float(d0[r.student]), "kl0": float(kl0[r.student]),
                    **{f"{k}_over_d0": v / float(d0[r.student]) for k, v in (("lo", r.lo), ("hi", r.hi), ("edge", edge))},
                    **{f"{k}_over_kl0": v / float(kl0[r.student]) for k, v in (("lo", r.lo), ("hi", r.hi), ("edge", edge))}})
    return pd.DataFrame(out)


def edge_point(lo: float, hi: float) -> float:
    """A budget's edge: the geometric mean of its largest passing D `lo` and its smallest failing D `hi` (also where
    hi < lo, a fail below a pass); NaN unless both are positive."""
    return float(np.sqrt(lo * hi)) if lo > 0 and hi > 0 else float("nan")


def near_edge(D, edge: float, factor: float) -> np.ndarray:
    """Whether each D lies within `factor` of `edge`, either way."""
    D = np.asarray(D, dtype=float)
    return (D >= edge / factor) & (D <= edge * factor)


def edge_counts(verdicts: pd.DataFrame, edge: float, tau: float, rule: str = "seeds", factor: float = 10.0) -> tuple:
    """(passes, fails) under `rule` at tau among the configurations of `verdicts` whose D is within `factor` of
    `edge` (either way): what resolves an edge."""
    near = verdicts[near_edge(verdicts["D"], edge, factor)]
    f = rule_fails(near, tau, rule)
    return int((f == False).sum()), int((f == True).sum())  # noqa: E712


# ---------------------------------------------------------------- offline predictors of training's outcome

# The offline statistics judged as predictors (columns of the predictor table, workflow/scripts/predictors.py), with
# their labels: the admission check's D_hat, then the step-0 statistics (opd.backends.tiny.probes.step0_statistics).
PREDICTORS: dict[str, str] = {
    "d_hat": "D̂ (the admission check's)", "d": "D̂ (probe prefixes)", "kl_qp": "KL(q‖p) exact",
    "tv": "total variation", "kl_qp_rel": "KL(q‖p) / KL(p‖teacher)", "coherence": "bias coherence",
    "T_U_logit": "T / U (logit)", "T_U_param": "T / U (param)", "S_U_param": "S / U (param)",
    "E_U_logit": "(T+S) / U (logit)", "E_U_param": "(T+S) / U (param)", "cos_TU_param": "cos(T, U) (param)",
    "T_persist_U_param": "persistent T / U (param)", "T_run_U_param": "run-horizon T / U (param)",
}


class Threshold(NamedTuple):
    """A one-statistic rule: admit (predict pass) iff sign * x <= t."""
    sign: int
    t: float

    def admits(self, x) -> np.ndarray:
        return self.sign * np.asarray(x, dtype=float) <= self.t

    @classmethod
    def of(cls, rule: spec.FrozenRule) -> "Threshold":
        """A frozen rule's cut (one of config.yaml's frozen_rules) as a Threshold."""
        return cls(*rule.cut_at)

    @property
    def cut(self) -> str:
        """The admitted side of the cut: "≤ 1.41"."""
        return f"{'≤' if self.sign > 0 else '≥'} {self.sign * self.t:.3g}"


def fit_threshold(x, passed) -> Threshold:
    """The threshold rule that agrees with the most of `passed` (bool) on x: both directions and every cut between
    two values of x (and beyond either end) tried; ties go to sign +1 (more of the statistic is worse), then to the
    middle one of the best cuts in x's order."""
    x, y = np.asarray(x, dtype=float), np.asarray(passed, dtype=bool)
    best = None
    for sign in (1, -1):
        v = np.unique(sign * x)
        cuts = np.concatenate([[v[0] - 1.0], (v[:-1] + v[1:]) / 2, [v[-1] + 1.0]])
        acc = ((sign * x[None, :] <= cuts[:, None]) == y[None, :]).sum(1)
        top = np.flatnonzero(acc == acc.max())
        cand = (int(acc.max()), sign, float(cuts[top[len(top) // 2]]))
        if best is None or cand[0] > best[0]:
            best = cand
    return Threshold(best[1], best[2])


def held_out_admits(x, passed, folds) -> np.ndarray:
    """Each candidate's prediction by the threshold fitted on every other fold (`folds`: one label per candidate:
    its own index for leave-one-out, its student for leave-one-student-out). NaN-free inputs."""
    x, y, f = np.asarray(x, dtype=float), np.asarray(passed, dtype=bool), np.asarray(folds)
    out = np.zeros(len(x), dtype=bool)
    for g in np.unique(f):
        out[f == g] = fit_threshold(x[f != g], y[f != g]).admits(x[f == g])
    return out


def predictor_record(table: pd.DataFrame, statistics, *, outcome: str = "outcome", delta: str = "delta") -> pd.DataFrame:
    """How well each offline statistic (columns of `table`, one row per candidate engine and student with its
    training `outcome` "pass"/"fail" and its Delta) predicts training: for split `row` (leave one candidate out)
    and `student` (leave one student out) the share of candidates whose held-out threshold rule (fit_threshold on
    the other candidates, pooled over students) agrees with training, and Spearman's rho of the statistic with
    Delta (pooled for `row`, on the held-out student for each `student` fold), with n. `selected` is the nested
    choice: in each fold the statistic with the best training-fold agreement, then its threshold, so its accuracy
    is not flattered by picking the best statistic on the same candidates; its `chosen` says which statistics the
    folds chose, with counts. Rows per split over all students (`student` = "all") and, for split `student`, per
    held-out student. Split `all` holds one row, the fitted rule (fitted_rule: `chosen`, `sign`, `threshold`) scored
    in sample on every candidate it could be fitted on."""
    t = table[table[outcome].isin(["pass", "fail"])].reset_index(drop=True)
    y, students = (t[outcome] == "pass").to_numpy(), t["student"].to_numpy()
    folds = {"row": np.arange(len(t)), "student": students}
    preds, rows = {}, []
    for stat in statistics:
        x = pd.to_numeric(t[stat], errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(x)
        for split, f in folds.items():
            p = np.full(len(t), np.nan)
            if ok.sum() >= 2 and len(np.unique(f[ok])) >= 2:
                p[ok] = held_out_admits(x[ok], y[ok], f[ok])
            preds[stat, split] = p
    chosen = {}
    for split, f in folds.items():  # nested: the statistic is chosen inside each fold
        preds["selected", split], chosen[split] = nested_choice(t, statistics, y, f)
    d = pd.to_numeric(t[delta], errors="coerce").to_numpy(dtype=float)
    for (stat, split), p in preds.items():
        x = pd.to_numeric(t[stat], errors="coerce").to_numpy(dtype=float) if stat != "selected" else None
        groups = [("all", np.ones(len(t), bool))] + ([(s, students == s) for s in np.unique(students)]
                                                     if split == "student" else [])
        for who, m in groups:
            k = m & np.isfinite(p)
            rho = float("nan")
            if x is not None:
                r = k & np.isfinite(d)
                rho = (float(np.nanmean([_spearman_rows(x[r & (students == s)], d[r & (students == s)])
                                         for s in np.unique(students[r])])) if split == "student" and who == "all"
                       else float(_spearman_rows(x[r], d[r]))) if r.sum() >= 3 else float("nan")
            rows.append({"statistic": stat, "split": split, "student": who, "n": int(k.sum()),
                         "n_agree": int((p[k].astype(bool) == y[k]).sum()),
                         "accuracy": float((p[k].astype(bool) == y[k]).mean()) if k.any() else float("nan"),
                         "spearman": rho, "n_pass": int(y[k].sum()),
                         "chosen": _choices(chosen[split][m & np.isfinite(p)]) if stat == "selected" else stat})
    rule = fitted_rule(t, statistics, y)  # split `all`: the rule fitted on every candidate, scored on them (in sample)
    if rule is not None:
        stat, th, agree = rule
        rows.append({"statistic": "selected", "split": "all", "student": "all", "n": len(agree),
                     "n_agree": int(agree.sum()), "accuracy": float(agree.mean()), "spearman": float("nan"),
                     "n_pass": int(y[np.isfinite(pd.to_numeric(t[stat], errors="coerce").to_numpy(dtype=float))].sum()),
                     "chosen": stat, "sign": th.sign, "threshold": th.t})
    return pd.DataFrame(rows)


def nested_choice(t: pd.DataFrame, statistics, passed, folds) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's held-out decision (1.0 admit, 0.0 reject, NaN where its statistic is missing) by the nested
    choice: in every fold (`folds`, one label per candidate) the statistic with the best agreement on the other
    folds' candidates (ties to the earlier in `statistics`), then its threshold fitted there (fit_threshold). Returns
    the decisions and the statistic each candidate's fold chose ("" where none could be fitted)."""
    y, f = np.asarray(passed, dtype=bool), np.asarray(folds)
    p, chosen = np.full(len(t), np.nan), np.full(len(t), "", dtype=object)
    for g in np.unique(f):
        tr, te = f != g, f == g
        if not tr.any():
            continue
        best = max(statistics, key=lambda s: (_fold_accuracy(t[s], y, tr), -list(statistics).index(s)))
        x = pd.to_numeric(t[best], errors="coerce").to_numpy(dtype=float)
        fit = tr & np.isfinite(x)
        if fit.sum() < 2:
            continue
        p[te] = np.where(np.isfinite(x[te]), fit_threshold(x[fit], y[fit]).admits(x[te]), np.nan)
        chosen[te] = best
    return p, chosen


def fitted_rule(t: pd.DataFrame, statistics, passed):
    """The second admission rule, as a user would apply it to a new engine: the statistic whose threshold agrees
    best with training over every candidate (ties to the earlier in `statistics`) and that threshold. Returns
    (statistic, Threshold, agreement per candidate with the statistic), or None with fewer than two such
    candidates. Its agreement is in sample; nested_choice's leave-one-out decisions are the honest estimate."""
    y = np.asarray(passed, dtype=bool)
    every = np.ones(len(t), dtype=bool)
    best = max(statistics, key=lambda s: (_fold_accuracy(t[s], y, every), -list(statistics).index(s)))
    x = pd.to_numeric(t[best], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(x)
    if ok.sum() < 2:
        return None
    th = fit_threshold(x[ok], y[ok])
    return best, th, th.admits(x[ok]) == y[ok]


class FittedRule(NamedTuple):
    """The second admission rule's record (analysis/predictors.parquet, read by fitted_rule_of): admit iff
    sign * statistic <= threshold, fitted on `n` candidates and agreeing with training on `n_agree` of them (in
    sample); held out (nested_choice, leaving one candidate out) it agrees on `n_agree_held_out` of `n_held_out`."""
    statistic: str
    sign: int
    threshold: float
    n: int
    n_agree: int
    n_held_out: int
    n_agree_held_out: int

    @property
    def cut(self) -> str:
        """The admitted side of the cut: "≤ 1.41"."""
        return Threshold(self.sign, self.threshold).cut

    @property
    def label(self) -> str:
        """The rule in words: "persistent T / U (param) ≤ 1.41"."""
        return rule_label(self.statistic, Threshold(self.sign, self.threshold))


def rule_label(statistic: str, threshold: Threshold) -> str:
    """A one-statistic admission rule in words: "persistent T / U (param) ≤ 1.41"."""
    return f"{PREDICTORS.get(statistic, statistic)} {threshold.cut}"


class ProspectiveTest(NamedTuple):
    """A frozen admission rule's record (analysis/predictors.parquet, split `prospective` and `fitted_on`, column
    `rule` = `name`; read by prospective_tests_of): on the `n` candidates it was not fitted on, decided before their
    runs, it agrees with training on `n_agree`, the paper's rule on `n_agree_paper` and admitting every candidate on
    `n_agree_all`; on the `n_fitted_on` candidates it was fitted on it agrees on `n_agree_fitted_on`."""
    name: str
    statistic: str
    threshold: Threshold
    n: int
    n_agree: int
    n_agree_paper: int
    n_agree_all: int
    n_fitted_on: int
    n_agree_fitted_on: int

    @property
    def label(self) -> str:
        return rule_label(self.statistic, self.threshold)


def prospective_tests_of(record: pd.DataFrame) -> tuple[ProspectiveTest, ...]:
    """Each frozen rule's prospective test in a predictor record, in config.yaml's order (none where the experiment
    froze no rule)."""
    if "rule" not in record:
        return ()
    r = record[record["split"].isin(["prospective", "fitted_on"]) & (record["student"] == "all")
               & record["rule"].notna()]
    tests = []
    for name in dict.fromkeys(r["rule"]):
        q = r[r["rule"] == name].set_index(["split", "statistic"])
        own, fit = q.loc[("prospective", "frozen_rule")], q.loc[("fitted_on", "frozen_rule")]
        tests.append(ProspectiveTest(str(name), str(own["chosen"]), Threshold(int(own["sign"]), float(own["threshold"])),
                                     int(own["n"]), int(own["n_agree"]), int(q.loc[("prospective", "paper_rule"), "n_agree"]),
                                     int(q.loc[("prospective", "admit_all"), "n_agree"]), int(fit["n"]),
                                     int(fit["n_agree"])))
    return tuple(tests)


def fitted_rule_of(record: pd.DataFrame) -> FittedRule | None:
    """The fitted rule in a predictor record (predictor_record's split `all` and its `row` nested choice), or None
    where it has none."""
    r = record[(record["statistic"] == "selected") & (record["student"] == "all")].set_index("split")
    if "all" not in r.index or "row" not in r.index:
        return None
    a, h = r.loc["all"], r.loc["row"]
    if not int(h["n"]):  # fitted, but no candidate could be decided without itself (two candidates)
        return None
    return FittedRule(str(a["chosen"]), int(a["sign"]), float(a["threshold"]), int(a["n"]), int(a["n_agree"]),
                      int(h["n"]), int(h["n_agree"]))


def _choices(chosen) -> str:
    """The statistics a nested choice's folds chose, most often first, with counts: "kl_qp (50), tv (4)"."""
    names, counts = np.unique([c for c in chosen if c], return_counts=True)
    return ", ".join(f"{n} ({c})" for c, n in sorted(zip(counts, names), key=lambda z: (-z[0], z[1])))


def _fold_accuracy(col, y, train) -> float:
    """Training-fold agreement of the best threshold on one statistic, over every training candidate: one without
    the statistic counts as a disagreement, so a statistic measured on few candidates cannot win on its share."""
    x = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
    m = train & np.isfinite(x)
    if m.sum() < 2:
        return -1.0
    return float((fit_threshold(x[m], y[m]).admits(x[m]) == y[m]).sum() / train.sum())
