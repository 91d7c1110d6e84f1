"""One Delta = tau edge per mechanism (opd.stats.edges): which rows lie on which dial (opd.rows.mechanism), the
isotonic crossing, its interval from joint replicates, censoring, the ratio of two edges, and the committed toy's
table."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opd import stats, store
from opd.outputs import analysis_path
from opd.rows import Row, dial, dial_value, mechanism
from conftest import ROOT


# ---------------------------------------------------------------- which rows lie on which dial

def test_each_plain_row_lies_on_one_dial_and_the_rest_on_none():
    rows = [Row("bf16", baseline=True), Row("noise-10", noise_sigma=0.1), Row("edge-0p0632", noise_sigma=0.0632),
            Row("noise-10-redraw", noise_sigma=0.1, noise_redraw=True), Row("stale-k2", staleness=2),
            Row("lr3e-5-k0", lr=3e-5), Row("lr3e-5-k2", lr=3e-5, staleness=2, reference="lr3e-5-k0"),
            Row("same-lr-k2", lr=1e-4, staleness=2), Row("nvfp4", weights="nvfp4"),
            Row("nvfp4-l0", weights="nvfp4", bf16_layers=(0,)), Row("fp8w-k8", weights="fp8_tensor", staleness=8),
            Row("noise-tis", noise_sigma=0.1, variant="tis"), Row("rl", algorithm="grpo", noise_sigma=0.1),
            Row("noise-guard", noise_sigma=0.1, guard={"d_max": 0.01, "window": 3, "action": "fallback",
                                                       "cooldown": 5}),
            Row("noise-vs-other", noise_sigma=0.1, reference="bf16")]
    got = {r.name: mechanism(r, rows, lr=1e-4) for r in rows}
    assert got == {"bf16": None, "noise-10": "noise_fixed", "edge-0p0632": "noise_fixed",
                   "noise-10-redraw": "noise_redrawn", "stale-k2": "staleness", "lr3e-5-k0": None,
                   "lr3e-5-k2": "staleness@lr=3e-05", "same-lr-k2": "staleness", "nvfp4": None, "nvfp4-l0": None,
                   "fp8w-k8": None, "noise-tis": None, "rl": None, "noise-guard": None, "noise-vs-other": None}
    assert dial("noise_fixed") == dial("noise_redrawn") == "noise_sigma" and dial("staleness@lr=3e-05") == "staleness"
    assert dial_value(rows[2], "noise_fixed") == 0.0632 and dial_value(rows[6], "staleness@lr=3e-05") == 2


def test_a_scaled_recipe_is_a_dial_with_its_full_strength_row():
    rows = [Row("nvfp4", weights="nvfp4"), Row("nvfp4-a05", weights="nvfp4", quant_alpha=0.5),
            Row("kv", kv_cache="fp8_e4m3"), Row("nvfp4-a05-l0", weights="nvfp4", quant_alpha=0.5,
                                                          bf16_layers=(0,))]
    got = {r.name: mechanism(r, rows, lr=1e-4) for r in rows}
    assert got == {"nvfp4": "alpha:nvfp4/none/none", "nvfp4-a05": "alpha:nvfp4/none/none", "kv": None,
                   "nvfp4-a05-l0": None}  # kv: no scaled row of its recipe
    assert dial(got["nvfp4"]) == "quant_alpha" and dial_value(rows[1], got["nvfp4"]) == 0.5
    assert mechanism(Row("nvfp4", weights="nvfp4"), rows, lr=1e-4) == got["nvfp4"]  # alpha 1, the field unwritten


def test_an_amplified_recipe_is_on_the_same_dial_as_its_scaled_down_and_full_strength_rows():
    """quant_alpha > 1 (the recipe's own error amplified) lies on the recipe's alpha dial as alpha < 1 does, and
    puts the recipe's alpha = 1 row on it too, where no row below 1 does; BF16 layers still put a row on no dial."""
    rows = [Row("kv", kv_cache="fp8_e4m3"), Row("kv-a2", kv_cache="fp8_e4m3", quant_alpha=2.0),
            Row("kv-a16", kv_cache="fp8_e4m3", quant_alpha=16.0), Row("w", weights="nvfp4"),
            Row("kv-a4-l0", kv_cache="fp8_e4m3", quant_alpha=4.0, bf16_layers=(0,))]
    got = {r.name: mechanism(r, rows, lr=1e-4) for r in rows}
    assert got == {"kv": "alpha:none/none/fp8_e4m3", "kv-a2": "alpha:none/none/fp8_e4m3",
                   "kv-a16": "alpha:none/none/fp8_e4m3", "w": None, "kv-a4-l0": None}
    assert [dial_value(r, got["kv"]) for r in rows[:3]] == [1.0, 2.0, 16.0]
    assert mechanism(rows[0], [rows[0], rows[-1]], lr=1e-4) is None  # only an off-dial row scales it


# ---------------------------------------------------------------- isotonic crossing

def test_isotonic_pools_adjacent_violators():
    assert stats.isotonic([0.1, 0.3, 0.2, 0.4]) == pytest.approx([0.1, 0.25, 0.25, 0.4])
    assert stats.isotonic([3.0, 2.0, 1.0]) == pytest.approx([2.0, 2.0, 2.0])
    assert stats.isotonic([1.0, 3.0, 2.0], weights=[1, 1, 3]) == pytest.approx([1.0, 2.25, 2.25])
    y = np.array([[0.1, 0.3, 0.2, 0.4], [0.0, 1.0, 2.0, 3.0]])
    assert stats.isotonic(y) == pytest.approx(np.array([[0.1, 0.25, 0.25, 0.4], [0.0, 1.0, 2.0, 3.0]]))


def test_isotonic_agrees_with_scipy():
    from scipy.optimize import isotonic_regression as iso  # scipy >= 1.12 (pyproject)
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 12):
        y, w = rng.normal(size=n), rng.uniform(0.5, 3, size=n)
        assert stats.isotonic(y, w) == pytest.approx(iso(y, weights=w).x, abs=1e-12)


def test_the_crossing_interpolates_in_log_D_between_adjacent_rows():
    D = np.array([1e-3, 1e-2, 1e-1])
    assert float(stats.crossing(D, [0.1, 0.3, 0.5], tau=0.2)) == pytest.approx(np.sqrt(1e-5))
    assert float(stats.crossing(D[::-1], [0.5, 0.3, 0.1], tau=0.2)) == pytest.approx(np.sqrt(1e-5))  # any order
    # non-monotone: [0.1, 0.3, 0.1, 0.5] is pooled to [0.1, 0.2, 0.2, 0.5]; tau = 0.25 is crossed between D 4 and 8
    assert float(stats.crossing([1, 2, 4, 8], [0.1, 0.3, 0.1, 0.5], tau=0.25)) == pytest.approx(4 * 2 ** (1 / 6))
    assert float(stats.crossing([1, 2, 4, 8], [0.1, 0.3, 0.1, 0.5], tau=0.2)) == pytest.approx(2.0)  # at a row


def test_censoring_below_and_above_the_rows():
    D = [0.01, 0.1]
    assert np.isinf(stats.crossing(D, [0.05, 0.1], tau=0.2)) and stats.crossing(D, [0.3, 0.4], tau=0.2) == 0
    assert np.isinf(stats.crossing([0.1], [0.1], tau=0.2)) and stats.crossing([0.1], [0.3], tau=0.2) == 0
    reps = np.array([[0.05, 0.1]] * 90 + [[0.1, 0.3]] * 10)  # 90% of the replicates: no crossing within the rows
    e = stats.edge_interval(D, [0.05, 0.1], reps, tau=0.2)
    assert np.isinf(e.edge) and e.censored_hi and not e.censored_lo and e.lo == pytest.approx(np.sqrt(1e-3))
    e = stats.edge_interval(D, [0.3, 0.4], np.full((100, 2), 0.3), tau=0.2)  # every replicate above tau
    assert e.edge == 0 and e.lo == 0 and e.censored_lo and e.hi == pytest.approx(0.01) and not e.censored_hi
    assert float(stats.percentile(np.array([1.0, np.inf, np.inf]), 97.5)) == np.inf


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-5, 1.0), st.floats(-0.5, 1.5)), min_size=1, max_size=12,
                unique_by=lambda t: t[0]), st.floats(0.05, 0.5))
def test_an_uncensored_edge_lies_within_the_rows_D_and_ignores_their_order(points, tau):
    D, delta = (np.array(x) for x in zip(*points))
    edge = float(stats.crossing(D, delta, tau=tau))
    assert edge == pytest.approx(float(stats.crossing(D[::-1], delta[::-1], tau=tau)))
    fit = stats.isotonic(delta[np.argsort(D)])
    assert (np.diff(fit) >= 0).all() and fit.sum() == pytest.approx(delta.sum())
    if 0 < edge < np.inf:
        assert D.min() * (1 - 1e-12) <= edge <= D.max() * (1 + 1e-12)
    else:
        assert edge == (0 if fit[0] >= tau else np.inf)


# ---------------------------------------------------------------- joint replicates and the interval

def synthetic_runs(rng, truth, n=300, seeds=3, base_seeds=8, run_sd=0.03, problem_sd=0.1):
    """Per-problem held-out KL of a baseline and of one row per entry of `truth` (its true Delta): each run a seed
    effect and per-problem noise on the same problems."""
    base = rng.gamma(2.0, 0.05, n)

    def runs(scale, s):
        return np.stack([base * scale * rng.lognormal(0, run_sd) * rng.lognormal(0, problem_sd, n) for _ in range(s)])
    return runs(1.0, base_seeds), [runs(1 + d, seeds) for d in truth]


def true_delta(D):
    """A known monotone Delta(D): 0.4 per decade above D = 1e-3, so Delta = tau = 0.2 at D = 10^-2.5."""
    return 0.4 * np.log10(np.asarray(D) / 1e-3)


def test_a_known_monotone_delta_recovers_its_crossing_within_the_interval():
    D = np.array([1e-3, 2e-3, 5e-3, 1e-2, 3e-2])
    truth, covered = 10 ** -2.5, 0
    for i in range(40):
        rng = np.random.default_rng(100 + i)
        kb, kcs = synthetic_runs(rng, true_delta(D))
        delta, reps = stats.seed_replicates(kcs, [kb] * len(kcs), n_boot=2000, seed=i)
        e = stats.edge_interval(D, delta, reps, tau=0.2)
        assert e.lo <= e.edge <= e.hi and not e.censored_lo and not e.censored_hi
        covered += e.lo <= truth <= e.hi
    assert covered >= 34  # nominal 95% of 40: at least 85% in this fixed draw


def test_joint_replicates_keep_each_rows_own_interval():
    """Each comparison's joint replicates have seed_bootstrap's distribution (seed-aware) and exactly
    paired_bootstrap's resamples (the paper's rule); what is shared across rows moves them together."""
    rng = np.random.default_rng(7)
    kb, kcs = synthetic_runs(rng, [0.05, 0.3], seeds=6, base_seeds=9)
    draws_c, draws_b = np.arange(6) % 3, np.arange(9) % 3  # three base-model draws
    for dc, db in ((None, None), ([draws_c] * 2, [draws_b] * 2)):
        delta, reps = stats.seed_replicates(kcs, [kb] * 2, draws_cands=dc, draws_refs=db, n_boot=20_000, seed=3)
        for j, kc in enumerate(kcs):
            one = stats.seed_bootstrap(kc, kb, n_boot=20_000, seed=3, draws_cand=None if dc is None else dc[j],
                                       draws_base=None if db is None else db[j])
            lo, hi = np.percentile(reps[:, j], [2.5, 97.5])
            assert delta[j] == pytest.approx(one.delta)
            # Monte-Carlo error only (the two draw their t's from different streams)
            assert lo == pytest.approx(one.ci_lo, abs=0.08 * (one.ci_hi - one.ci_lo))
            assert hi == pytest.approx(one.ci_hi, abs=0.08 * (one.ci_hi - one.ci_lo))
        assert np.corrcoef(reps.T)[0, 1] > 0.2  # the shared baseline and problems
    m = np.column_stack([k.mean(0) for k in kcs])
    reps = stats.paired_resamples(m, np.column_stack([kb.mean(0)] * 2), 5000, 0)
    for j in range(2):
        _, lo, hi = stats.paired_bootstrap(m[:, j], kb.mean(0), n_boot=5000, seed=0)
        assert np.percentile(reps[:, j], [2.5, 97.5]) == pytest.approx([lo, hi], rel=1e-12)


def test_the_ratio_of_two_edges():
    rng = np.random.default_rng(3)
    D = np.array([1e-3, 3e-3, 1e-2, 3e-2])
    kb, kcs = synthetic_runs(rng, true_delta(D))
    delta, reps = stats.seed_replicates(kcs, [kb] * 4, n_boot=4000, seed=0)
    a = stats.edge_interval(D, delta, reps, tau=0.2)
    bounds = stats.replicate_bounds(D, stats.crossing(D, reps, tau=0.2))
    same = stats.edge_ratio(a.edge, bounds, a.edge, bounds)  # two identical mechanisms
    assert same.ratio == pytest.approx(1) and same.coincide and same.lo == pytest.approx(1)
    # the same Deltas at 100x the D: the edge is 100x in every replicate
    far = stats.replicate_bounds(100 * D, stats.crossing(100 * D, reps, tau=0.2))
    x = stats.edge_ratio(100 * a.edge, far, a.edge, bounds)
    assert x.ratio == pytest.approx(100) and x.lo == pytest.approx(100) and x.hi == pytest.approx(100)
    assert not x.coincide
    # a mechanism that never crosses (every row passes, up to D = 1): at least 1 / the other's upper end
    never = stats.replicate_bounds(np.array([0.1, 1.0]), np.full(len(reps), np.inf))
    y = stats.edge_ratio(np.inf, never, a.edge, bounds)
    assert np.isinf(y.ratio) and y.censored_hi and y.lo > 1 and not y.coincide


def test_edge_tables_from_runs():
    """edge_tables on synthetic runs of a noise dial and a staleness dial whose Deltas follow the same curve in D:
    one edge each, in D, over D(0) and over the initial KL, under both rules, and their ratio's interval holds 1."""
    rng = np.random.default_rng(11)
    noise = {f"n{i}": d for i, d in enumerate([1e-3, 2e-3, 5e-3, 1e-2, 3e-2])}
    stale = {f"k{k}": d for k, d in zip((1, 2, 4, 8), [1.5e-3, 3e-3, 8e-3, 2e-2])}
    allD = {**noise, **stale}
    kb, kcs = synthetic_runs(rng, true_delta(list(allD.values())), n=200)
    frames, D = [], {"bf16": 1e-5, **allD}
    for name, k in [("bf16", kb), *zip(allD, kcs)]:
        for s, kl in enumerate(k):
            for step, f in ((0, 3.0), (100, 1.0)):
                frames.append(pd.DataFrame({"run_id": f"{name}.m.s{s}", "config": name, "student": "m", "seed": s,
                                            "step": step, "prompt_id": np.arange(len(kl)), "kl": kl * f,
                                            "correct": 0.5}))
    heldout = pd.concat(frames, ignore_index=True)
    steps = pd.DataFrame([{"student": "m", "config": c, "run_id": f"{c}.m.s0", "d_n": d} for c, d in D.items()])
    v = stats.verdicts(heldout, steps, "bf16", tau=0.2, n_boot=1000)
    rows = [Row("bf16", baseline=True)] + [Row(c, noise_sigma=0.01 * (i + 1)) for i, c in enumerate(noise)] \
        + [Row(c, staleness=int(c[1:])) for c in stale]
    e, r = stats.edge_tables(v, heldout, rows, "bf16", tau=0.2, lr=1e-4, n_boot=2000)
    assert list(e.columns) == list(stats.EDGE_COLUMNS) and list(r.columns) == list(stats.RATIO_COLUMNS)
    assert set(zip(e["mechanism"], e["rule"])) == {(m, x) for m in ("noise_fixed", "staleness")
                                                   for x in ("seeds", "paper")}
    truth = 10 ** -2.5
    for x in e.itertuples():
        assert x.D_lo <= truth <= x.D_hi and x.D_lo <= x.D_edge <= x.D_hi
        assert x.edge_over_d0 == pytest.approx(x.D_edge / 1e-5) and x.kl0 == pytest.approx(3 * kb.mean(1).mean())
        assert x.n_rows == (5 if x.mechanism == "noise_fixed" else 4) and x.dial == dial(x.mechanism)
    assert r["coincide"].all() and (r["mechanism"] == "staleness").all() and (r["versus"] == "noise_fixed").all()


# ---------------------------------------------------------------- the committed toy

def test_the_committed_toy_edges_table():
    path = ROOT / analysis_path("results/toy", "edges")
    e = store.read_table(path)
    cols = ["student", "mechanism", "dial", "D_edge", "D_lo", "D_hi", "edge_over_d0", "edge_over_d0_lo",
            "edge_over_d0_hi", "edge_over_kl0", "edge_over_kl0_lo", "edge_over_kl0_hi", "n_rows", "n_runs",
            "censored_lo", "censored_hi", "rule", "tau"]
    assert set(cols) <= set(e.columns) and len(e) and set(e["rule"]) == {"seeds", "paper"}
    finite = np.isfinite(e["D_edge"]) & (e["D_edge"] > 0)
    assert ((e["D_lo"] <= e["D_edge"]) & (e["D_edge"] <= e["D_hi"]))[finite].all()
    assert (e["censored_lo"] == (e["D_lo"] == 0)).all() and (e["censored_hi"] == np.isinf(e["D_hi"])).all()
    assert (e["D_lo"] <= e["D_hi"]).all()
    assert {"noise_fixed", "noise_redrawn", "staleness"} <= set(e["mechanism"])
    r = store.read_table(ROOT / analysis_path("results/toy", "edge_ratios"))
    assert (r["coincide"] == ((r["ratio_lo"] <= 1) & (r["ratio_hi"] >= 1))).all()
