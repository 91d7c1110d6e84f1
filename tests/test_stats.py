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
    adm = pd.DataFrame({"student": "m", "config": ["a", "b", "c"], "d_hat": [0.005, 0.3, 0.4]})
    rec = stats.admission_record(adm, v, alpha=1.5, L=0.41).set_index("config")
    assert rec["admit"].tolist() == [True, False, False]  # 1.5 x 0.3 = 0.45 >= 0.41
    assert rec["agrees"].tolist() == [True, False, True]
    assert rec.loc["c", "ratio"] == pytest.approx(1.5)
    s = stats.admission_summary(rec.reset_index(), ratio_floor=0.01)
    assert s["alpha_implied"] == pytest.approx(1.5) and s["L_retrospective"] == pytest.approx(0.2)
    assert (s["n_decisions"], s["n_agree"]) == (3, 2)
    assert stats.admit(0.27) and not stats.admit(0.28)


def test_time_to_target_interpolates():
    curve = pd.DataFrame({"x": [0, 10, 20], "kl": [1.0, 0.6, 0.2]})
    assert stats.time_to_target(curve, 0.4) == pytest.approx(15)
    assert stats.time_to_target(curve, 1.2) == 0
    assert np.isnan(stats.time_to_target(curve, 0.1))
