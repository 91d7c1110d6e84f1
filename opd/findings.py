"""The toy paper's findings as sentences whose every number is computed here from the analysis files
(the README links findings.md instead of typing numbers that drift at every regeneration); the claims scorecard
that opens the file is opd.scorecard's. The sentence templates are the module-level strings below: one place to
edit the wording."""
import numpy as np
import pandas as pd

from opd import mechanism, stats
from opd.scorecard import MECH_SPACES, prospective_texts, scorecard, two_digit_span, two_digits, variant_pairs
from opd.spec import RLCollapse

NOISE = ("- **Instrument noise.** The standard engine against itself, one seed against another: Δ has SD "
         "{sd_single:.1%} on {student} ({n_seeds} seeds; range {lo:+.1%} to {hi:+.1%}), where the problem-only "
         "interval of the paper's rule gives that comparison an SE of {se_problem:.1%}. At the seed counts "
         "compared ({n_row} per row against {n_seeds}) the run-to-run SD of Δ is {sd_used:.1%}. τ = {tau:.0%}.")
DRAWS = ("- **Base-model draws.** {n_draws} base models per student, each its own SFT (run seed s trains from draw "
         "s % {n_draws}); every comparison pairs its two sides on the draws the candidate ran, and the seed-aware "
         "interval covers the draws (their spread, Student-t on the draws' count). The base model alone moves the "
         "standard engine's final held-out KL by an SD of {sd_draw} (log scale) between draws, against {sd_run} "
         "between OPD seeds on one draw; a configuration's Δ moves with the draw by an SD of {sd_dc} (the draw x "
         "configuration interaction, log scale, pooled over each student's rows{dc_floor}). Judged on each draw alone (seed-aware rule, one seed against the "
         "reference's on that draw), {n_same} of {n} comparisons with runs on every draw reach the same verdict on "
         "all of them{differ}.")
CLOSING = ("- **OPD works.** On the standard engine, held-out KL goes from {k0:.4f} to {k1:.4f} on {student}: "
           "OPD closes {closed:.0%} of the student's KL to its teacher (mean of {n} seeds).")
BUDGET = ("- **Budget of {student} at τ = {tau:.0%}**, {rule}: {interval} ({n_pass} configurations pass, "
          "{n_fail} fail{unjudged}).")
FAILS = "- **Fails under the seed-aware rule ({student}):** {items}."
NOFAILS = "- **No configuration of {student} fails the seed-aware rule.**"
DISAGREE = ("- **The two rules disagree** on {student}: {items} (paper's rule / seed-aware rule).")
STALENESS = "- **Staleness at lr {lr:.0e}** ({student}, Δ against k = 0 at that lr, seed-aware rule): {items}."
ADMISSION = ("- **Admission check** (α = {alpha}, L = {L}, {n_prompts} prompts): {n_agree} of {n_decisions} "
             "candidate engines' decisions agree with the training outcome (the paper's rule; the standard engine is "
             "not counted); admitting every candidate would agree on {n_admit_all_agree} of {n_decisions}. D̂'s "
             "bootstrap SE over prompts is {se_relative_min:.0%} to {se_relative_max:.0%} of D̂ where D̂ ≥ "
             "{ratio_floor}; an SE of at most a third of D̂ needs up to {prompts_for_se_third:.0f} prompts there "
             "(the SE of a mean shrinks as 1/√n). In-training D / offline D̂ reaches {alpha_implied:.2f} "
             "(for D̂ ≥ {ratio_floor}); the largest passing D is {L_retrospective:.4g}.")
ADMISSION_NONE = ("- **Admission check** (α = {alpha}, L = {L}): no candidate engine in this matrix has a training "
                  "outcome to compare with (the standard engine is not counted).")
RL = "- **RL under the same engines** ({student}): {items}."
RL_SPREAD = ("- **RL collapse thresholds against the seed spread** ({student}, the standard engine's {n} OPD seeds at the "
             "final held-out evaluation, on all its base-model draws, the quantities the rule compares): mean "
             "held-out response length varies by "
             "{len_cv:.2%} across seeds (SD/mean), so the length factor {len_f:g}x is {len_sds:.0f} such SDs; {entropy}.")
RL_SPREAD_ENTROPY = ("held-out entropy varies by {ent_cv:.1%}, so the entropy factor {ent_f:g}x is {ent_sds:.0f} such "
                     "SDs")
RL_SPREAD_NO_ENTROPY = ("held-out entropy is not in these runs (an optional column, logged since the rule), so its "
                        "spread is not measured here")
# A layer's effect is split into the shares keys alone and values alone carry only where both shares' SEs are
# at most this (50 points); a larger SE says nothing about the split at this sample.
KV_SHARE_SE_MAX = 0.5
KV_UNRESOLVED = "its split into keys and values is not resolved at this sample (a share's SE is above {max:.0%})"
KV = ("- **FP8 KV cache by layer and part** ({student}, {recipe}, offline D̂ ± SE): every layer {all_kv}; {layers}.")
GUARD = ("- **Mismatch guard** ({student}, d_max = {d_max:g}, window {window}, cooldown {cooldown} doubling on "
         "re-trigger; Δ with the seed-aware interval): {items}. Replayed over the standard engine's {runs} runs "
         "the guards fire {alarms} times; its largest {window}-step mean of d_n is {worst:.2g}.")
GUARD_ITEM = ("{config} ({action}{flush}): D = {d_ratio:.2g}x d_max, Δ = {delta:+.0%} [{lo:+.0%}, {hi:+.0%}], {verdict}, against {unguarded}'s "
              "{u_delta:+.0%} [{u_lo:+.0%}, {u_hi:+.0%}], {u_verdict}; {cheap:.0%} of steps on the cheap engine, "
              "{acts:g} activations per run; {speed}")
GUARD_SPEED = ("measured inside the runs, the cheap engine's steps ran at {cheap_x:.2f}x the fallback's tokens/s and "
               "the guarded run at {run_x:.2f}x (on the cores each run had: staleness buys speed only where its "
               "rollout thread finds a free core, and a regeneration that runs as many jobs as cores leaves none free)")
RULE_NAMES = stats.RULE_NAMES
# The mechanism group (tiny backend: the gradient probes, opd/backends/tiny/probes.py; numbers from
# analysis/probes.parquet and probes_prefix.parquet). The paper's own numbers are typed here, labelled as the paper's.
MECH_BOUND = ("- **Mechanism: the bias bound** (gradient probes of {student}'s first-seed runs): ‖g_bias‖₁ ≤ "
              "2‖δ‖₁‖A‖∞ {holds} on all {n_prefixes:,} prefixes checked ({per_set:,.0f} per probed set on average); "
              "the largest ‖g_bias‖₁/bound is {opd_max:.2f} for OPD and {rl_max:.2f} for REINFORCE. Of the "
              "{n_sampled:,} sampled prefixes plotted in the mechanism figure's panel (c), the largest ‖g_bias‖₂/bound "
              "is {sampled_max:.2f}.")
MECH_BIAS = ("- **Mechanism: OPD's bias against REINFORCE's** (end of training over step 0, noise rows × probe "
             "seeds): OPD's mean per-prefix bias is at {opd}x of its step-0 size, REINFORCE's Rδ at {rl}x; per "
             "unit of mismatch (mean ‖δ‖₁, itself at {delta}x) OPD's is at {opd_per}x and REINFORCE's at {rl_per}x "
             "(the paper: OPD's bias vanishes as A → 0, REINFORCE's does not).")
MECH_GROWTH = ("- **Mechanism: T and S against σ** (growth of T/U and S/U from σ = {lo:g} to {hi:g}, range over the "
               "probe seeds): {items}. The paper's: S 5.3x (0.098 → 0.517), T 2.1x (0.198 → 0.417).")
MECH_GROWTH_ITEM = "{space}, step {step}: S {S}x, T {T}x, S grows faster in {n_faster} of {n} probe seeds"
MECH_SIZES = ("- **Mechanism: the sizes of T and S** (σ = {lo:g}–{hi:g}, every probed step and probe seed): {items}. "
              "The paper's T/U 0.198–0.417 and S/U 0.098–0.517.")
MECH_SIZES_ITEM = "{space}: T > S at {n_gt} of {n} points, T/U {T}, S/U {S}"
MECH_FIXED = ("- **Mechanism: error/update on fixed prefixes over training** (end over step 0): for σ ≥ {lo:g} the "
              "error shrinks more than the update in {n_shrink} of {n} cases (noise row × probe seed × space); at "
              "σ = {hi:g}, logit space, error/update is {r0_hi} at step 0 and {r1_hi} at the end. Over every noise "
              "row, probe seed and space the error is at {err}x of its step-0 size (the paper's falls to "
              "0.11–0.13x, its update faster, its error/update rising 0.93 → 1.88). At σ = {small:g}, logit space, "
              "error/update goes {r0_small} → {r1_small} (rises in {n_rise} of {n_small} probe seeds). The "
              "student's KL(p‖p_T) on its own prefixes goes from {kl0} at step 0 to {kl1} at the end (noise rows, "
              "probe seed {seed}).")
MECH_STALE = ("- **Mechanism: staleness** (k = {k}, error/update on fixed prefixes, logit space, probe seed {seed}): "
              "{items}; the standard engine's at step {last}: {base}.")
MECH_COST = ("- **Mechanism: cost** (probes.parquet's timing columns): probing the {n_runs} runs took {cpu:.0f} CPU s "
             "({per_run:.0f} s per run, {per_point:.1f} s per run, step and probe seed), inside each probed run's own "
             "training job, which keeps the weights the probes read (no run is re-trained and no weights are stored). "
             "Spread over {cores} cores that is about {cpu_cores:.0f} s of a from-scratch regeneration (its goal "
             "and a re-measurement: benchmarks/probes.py).")
MECH_CORES = 2  # the cores of the README's reference machine (its set-up: 2 cores)


def budget_sentence(b: pd.Series) -> str:
    if np.isnan(b["lo"]) and np.isnan(b["hi"]):
        interval = "no configurations judged"
    elif np.isnan(b["hi"]):
        interval = f"every configuration passes (largest D {b['lo']:.4g})"
    elif np.isnan(b["lo"]):
        interval = f"every configuration fails (smallest D {b['hi']:.4g})"
    elif b["consistent"]:
        interval = f"B_emp = [{b['lo']:.4g}, {b['hi']:.4g}], consistent"
    else:
        interval = (f"inconsistent: a configuration fails at D = {b['hi']:.4g} while another passes at "
                    f"D = {b['lo']:.4g}")
    unjudged = f", {int(b['n_unjudged'])} unjudged" if b["n_unjudged"] else ""
    return BUDGET.format(student=b["student"], tau=b["tau"], rule=RULE_NAMES[b["rule"]], interval=interval,
                         n_pass=int(b["n_pass"]), n_fail=int(b["n_fail"]), unjudged=unjudged)


def rl_item(r) -> str:
    opd = "not run"
    if r.opd_config:
        opd = f"Δ = {r.opd_delta:+.0%}, {r.opd_verdict_seeds or r.opd_verdict}"
    se = f" ± {r.accuracy_change_se:.1f}" if np.isfinite(r.accuracy_change_se) else ""
    return (f"{r.config}: {r.accuracy_change:+.1f}{se} accuracy points vs its standard-engine run ({int(r.n_seeds)} "
            f"seed{'s' if r.n_seeds != 1 else ''})"
            f"{f' (collapsed: {r.collapse_criteria})' if r.collapsed else ''}; OPD on that engine: {opd}")


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


def kv_sentences(kv: pd.DataFrame) -> list[str]:
    """Per student and recipe: D_hat of every layer in FP8, and of each layer alone with the share of it that
    keys alone and values alone carry."""
    out = []
    for (student, recipe), k in kv.groupby(["student", "recipe"]):
        k = k.set_index(["mode", "layer", "part"])
        est = lambda i: f"{k.loc[i, 'd_hat']:.2g} ± {k.loc[i, 'se']:.1g}"  # noqa: E731
        share = lambda i: f"{k.loc[i, 'share']:.0%} ± {k.loc[i, 'share_se']:.0%}"  # noqa: E731

        def parts(i):
            whole = k.loc[("only", i, "kv")]
            if whole["d_hat"] < 2 * whole["se"]:  # a share of an effect within 2 SE of 0 means nothing
                return "too close to 0 to split into keys and values"
            if max(k.loc[("only", i, p), "share_se"] for p in ("k", "v")) > KV_SHARE_SE_MAX:
                return KV_UNRESOLVED.format(max=KV_SHARE_SE_MAX)
            return f"keys only {share(('only', i, 'k'))} and values only {share(('only', i, 'v'))} of it"
        layers = "; ".join(f"layer {i} alone {est(('only', i, 'kv'))}, {parts(i)}"
                           for i in sorted(k.xs("only", level="mode").index.get_level_values("layer").unique()))
        out.append(KV.format(student=student, recipe=recipe, all_kv=est(("all", -1, "kv")), layers=layers))
    return out


def guard_sentences(g: pd.DataFrame) -> list[str]:
    """Per student and guard setting: each guarded row against the same engine unguarded (analysis/guard.parquet)."""
    out = []
    for (student, d_max, window, cooldown), t in g.groupby(["student", "d_max", "window", "cooldown"]):
        items = "; ".join(GUARD_ITEM.format(
            config=r.config, action=r.action, flush=", flush" if r.flush else "",
            d_ratio=r.D_over_d_max, delta=r.delta, lo=r.ci_lo_seeds, hi=r.ci_hi_seeds,
            verdict=r.verdict_seeds, unguarded=r.unguarded, u_delta=r.unguarded_delta, u_lo=r.unguarded_ci_lo_seeds,
            u_hi=r.unguarded_ci_hi_seeds, u_verdict=r.unguarded_verdict_seeds, cheap=r.cheap_share, acts=r.activations,
            speed=GUARD_SPEED.format(cheap_x=r.cheap_over_fallback, run_x=r.run_over_fallback)
            + ("" if r.fallback_is_standard else f" (its fallback is {r.action}: not the standard engine)"))
            for r in t.itertuples() if r.unguarded is not None)
        out.append(GUARD.format(student=student, d_max=d_max, window=window, cooldown=cooldown, items=items,
                                runs=int(t["baseline_runs"].iloc[0]), alarms=int(t["baseline_alarms"].sum()),
                                worst=t["baseline_max_window_d"].iloc[0]))
    return out


def draws_sentence(draws: pd.DataFrame, noise: pd.DataFrame) -> str | None:
    """What the base-model draws change: the draw SD beside the seed SD, and which comparisons' seed-aware
    verdicts differ from draw to draw (the analysis's draws.parquet); None with one draw."""
    n_draws = int(draws["draw"].max()) + 1 if len(draws) else 1
    if n_draws < 2:
        return None
    g = draws[draws["verdict_seeds"].notna()].groupby(["student", "config"])
    full = [(k, x) for k, x in g if x["draw"].nunique() == n_draws]
    split = [(k, x.sort_values("draw")) for k, x in full if x["verdict_seeds"].nunique() > 1]
    differ = "" if not split else "; they differ on " + "; ".join(
        f"{st} {c} ({', '.join(f'draw {r.draw} {r.delta:+.0%} {r.verdict_seeds}' for r in x.itertuples())})"
        for (st, c), x in split)
    span = lambda col: two_digit_span(noise[col].dropna())  # noqa: E731
    return DRAWS.format(n_draws=n_draws, sd_draw=span("sd_draw"), sd_run=span("sd_run"),
                        sd_dc=span("sd_draw_config") if "sd_draw_config" in noise else "–",
                        dc_floor=draw_config_floor(noise.get("sd_draw_config")),
                        n_same=len(full) - len(split), n=len(full), differ=differ)


DISTANCE = ("- **Distance from the teacher (a discriminating control).** {near} is {far} trained {steps} more SFT "
            "steps on the same trajectory (the same teacher recipe): initial held-out KL {kl_near:.4f} against "
            "{kl_far:.4f}. On the engines both ran (seed-aware intervals): {items}. Δ is larger on the nearer "
            "student on {n_larger} of {n} engines, beyond the seeds (intervals apart) on {n_apart}; verdicts: "
            "{verdicts}.")


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
    Delta on each, whether the nearer one's is larger and whether the seed-aware intervals are apart."""
    out = []
    v = verdicts.set_index(["student", "config"])
    h = heldout[(heldout["config"] == baseline)]
    for near, far in nearer_pairs(students):
        shared = sorted({c for s, c in v.index if s == near and c != baseline and (far, c) in v.index})
        if not shared:
            continue
        kl0 = {s: h[(h["student"] == s) & (h["step"] == h["step"].min())].groupby("seed")["kl"].mean().mean()
               for s in (near, far)}
        items, larger, apart, verdicts_ = [], 0, 0, []
        for c in shared:
            a, b = v.loc[(far, c)], v.loc[(near, c)]
            larger += b.delta > a.delta
            apart += (b.ci_lo_seeds > a.ci_hi_seeds) or (b.ci_hi_seeds < a.ci_lo_seeds)
            items.append(f"{c} {a.delta:+.0%} [{a.ci_lo_seeds:+.0%}, {a.ci_hi_seeds:+.0%}] → {b.delta:+.0%} "
                         f"[{b.ci_lo_seeds:+.0%}, {b.ci_hi_seeds:+.0%}]")
            verdicts_.append(f"{c} {a.verdict_seeds} → {b.verdict_seeds}")
        out.append(DISTANCE.format(near=near, far=far, kl_near=kl0[near], kl_far=kl0[far], items="; ".join(items),
                                   steps=students[near]["student_steps"] - students[far]["student_steps"],
                                   n_larger=int(larger), n=len(shared), n_apart=int(apart),
                                   verdicts="; ".join(verdicts_)))
    return out


def draw_config_floor(sd) -> str:
    """The words a zero draw x configuration SD needs: its estimate is unbiased and floored at 0 when pooled
    (opd.stats.pool_draw_variance), so 0 means the draws' spread of Δ is no larger than their seeds explain."""
    n = 0 if sd is None else int((pd.Series(sd, dtype=float).dropna() == 0).sum())
    return "" if not n else (f"; at 0 on {n} student{'s' if n > 1 else ''}: the pooled estimate is floored at 0, the "
                             f"draws' spread of Δ being no larger than their seeds explain")


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


def mechanism_growth(t: pd.DataFrame) -> list[str]:
    """Growth of T/U and S/U from LO to HI per space and end step, with how many probe seeds see S grow faster."""
    items = []
    for step in (int(t["step"].max()), int(t["step"].min())):
        for space in ("param", "logit"):
            s, tt = mechanism.growths(t, "S", step, space), mechanism.growths(t, "T", step, space)
            if len(s):
                items.append(MECH_GROWTH_ITEM.format(space=MECH_SPACES[space], step=step, S=two_digit_span(s),
                                                     T=two_digit_span(tt), n_faster=int((s > tt).sum()), n=len(s)))
    return items


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
    return {"cpu": cpu, "n_runs": len(runs), "per_run": cpu / len(runs), "per_point": cpu / len(t),
            "cores": MECH_CORES, "cpu_cores": cpu / MECH_CORES}


def mechanism_sentences(t: pd.DataFrame, prefix: pd.DataFrame, baseline: str) -> list[str]:
    """The mechanism group: every number from the probes' tables."""
    lo_hi = {"lo": mechanism.LO, "hi": mechanism.HI}
    out = [MECH_BOUND.format(student=t["student"].iloc[0], **mechanism_bound(t, prefix))]
    if (t["noise_sigma"] > 0).any():
        out.append(MECH_BIAS.format(**mechanism_bias(t)))
        if growth := mechanism_growth(t):
            out.append(MECH_GROWTH.format(items="; ".join(growth), **lo_hi))
        if sizes := mechanism_sizes(t):
            out.append(MECH_SIZES.format(items="; ".join(sizes), **lo_hi))
        out.append(MECH_FIXED.format(**mechanism_fixed(t), **lo_hi))
    if stale := mechanism_staleness(t, baseline):
        out.append(MECH_STALE.format(**stale))
    out.append(MECH_COST.format(**mechanism_cost(t)))
    return out


def predictor_sentence(record: pd.DataFrame) -> str | None:
    """Which offline statistic at the step-0 student predicts training (analysis/predictors.parquet): the paper's
    rule, admitting everything, the best single statistic held out, and the nested choice, each with n."""
    r = record[record["student"] == "all"].set_index(["statistic", "split"])
    if ("paper_rule", "fixed") not in r.index or not r.loc[("paper_rule", "fixed"), "n"]:
        return None
    fit = r.drop(index=["paper_rule", "admit_all", "selected"], level=0, errors="ignore")

    def acc(key):
        x = r.loc[key]
        return f"{int(x['n_agree'])}/{int(x['n'])} ({x['accuracy']:.0%})"
    best = {split: fit.xs(split, level=1)["accuracy"].idxmax() for split in ("row", "student")
            if split in fit.index.get_level_values(1) and fit.xs(split, level=1)["accuracy"].notna().any()}
    parts = [f"the paper's rule (α D̂ < L) agrees with training on {acc(('paper_rule', 'fixed'))} candidates, "
             f"admitting every one on {acc(('admit_all', 'fixed'))}"]
    names = {"row": "leaving out one candidate", "student": "leaving out one whole student"}
    for split, stat in best.items():
        x = r.loc[(stat, split)]
        parts.append(f"{names[split]}, the best single statistic is {stats.PREDICTORS[stat]} at {acc((stat, split))}"
                     f" (Spearman ρ with Δ {x['spearman']:+.2f}), D̂'s own threshold {acc(('d_hat', split))}, and the "
                     f"statistic chosen inside each fold {acc(('selected', split))}")
    goal = r.loc[("selected", "row"), "accuracy"] >= 0.9 and r.loc[("selected", "row"), "n_agree"] > \
        r.loc[("paper_rule", "fixed"), "n_agree"]
    rule = stats.fitted_rule_of(record)
    fitted = ("" if rule is None else f" Fitted on every candidate, the choice is {rule.label}: the admission record's "
              f"second rule (table and figure `admission`), {rule.n_agree}/{rule.n} in sample.")
    tests = stats.prospective_tests_of(record)
    if tests:
        fitted += f" Tested forward: {prospective_texts(tests)}."
    return (f"- **Which offline statistic predicts training** (every candidate engine of every student, statistics at "
            f"the step-0 student, threshold rules fitted on the other candidates; analysis/predictors.parquet): "
            + "; ".join(parts) + ". " + ("The nested choice reaches the 90% goal and beats the paper's rule."
                                         if goal else "No offline rule here reaches the 90% goal held out: the best "
                                         "single statistic is chosen on the same candidates, so only the nested "
                                         "choice's agreement is an honest estimate.") + fitted)


def fitted_misses_sentence(record: pd.DataFrame, step0: pd.DataFrame) -> str | None:
    """The candidates the fitted rule, fitted on every candidate, still gets wrong (in sample): each with its
    statistic, outcome and Delta, so what the rule cannot see is named, not only counted."""
    rule = stats.fitted_rule_of(record)
    if rule is None or rule.statistic not in step0:
        return None
    t = step0[step0["outcome"].isin(["pass", "fail"])]
    x = pd.to_numeric(t[rule.statistic], errors="coerce").to_numpy(dtype=float)
    admit = stats.Threshold(rule.sign, rule.threshold).admits(x)
    wrong = t[np.isfinite(x) & (admit != (t["outcome"] == "pass").to_numpy())]
    if not len(wrong):
        return f"- **The fitted rule** (admit iff {rule.label}) agrees with training on every candidate in sample."
    items = "; ".join(f"{r.student} {r.config} ({getattr(r, rule.statistic):.3g}, {r.outcome} at Δ {r.delta:+.0%})"
                      for r in wrong.sort_values(["outcome", "student", "config"]).itertuples())
    return (f"- **What the fitted rule cannot see** (admit iff {rule.label}, fitted on every candidate): in sample it "
            f"still disagrees with training on {len(wrong)} of {rule.n}: {items}. A pass it rejects is an engine whose "
            f"step-0 error looks as large as the fails' but whose training did not suffer; a fail it admits, the "
            f"opposite.")


def tis_sentence(verdicts: pd.DataFrame, rows: pd.DataFrame, step0: pd.DataFrame) -> str | None:
    """TIS's rescue against its hypothesis (config.yaml: formed on the matrix's first TIS row, noise-234's rescue, and
    fixed before the TIS rows after it ran; only those count as tests): TIS removes the per-token error T of the engine's update, not the prefix shift S, so it passes
    where the engine's step-0 error is mostly T (T/U > S/U, parameter space, analysis/predictor_stats) and on the
    standard engine (no error); elsewhere it predicts nothing. Each prediction against the seed-aware verdict."""
    s0 = step0.set_index(["student", "config"])
    items, held = [], []
    for r, plain, student, a, b in variant_pairs(verdicts, rows, "tis"):
        if plain.baseline:
            why, predicted = "the standard engine: no error to remove", "pass"
        elif (student, plain.name) in s0.index:
            T, S = s0.loc[(student, plain.name), ["T_U_param", "S_U_param"]]
            predicted = "pass" if T > S else None
            why = f"step 0: T/U {T:.2g}, S/U {S:.2g}"
        else:
            continue
        first = not items  # the matrix's first TIS row: the rescue the hypothesis was formed on, not a test of it
        if predicted and isinstance(a.verdict_seeds, str) and not first:
            held.append(a.verdict_seeds == predicted)
        items.append(("formed on " if first else "") + f"{student} {plain.name} ({why}): plain {b.verdict_seeds} at Δ {b.delta:+.0%}, TIS "
                     f"{a.verdict_seeds} at Δ {a.delta:+.0%} [{a.ci_lo_seeds:+.0%}, {a.ci_hi_seeds:+.0%}]"
                     + (f", predicted {predicted}" if predicted else ", no prediction (S ≥ T)"))
    if not held:
        return None
    return (f"- **TIS's rescue, tested** (the hypothesis, formed on the first TIS row and fixed in config.yaml before "
            f"the others ran: TIS's weights min(p/q, C) remove the per-token error T of the engine's update, not the "
            f"prefix shift S, so TIS passes wherever the step-0 error is mostly T and on the standard engine): "
            + "; ".join(items) + f". {sum(held)} of {len(held)} predictions made before their runs held.")


def findings(verdicts, budget, noise, pairs, staleness, heldout, rows, admission, rl, tau, baseline, primary,
             kv=None, probes=None, guard=None, rl_thresholds=None, edge=None, decides=None, predictors=None,
             predictor_stats=None, draws=None, student_specs=None, edges=None, edge_ratios=None) -> str:
    """probes: (probes.parquet, probes_prefix.parquet) where the experiment probes the mechanism (tiny backend).
    rl_thresholds: the experiment's rl_collapse settings as config.yaml writes them (defaults: opd.spec.RLCollapse).
    edge, decides, edges, edge_ratios: the analysis's edge.parquet, decides.parquet, edges.parquet and
    edge_ratios.parquet; with all four, the claims scorecard comes first.
    draws: the analysis's draws.parquet (each comparison on each base-model draw alone). student_specs: the students'
    specs as config.yaml writes them (the control students nearer their teacher are found from them)."""
    out = [f"# Findings of this experiment (generated by workflow/scripts/findings.py; τ = {tau:.0%})", ""]
    if edge is not None and decides is not None and edges is not None and edge_ratios is not None:
        out += scorecard(verdicts, edge, decides, rows, heldout, admission, rl, tau, primary, kv=kv, probes=probes,
                         fitted=stats.fitted_rule_of(predictors) if predictors is not None else None,
                         prospective=stats.prospective_tests_of(predictors) if predictors is not None else (),
                         edges=edges, edge_ratios=edge_ratios)
    students = [primary] + sorted(set(verdicts["student"]) - {primary})
    base = heldout[heldout["config"] == baseline]
    for student in students:
        h = base[base["student"] == student]
        if len(h):
            k = h.groupby(["seed", "step"])["kl"].mean().unstack("step")
            k0, k1 = k.iloc[:, 0].mean(), k.iloc[:, -1].mean()
            out.append(CLOSING.format(student=student, k0=k0, k1=k1, closed=1 - k1 / k0, n=len(k)))
    for n in noise.to_dict("records"):
        d = pairs.loc[pairs["student"] == n["student"], "delta"]
        out.append(NOISE.format(**n, n_row=n["n_seeds_row"], lo=d.min(), hi=d.max()))
    if draws is not None and (line := draws_sentence(draws, noise)):
        out.append(line)
    in_budget = set(rows.loc[rows["in_budget"], "name"])
    for student in students:
        for b in budget[(budget["student"] == student) & np.isclose(budget["tau"], tau)].to_dict("records"):
            out.append(budget_sentence(pd.Series(b)))
        v = verdicts[(verdicts["student"] == student) & verdicts["config"].isin(in_budget)]
        fails = v[v["verdict_seeds"] == "fail"].sort_values("D")
        if len(fails):
            out.append(FAILS.format(student=student, items="; ".join(
                f"{r.config} (D = {r.D:.3g}, Δ = {r.delta:+.0%})" for r in fails.itertuples())))
        elif v.loc[v["config"] != baseline, "verdict_seeds"].notna().any():
            out.append(NOFAILS.format(student=student))
        differ = v[v["verdict_seeds"].notna() & (v["verdict"] != v["verdict_seeds"])].sort_values("D")
        if len(differ):
            out.append(DISAGREE.format(student=student, items="; ".join(
                f"{r.config} (D = {r.D:.3g}, Δ = {r.delta:+.0%}: {r.verdict} / {r.verdict_seeds})"
                for r in differ.itertuples())))
    for lr, g in staleness.groupby("lr"):
        items = "; ".join(f"k = {r.k}: Δ = {r.delta:+.0%} [{r.ci_lo_seeds:+.0%}, {r.ci_hi_seeds:+.0%}], "
                          f"D = {r.D:.2g}, {r.verdict_seeds}" for r in g[g["k"] > 0].itertuples())
        if items:
            out.append(STALENESS.format(lr=lr, student=primary, items=items))
    if admission:
        out.append((ADMISSION if admission["n_decisions"] else ADMISSION_NONE).format(**admission))
    for student, g in (rl.groupby("student") if len(rl) else ()):
        items = "; ".join(rl_item(r) for r in g.itertuples() if r.reference != r.config)
        if items:
            out.append(RL.format(student=student, items=items))
    if len(rl) and (spread := rl_spread(heldout, baseline, primary,
                                        RLCollapse.of(rl_thresholds).thresholds())):
        out.append(spread)
    out += distance_sentences(verdicts, heldout, baseline, student_specs or {})
    if predictors is not None and (line := predictor_sentence(predictors)):
        out.append(line)
    if predictors is not None and predictor_stats is not None \
            and (line := fitted_misses_sentence(predictors, predictor_stats)):
        out.append(line)
    if predictor_stats is not None and (line := tis_sentence(verdicts, rows, predictor_stats)):
        out.append(line)
    if kv is not None:
        out += kv_sentences(kv)
    if probes is not None:
        out += mechanism_sentences(*probes, baseline)
    if guard is not None:
        out += guard_sentences(guard)
    return "\n".join(out) + "\n"
