"""Calibrating a budget for a fraction of the runs, measured on the committed toy (reads results/toy and
config.yaml only; trains nothing; run `snakemake -c 2 --config experiment=toy` first: it builds
results/toy/analysis/heldout.parquet from the committed runs).

Sequential seeds (opd.calibration.SequentialRule): each OPD row starts with one seed, the fewest the
seed-aware rule allows against the baseline's 8, and gets the next seed (0, 1, 2, ... in order) only while
the seed-aware 95% interval of its Delta straddles tau, up to the full design's seeds per row; the baseline
and the reference rows run their full design (every comparison shares them). While a row has one seed its
run-to-run variance is assumed at most one_seed_ratio^2 x the baseline's, one_seed_ratio being the largest
run SD ratio of a row over the baseline measured in the toy (opd.calibration.measure_noise). Printed:
1. the rule and its error rates by simulation at each student's measured noise sizes: the probability that
   the sequential verdict differs from the full design's on the same runs, at true Delta from 0 to 3 tau,
   at the baseline's noise and 4x it (and, on the primary student, with one_seed_ratio = 1);
2. the replay over the committed full-design runs: per row, the seeds the rule would have run, in order,
   its verdict and the full design's seed-aware verdict;
3. the bisected edges committed in results/toy/analysis/bisection.parquet (rule bisection, opd.plan): every value in
   the order tried, and per student the edge found against the grid's (the budget rows no edge made);
4. an estimate on paper of the GPU-hours the same rules would save on the paper experiment;
5. one line per student: `calibration <student>: runs_used=A runs_full=B verdicts_agree=C/D ... edge_factor=E` (runs of the
   OPD rows judged by the rule, the baseline's included; RL rows are not judged by it).
Sequential verdicts are conditional on the stopping rule: a row stopped early because its interval cleared
tau, so the interval it stopped on does not have its nominal 95% coverage unconditionally; the error rates
above are the guarantee, at the noise sizes measured, and they hold only as far as those sizes do.

Run: python benchmarks/calibration.py [--experiments 1000]   (about 2 minutes on 2 cores)"""
import argparse
from pathlib import Path

import numpy as np

from opd import calibration as cal
from opd import config as C
from opd import store
from opd.rows import Row
from opd.spec import results_dir

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = "toy"
NOISY = {"cand_run": 6.0, "cand_interaction": 2.0}  # 4.0x the baseline's run SD at qwen-s's sizes (bootstrap.py)
DELTAS = (0.0, 0.5, 1.0, 1.5, 3.0)  # true Delta in units of tau


def noise_models(noise):
    return {r.student: cal.NoiseModel(int(r.n_problems), float(r.kx_sd_log),
                                      cal.tail_df_for(r.kx_excess_kurtosis, r.kx_sd_log, int(r.n_problems)),
                                      float(r.sd_run), float(r.sd_interaction), float(r.sd_effect_median))
            for r in noise.itertuples()}


def sequential_seeds(exp: dict, heldout, noise, n_exp: int) -> dict:
    """The sequential-seeds part: prints the rule, its simulated error rates and the replay; returns per
    student the fields of its summary line."""
    rows = [Row.of(r) for r in exp["rows"]]
    baseline = next(r.name for r in rows if r.baseline)
    opd = [r.name for r in rows if r.algorithm == "opd"]
    references = {r.name: r.reference for r in rows if r.reference}
    b = exp["bootstrap"]
    ratio = float(noise["run_ratio_max"].max())
    rule = cal.SequentialRule(tau=float(exp["tau"]), max_seeds=len(exp["seeds"]), start_seeds=1,
                              one_seed_ratio=ratio, n_boot=int(b["resamples"]), ci=float(b["level"]),
                              seed=int(b["seed"]))
    base_seeds = len(next(r for r in exp["rows"] if r.get("baseline"))["seeds"])
    rule.validate(base_seeds)
    print(f"sequential seeds: {rule}")
    print(f"  one_seed_ratio {ratio:.2f}: the largest row / baseline run SD ratio measured ("
          + ", ".join(f"{s} {x:.2f}" for s, x in zip(noise["student"], noise["run_ratio_max"])) + ")")

    print(f"\n1. error rates, {n_exp} simulated rows each (1,000 resamples per interval), {base_seeds} baseline seeds:"
          " P(sequential verdict != full design's), P(fail) of each, mean seeds run")
    sim = rule._replace(n_boot=1000)
    models = noise_models(noise)
    primary = "qwen-s" if "qwen-s" in models else next(iter(models))
    cases = [(s, sim, label) for s in models for label in ("1x", "4x")]
    cases += [(primary, sim._replace(one_seed_ratio=1.0), label + ", one_seed_ratio 1") for label in ("1x", "4x")]
    print("student  noise                    Delta/tau  differ  fail(seq)  fail(full)  seeds")
    for student, r, label in cases:
        for f in DELTAS:
            rng = np.random.default_rng([int(10 * f), len(label), len(student)])
            res = cal.sequential_rates(rng, models[student], r, delta=f * rule.tau, seeds_base=base_seeds,
                                       n_exp=n_exp, **(NOISY if label.startswith("4x") else {}))
            print(f"{student:8s} {label:24s} {f:5.1f}     {res.differ:6.3f}  {res.fail_sequential:8.3f}  "
                  f"{res.fail_full:9.3f}  {res.mean_seeds:5.2f}")

    replayed = cal.replay(heldout[heldout["config"].isin(opd)], rule, baseline=baseline, references=references)
    print("\n2. replay over the committed full-design runs (seeds in the order the rule would have run them)")
    cols = ["student", "config", "role", "seeds_run", "delta", "ci_lo", "ci_hi", "verdict", "verdict_full", "agree"]
    print(replayed[cols].to_string(index=False, float_format=lambda x: f"{x:+.3f}"))
    loose = cal.replay(heldout[heldout["config"].isin(opd)], rule._replace(one_seed_ratio=1.0), baseline=baseline,
                       references=references)
    print("   the same replay with one_seed_ratio 1 (a one-seed row as noisy as the baseline: error rates above): "
          + "; ".join(f"{s.student} runs {s.runs_used}/{s.runs_full}, verdicts agree {s.verdicts_agree}/{s.n_rows}"
                      for s in cal.replay_summary(loose)))
    return {s.student: {"runs_used": s.runs_used, "runs_full": s.runs_full,
                        "verdicts_agree": f"{s.verdicts_agree}/{s.n_rows}"} for s in cal.replay_summary(replayed)}


def bisected_edges(exp: dict, heldout, noise, n_exp: int) -> dict:
    """The bisected-edge part: the committed edges (results/toy/analysis/bisection.parquet, rule bisection) against each
    student's grid. Returns per student edge_runs (the runs the bisection used), grid_runs (the runs of the grid's
    budget rows) and edge_factor: the bisected edge's D over the grid's, or its inverse (>= 1); NaN where either
    has no pass or no fail (then there is no edge to compare)."""
    path = ROOT / results_dir(EXPERIMENT) / "analysis/bisection.parquet"
    if not path.exists():
        print(f"\n3. bisected edges: none committed ({path.relative_to(ROOT)} is missing)")
        return {}
    t = store.read_table(path)
    print("\n3. the bisected edges (every value in the order tried; D and the bracket after it; seed-aware rule)")
    cols = ["student", "order", "value", "n_seeds", "verdict", "delta", "D", "D_lo_after", "D_hi_after"]
    print(t[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    out = {}
    for student, s in t.groupby("student", sort=False):
        last = s.sort_values("order").iloc[-1]
        edge = float(np.sqrt(last["D_lo_after"] * last["D_hi_after"]))
        ratio = edge / float(last["grid_edge"])
        factor = max(ratio, 1 / ratio) if np.isfinite(ratio) and ratio > 0 else float("nan")
        print(f"   {student}: bisected edge D {edge:.4g} [{last['D_lo_after']:.4g}, {last['D_hi_after']:.4g}] "
              f"(x{last['D_hi_after'] / last['D_lo_after']:.2f}, stopped: {last['stopped']}) from {int(s['n_seeds'].sum())} "
              f"runs of {len(s)} values; grid [{last['grid_lo']:.4g}, {last['grid_hi']:.4g}] from "
              f"{int(last['grid_rows'])} rows, {int(last['grid_runs'])} runs")
        out[student] = {"edge_runs": int(s["n_seeds"].sum()), "grid_runs": int(last["grid_runs"]),
                        "edge_factor": f"{factor:.2f}"}
    return out


# The paper's cost of one run (its 7B runs: 200 steps, 5.5-6 h on 8 GPUs), on paper: an estimate, not a measurement.
PAPER_RUN_GPU_H = 5.75 * 8


def paper_estimate(exp: dict, fields: dict) -> None:
    """GPU-hours the same rules would save on the paper experiment, estimated from its matrix (config.yaml's
    `paper` experiment), the seed-aware full design (the toy's seeds per row and baseline) and the toy's measured
    fraction of runs used, at the paper's cost per run."""
    paper = C.load()["experiments"]["paper"]
    rows = [Row.of(r) for r in paper["rows"]]
    judged = [r for r in rows if r.algorithm == "opd" and not r.baseline]
    per_row, base = len(exp["seeds"]), len(next(r for r in exp["rows"] if r.get("baseline"))["seeds"])
    full = len(judged) * per_row + base
    used = [f["runs_used"] / f["runs_full"] for f in fields.values() if "runs_used" in f]
    share = float(np.median(used)) if used else float("nan")
    print(f"\n4. the paper experiment, on paper (an ESTIMATE: the paper's {PAPER_RUN_GPU_H:.0f} GPU-h per 7B run, the "
          f"toy's median share of runs used {share:.2f}): the seed-aware full design is {len(judged)} rows x "
          f"{per_row} seeds + {base} baseline seeds = {full} runs, {full * PAPER_RUN_GPU_H:,.0f} GPU-h; sequential "
          f"seeds ~{share * full:.0f} runs, {share * full * PAPER_RUN_GPU_H:,.0f} GPU-h (saving "
          f"~{(1 - share) * full * PAPER_RUN_GPU_H:,.0f} GPU-h per student)")
    edge = [f["edge_runs"] for f in fields.values() if "edge_runs" in f]
    if edge and exp.get("edges"):
        x = exp["edges"][0]
        lo, hi = x["bracket"]
        factor = x.get("factor", 1.5)
        # a grid as fine as the bisection's stopping factor: D grows about as sigma^2 (the toy's noise rows), so a
        # factor f in D is sqrt(f) in sigma
        n_grid = int(np.ceil(np.log(hi / lo) / np.log(np.sqrt(factor)))) + 1
        e_runs = float(np.median(edge))
        print(f"   a bisected noise edge used a median {e_runs:.0f} runs per toy student: at the paper's cost "
              f"{e_runs * PAPER_RUN_GPU_H:,.0f} GPU-h per student for an edge within {factor}x in D, where a grid "
              f"that fine over sigma in [{lo}, {hi}] ({n_grid} values, {np.sqrt(factor):.3f}x apart in sigma) x "
              f"{per_row} seeds would be {n_grid * per_row} runs, {n_grid * per_row * PAPER_RUN_GPU_H:,.0f} GPU-h")


# each part: (experiment, committed held-out KL, measured noise, simulated rows) -> {student: {field: value}}
PARTS = [sequential_seeds, bisected_edges]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experiments", type=int, default=1000, help="simulated rows per error-rate case")
    args = ap.parse_args()
    exp = C.load()["experiments"][EXPERIMENT]
    heldout = store.read_table(ROOT / results_dir(EXPERIMENT) / "analysis/heldout.parquet")
    baseline = next(r["name"] for r in exp["rows"] if r.get("baseline"))
    # the noise sizes of the fixed design (the rows config.yaml writes), which the rule's replay and its
    # pre-registered one_seed_ratio are about; the bisected edges' rows are checked against that ratio below
    configured = {r["name"] for r in exp["rows"]}
    noise = cal.measure_noise(heldout[heldout["config"].isin(configured)], baseline, n_draws=int(exp.get("base_draws", 1)))
    edges = cal.measure_noise(heldout[heldout["config"].isin(configured) | heldout["config"].str.startswith(
        tuple(f"{x['name']}-" for x in exp.get("edges", ())) or ("\0",))], baseline, n_draws=int(exp.get("base_draws", 1)))
    stated = exp.get("sequential", {}).get("one_seed_ratio")
    if stated is not None:
        print(f"the toy's pre-registered one_seed_ratio {stated}; the largest row / baseline run SD ratio, fixed "
              f"design: " + ", ".join(f"{s} {x:.2f}" for s, x in zip(noise["student"], noise["run_ratio_max"]))
              + "; with the bisected edges' rows: "
              + ", ".join(f"{s} {x:.2f}" for s, x in zip(edges["student"], edges["run_ratio_max"])) + "\n")
    fields = {}
    for part in PARTS:
        for student, f in part(exp, heldout, noise, args.experiments).items():
            fields.setdefault(student, {}).update(f)
    paper_estimate(exp, fields)
    print()
    for student, f in fields.items():
        print(f"calibration {student}: " + " ".join(f"{k}={v}" for k, v in f.items()))


if __name__ == "__main__":
    main()
