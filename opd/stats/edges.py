"""The mismatch budget as one Delta = tau edge per mechanism (opd.rows.mechanism) and student, with its interval
from joint bootstrap replicates, and the ratio of two mechanisms' edges (does total mismatch decide?).

The edge of one mechanism: its rows' Delta, made non-decreasing in log D by pool-adjacent-violators (isotonic),
crosses tau between two adjacent rows; linear interpolation in log D between them gives the edge (`crossing`).
Where the fitted Delta stays below tau there is no crossing within the rows' D: the edge lies above the largest
(+inf, censored above); where it is at or above tau at every row, below the smallest (0, censored below). The
interval: the same crossing in every joint replicate of the rows' Delta (every row resampled with the same
problems and the same draws of what its runs share: opd.stats.seed_replicates, or opd.stats.paired_resamples for
the paper's problem-only rule), and the replicates' percentiles (`edge_interval`)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from opd.rows import Row, dial, dial_value, mechanism, mechanism_order
from opd.stats.bootstrap import BOOT_CHUNK, paired_resamples
from opd.stats.budget import baseline_scales
from opd.stats.rule import final_heldout, final_pairs, shared_draws
from opd.stats.seeds import draw_of, seed_replicates

EDGE_RULES = ("seeds", "paper")  # the seed-aware resampling (the edges' own) and the paper's problem-only one


class Edge(NamedTuple):
    """A Delta = tau edge in D: the point estimate `edge` (0 or inf where censored) and its interval [lo, hi];
    censored_lo: lo is 0 (the edge may lie below every row's D), censored_hi: hi is inf (above every row's)."""
    edge: float
    lo: float
    hi: float
    censored_lo: bool
    censored_hi: bool


class EdgeRatio(NamedTuple):
    """The ratio of two edges in D with its interval; `coincide`: the interval holds 1."""
    ratio: float
    lo: float
    hi: float
    coincide: bool
    censored_lo: bool
    censored_hi: bool


def isotonic(y, weights=None) -> np.ndarray:
    """The non-decreasing least-squares fit to y along its last axis (pool-adjacent-violators; what
    scipy.optimize.isotonic_regression gives), vectorised over the leading axes: fit_i = max over j <= i of min over
    k >= i of the weighted mean of y_j..y_k. y (..., n); weights (n,) (None: equal)."""
    y = np.asarray(y, dtype=float)
    n = y.shape[-1]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    cw = np.concatenate([[0.0], np.cumsum(w)])
    cy = np.concatenate([np.zeros(y.shape[:-1] + (1,)), np.cumsum(y * w, axis=-1)], axis=-1)
    valid = np.arange(n)[None, :] >= np.arange(n)[:, None]  # [j, k]: k >= j
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (cy[..., None, 1:] - cy[..., :-1, None]) / np.where(valid, cw[1:][None, :] - cw[:-1][:, None], 1.0)
    mean = np.where(valid, mean, np.inf)
    suffix_min = np.flip(np.minimum.accumulate(np.flip(mean, -1), axis=-1), -1)  # [j, i]: min over k >= i
    return np.where(valid, suffix_min, -np.inf).max(axis=-2)


def crossing(D, delta, *, tau: float, weights=None) -> np.ndarray:
    """Where Delta, made non-decreasing in log D (isotonic), crosses tau, interpolated linearly in log D between the
    two adjacent rows: the last below tau and the first at or above it. D (n,) positive; delta (..., n), rows in
    D's order (any). Returns (...,) in D's units: 0 where the fit is at or above tau at every row (the edge lies
    below the smallest D), inf where it is below tau at every row (above the largest)."""
    D = np.asarray(D, dtype=float)
    delta = np.asarray(delta, dtype=float)
    order = np.argsort(D, kind="stable")
    x = np.log(D[order])
    out = np.empty(delta.shape[:-1])
    flat_in, flat_out = delta.reshape(-1, len(D))[:, order], out.reshape(-1)
    for start in range(0, len(flat_in), BOOT_CHUNK):  # chunks keep the (m, n, n) means small
        f = isotonic(flat_in[start:start + BOOT_CHUNK], None if weights is None else np.asarray(weights)[order])
        above = f >= tau
        if len(D) == 1:
            flat_out[start:start + len(f)] = np.where(above[:, 0], 0.0, np.inf)
            continue
        i1 = np.clip(np.argmax(above, axis=-1), 1, len(D) - 1)  # the first row at or above tau
        f0, f1 = np.take_along_axis(f, i1[:, None] - 1, -1)[:, 0], np.take_along_axis(f, i1[:, None], -1)[:, 0]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # where censored, xe is not used
            xe = np.exp(x[i1 - 1] + (tau - f0) / (f1 - f0) * (x[i1] - x[i1 - 1]))
        flat_out[start:start + len(f)] = np.where(above[:, 0], 0.0, np.where(above[:, -1], xe, np.inf))
    return out


def percentile(x, q: float) -> np.ndarray:
    """np.percentile's linear interpolation along axis 0, where x may hold infinities (two equal neighbours give
    themselves, not NaN)."""
    x = np.sort(np.asarray(x, dtype=float), axis=0)
    pos = q / 100 * (len(x) - 1)
    i = int(np.floor(pos))
    a, b, t = x[i], x[min(i + 1, len(x) - 1)], pos - i
    with np.errstate(invalid="ignore"):
        return np.where((t == 0) | (a == b), a, a + (b - a) * t)


def replicate_bounds(D, edges) -> tuple[np.ndarray, np.ndarray]:
    """What each replicate's edge says about where the edge lies: [lower, upper], equal for a crossing, [largest
    D, inf] where censored above, [0, smallest D] where censored below."""
    D, edges = np.asarray(D, dtype=float), np.asarray(edges, dtype=float)
    return np.where(np.isinf(edges), D.max(), edges), np.where(edges == 0, D.min(), edges)


def edge_interval(D, delta, replicates, *, tau: float, ci: float = 0.95, weights=None) -> Edge:
    """One mechanism's edge (`crossing` of the point Deltas) and its percentile interval over joint replicates:
    D (n,) the rows' D; delta (n,) their Delta; replicates (B, n) Delta in each joint replicate. lo: the
    (1 - ci) / 2 percentile of the replicates' lower bounds (replicate_bounds: a replicate censored above puts the
    edge at least at the largest D); hi: the (1 + ci) / 2 percentile of their upper bounds (inf where more than
    (1 - ci) / 2 of the replicates are censored above)."""
    return edge_of(D, crossing(D, delta, tau=tau, weights=weights), crossing(D, replicates, tau=tau, weights=weights),
                   ci=ci)


def edge_of(D, point: float, at, *, ci: float = 0.95) -> Edge:
    """edge_interval from the crossings already found: `point` the point Deltas' (crossing), `at` (B,) each joint
    replicate's."""
    lower, upper = replicate_bounds(D, at)
    lo, hi = float(percentile(lower, 50 * (1 - ci))), float(percentile(upper, 50 * (1 + ci)))
    return Edge(float(point), lo, hi, lo == 0, bool(np.isinf(hi)))


def edge_ratio(point_a: float, bounds_a, point_b: float, bounds_b, *, ci: float = 0.95) -> EdgeRatio:
    """The ratio of edge a to edge b in D, with its percentile interval over the same joint replicates: bounds_a,
    bounds_b are each edge's replicate_bounds; the lower end takes each replicate's smallest ratio its bounds allow
    (lower_a / upper_b), the upper end its largest (upper_a / lower_b), so that censored replicates widen the
    interval, never narrow it. The point ratio is NaN where both edges are censored on the same side."""
    (la, ua), (lb, ub) = bounds_a, bounds_b
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = float(np.float64(point_a) / np.float64(point_b))
        lo = float(percentile(la / ub, 50 * (1 - ci)))
        hi = float(percentile(ua / lb, 50 * (1 + ci)))
    return EdgeRatio(ratio, lo, hi, bool(lo <= 1 <= hi), lo == 0, bool(np.isinf(hi)))


# ---------------------------------------------------------------- the tables: per student and mechanism


def mechanisms(rows, *, lr: float | None) -> dict[str, str]:
    """Each row on a dial (opd.rows.mechanism): its name -> its mechanism."""
    R = [Row.of(r) for r in rows]
    return {r.name: m for r in R if (m := mechanism(r, R, lr=lr))}


def _balanced(k, draws):
    """The draw-balanced mean K_x of one side's runs (S, n): each draw's seed mean, averaged over draws."""
    return np.mean([k[draws == d].mean(0) for d in np.unique(draws)], 0)


def joint_replicates(heldout: pd.DataFrame, student: str, configs, references: dict, baseline: str, *, rule: str,
                     n_draws: int = 1, n_boot: int = 10_000, seed: int = 0, one_seed_ratio: float = 1.0):
    """Delta of `configs` on one student, each against its reference (the baseline unless `references` names
    another), and n_boot joint replicates: (delta (C,), replicates (n_boot, C)), on the problems every run of
    every config and reference scored. rule "seeds": seed_replicates (problems, seeds and base-model draws);
    "paper": paired_resamples of the draw-balanced means (problems only)."""
    configs = list(configs)
    keep = set(configs) | {references.get(c) or baseline for c in configs} | {baseline}
    h = heldout[(heldout["student"] == student) & heldout["config"].isin(keep)]
    fin = final_heldout(h)
    common = fin.pivot_table(index="prompt_id", columns=["config", "seed"], values="kl").dropna().index
    pairs = {p[1]: p for p in final_pairs(h[h["prompt_id"].isin(common)], baseline, references)}
    kc, kr, dc, dr, refs = [], [], [], [], []
    for c in configs:
        _, _, ref, k_c, k_r, s_c, s_r, _ = pairs[c]
        k_r, s_r = shared_draws(k_r, s_r, s_c, n_draws)
        kc.append(k_c), kr.append(k_r), refs.append(ref)
        dc.append(draw_of(s_c, n_draws)), dr.append(draw_of(s_r, n_draws))
    if rule == "seeds":
        return seed_replicates(kc, kr, draws_cands=dc, draws_refs=dr, references=refs, n_boot=n_boot, seed=seed,
                               one_seed_ratio=one_seed_ratio)
    if rule != "paper":
        raise ValueError(f"rule must be one of {EDGE_RULES}, not {rule!r}")
    mc = np.column_stack([_balanced(k, d) for k, d in zip(kc, dc)])
    mr = np.column_stack([_balanced(k, d) for k, d in zip(kr, dr)])
    return mc.sum(0) / mr.sum(0) - 1.0, paired_resamples(mc, mr, n_boot, seed)


# Each table's columns and their types (typed even where a sub-matrix has no dial and the table is empty)
_S, _F, _B, _I = "str", "float64", "bool", "int64"
EDGE_COLUMNS = {"student": _S, "mechanism": _S, "dial": _S, "rule": _S, "tau": _F, "D_edge": _F, "D_lo": _F, "D_hi": _F,
                "censored_lo": _B, "censored_hi": _B, "edge_over_d0": _F, "edge_over_d0_lo": _F, "edge_over_d0_hi": _F,
                "edge_over_kl0": _F, "edge_over_kl0_lo": _F, "edge_over_kl0_hi": _F, "d0": _F, "kl0": _F,
                "n_rows": _I, "n_runs": _I, "D_min": _F, "D_max": _F, "share_above": _F, "share_below": _F, "rows": _S}
RATIO_COLUMNS = {"student": _S, "rule": _S, "tau": _F, "mechanism": _S, "versus": _S, "ratio": _F, "ratio_lo": _F,
                 "ratio_hi": _F, "censored_lo": _B, "censored_hi": _B, "coincide": _B}


def typed(records, columns: dict) -> pd.DataFrame:
    """A table of `records` with `columns` (name: type), typed also when empty."""
    return pd.DataFrame(records, columns=list(columns)).astype(columns)


class EdgeTables(NamedTuple):
    """edges: one row per student, mechanism and rule (EDGE_COLUMNS); ratios: per student and rule, every pair of
    its mechanisms of which at least one has a finite edge (RATIO_COLUMNS)."""
    edges: pd.DataFrame
    ratios: pd.DataFrame


def edge_tables(verdicts: pd.DataFrame, heldout: pd.DataFrame, rows, baseline: str, *, tau: float,
                lr: float | None, n_draws: int = 1, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0,
                one_seed_ratio: float = 1.0, rules=EDGE_RULES) -> EdgeTables:
    """Per student and rule, each mechanism's edge (edge_interval; rows: opd.rows.mechanism of `rows`, the
    experiment's rows with its learning rate `lr`), in D, over the standard engine's D(0) and over the student's
    initial held-out KL (baseline_scales), from the rows' D (the verdicts') and n_boot joint replicates of their
    Delta (joint_replicates: every mechanism of a student in the same replicates); and the ratio of every two of
    its mechanisms' edges (edge_ratio; `versus` the earlier in opd.rows.mechanism_order). A row the rule cannot
    judge (the seed-aware rule without the runs for it: no verdict_seeds) is left out."""
    mech = mechanisms(rows, lr=lr)
    R = {r.name: r for r in (Row.of(x) for x in rows)}
    scales = baseline_scales(verdicts, heldout, baseline)
    references = verdicts.set_index(["student", "config"])["reference"]
    edges, ratios = [], []
    for student, v in verdicts[verdicts["config"].isin(list(mech))].groupby("student"):
        d0, kl0 = (float(scales.loc[student, k]) for k in ("d0", "kl0"))
        for rule in rules:
            vr = v[v["verdict_seeds"].notna()] if rule == "seeds" else v
            if not len(vr):
                continue
            configs = list(vr["config"])
            refs = {c: references[(student, c)] for c in configs}
            delta, reps = joint_replicates(heldout, student, configs, refs, baseline, rule=rule, n_draws=n_draws,
                                           n_boot=n_boot, seed=seed, one_seed_ratio=one_seed_ratio)
            found = {}
            for m in sorted({mech[c] for c in configs}, key=mechanism_order):
                idx = [i for i, c in enumerate(configs) if mech[c] == m]
                D = vr["D"].to_numpy(dtype=float)[idx]
                at = crossing(D, reps[:, idx], tau=tau)  # each replicate's edge: the interval's and the ratios'
                e = edge_of(D, crossing(D, delta[idx], tau=tau), at, ci=ci)
                found[m] = (e, replicate_bounds(D, at))
                names = [configs[i] for i in idx]
                listed = sorted(zip(D, names))
                edges.append({
                    "student": student, "mechanism": m, "dial": dial(m), "rule": rule, "tau": float(tau),
                    "D_edge": e.edge, "D_lo": e.lo, "D_hi": e.hi, "censored_lo": e.censored_lo,
                    "censored_hi": e.censored_hi,
                    **{f"edge_over_{u}{s}": x / scale for u, scale in (("d0", d0), ("kl0", kl0))
                       for s, x in (("", e.edge), ("_lo", e.lo), ("_hi", e.hi))},
                    "d0": d0, "kl0": kl0, "n_rows": len(idx), "n_runs": int(vr["n_runs"].to_numpy()[idx].sum()),
                    "D_min": float(D.min()), "D_max": float(D.max()), "share_above": float(np.isinf(at).mean()),
                    "share_below": float((at == 0).mean()),
                    "rows": ", ".join(f"{c} ({dial_value(R[c], m):g})" for _, c in listed)})
            order = list(found)
            for j, m in enumerate(order):
                for b in order[:j]:
                    (ea, ba), (eb, bb) = found[m], found[b]
                    if not (np.isfinite(ea.edge) and ea.edge > 0) and not (np.isfinite(eb.edge) and eb.edge > 0):
                        continue
                    x = edge_ratio(ea.edge, ba, eb.edge, bb, ci=ci)
                    ratios.append({"student": student, "rule": rule, "tau": float(tau), "mechanism": m, "versus": b,
                                   "ratio": x.ratio, "ratio_lo": x.lo, "ratio_hi": x.hi, "censored_lo": x.censored_lo,
                                   "censored_hi": x.censored_hi, "coincide": x.coincide})
    return EdgeTables(typed(edges, EDGE_COLUMNS), typed(ratios, RATIO_COLUMNS))
