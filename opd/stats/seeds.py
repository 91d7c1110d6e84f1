"""This project's seed-aware interval: the run-to-run variance of a comparison's log ratio from its seeds and,
with several base-model draws, its draws, added to the problem bootstrap (seed_bootstrap)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from opd import spec
from opd.stats.bootstrap import Interval, resampled_sums


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


LOG_CLIP = 50.0  # seed_replicates' log ratios are clipped at +-LOG_CLIP


class Replicates(NamedTuple):
    """Delta of R comparisons (R,) and n_boot joint replicates of it (n_boot, R): in each replicate every
    comparison is resampled with the same problems and the same draws of what its units share."""
    delta: np.ndarray
    replicates: np.ndarray


def _reference_share(kc, kb, one_seed_ratio: float):
    """With one base-model draw: the part of seed_variance's `var` (E,) that is the reference side's, the run-to-run
    variance of its seed mean (Welch: its own; pooled: its share of the pooled variance)."""
    sc, sb = kc.shape[1], kb.shape[1]
    (vc, _), (vb, _) = _side_spread(kc), _side_spread(kb)
    if min(sc, sb) >= 2:
        return vb / sb
    df = sc + sb - 2
    pooled = sum((s - 1) / df * np.nan_to_num(v) for s, v in ((sc, vc), (sb, vb)))
    return pooled * (one_seed_ratio ** 2 if sb == 1 else 1.0) / sb


def seed_replicates(k_cands, k_refs, *, draws_cands=None, draws_refs=None, references=None, n_boot: int = 10_000,
                    seed: int = 0, one_seed_ratio: float = 1.0) -> Replicates:
    """Joint replicates of R comparisons' Delta under seed_bootstrap's model, for statistics of several
    comparisons at once (a budget edge across rows, the ratio of two edges): each comparison's replicates have
    exactly seed_bootstrap's distribution (draw_var=None), and in one replicate

    - every comparison resamples the same problems (one resampled_sums over every side's draw-balanced means, the
      counts of `seed`: the verdicts' own problem resamples);
    - with several base-model draws, the unit term sum_d g_d (z_d - mean z) / sqrt(D (D - 1)) uses one standard
      normal g_d per base-model draw, shared by every comparison: its variance is seed_bootstrap's var_d(z) / D, and
      two comparisons covary as their draws' pseudo-values z_d do (the reference's draw effects, which every z_d
      of the same reference holds, move them together);
    - with one draw, the unit term is the candidate's seed part (its own normal) plus the reference's (a normal
      shared by every comparison with the same entry of `references`, None: one reference for all);
    - the Student-t scale sqrt(df / chi2_df) comes from one uniform per replicate shared by every comparison (a
      multivariate t, as in simultaneous intervals; with unequal df each takes that uniform's quantile).

    k_cands, k_refs: R arrays (S_c, n) and (S_r, n), per run and problem, the same n problems in the same order in
    every array (each reference restricted to the draws its candidate ran: opd.stats.shared_draws); draws_cands,
    draws_refs: R arrays of draw labels (None: one draw). Raises ValueError where seed_bootstrap would (too few
    runs for a one-draw comparison). Returns Replicates(delta (R,), replicates (n_boot, R))."""
    from scipy import stats as sps

    R = len(k_cands)
    references = [0] * R if references is None else list(references)
    parts = []
    for i in range(R):
        kc, kb, dc, db, _ = _batch_inputs(k_cands[i], k_refs[i], None if draws_cands is None else draws_cands[i],
                                          None if draws_refs is None else draws_refs[i])
        draws = np.unique(np.concatenate([dc, db]))
        if len(draws) == 1:
            if not enough_seeds(kc.shape[1], kb.shape[1]):
                raise ValueError(f"comparison {i}: at least {MIN_SEED_DF + 2} runs in all are needed to estimate the "
                                 f"run-to-run variance (got {kc.shape[1]} candidate + {kb.shape[1]} reference seeds)")
            sv = seed_variance(kc, kb, one_seed_ratio=one_seed_ratio)
            shared = float(np.clip(_reference_share(kc, kb, one_seed_ratio)[0], 0, sv.var[0]))
            parts.append({"mc": kc.mean(1)[0], "mb": kb.mean(1)[0], "overlap": float(sv.overlap[0]),
                          "df": float(sv.df[0]), "own": np.sqrt(sv.var[0] - shared), "shared": np.sqrt(shared)})
        else:
            mc, mb, z, overlap, _, _ = _draw_parts(kc, kb, dc, db)
            parts.append({"mc": mc[0], "mb": mb[0], "overlap": float(overlap[0]), "df": len(draws) - 1.0,
                          "z": z[0], "draws": draws})
    mc = np.column_stack([p["mc"] for p in parts])
    mb = np.column_stack([p["mb"] for p in parts])
    delta = mc.sum(0) / mb.sum(0) - 1.0
    r = np.log1p(delta)
    sums = resampled_sums(np.column_stack([mc, mb]), n_boot, seed)
    log_boot = np.log(sums[:, :R] / sums[:, R:])
    v_boot = np.var(log_boot, axis=0, ddof=1)
    overlap = np.array([p["overlap"] for p in parts])
    keep = np.sqrt(np.clip(1 - overlap / np.where(v_boot > 0, v_boot, np.inf), 0, 1))
    labels = np.unique(np.concatenate([p["draws"] for p in parts if "draws" in p] or [np.zeros(0)]))
    shared_refs = {ref: j for j, ref in enumerate(dict.fromkeys(references))}
    rng = np.random.default_rng([seed, 2])
    u = 1.0 - rng.random(n_boot)  # (0, 1]: the shared chi-square quantile
    g = rng.standard_normal((n_boot, len(labels)))  # one per base-model draw
    h = rng.standard_normal((n_boot, len(shared_refs)))  # one per reference (one-draw comparisons)
    e = rng.standard_normal((n_boot, R))  # one per comparison (one-draw comparisons)
    noise = np.empty((n_boot, R))
    for i, p in enumerate(parts):
        if "draws" in p:
            D = len(p["draws"])
            normal = g[:, np.searchsorted(labels, p["draws"])] @ (p["z"] - p["z"].mean()) / np.sqrt(D * (D - 1))
        else:
            normal = p["own"] * e[:, i] + p["shared"] * h[:, shared_refs[references[i]]]
        noise[:, i] = normal / np.sqrt(sps.chi2.ppf(u, p["df"]) / p["df"])
    # a t with 1 or 2 degrees of freedom draws log ratios far out: clipped at +-LOG_CLIP (Delta e^50), where no
    # replicate's place against any tau changes, so that sums over replicates stay finite
    return Replicates(delta, np.expm1(np.clip(r + keep * (log_boot - r) + noise, -LOG_CLIP, LOG_CLIP)))
