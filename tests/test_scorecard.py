"""The claims scorecard (opd.scorecard): pure functions of the analysis tables, each verdict branch exercised on
small synthetic tables."""
import numpy as np
import pandas as pd
import pytest

from opd import scorecard as S
from opd.rows import Row

INF = np.inf


def edge_row(student, mechanism, D, lo, hi, d0=1e-4, kl0=0.1, rule="seeds", D_min=0.001, D_max=0.5):
    """D_min, D_max: the smallest and largest D of the mechanism's rows."""
    return {"student": student, "mechanism": mechanism, "rule": rule, "tau": 0.2, "D_edge": D, "D_lo": lo, "D_hi": hi,
            "D_min": D_min, "D_max": D_max,
            "edge_over_d0": D / d0, "edge_over_d0_lo": lo / d0, "edge_over_d0_hi": hi / d0, "edge_over_kl0": D / kl0,
            "edge_over_kl0_lo": lo / kl0, "edge_over_kl0_hi": hi / kl0, "d0": d0, "kl0": kl0, "n_rows": 4}


def ratio_row(student, mechanism, versus, ratio, lo, hi, rule="seeds"):
    return {"student": student, "rule": rule, "tau": 0.2, "mechanism": mechanism, "versus": versus, "ratio": ratio,
            "ratio_lo": lo, "ratio_hi": hi, "coincide": bool(lo <= 1 <= hi)}


def bemp(student, lo=0.01, hi=0.02, consistent=True, near=(3, 2)):
    return {"student": student, "rule": "seeds", "tau": 0.2, "lo": lo, "hi": hi, "edge": np.sqrt(lo * hi),
            "consistent": consistent, "n_pass_near": near[0], "n_fail_near": near[1], "d0": 1e-4, "kl0": 0.1,
            "lo_over_d0": lo / 1e-4, "hi_over_d0": hi / 1e-4, "lo_over_kl0": lo / 0.1, "hi_over_kl0": hi / 0.1}


# two students: "a" with fixed and redrawn noise edges that differ, "b" with fixed noise and staleness that coincide
EDGES = pd.DataFrame([edge_row("a", "noise_fixed", 0.01, 0.006, 0.02), edge_row("a", "noise_redrawn", INF, 0.2, INF),
                      edge_row("b", "noise_fixed", 0.02, 0.01, 0.05), edge_row("b", "staleness", 0.015, 0.005, 0.03),
                      edge_row("b", "staleness@lr=3e-05", INF, 0.004, INF),
                      edge_row("a", "noise_fixed", 0.01, 0.009, 0.011, rule="paper")])
RATIOS = pd.DataFrame([ratio_row("a", "noise_redrawn", "noise_fixed", INF, 10.0, INF),
                       ratio_row("b", "staleness", "noise_fixed", 0.75, 0.2, 2.5),
                       # a reference row's lr against the experiment's: differs, but is not judged
                       ratio_row("b", "staleness@lr=3e-05", "staleness", INF, 3.0, INF)])


def verdict_of(claim):
    return claim.verdict


# ---------------------------------------------------------------- the edges and where a D lies against one

def test_edge_place_says_within_beyond_or_undecided():
    e = pd.DataFrame([edge_row("a", "noise_fixed", 0.018, 0.0098, 0.14)]).iloc[0]
    assert S.edge_place(0.004, e) == "within the fixed-noise edge (D 0.0040 < edge 0.018 [0.0098, 0.14])"
    assert S.edge_place(0.2, e) == "beyond the fixed-noise edge (D 0.20 > edge 0.018 [0.0098, 0.14])"
    assert S.edge_place(0.05, e).startswith("inside the fixed-noise edge's interval: undecided (D 0.050")
    above = pd.DataFrame([edge_row("a", "noise_redrawn", INF, 0.39, INF, D_max=0.69)]).iloc[0]
    assert S.edge_place(0.01, above) == ("within the redrawn-noise edge (D 0.010 < 0.39, the edge's 95% lower bound; "
                                         "it lies above every row, > 0.69)")
    assert S.edge_place(0.5, above) == ("inside the redrawn-noise edge's interval: undecided (D 0.50; the edge > 0.69 "
                                        "(above every row; 95% lower bound 0.39))")
    below = pd.DataFrame([edge_row("a", "staleness", 0.0, 0.0, 0.003, D_min=0.001)]).iloc[0]
    assert S.edge_place(0.01, below).startswith("beyond the staleness edge (D 0.010 > 0.0030, the edge's 95% upper")
    assert S.mechanism_label("staleness@lr=3e-05") == "staleness (lr 3e-05)"


def test_an_edge_beyond_every_row_is_said_beyond_its_rows_largest_d_with_its_bound_apart():
    """An edge above every row lies above the largest D of its rows (D_max), not above its 95% lower bound (D_lo),
    which replicates crossing inside the rows pull below it."""
    above = pd.DataFrame([edge_row("a", "noise_redrawn", INF, 0.056, INF, d0=1e-3, D_max=0.685)]).iloc[0]
    assert S.edge_cell(above) == "> 0.69 (above every row; 95% lower bound 0.056)"
    assert S.beyond(above, above.d0, side=False) == "> 685 (95% lower bound 56)"
    below = pd.DataFrame([edge_row("a", "staleness", 0.0, 0.0, 0.003, D_min=0.001)]).iloc[0]
    assert S.edge_cell(below) == "< 0.0010 (below every row; 95% upper bound 0.0030)"
    t = pd.DataFrame([edge_row("a", "noise_redrawn", INF, 0.056, INF, D_max=0.685),
                      edge_row("b", "noise_redrawn", INF, 0.39, INF, D_max=0.51),
                      edge_row("c", "noise_redrawn", 0.01, 0.005, 0.02)])
    assert S.edge_range_words(t, " nats/token") == ("at D 0.010 nats/token on 1; above every row (D > 0.51–0.69 "
                                                    "nats/token; 95% lower bound 0.056–0.39) on 2")


def test_spreads_take_each_students_largest_edge_over_its_smallest_oriented_and_judged():
    sp = {s.student: s for s in S.spreads(EDGES, RATIOS)}
    assert (sp["a"].top, sp["a"].bottom, sp["a"].lo, sp["a"].state) == ("noise_redrawn", "noise_fixed", 10.0, "differ")
    # b's largest judged edge is fixed noise (the lr-3e-05 staleness is not judged): the ratio inverted
    b = sp["b"]
    assert (b.top, b.bottom) == ("noise_fixed", "staleness")
    assert b.ratio == pytest.approx(1 / 0.75) and (b.lo, b.hi) == pytest.approx((1 / 2.5, 1 / 0.2))
    assert b.state == "coincide"
    assert S.ratio_state(0.0, INF, True) == "undecided" and S.ratio_state(2, 3, False) == "differ"


# ---------------------------------------------------------------- one mismatch budget in D

def test_budget_disagrees_where_two_edges_differ_and_never_prints_an_inverted_interval():
    edge = pd.DataFrame([bemp("a", 0.6, 0.05, consistent=False), bemp("b")])
    c = S.claim_budget(edge, EDGES, RATIOS)
    assert c.verdict == S.DISAGREES and "on 1 of 2 students" in c.why
    # one test with total mismatch's: the plain sentence says both, with the spread's lower bound
    assert "or (one test) that total mismatch decides" in c.plain and "at least 10x apart on 1 of 2 students" in c.plain
    assert "fixed-noise at D 0.010–0.020 (100–200x D(0), 10–20% of the initial KL)" in c.toy
    assert "redrawn-noise above every row (D > 0.50; 95% lower bound 0.20)" in c.toy and "on 1 of 2 students" in c.toy
    assert "the same test as total mismatch's" in c.why
    assert "[0.6, 0.05]" not in c.toy + c.plain and "[0.184, 0.39] nats/token" in c.paper
    assert "B_emp inconsistent (a fail below a pass) on 1 of 2 students" in c.toy


def test_budget_agrees_only_with_every_student_compared_and_resolved():
    coincide = RATIOS.assign(ratio_lo=0.5, ratio_hi=2.0, coincide=True)
    edge = pd.DataFrame([bemp("a"), bemp("b")])
    assert S.claim_budget(edge, EDGES, coincide).verdict == S.AGREES
    # too few rows near a B_emp edge, or a student with nothing to compare: unresolved
    assert S.claim_budget(pd.DataFrame([bemp("a", near=(1, 1)), bemp("b")]), EDGES, coincide).verdict == S.UNRESOLVED
    only_b = coincide[coincide["student"] == "b"]
    assert S.claim_budget(edge, EDGES, only_b).verdict == S.UNRESOLVED
    # a ratio at another learning rate that differs is not judged
    lr_only = RATIOS.assign(coincide=[True, True, False], ratio_lo=[0.5, 0.2, 3.0])
    assert S.claim_budget(edge, EDGES, lr_only).verdict == S.AGREES


# ---------------------------------------------------------------- total mismatch decides

def test_total_mismatch_one_ratio_per_student():
    c = S.claim_total_mismatch(EDGES, RATIOS)
    assert c.verdict == S.DISAGREES and "a ∞ [10, ∞] (redrawn-noise / fixed-noise, differ)" in c.toy
    assert "b 1.3 [0.40, 5.0] (fixed-noise / staleness, coincide)" in c.toy and "at least 10x" in c.plain
    ok = RATIOS.assign(ratio=[1.2, 0.75, INF], ratio_lo=[0.5, 0.2, 3.0], ratio_hi=[3.0, 2.5, INF],
                       coincide=[True, True, False])
    edges = EDGES.assign(D_edge=EDGES["D_edge"].replace(INF, 0.3))
    assert S.claim_total_mismatch(edges, ok).verdict == S.AGREES
    wide = ok.assign(ratio_hi=[INF, 2.5, INF])  # a holds 1 only because its interval runs to infinity
    assert S.claim_total_mismatch(edges, wide).verdict == S.UNRESOLVED
    assert S.claim_total_mismatch(EDGES[EDGES["student"] == "a"].iloc[:1], RATIOS.iloc[:0]) is None


def test_budget_and_total_mismatch_rest_on_one_test():
    """Where a student's largest and smallest edges coincide but another pair differs, both claims see the same
    difference (differs), and the spread shows the pair that differs."""
    edges = pd.DataFrame([edge_row("c", "noise_fixed", 0.01, 0.002, 0.05), edge_row("c", "staleness", 0.02, 0.015, 0.03),
                          edge_row("c", "noise_redrawn", 0.04, 0.001, 0.5)])
    ratios = pd.DataFrame([ratio_row("c", "noise_redrawn", "noise_fixed", 4.0, 0.1, 50.0),
                           ratio_row("c", "staleness", "noise_fixed", 2.0, 1.2, 3.0),  # differs
                           ratio_row("c", "noise_redrawn", "staleness", 2.0, 0.05, 30.0)])
    assert S.differing(edges, ratios) == ["c"]
    edge = pd.DataFrame([bemp("c")])
    assert S.claim_budget(edge, edges, ratios).verdict == S.claim_total_mismatch(edges, ratios).verdict == S.DISAGREES
    (sp,) = S.spreads(edges, ratios)
    assert (sp.top, sp.bottom, sp.state) == ("staleness", "noise_fixed", "differ")
    coincide = ratios.assign(ratio_lo=0.5, coincide=True)
    assert not S.differing(edges, coincide) and S.claim_total_mismatch(edges, coincide).verdict != S.DISAGREES
    assert S.claim_budget(edge, edges, coincide).verdict != S.DISAGREES


# ---------------------------------------------------------------- staleness k = 8 passes, at the paper's scale

def staleness(delta_lo, delta_hi, D_small=0.0002):
    """qwen-like rows: k = 0..8 at the experiment's lr (k = 8 far up the budget) and a lower lr whose k = 2 sits at
    the paper's share of the edge (0.0002 / 0.01 = 2%, the paper's 1.5% within 3x)."""
    rows = [(1e-4, 0, "bf16", 1e-4, 0.0, 0.0, 0.0, "pass"), (1e-4, 8, "k8", 0.05, 3.0, 1.0, 9.0, "fail"),
            (3e-5, 0, "lo-k0", 6e-5, 0.0, 0.0, 0.0, "pass"),
            (3e-5, 2, "lo-k2", D_small, 0.01, delta_lo, delta_hi, "pass" if delta_lo < 0.2 else "fail"),
            (3e-5, 8, "lo-k8", 0.004, 0.09, 0.03, 0.16, "pass")]
    return pd.DataFrame(rows, columns=["lr", "k", "config", "D", "delta", "ci_lo_seeds", "ci_hi_seeds",
                                       "verdict_seeds"])


def test_staleness_is_judged_on_the_rows_at_the_papers_share_of_the_edge():
    c = S.claim_staleness(staleness(-0.01, 0.05), EDGES, "a", 0.2)
    assert c.verdict == S.AGREES and "lo-k2 (2.0%, 3.3x D(0))" in c.toy
    assert "k8" not in c.toy.split("itself")[0]  # the k = 8 rows are shown, not judged
    assert "k8 at 500% (fail)" in c.toy and "lo-k8 at 40% (pass)" in c.toy and "1.5% of its budget edge" in c.paper
    assert S.claim_staleness(staleness(0.22, 0.4), EDGES, "a", 0.2).verdict == S.DISAGREES
    assert S.claim_staleness(staleness(0.1, 0.3), EDGES, "a", 0.2).verdict == S.UNRESOLVED  # the interval holds τ
    assert S.claim_staleness(staleness(-0.01, 0.05, D_small=0.001), EDGES, "a", 0.2).verdict == S.UNRESOLVED  # none
    assert S.claim_staleness(staleness(-0.01, 0.05), EDGES, "nobody", 0.2) is None


# ---------------------------------------------------------------- the first layer's KV share: untestable

def test_kv_is_untestable_at_toy_scale_and_still_shows_the_numbers():
    row = lambda mode, layer, part, d, se, sh=np.nan, sh_se=np.nan: {  # noqa: E731
        "student": "s", "recipe": "fp8_e4m3", "mode": mode, "layer": layer, "part": part, "d_hat": d, "se": se,
        "share": sh, "share_se": sh_se}
    kv = pd.DataFrame([row("all", -1, "kv", 0.004, 0.0004), row("only", 0, "kv", 0.002, 0.0003),
                       row("only", 0, "k", 0.0016, 0.0003, 0.82, 0.07), row("only", 0, "v", 0.0002, 0.0001, 0.07, 0.04)])
    c = S.claim_kv(kv)
    assert c.verdict == S.UNTESTABLE and "QK-norm" in c.why and "trained from scratch" in c.why
    assert "layer 0 alone 50% of every layer's D̂" in c.toy and "keys alone 82% of layer 0's" in c.toy
    unresolved = kv.assign(share_se=kv["share_se"] * 10)
    assert "keys alone" not in S.claim_kv(unresolved).toy


# ---------------------------------------------------------------- TIS, centering, offset: within budget

def rows_frame(rows):
    R = [Row.of(r) for r in rows]
    return pd.DataFrame([r.resolved() for r in R]).assign(in_budget=[r.in_budget for r in R],
                                                          engine_key=[r.engine_key for r in R])


VARIANT_ROWS = rows_frame([{"name": "bf16", "baseline": True}, {"name": "q", "weights": "nvfp4"},
                           {"name": "q-tis", "weights": "nvfp4", "variant": "tis"},
                           {"name": "n", "noise_sigma": 0.3}, {"name": "n-center", "noise_sigma": 0.3,
                                                               "variant": "score_centering"},
                           {"name": "n-tis", "noise_sigma": 0.3, "variant": "tis"}])


def verdicts(q_tis=(0.01, -0.02, 0.04), n_tis=(0.1, 0.05, 0.15), q_verdict="pass"):
    v = [("bf16", 0.0, 0.0, 0.0, "pass"), ("q", 0.12, -0.02, 0.29, q_verdict), ("q-tis", *q_tis, "pass"),
         ("n", 0.6, 0.4, 0.8, "fail"), ("n-center", 0.5, 0.3, 0.7, "fail"), ("n-tis", *n_tis, "pass")]
    return pd.DataFrame([{"student": "s", "config": c, "D": 0.01, "delta": d, "ci_lo_seeds": lo, "ci_hi_seeds": hi,
                          "verdict_seeds": vs} for c, d, lo, hi, vs in v])


def test_variants_are_judged_on_engines_within_budget():
    c = S.claim_variants(verdicts(), VARIANT_ROWS)
    assert c.verdict == S.AGREES and "within budget: TIS on q (s)" in c.toy
    assert "outside budget only (plain fails on n): score centering" in c.toy and "outside budget TIS helps on 1 of 1 engine" in c.toy
    assert "score centering ran only outside it, where TIS helps" in c.plain
    # TIS wholly below the plain engine's interval within budget: it helps, the claim disagrees
    assert S.claim_variants(verdicts(q_tis=(-0.1, -0.15, -0.05)), VARIANT_ROWS).verdict == S.DISAGREES
    # the only engine within budget fails now: nothing to judge on
    assert S.claim_variants(verdicts(q_verdict="fail"), VARIANT_ROWS).verdict == S.UNRESOLVED


# ---------------------------------------------------------------- RL, admission, the mechanism

def rl(collapsed, opd):
    return pd.DataFrame([{"student": "s", "config": f"rl-{a}-{i}", "algorithm": a, "variant": "none",
                          "reference": f"rl-{a}-bf16", "opd_config": f"e{i}", "collapsed": c,
                          "opd_verdict_seeds": o} for a in ("reinforce", "grpo") for i, (c, o) in
                         enumerate(zip(collapsed[a], opd))])


def test_rl_breaks_before_opd():
    v = pd.DataFrame([{"student": "s", "config": f"e{i}", "D": d} for i, d in enumerate((0.001, 0.01, 0.1))])
    opd = ("pass", "pass", "fail")
    c = S.claim_rl(rl({"reinforce": (False, True, True), "grpo": (False, False, True)}, opd), v, {"s": 1e-4})
    assert c.verdict == S.UNRESOLVED  # GRPO collapses only where OPD fails too
    c = S.claim_rl(rl({"reinforce": (False, True, True), "grpo": (False, True, True)}, opd), v, {"s": 1e-4})
    assert c.verdict == S.AGREES and "REINFORCE collapses from 100x D(0)" in c.plain
    c = S.claim_rl(rl({"reinforce": (False, False, False), "grpo": (False, False, False)}, opd), v, {"s": 1e-4})
    assert c.verdict == S.DISAGREES


def test_admission():
    a = {"n_decisions": 10, "n_agree": 9, "n_admit_all_agree": 6}
    assert S.claim_admission(a).verdict == S.AGREES
    assert S.claim_admission({**a, "n_agree": 7}).verdict == S.UNRESOLVED
    assert S.claim_admission({**a, "n_agree": 6}).verdict == S.DISAGREES
    assert S.claim_admission({**a, "n_decisions": 0}) is None


def probes(faster_param, faster_logit):
    """Two probe seeds at sigma LO and HI, step 0 and 10: S/U grows 3x or 1.5x, T/U 2x, per space."""
    out = []
    for seed in (0, 1):
        for sigma in (S.mechanism.LO, S.mechanism.HI):
            hi = sigma == S.mechanism.HI
            row = {"probe_seed": seed, "noise_sigma": sigma, "step": 10, "opd_bias_bound_max_l1": 0.5,
                   "rl_bias_bound_max_l1": 0.4, "n_prefixes_q": 10, "n_prefixes_fixed": 5}
            for sp, fast in (("param", faster_param), ("logit", faster_logit)):
                row.update({f"U_{sp}": 1.0, f"T_{sp}": 2.0 if hi else 1.0, f"S_{sp}": (3.0 if fast else 1.5) if hi else 1.0})
            out.append(row)
    return pd.DataFrame(out)


def test_the_mechanism_claims():
    assert S.claim_bound(probes(True, True)).verdict == S.AGREES
    assert S.claim_bound(probes(True, True).assign(opd_bias_bound_max_l1=1.2)).verdict == S.DISAGREES
    assert S.claim_growth(probes(True, True)).verdict == S.AGREES
    assert S.claim_growth(probes(False, False)).verdict == S.DISAGREES
    mixed = S.claim_growth(probes(True, False))
    assert mixed.verdict == S.UNRESOLVED and "2 of 4" in mixed.plain


# ---------------------------------------------------------------- redrawn noise, the guard, the layout

def test_redraw_and_guard_sentences():
    r = S.redraw(EDGES, RATIOS)
    assert (r.n, r.n_differ) == (1, 1) and "above every row (D > 0.50 nats/token; 95% lower bound 0.20)" in r.sentence()
    assert "persistence" in r.sentence()
    gd = pd.DataFrame([{"unguarded": u, "verdict_seeds": "pass", "unguarded_verdict_seeds": uv, "d_max": 0.004,
                        "D_over_d_max": x} for u, uv, x in (("a", "fail", 0.15), ("b", "pass", 0.86))])
    assert S.guard_sentence(gd) == ("Beyond the paper, a guard falling back past d_max = 0.004 keeps every guarded row "
                                    "passing (1 whose unguarded twin fails) at 0.15–0.86x that line.")
    # its cost: the share of steps on the cheap engine, and the rows that are nearly their fallback's runs
    gd = gd.assign(config=["a-guard", "b-guard"], cheap_share=[0.53, 0.04], fallback_is_standard=True)
    assert S.guard_sentence(gd) == ("Beyond the paper, a guard falling back past d_max = 0.004 keeps every guarded row "
                                    "passing (1 whose unguarded twin fails) at 0.15–0.86x that line, on the cheap "
                                    "engine for only 4.0–53% of steps (4.0% on b-guard: nearly BF16).")
    assert S.guard(gd.assign(cheap_share=[0.53, 0.3])).cost() == "on the cheap engine for only 30–53% of steps"


def test_the_scorecard_table_has_one_line_per_claim():
    cs = [S.claim_budget(pd.DataFrame([bemp("a"), bemp("b")]), EDGES, RATIOS), S.claim_total_mismatch(EDGES, RATIOS)]
    table = S.scorecard_table(cs)
    assert table[0] == "| claim | paper | toy | verdict |" and len(table) == 2 + len(cs)
    assert all(line.count(" | ") == 3 for line in table[2:]) and "**disagrees**" in table[2]
    assert S.phrases(cs, S.DISAGREES) == "one budget in D and total mismatch deciding" and not S.phrases(cs, S.AGREES)
    # one test behind both: a list of verdicts counts it once
    assert S.phrases(S.one_test(cs), S.DISAGREES) == "one budget in D and, by the same test, total mismatch deciding"
    assert [c.key for c in S.one_test(cs)] == ["budget"]
    unresolved = [S.replace(c, verdict=S.UNRESOLVED) for c in cs]  # folded only where both disagree
    assert S.one_test(unresolved) == unresolved


# ---------------------------------------------------------------- the regime's three predictions

def regime_steps(h_by_student):
    """Baseline steps whose token entropy per student is h (two runs, two steps each, unequal token counts)."""
    rows = []
    for s, h in h_by_student.items():
        for run in (0, 1):
            for step, (ent, tok) in enumerate(((h * 0.5, 10), (h * 1.5 + (h / 30 if run else -h / 30), 10))):
                rows.append({"config": "bf16", "student": s, "run_id": f"bf16.{s}.s{run}", "step": step, "d_n": 0.0,
                             "entropy": ent, "n_tokens": tok})
    rows.append({"config": "other", "student": "a", "run_id": "x", "step": 0, "d_n": 1.0, "entropy": 9.0,
                 "n_tokens": 5})
    return pd.DataFrame(rows)


def test_the_regime_judges_each_prediction_on_the_interval():
    steps = regime_steps({"a": 0.1, "b": 0.2})
    assert S.token_entropy(steps, "bf16").round(12).to_dict() == {"a": 0.1, "b": 0.2}  # the other row is not read
    # a: D(0) 1e-5 over H 0.1 = 1e-4; b: 2.2e-5 over 0.2 = 1.1e-4 (5% from their mean)
    edges = pd.DataFrame([edge_row("a", "noise_fixed", 0.004, 0.002, 0.006, d0=1e-5, kl0=0.1),
                          edge_row("b", "noise_fixed", 0.005, 0.003, 0.008, d0=2.2e-5, kl0=0.1),
                          edge_row("a", "noise_fixed", 0.5, 0.4, 0.6, d0=1e-5, kl0=0.1, rule="paper")])
    r = S.regime(steps, edges, "bf16")
    assert r.students == ("a", "b") and np.allclose(r.d0_over_h, (1e-4, 1.1e-4))
    assert r.deviation == pytest.approx(0.05 / 1.05)
    # (b) a: [200, 600]x inside 115-980; b: [136, 364]x inside: holds. (c) a [2%, 6%], b [3%, 8%] < 20%: holds
    assert r.states == ("holds", "holds", "holds")
    wide = pd.DataFrame([edge_row("a", "noise_fixed", 0.004, 0.0005, 0.05, d0=1e-5, kl0=0.1),
                         edge_row("b", "noise_fixed", 0.05, 0.03, 0.08, d0=2.2e-5, kl0=0.1)])
    # a's interval [50, 5000]x straddles the band (undecided), b's [1364, 3636]x lies above it (fails): fails;
    # (c) a [0.5%, 50%] straddles 20%, b [30%, 80%] above it: fails
    assert S.regime(steps, wide, "bf16").states == ("holds", "fails", "fails")
    far = regime_steps({"a": 0.1, "b": 0.05})  # b's D(0) / H is 4.4x a's
    assert S.regime(far, edges, "bf16").states[0] == "fails"
    text = r.sentence()
    assert "(a) D(0) / H: a 0.0001, b 0.00011" in text and "(b) Fixed-noise edge / D(0): a 400x [200, 600]" in text
    assert text.endswith("(band < 20%): holds.") and len(text) <= 600
    assert S.regime(steps.assign(entropy=np.nan), edges, "bf16") is None  # runs without the entropy column's values
    one = S.regime(steps, edges, "bf16", {"a", "z"})  # only the students predicted on (findings: the converged ones)
    assert one.students == ("a",) and one.states[0] == "undecided"  # one student has no spread to judge
    assert S.regime(steps, edges, "bf16", set()) is None
