"""Verdicts, budget, admission record and the RL contrast, from the runs' Parquet files alone."""
from pathlib import Path

import numpy as np
import pandas as pd

from opd import backends, dag, derived, scripts, stats, store
from opd.rows import Row
from opd.spec import Infra, RLCollapse


def accuracy_change(per_seed: pd.Series, me, ref, n_draws: int) -> tuple[float, float]:
    """A row's final held-out accuracy change against its reference, in points, and its standard error: with one
    base-model draw, the difference of the two seed means and the SE from both rows' seed-to-seed variances (NaN
    with one seed on a side); with several, paired by draw (run seed s on draw s % n_draws): the mean over the
    draws both ran of the draw's difference, and the SE from those differences' spread (NaN with one draw).
    per_seed: final accuracy by (student, config, seed)."""
    a, b = per_seed.loc[me], per_seed.loc[ref]
    if n_draws <= 1:
        se = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        return 100 * float(a.mean() - b.mean()), 100 * float(se)
    da = a.groupby(stats.draw_of(a.index.to_numpy(), n_draws)).mean()
    db = b.groupby(stats.draw_of(b.index.to_numpy(), n_draws)).mean()
    d = (da - db).dropna()
    return 100 * float(d.mean()), 100 * float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")


def rl_table(rows: pd.DataFrame, steps: pd.DataFrame, heldout: pd.DataFrame, verdicts: pd.DataFrame,
             collapse: dict, n_draws: int = 1) -> pd.DataFrame:
    """Each RL run against the same algorithm on the standard engine, next to OPD under that engine, with
    the paper's collapse rule (stats.rl_collapse, thresholds `collapse` fixed in config before the runs):
    held-out accuracy (its change paired by base-model draw: accuracy_change), the policy's held-out entropy
    and mean response length at the final evaluation, each against the reference run. The training-step
    entropy (last / first step) is shown beside."""
    R = [Row.of(r) for r in rows.to_dict("records")]
    acc = heldout.groupby(["student", "config", "step"])["correct"].mean().reset_index()
    fin = stats.final_heldout(heldout)
    final = fin.groupby(["student", "config"])["correct"].mean()
    per_seed = fin.groupby(["student", "config", "seed"])["correct"].mean()  # final accuracy per run
    n_seeds = per_seed.groupby(["student", "config"]).size()
    held_len = fin.groupby(["student", "config"])["n_tokens"].mean()  # tokens of a problem's responses, summed
    held_ent = (fin.assign(e=fin["entropy"] * fin["n_tokens"]).groupby(["student", "config"])["e"].sum(min_count=1)
                / fin.groupby(["student", "config"])["n_tokens"].sum()) if "entropy" in fin else None
    ent = steps.groupby(["student", "config"])["entropy"].agg(["first", "last"])
    D = stats.run_mismatch(steps).set_index(["student", "config"])["D"]
    out = []
    for rr in [x for x in R if x.algorithm != "opd"]:
        r = rr.resolved()
        for student in sorted(heldout.loc[heldout["config"] == r["name"], "student"].unique()):
            ran = set(heldout.loc[heldout["student"] == student, "config"])
            ref_name = next((x.name for x in R if x.name in ran and x.algorithm == rr.algorithm and x.variant == "none"
                             and x.is_standard_engine), None)
            opd_name = next((x.name for x in R if x.name in ran and x.is_plain_opd and x.engine_key == rr.engine_key), None)
            v = verdicts.set_index(["student", "config"])
            a0 = acc[(acc["config"] == r["name"]) & (acc["student"] == student)].sort_values("step")["correct"].iloc[0]
            me, ref = (student, r["name"]), (student, ref_name)

            def vs_ref(x):
                return float(x[me] / x[ref]) if ref_name and x is not None else float("nan")
            change, change_se = accuracy_change(per_seed, me, ref, n_draws) if ref_name else (np.nan, np.nan)
            out.append({
                "student": student, "config": r["name"], "algorithm": r["algorithm"], "variant": r["variant"],
                "reference": ref_name, "opd_config": opd_name, "D": D[me],
                "accuracy_initial": 100 * a0, "accuracy_final": 100 * final[me],
                "accuracy_change": change, "accuracy_change_se": change_se, "n_seeds": int(n_seeds[me]),
                "entropy_ratio": vs_ref(held_ent), "length_ratio": vs_ref(held_len),
                "train_entropy_ratio": ent.loc[me, "last"] / ent.loc[me, "first"],
                "opd_delta": v["delta"].get((student, opd_name), float("nan")) if opd_name else float("nan"),
                "opd_verdict": v["verdict"].get((student, opd_name), None) if opd_name else None,
                "opd_verdict_seeds": v["verdict_seeds"].get((student, opd_name), None) if opd_name else None,
            })
    cols = ["student", "config", "algorithm", "variant", "reference", "opd_config", "D", "accuracy_initial",
            "accuracy_final", "accuracy_change", "accuracy_change_se", "n_seeds", "entropy_ratio", "length_ratio", "train_entropy_ratio", "opd_delta",
            "opd_verdict", "opd_verdict_seeds"]
    t = stats.rl_collapse(pd.DataFrame(out, columns=cols), **collapse)
    return t.assign(**{k: v for k, v in collapse.items()})


def staleness_lr(rows: pd.DataFrame, verdicts: pd.DataFrame, student: str, train_lr: float) -> pd.DataFrame:
    """Staleness-only OPD rows of one student (no numerics, no noise), with their learning rate: Delta
    against each row's reference (the same lr at k = 0), D, and both rules' intervals and verdicts."""
    r = rows[[Row.of(x).is_plain_opd and Row.of(x).has_standard_numerics for x in rows.to_dict("records")]]
    r = r.assign(lr=r["lr"].astype(float).fillna(train_lr), k=r["staleness"].astype(int))[["name", "lr", "k"]]
    v = verdicts[verdicts["student"] == student]
    cols = ["config", "reference", "D", "delta", "ci_lo", "ci_hi", "ci_lo_seeds", "ci_hi_seeds", "verdict",
            "verdict_seeds", "n_runs"]
    t = r.merge(v[cols], left_on="name", right_on="config").drop(columns="name")
    # k = 0 at each lr is what that lr's stale rows are measured against: Delta = 0 by definition
    ref = t["k"] == 0
    t.loc[ref, ["delta", "ci_lo", "ci_hi", "ci_lo_seeds", "ci_hi_seeds"]] = 0.0
    t.loc[ref, ["verdict", "verdict_seeds"]] = "pass"
    t.loc[ref, "reference"] = t.loc[ref, "config"]
    return t.sort_values(["lr", "k"], ignore_index=True)


def time_to_kl(held: pd.DataFrame, st: pd.DataFrame, rows: list[Row], baseline: str, n_draws: int = 1) -> pd.DataFrame:
    """Paper Table 11: steps and wall seconds to reach the baseline's final held-out KL, and to 90% of its
    improvement, for every budget row (linear interpolation between evaluations), and the speed-up in
    wall seconds against the baseline. Each row is measured against the baseline's runs on the base-model
    draws it ran (run seed s on draw s % n_draws): a row run on one base model alone meets that base model's
    targets. A speed-up whose row reaches the target at 0 s is NaN."""
    held = held[held["config"].isin([r.name for r in rows if r.in_budget])]
    held = held.assign(draw=stats.draw_of(held["seed"].to_numpy(), n_draws))
    st = st.assign(draw=stats.draw_of(st["seed"].to_numpy(), n_draws))
    out_rows = []

    def curve(k, s_, draws):
        """A config's mean held-out KL per evaluation step on `draws`, with the wall seconds at each step (the
        sum of the mean step_s of the steps before it)."""
        c = k[k["draw"].isin(draws)].groupby("step", as_index=False)["kl"].mean().sort_values("step")
        secs = s_[s_["draw"].isin(draws)].groupby("step")["step_s"].mean().cumsum()
        secs = secs.reindex(range(int(c["step"].max()) + 1)).ffill()
        return c, [0.0 if n == 0 else float(secs.iloc[n - 1]) for n in c["step"]]

    for student, k in held.groupby("student"):
        s_ = st[st["student"] == student]
        for cfg, c in k.groupby("config"):
            draws = sorted(c["draw"].unique())
            base, base_wall = curve(k[k["config"] == baseline], s_[s_["config"] == baseline], draws)
            mine, wall = curve(c, s_[s_["config"] == cfg], draws)
            final, start = base["kl"].iloc[-1], base["kl"].iloc[0]
            res = {"student": student, "config": cfg}
            for label, target in (("final", final), ("90%", start - 0.9 * (start - final))):
                res[f"steps to {label}"] = stats.time_to_target(mine.assign(x=mine["step"]), target)
                res[f"s to {label}"] = stats.time_to_target(mine.assign(x=wall), target)
                t0 = stats.time_to_target(base.assign(x=base_wall), target)
                res[f"speed-up to {label}"] = t0 / res[f"s to {label}"] if res[f"s to {label}"] > 0 else float("nan")
            out_rows.append(res)
    cols = ["student", "config"] + [f"{q} to {label}" for label in ("final", "90%") for q in ("steps", "s")] + \
        ["speed-up to final", "speed-up to 90%"]
    return pd.DataFrame(out_rows)[cols].sort_values(["student", "config"])


def infra(st: pd.DataFrame, baseline: str, window, peak_flops, flops_per_token: dict) -> pd.DataFrame:
    """poor-rl's infra columns per configuration: steps, median step seconds, throughput over a fixed
    window of steps (None: every step) and its ratio to the baseline, rollout wait, an MFU estimate (training
    FLOPs only; none without peak_flops) and the first step's p90 sequence log-ratio (the mean over the row's
    runs)."""
    lo, hi = window or (0, float("inf"))
    w = st[(st["step"] >= lo) & (st["step"] < hi)]
    if w.empty:
        raise ValueError(f"infra.window [{lo}, {hi}) holds no training step (steps run: {int(st['step'].min())}-"
                         f"{int(st['step'].max())}); set infra.window in config.yaml within them")
    g = w.groupby(["student", "config"]).agg(
        steps=("step", "nunique"), median_step_s=("step_s", "median"), tokens=("trained_tokens", "sum"),
        seconds=("step_s", "sum"), wait=("wait_s", "sum")).reset_index()
    g["tokens/s"] = g["tokens"] / g["seconds"]
    base = g[g["config"] == baseline].set_index("student")["tokens/s"]
    g["ratio"] = g["tokens/s"] / g["student"].map(base)
    g["rollout wait %"] = 100 * g["wait"] / g["seconds"]
    g["MFU % (est.)"] = 100 * g["tokens/s"] * g["student"].map(flops_per_token) / peak_flops if peak_flops else float("nan")
    # the first step of each of the row's runs, averaged (not one arbitrary run's: a sort by step alone leaves the
    # order of a step's runs to the CPU's sort kernel)
    at_first = st[st["step"] == st.groupby(["student", "config"])["step"].transform("min")]
    first = at_first.groupby(["student", "config"])["seq_logratio_p90"].mean()
    g = g.merge(first.rename("first-step diff").reset_index(), on=["student", "config"])
    return g[["student", "config", "steps", "median_step_s", "tokens/s", "ratio", "rollout wait %", "MFU % (est.)",
              "first-step diff"]].sort_values(["student", "config"])


def draws_table(heldout: pd.DataFrame, steps: pd.DataFrame, params, references: dict) -> pd.DataFrame:
    """Every OPD comparison on each base-model draw alone (stats.draw_verdicts: Delta, both intervals and both
    verdicts against the reference's runs on that draw), with the draw's D (mean d_n of its runs) and the
    student's initial held-out KL on it (the baseline's step-0 evaluation, mean over its runs on the draw)."""
    b = params.bootstrap
    d = stats.draw_verdicts(heldout, params.baseline, tau=params.tau, n_draws=params.base_draws,
                            n_boot=b["resamples"], ci=b["level"], seed=b["seed"], references=references,
                            one_seed_ratio=params.one_seed_ratio)
    per_run = steps.groupby(["student", "config", "seed"], as_index=False)["d_n"].mean()
    per_run["draw"] = stats.draw_of(per_run["seed"], params.base_draws)
    D = per_run.groupby(["student", "config", "draw"], as_index=False).agg(D=("d_n", "mean"))
    base = heldout[(heldout["config"] == params.baseline) & (heldout["step"] == 0)]
    k0 = base.groupby(["student", "seed"], as_index=False)["kl"].mean()
    k0["draw"] = stats.draw_of(k0["seed"], params.base_draws)
    k0 = k0.groupby(["student", "draw"], as_index=False).agg(initial_kl=("kl", "mean"))
    return d.merge(D, on=["student", "config", "draw"], how="left").merge(k0, on=["student", "draw"], how="left")


def main(inp, out, params):
    steps = pd.concat([store.read_table(p) for p in inp.steps], ignore_index=True)
    heldout = pd.concat([store.read_table(p) for p in inp.heldout], ignore_index=True)
    # every file records what it was computed from (opd.dag.analysis_inputs): the DAG remakes a stale one, `verdict`
    # refuses it
    runs = [Path(p).parent for p in inp.steps]
    full = dag.analysis_inputs(params.tau, params.settings, params.rows,
                               str(runs[0].parent.parent) if runs else ".", [r.name for r in runs], inp.admission)
    record = dag.record_reference(full)  # every file but verdicts.parquet, which carries the record in full
    store.write_table(steps, out.steps, store.STEPS, record)
    store.write_table(heldout, out.heldout, store.HELDOUT, record)
    rows = pd.DataFrame(params.rows)
    rows["bf16_layers"] = rows["bf16_layers"].map(list)
    store.write_table(rows, out.rows, inputs=record)

    b = params.bootstrap
    R = [Row.of(r) for r in params.rows]
    opd = [r.name for r in R if r.algorithm == "opd"]
    references = {r.name: r.reference for r in R if r.reference}
    v = stats.verdicts(heldout[heldout["config"].isin(opd)], steps[steps["config"].isin(opd)], params.baseline,
                       tau=params.tau, n_boot=b["resamples"], ci=b["level"], seed=b["seed"], references=references,
                       one_seed_ratio=params.one_seed_ratio, n_draws=params.base_draws)
    derived.write_table(v.assign(tau=params.tau), out.verdicts, inputs=full)  # with the tau its verdicts are at
    derived.write_table(draws_table(heldout[heldout["config"].isin(opd)], steps, params, references), out.draws,
                        inputs=record)
    # the budget: plain OPD engines measured against the baseline (not ablations with their own reference)
    engines = [r.name for r in R if r.in_budget]
    budget = stats.budget_table(v[v["config"].isin(engines)], params.taus)
    derived.write_table(budget, out.budget, inputs=record)
    # what decides: the rank agreement of D with Delta over the OPD sources (the budget rows but the baseline), and
    # the budget's edge in D, over the standard engine's D and over the initial held-out KL
    sources = [r.name for r in R if r.in_budget and not r.baseline]
    derived.write_table(stats.rank_table(v, sources, n_boot=b["resamples"], ci=b["level"], seed=b["seed"]),
                        out.decides, inputs=record)
    edge = stats.budget_edge(budget, v, heldout, params.baseline, params.tau)
    near = [stats.edge_counts(v[(v["student"] == e.student) & v["config"].isin(sources)], e.edge, params.tau)
            for e in edge.itertuples()]
    derived.write_table(edge.assign(n_pass_near=[p for p, _ in near], n_fail_near=[f for _, f in near]), out.edge,
                        inputs=record)
    # one Delta = tau edge per mechanism (a dial: noise, staleness, a scaled recipe) and student, with its interval
    # from joint replicates under both rules, and the ratio of every two mechanisms' edges
    edges = stats.edge_tables(v, heldout, R, params.baseline, tau=params.tau, lr=params.train_lr,
                              n_draws=params.base_draws, n_boot=b["resamples"], ci=b["level"], seed=b["seed"],
                              one_seed_ratio=params.one_seed_ratio)
    derived.write_table(edges.edges, out.edges, inputs=record)
    derived.write_table(edges.ratios, out.edge_ratios, inputs=record)
    pairs, noise = stats.seed_noise(heldout, params.baseline, seed=b["seed"], n_draws=params.base_draws)
    typical = v[v["config"] != params.baseline].groupby("student")["n_runs"].median()
    noise["n_seeds_row"] = noise["student"].map(typical).fillna(1).round().astype(int)
    noise["sd_used"] = noise["sd_run"] * np.sqrt(1 / noise["n_seeds_row"] + 1 / noise["n_seeds"])
    noise["tau"] = params.tau
    # the draw x configuration interaction (log scale), pooled over each student's comparisons on two draws or more:
    # what the base model alone does to a configuration's Delta (NaN with one draw)
    opd_rows = heldout[heldout["config"].isin(opd)]
    pooled = stats.pooled_draw_variances(stats.final_pairs(opd_rows, params.baseline, references), params.base_draws) \
        if params.base_draws > 1 else {}
    noise["sd_draw_config"] = noise["student"].map({s: np.sqrt(p.var) for s, p in pooled.items()}).astype(float)
    noise["draw_config_df"] = noise["student"].map({s: p.df for s, p in pooled.items()}).astype(float)
    derived.write_table(pairs, out.null_deltas, inputs=record)
    derived.write_table(noise, out.noise, inputs=record)
    derived.write_table(staleness_lr(rows, v, params.primary, params.train_lr), out.staleness_lr,
                        inputs=record)

    a = params.admission
    seqs = pd.concat([store.read_table(p) for p in inp.admission], ignore_index=True)
    est = stats.offline_estimates(seqs, ["student", "config"], n_boot=b["resamples"], seed=b["seed"])
    admission = stats.admission_record(est, v, alpha=a["alpha"], L=a["L"], baselines=[params.baseline])
    derived.write_table(admission, out.admission, inputs=record)
    derived.write_json(stats.admission_summary(admission), out.admission_summary)
    collapse = RLCollapse.of(params.rl_collapse).thresholds()  # config.yaml's, over the defaults
    derived.write_table(rl_table(rows, steps, heldout, v, collapse, params.base_draws), out.rl, inputs=record)
    derived.write_table(time_to_kl(heldout, steps, R, params.baseline, params.base_draws), out.time_to_kl,
                        inputs=record)
    fpt = {s: backends.train_flops_per_token(spec, params.backend) for s, spec in params.students.items()}
    i = Infra.of(params.infra)
    derived.write_table(infra(steps, params.baseline, i.window, i.peak_flops, fpt), out.infra, inputs=record)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
