"""opd.stats against scipy and at the edges of the fail rule."""
import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from opd import stats


def test_paired_bootstrap_agrees_with_scipy():
    rng = np.random.default_rng(1)
    base = rng.gamma(2.0, 0.05, size=300)
    cand = base * rng.lognormal(0.1, 0.3, size=300)
    delta, lo, hi = stats.paired_bootstrap(cand, base, n_boot=20_000, seed=3)
    ref = sps.bootstrap((cand, base), lambda c, b, axis=-1: c.sum(axis) / b.sum(axis) - 1, paired=True,
                        vectorized=True, n_resamples=20_000, method="percentile", random_state=4)
    assert delta == pytest.approx(cand.sum() / base.sum() - 1)
    width = hi - lo
    # percentile endpoints from 20k resamples agree within Monte-Carlo error (a few % of the width)
    assert lo == pytest.approx(ref.confidence_interval.low, abs=0.05 * width)
    assert hi == pytest.approx(ref.confidence_interval.high, abs=0.05 * width)


def test_paired_bootstrap_many_configurations_share_resamples():
    rng = np.random.default_rng(2)
    base = rng.gamma(2.0, 0.05, size=200)
    cands = np.stack([base * 1.3, base * rng.lognormal(0, 0.2, 200), base], axis=1)
    delta, lo, hi = stats.paired_bootstrap(cands, base, n_boot=2000)
    assert delta.shape == lo.shape == hi.shape == (3,)
    assert lo[0] == pytest.approx(0.3) and hi[0] == pytest.approx(0.3)  # a constant ratio has no spread
    assert lo[2] == pytest.approx(0, abs=1e-12) and hi[2] == pytest.approx(0, abs=1e-12)
    d1, l1, h1 = stats.paired_bootstrap(cands[:, 1], base, n_boot=2000)
    assert (d1, l1, h1) == pytest.approx((delta[1], lo[1], hi[1]))


def test_paired_bootstrap_rejects_misaligned_inputs():
    with pytest.raises(ValueError):
        stats.paired_bootstrap(np.ones(5), np.ones(4))


@pytest.mark.parametrize("delta,lo,hi,expected", [
    (0.30, -0.01, 0.60, False),  # Delta >= tau but the interval includes zero: pass
    (0.20, 0.05, 0.35, True),  # Delta exactly tau, interval above zero: fail
    (0.19, 0.10, 0.28, False),  # below tau: pass however tight
    (-0.30, -0.50, -0.10, False),  # better than the baseline: pass
])
def test_fail_rule_edges(delta, lo, hi, expected):
    assert bool(stats.fails(delta, lo, hi, 0.20)) is expected


def verdict_frame(D, delta, lo, hi):
    return pd.DataFrame({"D": D, "delta": delta, "ci_lo": lo, "ci_hi": hi})


def test_budget_interval_and_empty_sides():
    v = verdict_frame([0.001, 0.1, 0.4, 0.6], [0.0, 0.05, 0.25, 0.5], [-0.01, 0.0, 0.1, 0.3], [0.01, 0.1, 0.4, 0.7])
    assert stats.budget_interval(v, 0.20) == (0.1, 0.4)
    assert stats.budget_interval(v, 0.30) == (0.4, 0.6)
    lo, hi = stats.budget_interval(v, 0.9)
    assert lo == 0.6 and np.isnan(hi)
    only_fails = verdict_frame([0.5], [0.5], [0.2], [0.8])
    lo, hi = stats.budget_interval(only_fails, 0.2)
    assert np.isnan(lo) and hi == 0.5
    assert stats.is_consistent(0.1, 0.4) and not stats.is_consistent(0.5, 0.4) and stats.is_consistent(np.nan, 0.4)


def heldout_fixture(configs, n=120, seed=0):
    """Per-problem KL for each (config, scale): the candidate's K_x = base K_x x scale x noise."""
    rng = np.random.default_rng(seed)
    base = rng.gamma(2.0, 0.05, size=n)
    rows, steps = [], []
    for config, (scale, D) in configs.items():
        for s in (0, 1):
            kl = base * scale * rng.lognormal(0, 0.05, n)
            rows.append(pd.DataFrame({"run_id": f"{config}.m.s{s}", "config": config, "student": "m", "seed": s,
                                      "step": 10, "prompt_id": np.arange(n), "kl": kl, "correct": 0.5}))
            steps.append(pd.DataFrame({"run_id": f"{config}.m.s{s}", "config": config, "student": "m", "seed": s,
                                       "step": np.arange(10), "d_n": D}))
    return pd.concat(rows), pd.concat(steps)


def test_verdicts_average_seeds_and_apply_the_rule():
    held, steps = heldout_fixture({"base": (1.0, 0.001), "ok": (1.05, 0.05), "bad": (1.5, 0.5)})
    v = stats.verdicts(held, steps, "base", tau=0.2, n_boot=2000).set_index("config")
    assert v.loc["bad", "verdict"] == "fail" and v.loc["ok", "verdict"] == "pass" and v.loc["base", "verdict"] == "pass"
    assert v.loc["bad", "delta"] == pytest.approx(0.5, abs=0.03) and v.loc["base", "delta"] == 0
    assert v.loc["bad", "D"] == pytest.approx(0.5) and v.loc["ok", "n_runs"] == 2
    assert stats.budget_interval(v, 0.2) == (pytest.approx(0.05), pytest.approx(0.5))


def test_admission_record():
    v = pd.DataFrame({"student": "m", "config": ["a", "b", "c"], "D": [0.01, 0.2, 0.6],
                      "verdict": ["pass", "pass", "fail"]})
    adm = pd.DataFrame({"student": "m", "config": ["a", "b", "c"], "d_hat": [0.005, 0.3, 0.4], "se": 0.01,
                        "n_prompts": 16, "n_sequences": 32})
    rec = stats.admission_record(adm, v, alpha=1.5, L=0.41).set_index("config")
    assert rec["admit"].tolist() == [True, False, False]  # 1.5 x 0.3 = 0.45 >= 0.41
    assert rec["agrees"].tolist() == [True, False, True]
    assert rec.loc["c", "ratio"] == pytest.approx(1.5)
    s = stats.admission_summary(rec.reset_index(), ratio_floor=0.01)
    assert s["alpha_implied"] == pytest.approx(1.5) and s["L_retrospective"] == pytest.approx(0.2)
    assert (s["n_decisions"], s["n_agree"], s["n_admit_all_agree"]) == (3, 2, 2)
    assert stats.admit(0.27) and not stats.admit(0.28)


def test_admission_summary_counts_candidates_not_the_baseline():
    """The standard engine passes and is admitted by construction: counting it flatters the check."""
    v = pd.DataFrame({"student": "m", "config": ["bf16", "a", "b"], "D": [1e-4, 0.01, 0.6],
                      "verdict": ["pass", "fail", "fail"]})
    adm = pd.DataFrame({"student": "m", "config": ["bf16", "a", "b"], "d_hat": [1e-4, 0.005, 0.4], "se": 0.001,
                        "n_prompts": 16, "n_sequences": 32})
    rec = stats.admission_record(adm, v, alpha=1.5, L=0.41, baselines=["bf16"])
    assert rec.set_index("config")["candidate"].to_dict() == {"bf16": False, "a": True, "b": True}
    s = stats.admission_summary(rec, ratio_floor=0.01)
    assert (s["n_decisions"], s["n_agree"], s["n_admit_all_agree"], s["n_baseline"]) == (2, 1, 0, 1)
    assert s["se_relative_min"] == s["se_relative_max"] == pytest.approx(0.001 / 0.4)  # only D_hat >= 0.01
    assert s["prompts_for_se_third"] == 1  # 16 x (3 x 0.0025)^2, rounded up
    assert stats.prompts_needed(0.01, 16, 0.01) == 144 and stats.prompts_needed(0.01 / 3, 16, 0.01) == 16


def test_ratio_se_of_a_constant_is_zero_and_shrinks_as_one_over_root_n():
    tokens = np.arange(10, 26)
    d, se = stats.ratio_se(0.02 * tokens, tokens, n_boot=2000, seed=0)
    assert d == pytest.approx(0.02) and se == pytest.approx(0, abs=1e-12)
    rng = np.random.default_rng(0)
    num = rng.normal(0.02, 0.05, 64) * 20
    _, se64 = stats.ratio_se(num, np.full(64, 20), n_boot=20_000, seed=1)
    _, se256 = stats.ratio_se(np.tile(num, 4), np.full(256, 20), n_boot=20_000, seed=1)  # the same prompts, 4x
    assert se256 == pytest.approx(se64 / 2, rel=0.05)
    # the bootstrap SE of a mean: the sample SD / sqrt(n) (ddof 0: the bootstrap's plug-in)
    assert se64 == pytest.approx(np.std(num / 20) / np.sqrt(64), rel=0.05)
    assert np.isnan(stats.ratio_se([1.0], [10], n_boot=100)[1])


def test_offline_estimates_resample_prompts_with_all_their_responses():
    """Two responses of a prompt that share its effect: resampling prompts (not sequences) keeps them
    together, so the SE is that of 8 prompts, not 16 independent sequences."""
    rng = np.random.default_rng(0)
    effect = np.repeat(rng.normal(0.01, 0.02, 8), 2) * 20
    seqs = stats.sequence_frame(effect, np.full(16, 20), 2, student="m", config="a")
    assert seqs["prompt"].tolist() == list(np.repeat(np.arange(8), 2)) and seqs["response"].tolist() == [0, 1] * 8
    est = stats.offline_estimates(seqs, ["student", "config"], n_boot=20_000, seed=0).iloc[0]
    assert (est["n_prompts"], est["n_sequences"], est["n_tokens"]) == (8, 16, 320)
    assert est["d_hat"] == pytest.approx(effect.sum() / 320)
    assert est["se"] == pytest.approx(np.std(effect[::2] / 20) / np.sqrt(8), rel=0.05)


def test_prompts_for_relative_se():
    rng = np.random.default_rng(2)
    num = rng.normal(0.01, 0.03, 512) * 20
    t = stats.prompts_for_relative_se(num, np.full(512, 20), [16, 64, 256, 512], n_boot=4000)
    assert t["n"].tolist() == [16, 64, 256, 512] and t["se"].is_monotonic_decreasing
    assert not t["meets"].iloc[0] and t["meets"].iloc[-1]  # SE/D_hat ~ 3/sqrt(n): 0.75 at 16, 0.13 at 512


def rl_frame(**over):
    base = {"config": ["rl-ref", "rl-x"], "accuracy_change": [0.0, -1.0], "entropy_ratio": [1.0, 1.1],
            "length_ratio": [1.0, 1.0]}
    return pd.DataFrame({**base, **{k: [base[k][0], v] for k, v in over.items()}})


@pytest.mark.parametrize("over, fired", [
    ({}, ""),
    ({"accuracy_change": -5.0}, "accuracy"),
    ({"entropy_ratio": 0.3}, "entropy"),  # entropy collapsed to a third of the standard run's
    ({"entropy_ratio": 2.0}, "entropy"),  # or blew up
    ({"length_ratio": 0.7}, "length"),
    ({"accuracy_change": -20.0, "length_ratio": 1.5}, "accuracy+length"),
    ({"entropy_ratio": float("nan")}, ""),  # not measured: does not fire
])
def test_rl_collapse_names_the_criterion_that_fired(over, fired):
    t = stats.rl_collapse(rl_frame(**over), **stats.RL_COLLAPSE_DEFAULTS).set_index("config")
    assert t.loc["rl-x", "collapse_criteria"] == fired and t.loc["rl-x", "collapsed"] == bool(fired)
    assert not t.loc["rl-ref", "collapsed"]
    assert t.loc["rl-x", "collapse_entropy"] == ("entropy" in fired)


def test_time_to_target_interpolates():
    curve = pd.DataFrame({"x": [0, 10, 20], "kl": [1.0, 0.6, 0.2]})
    assert stats.time_to_target(curve, 0.4) == pytest.approx(15)
    assert stats.time_to_target(curve, 1.2) == 0
    assert np.isnan(stats.time_to_target(curve, 0.1))


# ---------------------------------------------------------------- seeds: the instrument's run-to-run noise

# Noise sizes of the toy (measured on the baseline's seeds, see figures/toy/tables/noise.md): a run's
# log sum_x K_x varies with SD ~0.02 between seeds at the toy's settings (0.065 at the first settings,
# 8 prompts and a constant lr), a single problem's K_x by ~0.18 (log SD) between seeds; K_x across
# problems ~ Gamma(1); the true per-problem effect of an engine varies around its mean by ~10%.
SD_PROBLEM, SD_EFFECT, N_PROBLEMS = 0.18, 0.10, 359


def simulate(rng, s_c, s_0, delta, sd_run, n=N_PROBLEMS, cand_noise=1.0):
    """One simulated experiment: (S_c, n) candidate and (S_0, n) baseline K_x, with problems drawn from
    a population, a per-run (seed) effect (`cand_noise` times larger on the candidate) and per-run
    per-problem noise; the population Delta is `delta`."""
    mu = rng.gamma(1.0, 0.04, n)
    effect = (1 + delta) * np.exp(rng.normal(-SD_EFFECT ** 2 / 2, SD_EFFECT, n))

    def runs(S, m, sd):
        return mu * m * np.exp(rng.normal(0, sd, (S, 1)) + rng.normal(-SD_PROBLEM ** 2 / 2, SD_PROBLEM, (S, n)))
    return runs(s_c, effect, sd_run * cand_noise), runs(s_0, 1.0, sd_run)


@pytest.mark.parametrize("s_c,sd_run,cand_noise", [(1, 0.018, 1), (3, 0.018, 1), (5, 0.018, 1), (1, 0.065, 1),
                                                   (3, 0.065, 1), (5, 0.065, 1), (3, 0.03, 3), (5, 0.03, 3)])
def test_seed_bootstrap_covers_the_true_delta(s_c, sd_run, cand_noise):
    """A nominal 95% interval covers the true Delta 90-99% of the time over simulated experiments with
    seed-level and problem-level noise of the sizes measured (S_0 = 8 baseline seeds), also when the
    candidate's runs vary 3x more than the baseline's (as the toy's noisiest rows do) and it has seeds
    to show it (a one-seed candidate is assumed as noisy as the baseline: it would under-cover there)."""
    rng = np.random.default_rng([s_c, int(sd_run * 1000), cand_noise])
    hits = []
    for i in range(200):
        kc, kb = simulate(rng, s_c, 8, 0.10, sd_run, cand_noise=cand_noise)
        _, lo, hi = stats.seed_bootstrap(kc, kb, n_boot=1000, seed=i)
        hits.append(lo <= 0.10 <= hi)
    assert 0.90 <= np.mean(hits) <= 0.99


def test_problem_only_interval_misses_run_to_run_noise():
    """Why the paper's rule alone is not enough at toy scale: with the first settings' run-to-run noise,
    the problem-only interval of one seed against one seed covers the true Delta far less than 95%."""
    rng = np.random.default_rng(7)
    hits = []
    for i in range(200):
        kc, kb = simulate(rng, 1, 1, 0.10, 0.065)
        _, lo, hi = stats.paired_bootstrap(kc[0], kb[0], n_boot=1000, seed=i)
        hits.append(lo <= 0.10 <= hi)
    assert np.mean(hits) < 0.8


def test_seed_bootstrap_needs_enough_seeds_and_aligned_problems():
    rng = np.random.default_rng(0)
    kc, kb = simulate(rng, 1, 2, 0.0, 0.02)
    with pytest.raises(ValueError, match="at least 4 runs"):
        stats.seed_bootstrap(kc, kb)
    with pytest.raises(ValueError, match="same problems"):
        stats.seed_bootstrap(kc[:, :10], simulate(rng, 1, 3, 0.0, 0.02)[1])
    kc, kb = simulate(rng, 1, 3, 0.0, 0.02)
    delta, lo, hi = stats.seed_bootstrap(kc, kb, n_boot=1000)
    assert delta == pytest.approx(kc.mean(0).sum() / kb.mean(0).sum() - 1) and lo < delta < hi


def test_seed_interval_widens_with_run_to_run_noise_and_narrows_with_seeds():
    rng = np.random.default_rng(1)
    mu = rng.gamma(1.0, 0.04, N_PROBLEMS)
    quiet = np.stack([mu * f for f in (0.99, 1.0, 1.01)])
    noisy = np.stack([mu * f for f in (0.8, 1.0, 1.25)])
    w = lambda kc, kb: np.subtract(*stats.seed_bootstrap(kc, kb, n_boot=2000)[2:0:-1])  # noqa: E731  hi - lo
    assert w(noisy, noisy[::-1] * 1.0) > 5 * w(quiet, quiet[::-1] * 1.0)
    many = np.stack([mu * f for f in np.exp(np.random.default_rng(2).normal(0, 0.1, 12))])
    assert w(many[:6], many[6:]) < w(many[:2], many[2:4])


def test_verdicts_seed_aware_columns_and_references():
    held, steps = heldout_fixture({"base": (1.0, 0.001), "ok": (1.05, 0.05), "bad": (1.5, 0.5),
                                   "lo": (1.3, 0.001), "lo-stale": (1.3 * 1.05, 0.01)})
    v = stats.verdicts(held, steps, "base", tau=0.2, n_boot=2000, references={"lo-stale": "lo"}).set_index("config")
    assert v.loc["lo-stale", "reference"] == "lo" and v.loc["lo-stale", "delta"] == pytest.approx(0.05, abs=0.03)
    assert v.loc["lo", "reference"] == "base" and v.loc["lo", "verdict"] == "fail"
    assert v.loc["bad", "verdict_seeds"] == "fail" and v.loc["ok", "verdict_seeds"] == "pass"
    # 2 + 2 seeds: the seed interval exists and is wider than the problem-only one
    assert (v["ci_hi_seeds"] - v["ci_lo_seeds"]).drop("base").gt((v["ci_hi"] - v["ci_lo"]).drop("base")).all()
    assert v.loc["base", ["ci_lo_seeds", "ci_hi_seeds"]].tolist() == [0, 0] and v.loc["base", "verdict_seeds"] == "pass"
    one = held[held["seed"] == 0]
    v1 = stats.verdicts(one, steps, "base", n_boot=500).set_index("config")
    assert pd.isna(v1.loc["bad", "verdict_seeds"]) and np.isnan(v1.loc["bad", "ci_lo_seeds"])
    with pytest.raises(ValueError, match="'nope', the reference of 'ok'"):
        stats.verdicts(held, steps, "base", n_boot=100, references={"ok": "nope"})


def test_budget_table_reports_both_rules():
    v = verdict_frame([0.001, 0.1, 0.4, 0.6], [0.0, 0.25, 0.25, 0.5], [-0.01, 0.05, 0.1, 0.3], [0.01, 0.45, 0.4, 0.7])
    v = v.assign(student="m", ci_lo_seeds=[-0.1, -0.1, 0.05, 0.2], ci_hi_seeds=[0.1, 0.6, 0.45, 0.8])
    b = stats.budget_table(v, [0.2]).set_index("rule")
    assert (b.loc["paper", "lo"], b.loc["paper", "hi"], b.loc["paper", "consistent"]) == (0.001, 0.1, True)
    assert (b.loc["seeds", "lo"], b.loc["seeds", "hi"]) == (0.1, 0.4)  # the noisy fail at D = 0.1 now passes
    v.loc[3, ["ci_lo_seeds", "ci_hi_seeds"]] = np.nan  # too few seeds: unjudged, not a pass
    b = stats.budget_table(v, [0.2]).set_index("rule")
    assert b.loc["seeds", "n_unjudged"] == 1 and b.loc["seeds", "n_pass"] + b.loc["seeds", "n_fail"] == 3


def test_seed_noise_is_the_null_distribution_of_one_engine():
    rng = np.random.default_rng(3)
    mu = rng.gamma(1.0, 0.04, 100)
    rows = [pd.DataFrame({"run_id": f"b.m.s{s}", "config": "b", "student": "m", "seed": s, "step": 5,
                          "prompt_id": np.arange(100), "kl": mu * f}) for s, f in enumerate((1.0, 1.1, 0.9))]
    pairs, summary = stats.seed_noise(pd.concat(rows), "b", n_boot=200)
    f = {0: 1.0, 1: 1.1, 2: 0.9}
    assert len(pairs) == 6
    for a, b, d in pairs[["seed_a", "seed_b", "delta"]].itertuples(index=False):
        assert d == pytest.approx(f[a] / f[b] - 1)
    assert summary.loc[0, "n_seeds"] == 3 and summary.loc[0, "sd_run"] == pytest.approx(np.std(np.log([1, 1.1, 0.9]),
                                                                                              ddof=1))


def test_share_se_is_paired_a_part_proportional_to_the_whole_has_no_spread():
    rng = np.random.default_rng(3)
    whole = rng.normal(0.01, 0.02, 64) * 20
    share, se = stats.share_se(0.8 * whole, np.full(64, 20), whole, np.full(64, 20), n_boot=2000)
    assert share == pytest.approx(0.8) and se == pytest.approx(0, abs=1e-9)
    part = whole * rng.lognormal(np.log(0.8), 0.5, 64)
    _, se_noisy = stats.share_se(part, np.full(64, 20), whole, np.full(64, 20), n_boot=2000)
    assert se_noisy > 0.01
