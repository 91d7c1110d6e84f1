"""The toy paper's findings, every number computed here from the analysis files: an opening of plain sentences (what
the toy found about each of the paper's claims, at most OPENING_WORDS words), the claims scorecard as a table
(opd.scorecard's Claims), the edges per mechanism and the FP8 KV cache's layers as tables, then the findings as
bullets of at most BULLET_CHARS characters that link the per-row tables (figures/<experiment>/tables/) instead of
enumerating rows. The sentence templates are the module-level strings below: one place to edit the wording.
readme_paragraph gives the three sentences README.md's generated block holds (opd.docs)."""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from opd import mechanism, report, stats, store
from opd import scorecard as S
from opd.scorecard import MECH_SPACES, g, pct, signed, span, two_digit_span, two_digits, variant_pairs
from opd.spec import RLCollapse

OPENING_WORDS, FILE_WORDS, BULLET_CHARS = 300, 2500, 600  # the limits tests/test_findings.py checks
TABLES = "tables/{}.md"  # a per-row table beside findings.md (figures/<experiment>/tables/)

NOISE = ("- **Instrument noise** ([tables/noise.md](tables/noise.md)). One seed of the standard engine against another: "
         "the SD of Δ is {single} {where}, {used} at the seed counts compared, where the paper's problem-only "
         "interval gives that comparison an SE of {se}. τ = {tau:.0%}.")
DRAWS = ("- **Base-model draws.** {n_draws} base models per student, each comparison paired on them. The base model "
         "moves the standard engine's final held-out KL by an SD of {sd_draw} (log) between draws, against {sd_run} "
         "between OPD seeds; a configuration's Δ moves with the draw by an SD of {sd_dc}{dc_floor}. {per_draw}")
DRAWS_SPLIT = "Judged on each draw alone, {n_same} of {n} comparisons keep their verdict on every draw{differ}."
DRAWS_NO_SPLIT = ("No comparison has the two seeds per draw that a seed-aware verdict on one draw alone needs (a row's "
                  "seeds are one per draw): the draw's share is the SD above, not a count of verdicts.")
CLOSING = ("- **OPD works.** On the standard engine OPD closes {closed} of each student's held-out KL to its teacher "
           "(mean of {n} seeds): {items}.")
BUDGETS = ("- **B_emp** ([tables/budget.md](tables/budget.md), [tables/runs.md](tables/runs.md)). At τ = {tau:.0%} it "
           "is inconsistent (a fail below a pass) on {n_seeds} of {n} students under the seed-aware rule and {n_paper} "
           "under the paper's; {n_fail} configurations fail the seed-aware rule{disagree}.")
STALENESS = ("- **Staleness** ({student}, Δ against k = 0 at the same lr, seed-aware rule; figure `staleness_lr`): "
             "{items}.")
ADMISSION = ("- **Admission check** (α = {alpha}, L = {L}, {n_prompts} prompts): {n_agree} of {n_decisions} "
             "candidate engines' decisions agree with training; admitting every candidate would agree on "
             "{n_admit_all_agree} of {n_decisions}. D̂'s SE over prompts is {se_relative_min:.0%} to "
             "{se_relative_max:.0%} of D̂ (D̂ ≥ {ratio_floor}): a third of D̂ needs up to {prompts_for_se_third:.0f} "
             "prompts. In-training D / offline D̂ reaches {alpha_implied:.2f}.")
ADMISSION_NONE = ("- **Admission check** (α = {alpha}, L = {L}): no candidate engine in this matrix has a training "
                  "outcome to compare with (the standard engine is not counted).")
RL = "- **RL under the same engines** ({student}; [tables/rl.md](tables/rl.md)): {items}."
RL_ITEM = ("{name} collapses on {n_collapsed} of {engines}, {n_opd_pass} of which OPD passes; accuracy "
           "{worst:+.1f} points at worst")
RL_SPREAD = ("- **RL collapse thresholds against the seed spread** ({student}, the standard engine's {n} OPD seeds at the "
             "final held-out evaluation): mean held-out response length varies by {len_cv:.2%} across seeds "
             "(SD/mean), so the length factor {len_f:g}x is {len_sds:.0f} such SDs; {entropy}.")
RL_SPREAD_ENTROPY = ("held-out entropy varies by {ent_cv:.1%}, so the entropy factor {ent_f:g}x is {ent_sds:.0f} such "
                     "SDs")
RL_SPREAD_NO_ENTROPY = ("held-out entropy is not in these runs (an optional column, logged since the rule), so its "
                        "spread is not measured here")
REDRAW_PAIRS = ("- **Redrawn against fixed noise, row by row.** Of {n} pairs of rows with the same σ on the same "
                "student, the redrawn one has the smaller Δ in {n_smaller}, {n_more_d} of them at more D; their "
                "seed-aware intervals are apart in {n_apart}.")
DISTANCE = ("- **Distance from the teacher (a discriminating control).** {near} is {far} trained {steps} more SFT "
            "steps on the same trajectory: initial held-out KL {kl_near:.4f} against {kl_far:.4f}. On the {n} engines "
            "both ran Δ is larger on the nearer student on {n_larger}, beyond the seeds (intervals apart) on "
            "{n_apart}; the verdict changes on {n_changed}{changed}.")
GUARD = ("- **Mismatch guard** ({student}, d_max = {d_max}, window {window}, cooldown {cooldown} doubling on "
         "re-trigger; [tables/guard.md](tables/guard.md)): {n_pass} of {rows} pass (Δ {deltas}), their D "
         "at {ratios}x d_max; {n_twin_fail} of their unguarded twins fail. {cheap} of steps trained on the cheap "
         "engine's batches, {acts} activations per run{rejected}. Replayed over the standard engine's {runs} runs the guards fire {alarms} times.")
RULE_NAMES = stats.RULE_NAMES
# The mechanism group (tiny backend: the gradient probes, opd/backends/tiny/probes.py; numbers from
# analysis/probes.parquet and probes_prefix.parquet). The paper's own numbers come from opd.scorecard, typed once there.
MECH_BOUND = ("- **Mechanism: the bias bound** (gradient probes of {student}'s first-seed runs): ‖g_bias‖₁ ≤ "
              "2‖δ‖₁‖A‖∞ {holds} on all {n_prefixes:,} prefixes checked ({per_set:,.0f} per probed set on average); "
              "the largest ‖g_bias‖₁/bound is {opd_max:.2f} for OPD and {rl_max:.2f} for REINFORCE. Of the "
              "{n_sampled:,} sampled prefixes plotted in the mechanism figure's panel (c), the largest ‖g_bias‖₂/bound "
              "is {sampled_max:.2f}.")
MECH_BIAS = ("- **Mechanism: OPD's bias against REINFORCE's** (end of training over step 0, noise rows × probe "
             "seeds): OPD's mean per-prefix bias is at {opd}x of its step-0 size, REINFORCE's Rδ at {rl}x; per "
             "unit of mismatch (mean ‖δ‖₁, itself at {delta}x) OPD's is at {opd_per}x and REINFORCE's at {rl_per}x "
             "(the paper: OPD's bias vanishes as A → 0, REINFORCE's does not).")
MECH_SIZES = ("- **Mechanism: the sizes of T and S** (σ = {lo:g}–{hi:g}, every probed step and probe seed): {items}. "
              "The paper's T/U {paper_T} and S/U {paper_S}.")
MECH_SIZES_ITEM = "{space}: T > S at {n_gt} of {n} points, T/U {T}, S/U {S}"
MECH_FIXED = ("- **Mechanism: error/update on fixed prefixes over training** (end over step 0): for σ ≥ {lo:g} the "
              "error shrinks more than the update in {n_shrink} of {n} cases (noise row × probe seed × space); at "
              "σ = {hi:g}, logit space, error/update is {r0_hi} at step 0 and {r1_hi} at the end. The error ends at "
              "{err}x of its step-0 size (the paper's at {paper_err}x, its error/update rising {paper_ratio}). At σ = "
              "{small:g}, logit space, error/update goes {r0_small} → {r1_small} (rises in {n_rise} of {n_small} probe "
              "seeds).")
MECH_STALE = ("- **Mechanism: staleness** (k = {k}, error/update on fixed prefixes, logit space, probe seed {seed}): "
              "{items}; the standard engine's at step {last}: {base}.")

MECH_COST = ("- **Mechanism: cost.** Probing the {n_runs} runs took {cpu:.0f} CPU s ({per_run:.0f} s per run), inside "
             "each probed run's own training job: about {cpu_cores:.0f} s of a from-scratch regeneration on {cores} "
             "cores (benchmarks/probes.py).")
MECH_CORES = 2  # the cores of the README's reference machine (its set-up: 2 cores)


def rl_spread(heldout: pd.DataFrame, baseline: str, student: str, thresholds: dict) -> str | None:
    """The seed-to-seed spread (SD/mean) of the held-out quantities the RL collapse rule's factors compare (mean
    response length, and the policy's per-token entropy, token-weighted, where the runs logged it), over the
    standard engine's seeds at their final evaluation, against the factors (how many such SDs each factor is)."""
    h = heldout[(heldout["config"] == baseline) & (heldout["student"] == student)]
    if h["seed"].nunique() < 2:
        return None
    fin = h[h["step"] == h["step"].max()]
    cv = lambda x: float(x.std(ddof=1) / x.mean())  # noqa: E731
    sds = lambda factor, c: (factor - 1) / c if c > 0 else float("inf")  # noqa: E731
    per = fin.groupby("seed").agg(tok=("n_tokens", "sum"), length=("n_tokens", "mean"))
    f = thresholds
    entropy = RL_SPREAD_NO_ENTROPY
    if "entropy" in fin and fin["entropy"].notna().all():
        ent = fin.assign(e=fin["entropy"] * fin["n_tokens"]).groupby("seed")["e"].sum() / per["tok"]
        entropy = RL_SPREAD_ENTROPY.format(ent_cv=cv(ent), ent_f=f["entropy_factor"],
                                           ent_sds=sds(f["entropy_factor"], cv(ent)))
    len_cv = cv(per["length"])
    return RL_SPREAD.format(student=student, n=len(per), len_cv=len_cv, len_f=f["length_factor"],
                            len_sds=sds(f["length_factor"], len_cv), entropy=entropy)


def verdict_words(v: pd.Series) -> str:
    """Verdicts in words: "all pass", "all fail", or which fail."""
    v = list(v)
    if all(x == "pass" for x in v):
        return "all pass"
    if all(x == "fail" for x in v):
        return "all fail"
    return f"{sum(x == 'fail' for x in v)} of {len(v)} fail"


def rl_sentence(rl: pd.DataFrame, student: str) -> str | None:
    """Per RL algorithm on one student: how many of its engines it collapses on, how many of those OPD passes, and its
    worst accuracy change (the per-row record: tables/rl.md)."""
    t = rl[(rl["student"] == student) & (rl["reference"] != rl["config"])]
    if t.empty:
        return None
    items = [RL_ITEM.format(name=S.ALGORITHM_NAMES.get(alg, alg), engines=S.plural(len(x), "engine"),
                            n_collapsed=int(x["collapsed"].sum()),
                            n_opd_pass=int((x["collapsed"] & (x["opd_verdict_seeds"] == "pass")).sum()),
                            worst=x["accuracy_change"].min())
             for alg, x in t.groupby("algorithm", sort=False)]
    return RL.format(student=student, items="; ".join(items))


def edges_table(edges: pd.DataFrame) -> list[str]:
    """Each student's Delta = tau edge per mechanism (seed-aware rule) in D, over D(0) and as a share of the initial
    held-out KL."""
    out = ["| student | mechanism | edge D, nats/token [95%] | × D(0) | share of initial KL |", "|---|---|---|---|---|"]
    for e in S.seeds_rule(edges).sort_values(["student", "mechanism"],
                                             key=lambda c: c.map(S.mechanism_order) if c.name == "mechanism" else c
                                             ).itertuples():
        if np.isinf(e.D_edge) or e.D_edge == 0:  # beyond every row: its rows' largest (smallest) D, the bound apart
            d0, kl = S.beyond(e, e.d0, side=False), S.beyond(e, e.kl0, pct, side=False)
        else:
            d0 = f"{g(e.edge_over_d0)} [{g(e.edge_over_d0_lo)}, {g(e.edge_over_d0_hi)}]"
            kl = f"{pct(e.edge_over_kl0)} [{pct(e.edge_over_kl0_lo)}, {pct(e.edge_over_kl0_hi)}]"
        out.append(f"| {e.student} | {S.mechanism_label(e.mechanism)} | {S.edge_cell(e)} | {d0} | {kl} |")
    return out


def guard_sentences(gd: pd.DataFrame) -> list[str]:
    """Per student and guard setting: the guarded rows against the same engines unguarded (analysis/guard.parquet;
    each row's numbers in tables/guard.md)."""
    out = []
    gd = gd[gd["unguarded"].notna()]
    for (student, d_max, window, cooldown), t in gd.groupby(["student", "d_max", "window", "cooldown"]):
        out.append(GUARD.format(student=student, d_max=f"{d_max:g}", window=window, cooldown=cooldown,
                                rows=S.plural(len(t), "guarded row"),
                                n_pass=int((t["verdict_seeds"] == "pass").sum()),
                                deltas=f"{signed(t['delta'].min())} to {signed(t['delta'].max())}",
                                ratios=span(t["D_over_d_max"]),
                                n_twin_fail=int((t["unguarded_verdict_seeds"] == "fail").sum()),
                                cheap=S.pct_span(t["cheap_share"]), acts=span(t["activations"], lambda v: f"{v:.3g}"),
                                rejected=(f", {span(t['rejected'], lambda v: f'{v:.3g}')} batches per run rejected at "
                                          f"the crossing" if t.get("reject", pd.Series(False)).any() else ""),
                                runs=int(t["baseline_runs"].iloc[0]), alarms=int(t["baseline_alarms"].sum())))
    return out


def draws_sentence(draws: pd.DataFrame, noise: pd.DataFrame) -> str | None:
    """What the base-model draws change: the draw SD beside the seed SD, and how many comparisons' seed-aware verdicts
    differ from draw to draw (each named in the analysis's draws.parquet); None with one draw."""
    n_draws = int(draws["draw"].max()) + 1 if len(draws) else 1
    if n_draws < 2:
        return None
    g_ = draws[draws["verdict_seeds"].notna()].groupby(["student", "config"])
    full = [(k, x) for k, x in g_ if x["draw"].nunique() == n_draws]
    split = [k for k, x in full if x["verdict_seeds"].nunique() > 1]
    differ = "" if not split else (f"; {len(split)} change{'s' * (len(split) == 1)} with it "
                                   f"(analysis/draws.parquet names {'it' if len(split) == 1 else 'them'})")
    sp = lambda col: two_digit_span(noise[col].dropna())  # noqa: E731
    return DRAWS.format(n_draws=n_draws, sd_draw=sp("sd_draw"), sd_run=sp("sd_run"),
                        sd_dc=sp("sd_draw_config") if "sd_draw_config" in noise else "–",
                        dc_floor=draw_config_floor(noise.get("sd_draw_config")),
                        per_draw=DRAWS_SPLIT.format(n_same=len(full) - len(split), n=len(full), differ=differ)
                        if full else DRAWS_NO_SPLIT)


def draw_config_floor(sd) -> str:
    """The words a zero draw x configuration SD needs: its estimate is unbiased and floored at 0 when pooled
    (opd.stats.pool_draw_variance), so 0 means the draws' spread of Δ is no larger than their seeds explain."""
    n = 0 if sd is None else int((pd.Series(sd, dtype=float).dropna() == 0).sum())
    return "" if not n else (f" (floored at 0 on {n} student{'s' if n > 1 else ''}: no more spread than the seeds "
                             f"explain)")


def nearer_pairs(students: dict) -> list[tuple[str, str]]:
    """(near, far) pairs of students whose specs differ in student_steps alone, the near one with more: the same
    SFT trajectory stopped later, so the same teacher."""
    out = []
    for a, sa in students.items():
        for b, sb in students.items():
            rest = lambda s: {k: v for k, v in s.items() if k != "student_steps"}  # noqa: E731
            if a != b and rest(sa) == rest(sb) and sa.get("student_steps", 0) > sb.get("student_steps", 0):
                out.append((a, b))
    return out


def distance_sentences(verdicts: pd.DataFrame, heldout: pd.DataFrame, baseline: str, students: dict) -> list[str]:
    """The control students nearer their teacher (nearer_pairs) against their far twin on every engine both ran:
    on how many Delta is larger on the nearer one, beyond the seeds, and where the verdict changes."""
    out = []
    v = verdicts.set_index(["student", "config"])
    h = heldout[(heldout["config"] == baseline)]
    for near, far in nearer_pairs(students):
        shared = sorted({c for s, c in v.index if s == near and c != baseline and (far, c) in v.index})
        if not shared:
            continue
        kl0 = {s: h[(h["student"] == s) & (h["step"] == h["step"].min())].groupby("seed")["kl"].mean().mean()
               for s in (near, far)}
        larger, apart, changed = 0, 0, []
        for c in shared:
            a, b = v.loc[(far, c)], v.loc[(near, c)]
            larger += b.delta > a.delta
            apart += (b.ci_lo_seeds > a.ci_hi_seeds) or (b.ci_hi_seeds < a.ci_lo_seeds)
            if a.verdict_seeds != b.verdict_seeds:
                changed.append(f"{c} {a.verdict_seeds} → {b.verdict_seeds}")
        out.append(DISTANCE.format(near=near, far=far, kl_near=kl0[near], kl_far=kl0[far], n=len(shared),
                                   steps=students[near]["student_steps"] - students[far]["student_steps"],
                                   n_larger=int(larger), n_apart=int(apart), n_changed=len(changed),
                                   changed=f" ({', '.join(changed)})" if changed else ""))
    return out


def redraw_pairs(verdicts: pd.DataFrame, rows: pd.DataFrame) -> str | None:
    """Every redrawn noise row beside the fixed-direction budget row of the same sigma on the same student: how often
    the redrawn one has the smaller Delta, at more D, and with the seed-aware intervals apart."""
    if "noise_redraw" not in rows:
        return None
    redrawn = rows["noise_redraw"].fillna(False).astype(bool)
    fixed = rows[~redrawn & rows["in_budget"] & (rows["noise_sigma"] > 0)]
    v = verdicts.set_index(["student", "config"])
    n = smaller = more = apart = 0
    for r in rows[redrawn].itertuples():
        for f in fixed[fixed["noise_sigma"] == r.noise_sigma]["name"]:
            for student in [s for s, c in v.index if c == r.name and (s, f) in v.index]:
                a, b = v.loc[(student, r.name)], v.loc[(student, f)]
                n += 1
                smaller += a.delta < b.delta
                more += a.delta < b.delta and a.D >= b.D
                apart += a.ci_hi_seeds < b.ci_lo_seeds or a.ci_lo_seeds > b.ci_hi_seeds
    return REDRAW_PAIRS.format(n=n, n_smaller=smaller, n_more_d=more, n_apart=apart) if n else None


def budgets_sentence(budget: pd.DataFrame, verdicts: pd.DataFrame, rows: pd.DataFrame, tau: float) -> str | None:
    """B_emp in one sentence: on how many students it is inconsistent under each rule, how many budget rows fail the
    seed-aware rule, and where the two rules disagree (each row's verdicts: tables/runs.md)."""
    b = budget[np.isclose(budget["tau"], tau)]
    if b.empty:
        return None
    bad = lambda rule: int((~b.loc[b["rule"] == rule, "consistent"].astype(bool)).sum())  # noqa: E731
    v = verdicts[verdicts["config"].isin(set(rows.loc[rows["in_budget"], "name"]))]
    differ = v[v["verdict_seeds"].notna() & (v["verdict"] != v["verdict_seeds"])]
    disagree = "" if differ.empty else (
        f"; the two rules disagree on {len(differ)} (" + ", ".join(f"{r.student} {r.config}" for r in
                                                                    differ.head(3).itertuples())
        + (", ..." if len(differ) > 3 else "") + ")")
    return BUDGETS.format(tau=tau, n=b["student"].nunique(), n_seeds=bad("seeds"), n_paper=bad("paper"),
                          n_fail=int((v["verdict_seeds"] == "fail").sum()), disagree=disagree)


def opd_works(heldout: pd.DataFrame, baseline: str, students: list[str]) -> str | None:
    base = heldout[heldout["config"] == baseline]
    items, closed, n = [], [], 0
    for student in students:
        h = base[base["student"] == student]
        if len(h):
            k = h.groupby(["seed", "step"])["kl"].mean().unstack("step")
            k0, k1 = k.iloc[:, 0].mean(), k.iloc[:, -1].mean()
            items.append(f"{student} {k0:.4f} → {k1:.4f}")
            closed.append(1 - k1 / k0)
            n = max(n, len(k))
    return CLOSING.format(closed=S.pct_span(closed), n=n, items=", ".join(items)) if items else None


def noise_sentence(noise: pd.DataFrame, tau: float) -> str | None:
    if noise.empty:
        return None
    lo, hi = noise.loc[noise["sd_single"].idxmin()], noise.loc[noise["sd_single"].idxmax()]
    where = f"on {lo['student']}" if len(noise) == 1 else f"across students ({lo['student']} to {hi['student']})"
    return NOISE.format(single=S.pct_span(noise["sd_single"]), where=where,
                        used=S.pct_span(noise["sd_used"]), se=S.pct_span(noise["se_problem"]), tau=tau)


def mechanism_bound(t: pd.DataFrame, prefix: pd.DataFrame) -> dict:
    """The bias bound over every checked prefix (probes.parquet) and over the plotted sample (probes_prefix)."""
    worst = mechanism.bound_max(t)
    sampled = pd.concat([(prefix[f"{k}_bias"] / prefix[f"{k}_bound"])[prefix[f"{k}_bound"] > 0] for k in ("opd", "rl")])
    return {"holds": "holds" if worst.max() <= 1 else "is VIOLATED", "n_prefixes": mechanism.n_prefixes_checked(t),
            "per_set": t[["n_prefixes_q", "n_prefixes_p", "n_prefixes_fixed"]].to_numpy().mean(),
            "opd_max": worst["opd"], "rl_max": worst["rl"], "n_sampled": len(prefix),
            "sampled_max": sampled.max() if len(sampled) else float("nan")}


def mechanism_bias(t: pd.DataFrame) -> dict:
    """OPD's and REINFORCE's mean per-prefix bias, end over step 0 (per-prefix means: the same in either space)."""
    ot = mechanism.over_training(t, "logit")
    return {"opd": two_digit_span(ot["opd_bias"]), "rl": two_digit_span(ot["rl_bias"]),
            "opd_per": two_digit_span(ot["opd_per"]), "rl_per": two_digit_span(ot["rl_per"]),
            "delta": two_digit_span(ot["delta"])}


def mechanism_sizes(t: pd.DataFrame) -> list[str]:
    """T/U and S/U at every probed point with LO <= sigma <= HI, and how often T > S."""
    g = t[(t["noise_sigma"] >= mechanism.LO) & (t["noise_sigma"] <= mechanism.HI)]
    return [MECH_SIZES_ITEM.format(space=MECH_SPACES[sp], n_gt=int((g[f"T_{sp}"] > g[f"S_{sp}"]).sum()), n=len(g),
                                   T=two_digit_span(g[f"T_{sp}"] / g[f"U_{sp}"]),
                                   S=two_digit_span(g[f"S_{sp}"] / g[f"U_{sp}"]))
            for sp in ("logit", "param")] if len(g) else []


def mechanism_fixed(t: pd.DataFrame) -> dict:
    """Error and update on fixed prefixes, end over step 0, and the student's KL to its teacher."""
    ot = {sp: mechanism.over_training(t, sp) for sp in ("logit", "param")}
    both = pd.concat(ot.values())
    big = both[both["sigma"] >= mechanism.LO]
    hi, lg = ot["logit"][ot["logit"]["sigma"] == mechanism.HI], ot["logit"]
    small = lg[lg["sigma"] == lg["sigma"].min()]
    main = t[t["main"] & (t["noise_sigma"] > 0)]
    return {"n_shrink": int((big["err"] < big["upd"]).sum()), "n": len(big), "r0_hi": two_digit_span(hi["r0"]),
            "r1_hi": two_digit_span(hi["r1"]), "err": two_digit_span(both["err"]), "small": lg["sigma"].min(),
            "r0_small": two_digit_span(small["r0"]), "r1_small": two_digit_span(small["r1"]),
            "n_rise": int((small["r1"] > small["r0"]).sum()), "n_small": len(small),
            "kl0": two_digit_span(main.loc[main["step"] == main["step"].min(), "kl_pt"]),
            "kl1": two_digit_span(main.loc[main["step"] == main["step"].max(), "kl_pt"]),
            "seed": int(main["probe_seed"].iloc[0])}


def mechanism_staleness(t: pd.DataFrame, baseline: str) -> dict | None:
    """The stalest row's error/update on fixed prefixes at every probed step, and the standard engine's at the end."""
    main = t[t["main"]]
    stale = main[(main["staleness"] > 0) & (main["noise_sigma"] == 0)]
    base = main[(main["config"] == baseline) & (main["step"] == main["step"].max())]
    if stale.empty or base.empty:
        return None
    k = int(stale["staleness"].max())
    g = stale[stale["staleness"] == k].sort_values("step")
    items = ", ".join(f"{two_digits(r.err_fixed_logit / r.upd_fixed_logit)} at step {r.step}" for r in g.itertuples())
    b = base.iloc[0]
    return {"k": k, "seed": int(g["probe_seed"].iloc[0]), "items": items, "last": int(b["step"]),
            "base": two_digits(b["err_fixed_logit"] / b["upd_fixed_logit"])}


def mechanism_cost(t: pd.DataFrame) -> dict:
    """The probes' time from their timing columns (per run: probe_s wall, probe_cpu_s CPU)."""
    runs = t.groupby(["config", "seed"]).first()
    cpu = runs["probe_cpu_s"].sum()
    return {"cpu": cpu, "n_runs": len(runs), "per_run": cpu / len(runs), "cores": MECH_CORES,
            "cpu_cores": cpu / MECH_CORES}


def mechanism_sentences(t: pd.DataFrame, prefix: pd.DataFrame, baseline: str) -> list[str]:
    """The mechanism group: every number from the probes' tables."""
    lo_hi = {"lo": mechanism.LO, "hi": mechanism.HI}
    paper = {"paper_T": "–".join(map(str, S.PAPER_SIZES["T"])), "paper_S": "–".join(map(str, S.PAPER_SIZES["S"])),
             "paper_err": "–".join(map(str, S.PAPER_FIXED_ERROR)), "paper_ratio": " → ".join(map(str, S.PAPER_FIXED_RATIO))}
    out = [MECH_BOUND.format(student=t["student"].iloc[0], **mechanism_bound(t, prefix))]
    if (t["noise_sigma"] > 0).any():
        out.append(MECH_BIAS.format(**mechanism_bias(t)))
        if sizes := mechanism_sizes(t):
            out.append(MECH_SIZES.format(items="; ".join(sizes), **lo_hi, **paper))
        out.append(MECH_FIXED.format(**mechanism_fixed(t), **lo_hi, **paper))
    if stale := mechanism_staleness(t, baseline):
        out.append(MECH_STALE.format(**stale))
    out.append(MECH_COST.format(**mechanism_cost(t)))
    return out




def predictor_sentence(record: pd.DataFrame) -> str | None:
    """Which offline statistic at the step-0 student predicts training (analysis/predictors.parquet): the paper's
    rule, admitting everything, the best single statistic held out, the nested choice, and the rule fitted on all."""
    r = record[record["student"] == "all"].set_index(["statistic", "split"])
    if ("paper_rule", "fixed") not in r.index or not r.loc[("paper_rule", "fixed"), "n"]:
        return None
    fit = r.drop(index=["paper_rule", "admit_all", "selected"], level=0, errors="ignore")

    def acc(key):
        x = r.loc[key]
        return f"{int(x['n_agree'])}/{int(x['n'])} ({x['accuracy']:.0%})"
    parts = [f"the paper's rule (α D̂ < L) {acc(('paper_rule', 'fixed'))}, admitting every candidate "
             f"{acc(('admit_all', 'fixed'))}"]
    if "row" in fit.index.get_level_values(1) and fit.xs("row", level=1)["accuracy"].notna().any():
        stat = fit.xs("row", level=1)["accuracy"].idxmax()
        parts.append(f"leaving one candidate out, the best single statistic ({stats.PREDICTORS[stat]}) "
                     f"{acc((stat, 'row'))} and the statistic chosen inside each fold {acc(('selected', 'row'))}")
    goal = r.loc[("selected", "row"), "accuracy"] >= 0.9 and r.loc[("selected", "row"), "n_agree"] > \
        r.loc[("paper_rule", "fixed"), "n_agree"]
    rule = stats.fitted_rule_of(record)
    fitted = "" if rule is None else f" Fitted on every candidate: {rule.label} ({rule.n_agree}/{rule.n} in sample)."
    return (f"- **Which offline statistic predicts training** (statistics at the step-0 student; figure `predictors`): "
            + "; ".join(parts) + ". " + ("The nested choice reaches the 90% goal." if goal else
                                         "No rule reaches the 90% goal held out.") + fitted)


def prospective_sentence(record: pd.DataFrame) -> str | None:
    """config.yaml's frozen rules, each on the candidates that ran after it was fixed."""
    tests = stats.prospective_tests_of(record)
    if not tests:
        return None
    items = [f"{p.name} ({p.label}, fitted on {p.n_fitted_on}) matches {p.n_agree} of {p.n} new candidates, the "
             f"paper's rule {p.n_agree_paper}, admitting every one {p.n_agree_all}" if p.n else
             f"{p.name} has no new candidate yet" for p in tests]
    return "- **Frozen rules, tested forward** (config.yaml's `frozen_rules`): " + "; ".join(items) + "."


def fitted_misses_sentence(record: pd.DataFrame, step0: pd.DataFrame) -> str | None:
    """The candidates the fitted rule, fitted on every candidate, still gets wrong (in sample), named by outcome."""
    rule = stats.fitted_rule_of(record)
    if rule is None or rule.statistic not in step0:
        return None
    t = step0[step0["outcome"].isin(["pass", "fail"])]
    x = pd.to_numeric(t[rule.statistic], errors="coerce").to_numpy(dtype=float)
    admit = stats.Threshold(rule.sign, rule.threshold).admits(x)
    wrong = t[np.isfinite(x) & (admit != (t["outcome"] == "pass").to_numpy())]
    if not len(wrong):
        return f"- **The fitted rule** (admit iff {rule.label}) agrees with training on every candidate in sample."
    names = lambda w: ", ".join(f"{r.student} {r.config}" for r in w.sort_values(["student", "config"]).itertuples())  # noqa: E731
    fails, passes = wrong[wrong["outcome"] == "fail"], wrong[wrong["outcome"] == "pass"]
    return (f"- **What the fitted rule cannot see** (admit iff {rule.label}): in sample it disagrees with training on "
            f"{len(wrong)} of {rule.n}" + (f"; fails it admits: {names(fails)}" if len(fails) else "")
            + (f"; passes it rejects (step-0 error as large as the fails', training unharmed): {names(passes)}"
               if len(passes) else "") + ".")


def tis_sentence(verdicts: pd.DataFrame, rows: pd.DataFrame, step0: pd.DataFrame) -> str | None:
    """TIS's rescue against its hypothesis (config.yaml: formed on the matrix's first TIS row and fixed before the TIS
    rows after it ran; only those count as tests): TIS removes the per-token error T of the engine's update, not the
    prefix shift S, so it passes where the engine's step-0 error is mostly T (T/U > S/U, parameter space,
    analysis/predictor_stats) and on the standard engine (no error); elsewhere it predicts nothing."""
    s0 = step0.set_index(["student", "config"])
    items, held = [], []
    for r, plain, student, a, b in variant_pairs(verdicts, rows, "tis"):
        if plain.baseline:
            why, predicted = "no error", "pass"
        elif (student, plain.name) in s0.index:
            T, S_ = s0.loc[(student, plain.name), ["T_U_param", "S_U_param"]]
            predicted = "pass" if T > S_ else None
            why = f"T/U {T:.2g}, S/U {S_:.2g}"
        else:
            continue
        first = not items  # the matrix's first TIS row: the rescue the hypothesis was formed on, not a test of it
        if predicted and isinstance(a.verdict_seeds, str) and not first:
            held.append(a.verdict_seeds == predicted)
        items.append(("formed on " if first else "") + f"{student} {plain.name} ({why}): {b.verdict_seeds} → "
                     f"{a.verdict_seeds}" + (f", predicted {predicted}" if predicted and not first
                                             else "" if first else ", no prediction"))
    if not held:
        return None
    return (f"- **TIS's rescue, tested** (fixed in config.yaml before the runs: TIS removes the per-token error T, not "
            f"the prefix shift S, so it passes where step-0 error is mostly T; plain → TIS): " + "; ".join(items)
            + f". {sum(held)} of {len(held)} predictions made before their runs held.")


# ---------------------------------------------------------------- the whole file

def words(text: str) -> int:
    """Words as tests/test_findings.py counts them, as `wc -w` does: every whitespace-separated token."""
    return len(text.split())


def opening_text(text: str) -> str:
    """findings.md's opening: the text before its first table or its second heading."""
    out = []
    headings = 0
    for line in text.splitlines():
        headings += line.startswith("#")
        if line.startswith("|") or headings > 1:
            break
        out.append(line)
    return "\n".join(out)


def claims_of(verdicts, edge, edges, edge_ratios, rows, staleness, rl, admission, tau, primary, kv=None, probes=None,
              predictors=None) -> list[S.Claim]:
    return S.claims(verdicts, edge, edges, edge_ratios, rows, staleness, rl, admission, tau, primary, kv=kv,
                    probes=probes, fitted=stats.fitted_rule_of(predictors) if predictors is not None else None)


def opening(cs: list[S.Claim], redraw: S.Redraw | None, guard: str | None) -> list[str]:
    """The opening paragraphs: the clearest finding, then one plain sentence per claim, then the guard."""
    out = [redraw.sentence(), ""] if redraw is not None else []
    out += [" ".join(c.plain for c in S.one_test(cs)), ""]  # one budget and total mismatch: one test, said once
    return out + ([guard, ""] if guard else [])


def readme_paragraph(cs: list[S.Claim], redraw: S.Redraw | None, guard: S.Guard | None, n_students: int,
                     findings_link: str = "figures/toy/findings.md") -> str:
    """README.md's "What the toy finds": exactly three sentences from the same Claims, redrawn noise and guard."""
    first = (f"On the toy's {n_students} students, a weight-noise direction redrawn at every step hurts far less than a "
             f"fixed one at the same or more mismatch D: its Δ = τ edge lies {redraw.redrawn}, the fixed one's "
             f"{redraw.fixed}, apart beyond their 95% interval on {redraw.n_differ} of {redraw.n} students, so the "
             f"error's persistence matters, not its per-token KL alone." if redraw is not None and redraw.n_differ else
             f"On the toy's {n_students} students, redrawing the weight-noise direction at every step is not told "
             f"apart from a fixed direction.")
    groups = [(S.DISAGREES, "disagrees with {}"), (S.AGREES, "agrees on {}"), (S.UNRESOLVED, "leaves {} unresolved"),
              (S.UNTESTABLE, "cannot test, at its scale, {}")]
    once = S.one_test(cs)  # one budget in D and total mismatch deciding: one test, said once
    said = [f.format(S.phrases(once, v)) for v, f in groups if S.phrases(once, v)]
    second = "Of the paper's claims the toy " + "; it ".join(said[:-1]) + ("; and it " if len(said) > 1 else "") \
        + said[-1] + "."
    link = f"[{findings_link}]({findings_link})"
    third = (f"{guard.clause()}, and {link} gives every number with its criterion." if guard is not None else
             f"{link} gives every number with its criterion.")
    return " ".join([first, second, third])


def findings(verdicts, budget, noise, pairs, staleness, heldout, rows, admission, rl, tau, baseline, primary,
             kv=None, probes=None, guard=None, rl_thresholds=None, edge=None, decides=None, predictors=None,
             predictor_stats=None, draws=None, student_specs=None, edges=None, edge_ratios=None, steps=None) -> str:
    """findings.md. probes: (probes.parquet, probes_prefix.parquet) where the experiment probes the mechanism (tiny
    backend). rl_thresholds: the experiment's rl_collapse settings as config.yaml writes them (defaults:
    opd.spec.RLCollapse). edge, edges, edge_ratios: the analysis's edge.parquet, edges.parquet and edge_ratios.parquet;
    with all three the opening and the claims scorecard come first. draws: draws.parquet (each comparison on each
    base-model draw alone). student_specs: the students' specs as config.yaml writes them (the control students nearer
    their teacher are found from them). steps: steps.parquet (the regime's token entropy). `pairs` (null_deltas) and
    `decides` are read by the tables, not here."""
    out = [f"# Findings (τ = {tau:.0%}; generated by workflow/scripts/findings.py)", ""]
    if edge is not None and edges is not None and edge_ratios is not None:
        cs = claims_of(verdicts, edge, edges, edge_ratios, rows, staleness, rl, admission, tau, primary, kv=kv,
                       probes=probes[0] if probes is not None else None, predictors=predictors)
        out += opening(cs, S.redraw(edges, edge_ratios), S.guard_sentence(guard) if guard is not None else None)
        n_draws = int(verdicts["n_draws"].max()) if "n_draws" in verdicts and len(verdicts) else 1
        out += ["## Claims scorecard", "", *S.scorecard_table(cs), "",
                f"Verdicts by the criteria of docs/methods.md (\"The claims scorecard\"), fixed before the numbers: the "
                f"seed-aware rule at τ = {tau:.0%}" + (f", each comparison paired across the {n_draws} base models "
                                                        f"per student" if n_draws > 1 else "") + ".", "",
                "## Δ = τ edge per mechanism", "", *edges_table(edges), "",
                "Where each mechanism's Δ, monotone in log D, crosses τ (seed-aware rule; 95% interval from joint "
                "bootstrap replicates; figure `edges`).", ""]
    out += ["## Findings", ""]
    students = [primary] + sorted(set(verdicts["student"]) - {primary})
    lines = [opd_works(heldout, baseline, students), noise_sentence(noise, tau),
             draws_sentence(draws, noise) if draws is not None else None, redraw_pairs(verdicts, rows),
             budgets_sentence(budget, verdicts, rows, tau)]
    items = [f"at lr {lr:.0e}, k = {', '.join(str(k) for k in t['k'])}: Δ {', '.join(signed(x) for x in t['delta'])} "
             f"at D {', '.join(f'{x:.2g}' for x in t['D'])} ({verdict_words(t['verdict_seeds'])})"
             for lr, t in staleness[staleness["k"] > 0].groupby("lr")]
    if items:
        lines.append(STALENESS.format(student=primary, items="; ".join(items)))
    if admission:
        lines.append((ADMISSION if admission["n_decisions"] else ADMISSION_NONE).format(**admission))
    if len(rl):
        lines += [rl_sentence(rl, s) for s in sorted(set(rl["student"]))]
        lines.append(rl_spread(heldout, baseline, primary, RLCollapse.of(rl_thresholds).thresholds()))
    lines += distance_sentences(verdicts, heldout, baseline, student_specs or {})
    converged = {name for name, spec in (student_specs or {}).items() if "converge" in spec}  # what was predicted on
    regime = S.regime(steps, edges, baseline, converged) if steps is not None and edges is not None and converged \
        else None
    if regime is not None:
        lines.append(regime.sentence())
    if predictors is not None:
        lines += [predictor_sentence(predictors), prospective_sentence(predictors)]
        if predictor_stats is not None:
            lines.append(fitted_misses_sentence(predictors, predictor_stats))
    if predictor_stats is not None:
        lines.append(tis_sentence(verdicts, rows, predictor_stats))
    if probes is not None:
        lines += mechanism_sentences(*probes, baseline)
    if guard is not None:
        lines += guard_sentences(guard)
    return "\n".join(out + [x for x in lines if x]) + "\n"


# ---------------------------------------------------------------- reading the analysis files

READ = ("verdicts", "budget", "noise", "null_deltas", "staleness_lr", "heldout", "rl", "rows", "edge", "decides",
        "draws", "edges", "edge_ratios", "kv_attribution", "guard", "predictors", "predictor_stats", "probes",
        "probes_prefix")


def read(files: dict) -> dict:
    """The analysis files findings() reads, by name (READ, and admission_summary), those given: rows through
    report.rows_frame, admission_summary as JSON, the rest as tables."""
    out = {}
    for name, path in files.items():
        if name == "rows":
            out[name] = report.rows_frame(path)
        elif name == "admission_summary":
            out[name] = json.loads(Path(path).read_text())
        elif name in READ:
            out[name] = store.read_table(path)
    return out


def readme_from_analysis(analysis: Path, tau: float, primary: str, findings_link: str) -> str:
    """README.md's three sentences from a committed analysis folder (no held-out KL needed: a fresh clone has it)."""
    names = ("verdicts", "edge", "edges", "edge_ratios", "rows", "staleness_lr", "rl", "kv_attribution", "guard",
             "predictors", "probes")
    files = {n: analysis / f"{n}.parquet" for n in names if (analysis / f"{n}.parquet").exists()}
    if (analysis / "admission_summary.json").exists():
        files["admission_summary"] = analysis / "admission_summary.json"
    t = read(files)
    cs = claims_of(t["verdicts"], t["edge"], t["edges"], t["edge_ratios"], t["rows"], t["staleness_lr"], t["rl"],
                   t.get("admission_summary"), tau, primary, kv=t.get("kv_attribution"), probes=t.get("probes"),
                   predictors=t.get("predictors"))
    guard = S.guard(t["guard"]) if "guard" in t else None
    return readme_paragraph(cs, S.redraw(t["edges"], t["edge_ratios"]), guard, t["edge"]["student"].nunique(),
                            findings_link)
