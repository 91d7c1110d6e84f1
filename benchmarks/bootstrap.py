"""The bootstrap's speed, the toy's noise sizes, and the seed-aware interval's coverage and power at them.

1. Speed: paired bootstrap, 10,000 resamples x 530 problems x 20 configurations in one vectorised call,
   against scipy.stats.bootstrap run per configuration on the same data: both times, the ratio and the
   largest difference between the intervals. Goal: >= 20x faster, same intervals within Monte-Carlo error.
2. Noise sizes: opd.calibration.measure_noise on the committed toy results (results/toy/analysis/
   heldout.parquet, each run's final evaluation: not committed, `snakemake -c 2 --config experiment=toy` builds it
   from the runs), per student. tests/test_stats.py's coverage tests use the
   numbers this prints (constants there, with this file named as their source).
3. Coverage of stats.seed_bootstrap's nominal 95% interval over simulated comparisons at those sizes
   (opd.calibration.simulate): 1, 3, 5 candidate seeds against 8, candidates 1x to 4x noisier than the
   baseline, normal and heavy-tailed seed effects; then the two-level rule over base-model draws at a range
   of draw x configuration SDs (each row's own draws, and pooled over rows). Goal: 92-98%.
4. Power: the probability that the seed-aware rule fails a candidate whose true Delta is tau or 1.5 tau.

Run: python benchmarks/bootstrap.py [--experiments 1000] [--resamples 1000]   (about 2 minutes on 2 cores)"""
import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from opd import calibration as cal
from opd import config as C
from opd import stats, store
from opd.stats import paired_bootstrap

ROOT = Path(__file__).resolve().parent.parent
N_PROBLEMS, N_CONFIGS, N_BOOT = 530, 20, 10_000
BASE_SEEDS = 8  # the toy's baseline seeds
# the candidates' noise against the baseline's: (seed effect x, interaction x) and the total run SD ratio
# they make at qwen-s's sizes (printed); 4x is the noisiest row measured (run_ratio_max)
NOISE = {"1x": (1.0, 1.0), "1.7x": (2.0, 1.5), "4x": (6.0, 2.0)}
DRAW_SDS = (0.0, 0.02, 0.05, 0.1, 0.2)  # draw x configuration SDs of log(1 + Delta) (the toy's: analysis/noise.parquet sd_draw_config)


def speed():
    rng = np.random.default_rng(0)
    base = rng.gamma(2.0, 0.05, N_PROBLEMS)
    cands = base[:, None] * rng.lognormal(np.linspace(-0.05, 0.4, N_CONFIGS), 0.3, (N_PROBLEMS, N_CONFIGS))
    t = time.perf_counter()
    delta, lo, hi = paired_bootstrap(cands, base, n_boot=N_BOOT, seed=0)
    ours = time.perf_counter() - t
    t = time.perf_counter()
    ref = []
    for c in range(N_CONFIGS):
        r = sps.bootstrap((cands[:, c], base), lambda x, y, axis=-1: x.sum(axis) / y.sum(axis) - 1, paired=True,
                          vectorized=True, n_resamples=N_BOOT, method="percentile", random_state=c)
        ref.append((r.confidence_interval.low, r.confidence_interval.high))
    theirs = time.perf_counter() - t
    ref = np.array(ref)
    diff = np.maximum(np.abs(lo - ref[:, 0]), np.abs(hi - ref[:, 1])) / (hi - lo)
    print("1. speed")
    print(f"opd.stats.paired_bootstrap, one call:  {ours:8.3f} s")
    print(f"scipy.stats.bootstrap, per config:     {theirs:8.3f} s")
    print(f"speed-up:                              {theirs / ours:8.1f} x   (goal >= 20 x)")
    print(f"largest endpoint difference:           {diff.max():8.3%} of the interval width (Monte-Carlo error)")


def models(noise: pd.DataFrame) -> dict:
    """A simulator model per student at its measured sizes (the K_x tail matched to the measured kurtosis)."""
    out = {}
    for r in noise.itertuples():
        out[r.student] = cal.NoiseModel(int(r.n_problems), float(r.kx_sd_log),
                                        cal.tail_df_for(r.kx_excess_kurtosis, r.kx_sd_log, int(r.n_problems)),
                                        float(r.sd_run), float(r.sd_interaction), float(r.sd_effect_median))
    return out


def pooled_mix(rng, model, tau, n_exp, n_boot, typical=8, noisy=2):
    """Coverage of typical and noisy rows' intervals, from their own draws and from the draw variance pooled
    over the typical + noisy rows of each simulated student (n_exp students)."""
    kw = {"n_exp": None, "seeds_cand": 3, "seeds_base": BASE_SEEDS, "delta": tau, "n_draws": 3}
    groups = {"typical": (typical, model._replace(sd_draw=0.02), {}),
              "4x noisier": (noisy, model._replace(sd_draw=0.1), {"cand_run": NOISE["4x"][0],
                                                                 "cand_interaction": NOISE["4x"][1]})}
    runs = {k: cal.simulate(rng, mm, **{**kw, "n_exp": n * n_exp}, **extra) for k, (n, mm, extra) in groups.items()}
    draws = {"draws_cand": runs["typical"].draws_cand, "draws_base": runs["typical"].draws_base}
    est = np.hstack([stats.draw_variance(r.k_cand, r.k_base, **draws).var.reshape(n_exp, -1) for r in runs.values()])
    pooled = np.maximum(est.mean(1), 0)
    out = {}
    for k, r in runs.items():
        n = groups[k][0]
        dv = stats.DrawVariance(np.repeat(pooled, n), (typical + noisy) * 2)
        own = stats.seed_bootstrap(r.k_cand, r.k_base, n_boot=n_boot, **draws)
        pool = stats.seed_bootstrap(r.k_cand, r.k_base, n_boot=n_boot, draw_var=dv, **draws)
        out[k] = [float(np.mean((i.ci_lo <= tau) & (tau <= i.ci_hi))) for i in (own, pool)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experiments", type=int, default=1000, help="simulated comparisons per case")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per interval")
    args = ap.parse_args()
    E, B = args.experiments, args.resamples
    exp = C.load()["experiments"]["toy"]
    tau = float(exp["tau"])
    speed()

    heldout = store.read_table(ROOT / "results/toy/analysis/heldout.parquet")
    baseline = next(r["name"] for r in exp["rows"] if r.get("baseline"))
    noise = cal.measure_noise(heldout, baseline, n_draws=int(exp.get("base_draws", 1)))
    print(f"\n2. noise sizes, measured on results/toy (baseline {baseline}, final evaluation; logs)")
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(noise.set_index("student").T.to_string(float_format=lambda x: f"{x:.4g}"))
    M = models(noise)
    for s, m in M.items():
        print(f"simulator model {s}: {m}")

    print(f"\n3. coverage of the nominal 95% seed-aware interval, {E} simulated comparisons each, {B} resamples; "
          f"{BASE_SEEDS} baseline seeds, true Delta = tau = {tau}")
    print("student  cand seeds  noise (total run SD)  seed tails  coverage  median width")
    for student, m in M.items():
        for sc in (1, 3, 5):
            for label, (run, inter) in NOISE.items():
                for tails in ("normal", "heavy"):
                    rng = np.random.default_rng([sc, int(10 * run), len(tails), len(student)])
                    r = cal.rates(rng, m, tau=tau, delta=tau, n_exp=E, seeds_cand=sc, seeds_base=BASE_SEEDS, n_boot=B,
                                  cand_run=run, cand_interaction=inter, run_tails=tails)
                    ratio = np.sqrt(run ** 2 * m.sd_run ** 2 + inter ** 2 * (noise.set_index("student").loc[
                        student, "sd_run_interaction"]) ** 2) / noise.set_index("student").loc[student, "sd_run_total"]
                    print(f"{student:8s} {sc:6d}      {label:5s} ({ratio:3.1f}x)          {tails:7s}    "
                          f"{r.coverage:6.3f}    {r.width:6.3f}")

    primary = next(iter(M)) if "qwen-s" not in M else "qwen-s"
    m = M[primary]._replace(draw_scale_sd=0.25, draw_problem_sd=0.3)
    print(f"\n   two-level (base-model draws), {primary}: run s on draw s % 3, 8 baseline seeds (3, 3, 2 per draw); "
          "both sides' K_x scaled per draw by a common factor (SD 0.25 overall, 0.3 per problem)")
    print("cand seeds  noise  draw SD  draw tails  coverage (own draws)  (pooled)  width (own)  (pooled)")
    for sc in (3, 6):
        for label in ("1x", "4x"):
            run, inter = NOISE[label]
            for sd in DRAW_SDS:
                for tails in ("normal", "heavy"):
                    res = []
                    for pooled in (False, True):
                        rng = np.random.default_rng([sc, int(10 * run), int(100 * sd), len(tails)])
                        res.append(cal.rates(rng, m._replace(sd_draw=sd), tau=tau, delta=tau, n_exp=E, seeds_cand=sc,
                                             seeds_base=BASE_SEEDS, n_boot=B, n_draws=3, cand_run=run,
                                             cand_interaction=inter, draw_tails=tails, pooled_draw_var=pooled))
                    print(f"{sc:6d}      {label:4s}   {sd:5.2f}    {tails:7s}     {res[0].coverage:6.3f}          "
                          f"{res[1].coverage:6.3f}     {res[0].width:6.3f}    {res[1].width:6.3f}")

    print("\n   pooled over a student's rows, the draw variance is assumed the same for every row: 10 rows, 8 at the "
          "baseline's noise with draw SD 0.02 and 2 4x noisier with draw SD 0.1, 3 seeds over 3 draws each")
    print("rows         coverage (own draws)  (pooled)")
    for kind, cov in pooled_mix(np.random.default_rng(13), m, tau, E // 2, B).items():
        print(f"{kind:12s} {cov[0]:6.3f}                {cov[1]:6.3f}")
    print("\n   one-seed candidates with a stated bound on their noise (one_seed_ratio 4: the sequential rule's)")
    for label in ("1x", "4x"):
        run, inter = NOISE[label]
        r = cal.rates(np.random.default_rng([int(10 * run), 41]), M[primary], tau=tau, delta=tau, n_exp=E, seeds_cand=1,
                      seeds_base=BASE_SEEDS, n_boot=B, cand_run=run, cand_interaction=inter, one_seed_ratio=4.0)
        print(f"{primary} 1 seed, noise {label}: coverage {r.coverage:.3f}, median width {r.width:.3f}")

    print(f"\n4. power: P(fail) of the seed-aware rule at tau = {tau}, {E} simulated comparisons each "
          f"(one draw: 8 baseline seeds; three draws: the same 8 over draws 0, 1, 2)")
    print("student  design                       noise  P(fail | Delta = tau)  P(fail | 1.5 tau)  P(fail | 0.5 tau)")
    for student in M:
        designs = [(f"{sc} seeds, one draw", sc, 1, 0.0) for sc in (1, 3, 5)] + [
            ("3 seeds over 3 draws, SD .02", 3, 3, 0.02), ("6 seeds over 3 draws, SD .02", 6, 3, 0.02)]
        for name, sc, nd, sd in designs:
            for label in ("1x", "4x"):
                run, inter = NOISE[label]
                mm = M[student]._replace(sd_draw=sd, draw_scale_sd=0.25 if nd > 1 else 0.0,
                                         draw_problem_sd=0.3 if nd > 1 else 0.0)
                p = [cal.rates(np.random.default_rng([sc, nd, int(10 * run), int(100 * f)]), mm, tau=tau,
                               delta=f * tau, n_exp=E, seeds_cand=sc, seeds_base=BASE_SEEDS, n_boot=B, n_draws=nd,
                               cand_run=run, cand_interaction=inter).fail for f in (1.0, 1.5, 0.5)]
                print(f"{student:8s} {name:28s} {label:4s}  {p[0]:10.3f}             {p[1]:10.3f}        {p[2]:8.3f}")


if __name__ == "__main__":
    main()
