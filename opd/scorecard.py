"""The claims scorecard at the top of findings.md: one line per claim of the paper, the paper's number, the toy's
with its uncertainty from the analysis tables, and a verdict by the criterion docs/methods.md states. Science, not
plumbing: workflow/scripts/findings.py writes the file (opd.findings builds its text)."""
import numpy as np
import pandas as pd

from opd import mechanism, stats
from opd.rows import FIELD_TYPES, Row

MECH_SPACES = {"logit": "logit space", "param": "parameter space"}


def two_digits(v: float) -> str:
    """Two significant digits (0.70, 7.6, 23): the precision of the mechanism's sentences."""
    return f"{v:#.2g}".rstrip(".") if abs(v) < 10 else f"{v:.0f}"


def two_digit_span(values) -> str:
    v = pd.Series(values, dtype=float).dropna()
    if v.empty:
        return "–"
    lo, hi = two_digits(v.min()), two_digits(v.max())
    return lo if lo == hi else f"{lo}–{hi}"


# ---------------------------------------------------------------- the claims scorecard (top of findings.md)
# One line per claim of the paper: the paper's number (typed here, labelled as the paper's), the toy's with its
# uncertainty from the analysis tables, and a verdict by the criterion docs/methods.md states ("The claims
# scorecard"), fixed before the numbers were read.
AGREES, DISAGREES, UNRESOLVED = "agrees", "disagrees", "unresolved"
PAPER_BUDGET = (0.184, 0.39)  # the paper's B_emp(0.20) on its 7B student, nats/token
PAPER_KL0 = 0.0965  # the 7B student's initial held-out KL
PAPER_D0_RATIO = (230, 490)  # the budget's ends over the 7B standard engine's own D
PAPER_KV_LAYER0 = (0.93, 0.99)  # the first layer's share of the FP8 KV cache's mismatch (7B)
PAPER_KV_KEYS = 0.82  # the keys-only share of that layer's effect
PAPER_RL = {"reinforce": 12, "grpo": 60}  # the multiple of the standard mismatch at which each RL algorithm collapses
NEAR_FACTOR = 10  # an edge is resolved by fails and passes within this factor of it
NEAR_FAILS, NEAR_PASSES = 2, 3
ADMISSION_SHARE = 0.9  # the admission check agrees when it matches training on at least this share of candidates
Z95 = 1.96
SCORE = "- **{claim}** Paper: {paper}. Toy: {toy}. **{verdict}**: {why}."
SCORE_HEAD = ("## Claims scorecard\n\nOne line per claim of the paper: the paper's number, the toy's with its "
              "uncertainty, and agrees, disagrees or unresolved by the criterion in docs/methods.md (\"The claims "
              "scorecard\"). Seed-aware rule at τ = {tau:.0%} throughout; reference rows (their own learning rate "
              "or reference) are not sources.\n")


SCORE_DRAWS = ("Each verdict is judged across base-model draws: both sides are paired on each of the (up to) "
               "{n_draws} base models per student that the candidate ran, and the seed-aware interval covers the "
               "draws (\"Base-model draws\" below).\n")


def row_objects(rows: pd.DataFrame) -> list[Row]:
    """The rows of report.rows_frame as opd.rows.Row (its derived columns left out)."""
    return [Row.of({k: v for k, v in r.items() if k in FIELD_TYPES}) for r in rows.to_dict("records")]


def _span(lo, hi, fmt="{:.3g}") -> str:
    """[lo, hi], an empty side as "–"."""
    f = lambda v: "–" if np.isnan(v) else fmt.format(v)  # noqa: E731
    return f"[{f(lo)}, {f(hi)}]"


def budget_span(lo: float, hi: float, fmt: str = "{:.3g}", unit: str = "") -> str:
    """A budget B_emp = [largest passing D, smallest failing D] in words, never as an inverted interval: [lo, hi]
    (an empty side "–"), or where a fail lies below a pass, "inconsistent (largest pass D ... above smallest fail
    D ...)" with both numbers named."""
    if not (np.isnan(lo) or np.isnan(hi)) and lo > hi:
        return (f"inconsistent (largest pass D {fmt.format(lo)}{unit} above smallest fail D "
                f"{fmt.format(hi)}{unit})")
    return _span(lo, hi, fmt) + unit


def _g(v: float) -> str:
    """Two significant digits (two_digits), with 0 and infinity as themselves."""
    return "0" if v == 0 else "∞" if np.isinf(v) else two_digits(v)


def edge_words(e) -> str:
    """One mechanism's Delta = tau edge (a row of opd.stats.edge_tables) in D with its interval, over D(0) and as a
    share of the initial held-out KL; an edge beyond the rows' D as the side it lies on."""
    g = _g
    if np.isinf(e.D_edge):
        return f"{e.mechanism} above every row (D > {g(e.D_lo)} nats/token = {g(e.edge_over_d0_lo)}x D(0))"
    if e.D_edge == 0:
        return f"{e.mechanism} below every row (D < {g(e.D_hi)} nats/token = {g(e.edge_over_d0_hi)}x D(0))"
    return (f"{e.mechanism} {g(e.D_edge)} [{g(e.D_lo)}, {g(e.D_hi)}] nats/token = {g(e.edge_over_d0)}x "
            f"[{g(e.edge_over_d0_lo)}, {g(e.edge_over_d0_hi)}] D(0) = {e.edge_over_kl0:.1%} of its initial KL")


def ratio_words(r) -> str:
    g = _g
    return (f"{r.mechanism} / {r.versus} {g(r.ratio)} [{g(r.ratio_lo)}, {g(r.ratio_hi)}]"
            + ("" if r.coincide else " (differ)"))


def score_budget(edge: pd.DataFrame, edges: pd.DataFrame, ratios: pd.DataFrame) -> str:
    """The budget claim: one budget in D, judged on each student's mechanisms' Delta = tau edges (edges, ratios: the
    seed-aware rows of opd.stats.edge_tables): disagrees where two of a student's edges differ beyond their joint
    interval (a ratio whose interval excludes 1); agrees where every student has two edges to compare, none
    differs, and its B_emp edge has NEAR_FAILS fails and NEAR_PASSES passes within NEAR_FACTOR of it; unresolved
    otherwise. B_emp (every pass below every fail) is shown, not judged."""
    edges, ratios = edges[edges["rule"] == "seeds"], ratios[ratios["rule"] == "seeds"]
    items, verdict = [], AGREES
    for e in edge.sort_values("student").itertuples():
        span = budget_span(e.lo, e.hi, unit=" nats/token")
        units = (f"{_span(e.lo_over_d0, e.hi_over_d0, '{:.0f}')}x D(0), "
                 f"{_span(e.lo_over_kl0, e.hi_over_kl0, '{:.1%}')} of its initial KL {e.kl0:.3f}" if e.consistent else
                 f"{e.lo_over_d0:.0f}x and {e.hi_over_d0:.0f}x D(0), {e.lo_over_kl0:.1%} and {e.hi_over_kl0:.1%} of "
                 f"its initial KL {e.kl0:.3f}")
        near = (f"{e.n_fail_near} fail{'s' * (e.n_fail_near != 1)} and {e.n_pass_near} "
                f"pass{'es' * (e.n_pass_near != 1)} within {NEAR_FACTOR}x of its edge {e.edge:.3g}"
                if not np.isnan(e.edge) else "no edge (no fail or no pass)")
        mine, pairs = edges[edges["student"] == e.student], ratios[ratios["student"] == e.student]
        per_mechanism = "; ".join(edge_words(x) for x in mine.itertuples())
        compared = ("; edge ratios " + "; ".join(ratio_words(r) for r in pairs.itertuples())) if len(pairs) else             "; no two edges to compare"
        items.append(f"{e.student} B_emp {span}, {units}, {near}; Δ = τ edges: {per_mechanism or 'none'}{compared}")
        if len(pairs) and not pairs["coincide"].all():
            verdict = DISAGREES
        elif verdict == AGREES and (not len(pairs) or np.isnan(e.lo) or np.isnan(e.hi)
                                    or e.n_fail_near < NEAR_FAILS or e.n_pass_near < NEAR_PASSES):
            verdict = UNRESOLVED
    why = {AGREES: "every student's mechanisms' edges coincide within their joint intervals, and each budget is "
                   "resolved at its edge",
           DISAGREES: "on at least one student two mechanisms' Δ = τ edges differ beyond their joint interval: no "
                      "single edge in D",
           UNRESOLVED: f"no two edges differ, but some student has no two edges to compare or lacks {NEAR_FAILS} "
                       f"fails and {NEAR_PASSES} passes within {NEAR_FACTOR}x of its edge"}[verdict]
    paper = (f"B_emp(0.20) = {_span(*PAPER_BUDGET)} nats/token on the 7B student, {PAPER_D0_RATIO[0]}–"
             f"{PAPER_D0_RATIO[1]}x its standard engine's D, {PAPER_BUDGET[0] / PAPER_KL0:.1f}–"
             f"{PAPER_BUDGET[1] / PAPER_KL0:.1f}x its initial held-out KL {PAPER_KL0}")
    return SCORE.format(claim="A mismatch budget.", paper=paper, toy="; ".join(items) + " (edges: where each "
                        "mechanism's Δ, monotone in log D, crosses τ, with 95% intervals from joint seed-aware "
                        "replicates)", verdict=verdict, why=why)


def score_total_mismatch(decides: pd.DataFrame, verdicts: pd.DataFrame, rows: pd.DataFrame) -> str | None:
    """None where no student has the three sources a rank correlation needs and no redrawn row has a fixed twin."""
    items = [f"{d.student}: Spearman ρ(D, Δ) = {d.rho:.2f} [{d.ci_lo:.2f}, {d.ci_hi:.2f}] over {d.n} sources, "
             f"{d.n_inversions} of {d.n_pairs} pairs inverted, {d.n_significant} beyond the seeds"
             + (f" ({d.significant})" if d.n_significant else "")
             for d in decides.sort_values("student").itertuples() if d.n >= 3]
    redraw = rows[rows["noise_redraw"].fillna(False).astype(bool)] if "noise_redraw" in rows else rows.iloc[:0]
    v = verdicts.set_index(["student", "config"])
    for r in redraw.itertuples():
        fixed = rows[(rows["noise_sigma"] == r.noise_sigma) & ~rows["noise_redraw"].fillna(False).astype(bool)
                     & rows["in_budget"]]
        for (student, config) in [k for k in v.index if k[1] == r.name]:
            a = v.loc[(student, config)]
            for f in fixed["name"]:
                if (student, f) in v.index:
                    b = v.loc[(student, f)]
                    items.append(f"{student} σ = {r.noise_sigma:g} redrawn every step against fixed: D {a.D:.3g} vs "
                                 f"{b.D:.3g}, Δ {a.delta:+.0%} [{a.ci_lo_seeds:+.0%}, {a.ci_hi_seeds:+.0%}] vs "
                                 f"{b.delta:+.0%} [{b.ci_lo_seeds:+.0%}, {b.ci_hi_seeds:+.0%}]")
    if not items:
        return None
    judged = decides[decides["n"] >= 3]
    if (judged["n_significant"] > 0).any():
        verdict, why = DISAGREES, "a configuration with more mismatch does significantly better than one with less"
    elif len(judged) and (judged["ci_lo"] > 0).all():
        verdict, why = AGREES, "no inversion beyond the seeds, and ρ's interval is above 0 on every student"
    else:
        verdict, why = UNRESOLVED, "no inversion beyond the seeds, but ρ's interval reaches 0 on some student"
    return SCORE.format(claim="Total mismatch decides, not bits or versions.", paper="every pass has less D than "
                        "every fail on each student (staleness k = 8 at D 0.0028 passes, vLLM FP8 at 0.68 fails)",
                        toy="; ".join(items), verdict=verdict, why=why)


def score_staleness(verdicts: pd.DataFrame, rows: pd.DataFrame, primary: str) -> str | None:
    R = row_objects(rows)
    k8 = [r for r in R if r.staleness == 8 and r.has_standard_numerics and r.is_plain_opd]
    v = verdicts.set_index(["student", "config"])
    shown = [(r, v.loc[(primary, r.name)]) for r in k8 if (primary, r.name) in v.index]
    main = [(r, x) for r, x in shown if r.in_budget]
    if not main:
        return None
    items = [f"{r.name}{'' if r.in_budget else ' (reference row: its own learning rate ' + format(r.lr, 'g') + ')'}: "
             f"D = {x.D:.2g}, Δ = {x.delta:+.0%} [{x.ci_lo_seeds:+.0%}, {x.ci_hi_seeds:+.0%}], {x.verdict_seeds}"
             for r, x in shown]
    passes = main[0][1].verdict_seeds == "pass"
    return SCORE.format(claim="Staleness k = 8 passes.", paper="k = 8 at D = 0.0028 passes", toy=f"{primary}: "
                        + "; ".join(items), verdict=AGREES if passes else DISAGREES,
                        why=f"k = 8 at the experiment's own learning rate {'passes' if passes else 'fails'}")


def score_kv(kv: pd.DataFrame) -> str:
    items, ok = [], []
    for (student, recipe), k in kv.groupby(["student", "recipe"]):
        k = k.set_index(["mode", "layer", "part"])
        a, b = k.loc[("only", 0, "kv")], k.loc[("all", -1, "kv")]
        share = a["d_hat"] / b["d_hat"]
        se = share * np.hypot(a["se"] / a["d_hat"], b["se"] / b["d_hat"])
        keys = k.loc[("only", 0, "k")]
        ok.append(share + Z95 * se >= PAPER_KV_LAYER0[0])
        items.append(f"{student} {recipe}: layer 0 alone {share:.0%} ± {se:.0%} of every layer's D̂, keys alone "
                     f"{keys['share']:.0%} ± {keys['share_se']:.0%} of layer 0's")
    verdict = AGREES if all(ok) else DISAGREES if not any(ok) else UNRESOLVED
    why = (f"layer 0's share reaches {PAPER_KV_LAYER0[0]:.0%} within 1.96 SE on {sum(ok)} of {len(ok)} students and "
           f"recipes")
    return SCORE.format(claim="The first layer carries the FP8 KV cache's mismatch.", paper=f"layer 0 is "
                        f"{PAPER_KV_LAYER0[0]:.0%}–{PAPER_KV_LAYER0[1]:.0%} of it (7B), keys ~{PAPER_KV_KEYS:.0%} of "
                        f"that layer's", toy="; ".join(items), verdict=verdict, why=why)


def variant_pairs(verdicts: pd.DataFrame, rows: pd.DataFrame, variant: str | None = None):
    """Each OPD update variant row (or those of `variant`) on each student beside the plain row of the same engine and
    settings: (row, plain row, student, the variant's verdict, the plain row's)."""
    R = row_objects(rows)
    v = verdicts.set_index(["student", "config"])
    for r in [x for x in R if x.algorithm == "opd" and x.variant != "none" and x.guard is None
              and variant in (None, x.variant)]:
        plain = next((x for x in R if x.is_plain_opd and x.engine_key == r.engine_key and x.lr == r.lr
                      and x.reference == r.reference), None)
        for student in [s for s, c in v.index if c == r.name]:
            if plain is not None and (student, plain.name) in v.index:
                yield r, plain, student, v.loc[(student, r.name)], v.loc[(student, plain.name)]


def score_variants(verdicts: pd.DataFrame, rows: pd.DataFrame) -> str | None:
    items, helps = [], []
    for r, plain, student, a, b in variant_pairs(verdicts, rows):
        helped = a.ci_hi_seeds < b.ci_lo_seeds
        helps.append(helped)
        items.append(f"{student} {r.variant} on {plain.name}: Δ {a.delta:+.0%} [{a.ci_lo_seeds:+.0%}, "
                     f"{a.ci_hi_seeds:+.0%}] against {b.delta:+.0%} [{b.ci_lo_seeds:+.0%}, {b.ci_hi_seeds:+.0%}]"
                     + (" (helps)" if helped else ""))
    if not items:
        return None
    verdict = DISAGREES if any(helps) else AGREES
    why = (f"{sum(helps)} of {len(helps)} variants' seed-aware intervals lie wholly below the plain engine's"
           if any(helps) else "no variant's seed-aware interval lies wholly below the plain engine's")
    return SCORE.format(claim="TIS, score centering and an advantage offset do not help OPD.", paper="neutral to "
                        "slightly harmful", toy="; ".join(items), verdict=verdict, why=why)


def score_rl(rl: pd.DataFrame, verdicts: pd.DataFrame, d0: dict) -> str | None:
    rl = rl[(rl["reference"] != rl["config"]) & (rl["variant"] == "none")]
    if rl.empty:
        return None
    v = verdicts.set_index(["student", "config"])
    items, first_rl, first_opd = [], {}, {}
    for r in rl.sort_values(["algorithm", "D"]).itertuples():
        opd_d = v["D"].get((r.student, r.opd_config), float("nan")) if r.opd_config else float("nan")
        opd_pass = r.opd_verdict_seeds == "pass"
        n = int(r.n_seeds)
        se = f" ± {r.accuracy_change_se:.1f}" if np.isfinite(r.accuracy_change_se) else ""
        engine = (f"engine D {opd_d:.2g} = {opd_d / d0[r.student]:.0f}x D(0)" if np.isfinite(opd_d)
                  else "no OPD row on this engine")
        items.append(f"{r.config} ({n} seed{'s' if n != 1 else ''}, {engine}): "
                     f"{r.accuracy_change:+.1f}{se} points, {'collapsed' if r.collapsed else 'no collapse'}; OPD "
                     f"{r.opd_verdict_seeds or 'not run'}")
        first_rl[r.algorithm] = first_rl.get(r.algorithm, False) or (bool(r.collapsed) and opd_pass)
        first_opd[r.algorithm] = first_opd.get(r.algorithm, False) or (not r.collapsed and r.opd_verdict_seeds == "fail")
    # per algorithm: agrees where it collapses on an engine OPD passes, disagrees where instead OPD fails an engine on
    # which it does not collapse; the claim agrees only if every algorithm agrees, disagrees only if none does
    agree = [a for a in first_rl if first_rl[a]]
    disagree = [a for a in first_rl if first_opd[a] and not first_rl[a]]
    parts = ([f"{', '.join(agree)} collapses on an engine OPD passes"] if agree else []) + \
        ([f"for {', '.join(disagree)} OPD fails an engine on which RL does not collapse, and RL collapses on no "
          "engine OPD passes"] if disagree else [])
    if len(agree) == len(first_rl):
        verdict, why = AGREES, "each algorithm collapses on an engine OPD passes"
    elif disagree and not agree:
        verdict, why = DISAGREES, parts[-1]
    else:
        verdict, why = UNRESOLVED, "; ".join(parts) if parts else "no engine separates them"
    return SCORE.format(claim="RL breaks before OPD.", paper=f"REINFORCE collapses at ~{PAPER_RL['reinforce']}x the "
                        f"standard mismatch and GRPO at ~{PAPER_RL['grpo']}x, on engines OPD passes",
                        toy="; ".join(items) + " (accuracy: the seeds' mean against the same algorithm on the "
                        "standard engine, ± its standard error: over the base-model draws, each draw's runs paired, "
                        "where the runs span several; over seeds otherwise)", verdict=verdict, why=why)


def prospective_text(p: stats.ProspectiveTest) -> str:
    """One frozen rule's prospective test in words."""
    if not p.n:
        return (f"the frozen rule {p.name} (config.yaml: admit iff {p.label}, fitted on {p.n_fitted_on} candidates) "
                f"has no candidate with an outcome it was not fitted on yet")
    return (f"the frozen rule {p.name} (config.yaml: admit iff {p.label}, fitted on {p.n_fitted_on} candidates, "
            f"then fixed before the runs of {p.n} new ones) matches {p.n_agree} of {p.n} new candidates "
            f"prospectively ({p.n_agree / p.n:.0%}; on the same candidates the paper's rule matches "
            f"{p.n_agree_paper}, admitting every one {p.n_agree_all})")


def prospective_texts(tests) -> str:
    """Every frozen rule's prospective test in words, in config.yaml's order."""
    return "; ".join(prospective_text(p) for p in tests)


def score_admission(a: dict, fitted: stats.FittedRule | None = None, prospective=()) -> str | None:
    """None where the matrix holds no admission decision (no candidate row on a student with a budget). The claim
    is the paper's rule's; the fitted rule and the frozen rules' prospective tests (tiny backend), where there are
    any, are said beside it, not scored."""
    if not a["n_decisions"]:
        return None
    share = a["n_agree"] / a["n_decisions"]
    if share >= ADMISSION_SHARE and a["n_agree"] > a["n_admit_all_agree"]:
        verdict, why = AGREES, f"at least {ADMISSION_SHARE:.0%} of decisions match and more than admitting all"
    elif a["n_agree"] <= a["n_admit_all_agree"]:
        verdict, why = DISAGREES, "no better than admitting every candidate"
    else:
        verdict, why = UNRESOLVED, f"better than admitting every candidate, below {ADMISSION_SHARE:.0%}"
    return SCORE.format(claim="The admission check predicts training.", paper="all 8 pre-fixed decisions matched",
                        toy=f"{a['n_agree']} of {a['n_decisions']} decisions match ({share:.0%}); admitting every "
                        f"candidate would match {a['n_admit_all_agree']}" + ("" if fitted is None else
                        f"; beside it, the fitted rule (beyond the paper: admit iff {fitted.label}) matches "
                        f"{fitted.n_agree_held_out} of {fitted.n_held_out} held out "
                        f"({fitted.n_agree_held_out / fitted.n_held_out:.0%}, each candidate decided by the rule "
                        f"chosen and fitted without it)") + ("" if not prospective else
                                                              f"; {prospective_texts(prospective)}"),
                        verdict=verdict, why=why)

def score_mechanism(t: pd.DataFrame) -> list[str]:
    worst = mechanism.bound_max(t)
    holds = bool(worst.max() <= 1)
    out = [SCORE.format(claim="The bias bound ‖g_bias‖₁ ≤ 2‖δ‖₁‖A‖∞.", paper="holds (a theorem; OPD's bias vanishes "
                        "as A → 0)", toy=f"largest ratio to the bound {worst['opd']:.2f} (OPD) over "
                        f"{mechanism.n_prefixes_checked(t):,} prefixes", verdict=AGREES if holds else DISAGREES,
                        why="it holds on every prefix checked" if holds else "violated on some prefix")]
    last = int(t["step"].max())
    items, faster, n = [], 0, 0
    for space in ("param", "logit"):
        s, tt = mechanism.growths(t, "S", last, space), mechanism.growths(t, "T", last, space)
        if len(s):
            items.append(f"{MECH_SPACES[space]}, step {last}: S {two_digit_span(s)}x, T {two_digit_span(tt)}x, S "
                         f"faster in {int((s > tt).sum())} of {len(s)} probe seeds")
            faster, n = faster + int((s > tt).sum()), n + len(s)
    if n:
        verdict = AGREES if faster == n else DISAGREES if faster == 0 else UNRESOLVED
        out.append(SCORE.format(claim=f"The prefix shift S grows faster than the per-token error T (σ {mechanism.LO:g} "
                                f"→ {mechanism.HI:g}).", paper="S 5.3x (0.098 → 0.517), T 2.1x (0.198 → 0.417)",
                                toy="; ".join(items), verdict=verdict,
                                why=f"S grows faster in {faster} of {n} probe seeds and spaces"))
    return out


def scorecard(verdicts, edge, decides, rows, heldout, admission, rl, tau, primary, kv=None, probes=None,
              fitted=None, prospective=(), edges=None, edge_ratios=None) -> list[str]:
    """The claims scorecard's lines (markdown), from the analysis tables; `fitted`: the fitted admission rule
    (opd.stats.fitted_rule_of) and `prospective`: the frozen rules' tests (opd.stats.prospective_tests_of), where
    the predictors stage ran; edges, edge_ratios: the analysis's edges.parquet and edge_ratios.parquet (the budget
    claim is judged on them)."""
    d0 = edge.set_index("student")["d0"].to_dict()
    lines = [score_budget(edge, edges, edge_ratios), score_total_mismatch(decides, verdicts, rows),
             score_staleness(verdicts, rows, primary), score_kv(kv) if kv is not None else None,
             score_variants(verdicts, rows), score_rl(rl, verdicts, d0) if len(rl) else None,
             score_admission(admission, fitted, prospective) if admission else None]
    lines += score_mechanism(probes[0]) if probes is not None else []
    n_draws = int(verdicts["n_draws"].max()) if "n_draws" in verdicts and len(verdicts) else 1
    head = SCORE_HEAD.format(tau=tau) + ("" if n_draws < 2 else SCORE_DRAWS.format(n_draws=n_draws))
    return [head] + [x for x in lines if x] + ["", "## Findings", ""]
