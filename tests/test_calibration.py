"""opd.calibration: the noise sizes measured from runs, the simulator, and the sequential-seeds rule."""
import numpy as np
import pandas as pd
import pytest

from opd import calibration as cal
from opd import stats

# the toy's qwen-s sizes, measured by benchmarks/bootstrap.py (see tests/test_stats.py, where they are derived)
QWEN_S = cal.NoiseModel(n_problems=359, kx_sd_log=0.83, kx_tail_df=np.inf, sd_run=0.0191, sd_interaction=0.300,
                        sd_effect=0.18)
NOISY = {"cand_run": 6.0, "cand_interaction": 2.0}  # a candidate 4x noisier than the baseline from seed to seed
TAU = 0.20


def heldout_frame(configs: dict) -> pd.DataFrame:
    """{config: (S, n) K} -> a final-evaluation heldout table of student m."""
    return pd.concat([pd.DataFrame({"run_id": f"{c}.m.s{s}", "config": c, "student": "m", "seed": s, "step": 100,
                                    "prompt_id": np.arange(k.shape[1]), "kl": row, "correct": 0.5})
                      for c, k in configs.items() for s, row in enumerate(k)], ignore_index=True)


def test_measure_noise_separates_the_run_effect_from_the_interaction():
    rng = np.random.default_rng(0)
    n = 2000
    mu = rng.gamma(1.0, 0.04, n)
    run = np.exp(np.array([-0.1, -0.05, 0.0, 0.05, 0.1])[:, None])
    pure = heldout_frame({"b": mu * run})  # run effects only: no interaction
    m = cal.measure_noise(pure, "b").iloc[0]
    assert m["sd_run_total"] == pytest.approx(np.std(np.log(run), ddof=1))
    assert m["sd_run_interaction"] == pytest.approx(0, abs=1e-12) and m["sd_run"] == pytest.approx(m["sd_run_total"])
    inter = heldout_frame({"b": mu * np.exp(rng.normal(0, 0.3, (40, n)))})  # interaction only, 40 seeds
    m = cal.measure_noise(inter, "b").iloc[0]
    assert m["sd_interaction"] == pytest.approx(0.3, rel=0.03)
    w = mu / mu.sum()  # the interaction's part of a run's log total: sqrt(sum_x w_x^2 var(e_x)), var(e) of exp(N)
    expect = np.sqrt((w ** 2).sum() * (np.exp(0.09) - 1))
    assert m["sd_run_interaction"] == pytest.approx(expect, rel=0.1)
    assert m["sd_run_shuffled"] == pytest.approx(expect, rel=0.15)
    assert m["sd_run_total"] == pytest.approx(expect, rel=0.3) and m["n_rows"] == 0
    with pytest.raises(ValueError, match="no held-out results for baseline 'x'"):
        cal.measure_noise(inter, "x")


def test_measure_noise_compares_rows_with_the_baseline():
    rng = np.random.default_rng(1)
    mu = rng.gamma(1.0, 0.04, 500)
    base = mu * np.exp(rng.normal(0, 0.05, (8, 1)) + rng.normal(0, 0.2, (8, 500)))
    loud = mu * np.exp(rng.normal(0, 0.5, (3, 1)) + rng.normal(0, 0.2, (3, 500)))
    m = cal.measure_noise(heldout_frame({"b": base, "loud": loud}), "b").iloc[0]
    assert m["n_rows"] == 1 and m["run_ratio_max"] > 3
    assert m["run_ratio_max"] == pytest.approx(np.std(np.log(loud.sum(1)), ddof=1) / m["sd_run_total"])


def test_tail_df_matches_the_kurtosis():
    assert cal.tail_df_for(4.2, 0.83, 359) == np.inf  # lighter than the log-normal: the lightest available
    assert np.isfinite(cal.tail_df_for(31.3, 0.68, 359))


def test_simulate_has_the_stated_delta_and_draws():
    rng = np.random.default_rng(2)
    runs = cal.simulate(rng, QWEN_S, n_exp=400, seeds_cand=3, seeds_base=8, delta=0.3, run_tails="heavy", n_draws=3)
    assert runs.k_cand.shape == (400, 3, 359) and runs.k_base.shape == (400, 8, 359)
    assert runs.draws_cand.tolist() == [0, 1, 2] and runs.draws_base.tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    ratio = runs.k_cand.mean((1, 2)).mean() / runs.k_base.mean((1, 2)).mean()  # population ratio over experiments
    assert ratio == pytest.approx(1.3, rel=0.03)
    with pytest.raises(ValueError, match="tails"):
        cal.simulate(rng, QWEN_S, n_exp=1, seeds_cand=1, seeds_base=1, delta=0, run_tails="cauchy")


# ---------------------------------------------------------------- sequential seeds

RULE = cal.SequentialRule(tau=TAU, max_seeds=3, start_seeds=1, n_boot=1000)


def rows_of(delta, seed, **noise):
    """One simulated row: (3, n) candidate and (8, n) baseline runs."""
    r = cal.simulate(np.random.default_rng(seed), QWEN_S, n_exp=1, seeds_cand=3, seeds_base=8, delta=delta, **noise)
    return r.k_cand[0], r.k_base[0]


def test_next_seeds_starts_continues_while_undecided_and_stops():
    kc, kb = rows_of(0.0, 3)
    assert cal.next_seeds(kc[:0], kb, RULE._replace(start_seeds=2)) == [0, 1]  # nothing run yet: the start
    assert cal.next_seeds(kc[:1], kb, RULE) == []  # Delta ~ 0: the interval lies below tau at one seed
    far, kb2 = rows_of(1.0, 4)
    assert cal.next_seeds(far[:1], kb2, RULE) == []  # Delta ~ 1: above tau
    near, kb3 = rows_of(TAU, 5)
    iv = cal.interval_on_seeds(near[:1], kb3, RULE)
    assert cal.straddles(iv.ci_lo, iv.ci_hi, TAU) and cal.next_seeds(near[:1], kb3, RULE) == [1]
    assert cal.next_seeds(near, kb3, RULE) == []  # max_seeds run
    assert cal.next_seeds(near[:1], kb3, RULE) == cal.next_seeds(near[:1], kb3, RULE)  # deterministic


def test_straddles():
    assert cal.straddles(0.1, 0.3, 0.2) and cal.straddles(-0.1, 0.5, 0.2)  # the latter straddles 0 too
    assert not cal.straddles(0.21, 0.5, 0.2) and not cal.straddles(-0.1, 0.19, 0.2)


def test_rule_validation():
    with pytest.raises(ValueError, match="start_seeds"):
        cal.SequentialRule(tau=TAU, max_seeds=2, start_seeds=3).validate(8)
    with pytest.raises(ValueError, match="too few"):
        cal.SequentialRule(tau=TAU, max_seeds=3, start_seeds=1).validate(2)
    with pytest.raises(ValueError, match="every one of the 3"):
        cal.SequentialRule(tau=TAU, max_seeds=6, start_seeds=2, n_draws=3).validate(8)


@pytest.mark.parametrize("delta", [0.0, TAU, 3 * TAU])
def test_sequential_verdict_agrees_with_the_full_design_at_the_measured_noise(delta):
    """At the baseline's noise, the sequential verdict differs from the full design's (3 seeds) on at most
    1% of rows, at Delta far below, at and far above tau, and saves runs away from tau."""
    r = cal.sequential_rates(np.random.default_rng([int(100 * delta)]), QWEN_S, RULE, delta=delta, seeds_base=8,
                             n_exp=600)
    assert r.differ <= 0.01
    assert r.mean_seeds < 2.0 if delta != TAU else r.mean_seeds > 2.5


def test_a_noisy_row_needs_the_one_seed_bound():
    """A row 4x noisier than the baseline, judged on one seed as if it were as quiet, stops early and
    disagrees with the full design far more often than under the stated bound (one_seed_ratio 4)."""
    kw = {"delta": 1.5 * TAU, "seeds_base": 8, "n_exp": 600, **NOISY}
    loose = cal.sequential_rates(np.random.default_rng(6), QWEN_S, RULE, **kw)
    bound = cal.sequential_rates(np.random.default_rng(6), QWEN_S, RULE._replace(one_seed_ratio=4.0), **kw)
    assert loose.differ > 0.1 and bound.differ < 0.07 and bound.mean_seeds > loose.mean_seeds


def test_replay_runs_rows_in_order_and_counts_runs():
    kc_zero, kb = rows_of(0.0, 7)
    kc_far, _ = rows_of(1.0, 8)
    kc_near, _ = rows_of(TAU, 9)
    held = heldout_frame({"b": kb, "zero": kc_zero * 1.0, "far": kc_far, "near": kc_near, "ref": kc_zero * 1.3,
                          "on-ref": kc_zero * 1.3 * 1.02})
    rp = cal.replay(held, RULE, baseline="b", references={"on-ref": "ref"}).set_index("config")
    assert rp.loc["b", "role"] == "baseline" and rp.loc["b", "seeds_run"] == "0,1,2,3,4,5,6,7"
    assert rp.loc["ref", "role"] == "reference" and rp.loc["ref", "n_runs"] == 3  # shared: its full design
    assert rp.loc["zero", "seeds_run"] == "0" and rp.loc["far", "seeds_run"] == "0"
    assert rp.loc["far", "verdict"] == "fail" and rp.loc["zero", "verdict"] == "pass"
    assert rp.loc["near", "n_runs"] >= 2 and rp.loc["on-ref", "reference"] == "ref"
    assert (rp["agree"] == (rp["verdict"] == rp["verdict_full"])).all()
    s = cal.replay_summary(rp.reset_index())[0]
    assert (s.student, s.runs_full, s.n_rows) == ("m", 8 + 5 * 3, 5)
    assert s.runs_used == rp["n_runs"].sum() and s.verdicts_agree == int(rp.drop("b")["agree"].sum())
    # the verdict the rule stopped on is the seed-aware rule on those seeds
    iv = cal.interval_on_seeds(kc_far[:1], kb, RULE)
    assert rp.loc["far", "ci_lo"] == pytest.approx(iv.ci_lo) and stats.fails(*iv, TAU)
