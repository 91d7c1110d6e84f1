"""opd.plan, the adaptive design: sequential seeds and bisected edges planned from the results on disk; their
validation; and one real round-by-round calibration through snakemake."""
import copy
import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pandas as pd
import pytest
import yaml

from opd import config as C
from opd import plan as P
from opd import store
from pathlib import Path
from opd.spec import Experiment
from conftest import edit_config, own_base_models, planned, planned_runs, snakemake
from helpers import load_script

N = 300  # problems
TAU = 0.20


def experiment(toy_config, *, rows=(), sequential=None, edges=(), base_seeds=(0, 1, 2, 3)):
    """The toy experiment cut to qwen-s: its baseline with `base_seeds`, and the given rows, rule and edges."""
    cfg = copy.deepcopy(toy_config)
    e = cfg["experiments"]["toy"]
    base = next(r for r in e["rows"] if r.get("baseline"))
    e["rows"] = [{**base, "students": ["qwen-s"], "seeds": list(base_seeds)}, *rows]
    e.pop("sequential", None), e.pop("edges", None), e.pop("base_draws", None)  # only what the test gives
    if sequential:
        e["sequential"] = sequential
    if edges:
        e["edges"] = list(edges)
    cfg["experiments"] = {"toy": e}
    C.validate(cfg)
    return Experiment.of(cfg)


class World:
    """Synthetic results: problem KL mu_x; a run of a row with true Delta `delta` has K = mu (1 + delta) x a seed
    effect (SD run_sd) x a per-problem interaction (SD 0.3), and D = D_of(row) (default 0.001 + noise_sigma^2)."""

    def __init__(self, delta_of, run_sd=0.02, seed=0, D_of=lambda r: 0.001 + r.noise_sigma ** 2):
        self.delta_of, self.run_sd, self.D_of = delta_of, run_sd, D_of
        self.mu = np.random.default_rng(seed).gamma(1.0, 0.05, N)
        self.results = {}

    def result(self, e, rid):
        row, student, s = rid.split(".")
        r = e.row(row)
        rng = np.random.default_rng([zlib.crc32(f"{row}.{student}".encode()), int(s[1:])])
        k = (self.mu * (1 + self.delta_of(r)) * np.exp(rng.normal(0, self.run_sd))
             * np.exp(rng.normal(0, 0.3, N) - 0.045))
        return P.RunResult(pd.Series(k, index=np.arange(N)), self.D_of(r))

    def train(self, plan, only=None):
        """Train what the plan has pending (or the runs `only` names): the results a round would leave."""
        for rid in plan.pending if only is None else only:
            self.results[rid] = self.result(plan.experiment, rid)

    def given(self):
        return P.Given(self.results)


def calibrate(e, world, rounds=30):
    """Rounds until nothing is pending: the plans, one per round."""
    plans = []
    for _ in range(rounds):
        plans.append(P.planned(e, world.given()))
        if not plans[-1].pending:
            return plans
        world.train(plans[-1])
    raise AssertionError("the plan did not end")


def quadratic(edge_at):
    """Delta = tau at noise_sigma = edge_at, growing with sigma^2 (D grows with it too)."""
    return lambda r: TAU * (r.noise_sigma / edge_at) ** 2


# ---------------------------------------------------------------- sequential seeds

def test_a_sequential_row_runs_one_seed_where_it_is_clear_and_more_only_while_it_straddles_tau(toy_config):
    rule = {"max_seeds": 3}
    rows = [{"name": "far", "noise_sigma": 0.3, "seeds": "sequential"},
            {"name": "near", "noise_sigma": 0.1, "seeds": "sequential"},
            {"name": "same", "noise_sigma": 0.01, "seeds": "sequential"}]
    e = experiment(toy_config, rows=rows, sequential=rule)
    deltas = {"far": 2.0, "near": TAU, "same": 0.0, "bf16": 0.0}
    world = World(lambda r: deltas[r.name], run_sd=0.02)
    first = P.planned(e, world.given())
    # before any result: the baseline's seeds and each row's first seed, nothing decided
    assert set(first.pending) == {f"bf16.qwen-s.s{s}" for s in range(4)} | {f"{r}.qwen-s.s0" for r in deltas if r != "bf16"}
    assert first.open and not any(st.decided for st in first.rows.values())
    plans = calibrate(e, world)
    end = plans[-1].rows
    assert end[("far", "qwen-s")].seeds == (0,) and end[("far", "qwen-s")].verdict == "fail"
    assert end[("same", "qwen-s")].seeds == (0,) and end[("same", "qwen-s")].verdict == "pass"
    near = end[("near", "qwen-s")]
    assert near.decided and near.seeds == (0, 1, 2)  # at tau the interval straddles it to max_seeds
    # each round adds one seed to an undecided row, in order
    grown = [p.rows[("near", "qwen-s")].seeds for p in plans]
    assert grown == sorted(grown, key=len) and all(len(b) - len(a) <= 1 for a, b in zip(grown, grown[1:]))
    # the planned experiment's runs are exactly what was chosen: no seed 1 of `far`
    runs = {r.run_id for r in plans[-1].experiment.runs()}
    assert "far.qwen-s.s0" in runs and "far.qwen-s.s1" not in runs and "near.qwen-s.s2" in runs


def test_the_plan_is_a_function_of_the_results_and_waits_for_the_reference(toy_config):
    e = experiment(toy_config, rows=[{"name": "x", "noise_sigma": 0.1, "seeds": "sequential"}],
                   sequential={"max_seeds": 3})
    world = World(lambda r: 0.0 if r.baseline else TAU)
    p = P.planned(e, world.given())
    world.train(p, only=["x.qwen-s.s0", "bf16.qwen-s.s0"])  # the baseline not complete: no decision, no seed 1
    waiting = P.planned(e, world.given())
    assert waiting.rows[("x", "qwen-s")] == P.RowState((0,), False)
    world.train(waiting)
    a, b = P.planned(e, world.given()), P.planned(e, P.Given(dict(world.results)))
    assert a.pending == b.pending and a.rows == b.rows
    # results beyond the rule's stopping point (here: a seed 2 run left by a full design) change nothing
    world.results["x.qwen-s.s2"] = world.result(a.experiment, "x.qwen-s.s2")
    assert P.planned(e, world.given()).rows[("x", "qwen-s")].seeds == a.rows[("x", "qwen-s")].seeds


def test_rows_near_their_students_edge_run_the_near_edge_seeds_and_the_others_do_not(toy_config):
    """near_edge_seeds: a row whose D lies within near_edge_factor of the edge (the geometric mean of the largest
    passing and the smallest failing D the plan decided) runs at least that many seeds; rows far from it stop where
    the rule decides them."""
    sigmas = {"p1": 0.02, "p2": 0.08, "p3": 0.095, "f1": 0.105, "f2": 0.12, "f3": 0.4}  # D = 0.001 + sigma^2
    rows = [{"name": n, "noise_sigma": v, "seeds": "sequential"} for n, v in sigmas.items()]
    rule = {"max_seeds": 6, "start_seeds": 2, "near_edge_seeds": 4, "near_edge_factor": 1.5}
    e = experiment(toy_config, rows=rows, sequential=rule)
    world = World(lambda r: 0.0 if r.baseline else (0.0 if r.noise_sigma < 0.1 else 1.0), run_sd=0.01)
    end = calibrate(e, world)[-1]
    D = {n: 0.001 + v ** 2 for n, v in sigmas.items()}
    edge = np.sqrt(D["p3"] * D["f1"])
    for n in sigmas:
        st = end.rows[(n, "qwen-s")]
        assert st.decided and st.verdict == ("pass" if n.startswith("p") else "fail")
        assert len(st.seeds) == (4 if edge / 1.5 <= D[n] <= edge * 1.5 else 2), n
    assert {n for n in sigmas if len(end.rows[(n, "qwen-s")].seeds) == 4} == {"p2", "p3", "f1", "f2"}
    off = experiment(toy_config, rows=rows, sequential={k: v for k, v in rule.items() if not k.startswith("near")})
    n_off = {k[0]: len(st.seeds) for k, st in P.planned(off, world.given()).rows.items()}
    assert max(n_off.values()) < 4 and n_off["p1"] == n_off["f3"] == 2  # the rule alone: no row reaches 4


def test_the_near_edge_floors_are_worked_out_to_a_fixed_point_as_the_edge_moves(toy_config):
    """A row floored near the edge can change verdict on its extra seeds, and so move the edge: the floors are
    worked out again until no new row comes near it. Here `hi` (D 0.030) passes on its first two seeds, above
    the fail f1 (D 0.016), so the first edge lies between them and floors both; on four seeds `hi` fails, the
    edge moves between p1 (D 0.010) and f1, and p1, outside the first window, gets its four seeds too."""
    mu = np.random.default_rng(0).gamma(1.0, 0.05, N)
    design = {"bf16": (1e-5, [0.0] * 4), "p1": (0.010, [0.0] * 4), "f1": (0.016, [1.0] * 4),
              "hi": (0.030, [0.12, 0.12, 0.35, 0.35])}  # row: D, Delta per seed (every seed's run exists)

    def result(row, seed):
        D, deltas = design[row]
        rng = np.random.default_rng([zlib.crc32(row.encode()), seed])
        k = mu * (1 + deltas[seed]) * np.exp(rng.normal(0, 0.01)) * np.exp(rng.normal(0, 0.05, N))
        return P.RunResult(pd.Series(k, index=np.arange(N)), D)

    rows = [{"name": n, "noise_sigma": 0.01 * i, "seeds": "sequential"} for i, n in enumerate(design) if n != "bf16"]
    rule = {"max_seeds": 4, "start_seeds": 2, "near_edge_seeds": 4, "near_edge_factor": 1.5}
    given = P.Given({f"{r}.qwen-s.s{s}": result(r, s) for r in design for s in range(4)})
    end = P.planned(experiment(toy_config, rows=rows, sequential=rule), given).rows
    no_floor = P.planned(experiment(toy_config, rows=rows, sequential={"max_seeds": 4, "start_seeds": 2}), given).rows
    assert no_floor[("hi", "qwen-s")].verdict == "pass" and len(no_floor[("hi", "qwen-s")].seeds) == 2
    assert no_floor[("p1", "qwen-s")].verdict == "pass" and no_floor[("f1", "qwen-s")].verdict == "fail"
    edge = np.sqrt(0.030 * 0.016)  # the first edge: the largest pass (hi) and the smallest fail (f1)
    assert 0.010 < edge / 1.5 < 0.016 and 0.030 < edge * 1.5  # p1 lies outside its window, f1 and hi inside
    assert end[("hi", "qwen-s")].verdict == "fail" and len(end[("hi", "qwen-s")].seeds) == 4
    assert {n: len(end[(n, "qwen-s")].seeds) for n in ("p1", "f1", "hi")} == {"p1": 4, "f1": 4, "hi": 4}


def test_near_edge_seeds_outside_the_rules_range_is_refused(toy_config):
    with pytest.raises(C.ConfigError, match="field 'sequential.near_edge_seeds': 7 is not between start_seeds"):
        experiment(toy_config, rows=[{"name": "x", "noise_sigma": 0.1, "seeds": "sequential"}],
                   sequential={"max_seeds": 6, "start_seeds": 2, "near_edge_seeds": 7})


# ---------------------------------------------------------------- bisected edges

EDGE = {"name": "edge", "field": "noise_sigma", "bracket": [0.02, 0.2], "students": ["qwen-s"], "factor": 1.5,
        "max_rows": 8}


@pytest.mark.parametrize("edge_at", [0.05, 0.11])
def test_an_edge_is_bisected_to_its_factor_in_d(toy_config, edge_at):
    e = experiment(toy_config, edges=[EDGE])
    world = World(quadratic(edge_at), run_sd=0.01)
    plans = calibrate(e, world)
    x = plans[-1].edges[0]
    values = [s.value for s in x.steps]
    assert values[:2] == [0.02, 0.2] and len(values) == len(set(values))
    for i in range(2, len(values)):  # each next value: the geometric midpoint of the bracket before it
        before = P.EdgeState(*plans[0].edges[0][:2], x.steps[:i], *[np.nan] * 4, None)
        lo, hi = P._bracket(before.steps)
        assert values[i] == P.rounded(np.sqrt(lo.value * hi.value))
    assert x.stopped == "factor" and x.D_hi <= 1.5 * x.D_lo
    assert x.lo < edge_at * 1.1 and x.hi > edge_at * 0.9  # the true edge (Delta = tau) inside, up to the noise
    # every value's row is named by its value, and trains exactly that value
    for s in x.steps:
        assert s.row.name == f"edge-{P.value_text(s.value)}" and s.row.noise_sigma == s.value
        assert float(s.row.name.split("-", 1)[1].replace("p", ".")) == s.value
    assert len(values) < 8  # fewer than a grid at the same resolution (0.02..0.2 by 1.22x in sigma: 13 rows)


def test_an_edge_outside_its_bracket_is_looked_for_beyond_it_and_stops_at_max_rows(toy_config):
    e = experiment(toy_config, edges=[{**EDGE, "bracket": [0.01, 0.02], "max_rows": 4}])
    x = calibrate(e, World(quadratic(0.3), run_sd=0.01))[-1].edges[0]
    assert [s.value for s in x.steps] == [0.01, 0.02, 0.04, 0.08]  # every value passes: up by the bracket's ratio
    assert x.stopped == "max_rows" and np.isnan(x.hi)


STALE = {"name": "stale", "field": "staleness", "bracket": [1, 16], "students": ["qwen-s"], "factor": 1.01,
         "max_rows": 10}


def test_a_staleness_edge_bisects_on_integers_and_stops_when_its_ends_are_adjacent(toy_config):
    """An integer dial: every value is an integer (the geometric midpoint rounded, halves up), its row trains that k,
    and the bisection stops once the largest pass and the smallest fail are adjacent integers (D's factor 7/6 is
    still above the edge's 1.01)."""
    e = experiment(toy_config, edges=[STALE])
    world = World(lambda r: 0.0 if r.staleness <= 5 else 1.0, run_sd=0.01, D_of=lambda r: 0.001 * (1 + r.staleness))
    x = calibrate(e, world)[-1].edges[0]
    values = [s.value for s in x.steps]
    assert values == [1, 16, 4, 8, 6, 5] and all(type(v) is int for v in values)
    for i in range(2, len(values)):  # each next value: the geometric midpoint of the bracket before it, rounded
        lo, hi = P._bracket(x.steps[:i])
        assert values[i] == int(np.floor(np.sqrt(lo.value * hi.value) + 0.5))
    assert (x.lo, x.hi, x.stopped) == (5, 6, "adjacent")
    for s in x.steps:
        assert s.row.name == f"stale-{s.value}" and s.row.staleness == s.value and s.row.params() == {
            "name": s.row.name, "staleness": s.value}
        assert s.row.family == "staleness" and s.row.in_budget


def test_a_staleness_edge_failing_everywhere_stops_at_k_1(toy_config):
    e = experiment(toy_config, edges=[{**STALE, "bracket": [2, 8]}])
    x = calibrate(e, World(lambda r: 0.0 if r.baseline else 1.0, run_sd=0.01,
                           D_of=lambda r: 0.001 * (1 + r.staleness)))[-1].edges[0]
    assert [s.value for s in x.steps] == [2, 8, 1] and x.stopped == "range" and np.isnan(x.lo)


ALPHA = {"name": "w4a4", "field": "quant_alpha", "fixed": {"weights": "nvfp4", "activations": "nvfp4"},
         "bracket": [0.1, 1], "students": ["qwen-s"], "factor": 1.5, "max_rows": 8}


def test_a_quant_alpha_edge_bisects_inside_0_1_on_rows_that_carry_its_fixed_fields(toy_config):
    e = experiment(toy_config, edges=[ALPHA])
    world = World(lambda r: 0.0 if r.baseline else TAU * (r.quant_alpha / 0.45) ** 2, run_sd=0.01,
                  D_of=lambda r: 0.001 + (0.05 * r.quant_alpha) ** 2 if r.quantizes else 0.001)
    plans = calibrate(e, world)
    x = plans[-1].edges[0]
    values = [s.value for s in x.steps]
    assert values[:2] == [0.1, 1.0] and all(0 < v <= 1 for v in values) and len(values) == len(set(values))
    for i in range(2, len(values)):
        lo, hi = P._bracket(x.steps[:i])
        assert values[i] == P.rounded(np.sqrt(lo.value * hi.value))
    assert x.stopped == "factor" and x.D_hi <= 1.5 * x.D_lo and x.lo < 0.45 * 1.1 and x.hi > 0.45 * 0.9
    for s in x.steps:
        r = s.row
        assert r.name == f"w4a4-{P.value_text(s.value)}" and r.quant_alpha == s.value
        assert r.params() == {"name": r.name, "weights": "nvfp4", "activations": "nvfp4", "quant_alpha": s.value}
        assert r.family == "activations" and r.in_budget and "weights = nvfp4" in r.description
    assert [r.name for r in P.axis_rows(plans[-1].experiment, plans[-1].experiment.edges[0])] == ["bf16"]


def test_a_quant_alpha_edge_passing_everywhere_goes_past_1_and_stops_at_16(toy_config):
    """Past alpha = 1 the recipe's error is amplified: a recipe that passes as it is has its edge looked for beyond
    it, by the bracket's ratio, up to the dial's end (16), where it stops (`range`)."""
    e = experiment(toy_config, edges=[{**ALPHA, "bracket": [0.1, 0.5]}],
                   rows=[{"name": "grid-w4a4", "weights": "nvfp4", "activations": "nvfp4"},
                         {"name": "other", "weights": "nvfp4"}])
    end = calibrate(e, World(lambda r: 0.0, run_sd=0.01, D_of=lambda r: 0.001 + 0.01 * r.quant_alpha))[-1]
    x = end.edges[0]
    assert [s.value for s in x.steps] == [0.1, 0.5, 2.5, 12.5, 16.0] and x.stopped == "range" and np.isnan(x.hi)
    assert x.lo == 16.0 and [s.row.name for s in x.steps][2:] == ["w4a4-2p5", "w4a4-12p5", "w4a4-16"]
    # the grid it is read against: the same recipes (at quant_alpha 1), not another engine
    assert [r.name for r in P.axis_rows(end.experiment, end.experiment.edges[0])] == ["bf16", "grid-w4a4"]


def test_a_quant_alpha_edge_passing_at_1_and_2_extends_its_hi_side_past_them(toy_config):
    """A bracket [1, 2] (an amplified error at 2) whose two rows both pass: the edge lies above, so the next value is
    4 (the bracket's ratio), the bisection's frontier; every row of it lies on the recipe's alpha dial, the alpha = 1
    row too (opd.rows.mechanism: a row of the same recipe has alpha != 1), so edges.parquet reads them all."""
    from opd.rows import mechanism
    e = experiment(toy_config, edges=[{**ALPHA, "bracket": [1, 2]}])
    world = World(lambda r: 0.0, run_sd=0.01, D_of=lambda r: 0.001 + 0.01 * r.quant_alpha)
    first = P.planned(e, world.given())
    assert [s.value for s in first.edges[0].steps] == [1.0, 2.0] and first.edges[0].stopped is None
    world.train(first)  # the bracket's ends: both pass
    x = P.planned(e, world.given()).edges[0]
    assert [s.value for s in x.steps] == [1.0, 2.0, 4.0] and [s.state.verdict for s in x.steps[:2]] == ["pass"] * 2
    assert not x.steps[2].state.decided and x.stopped is None  # 4 is what the next round trains
    assert x.lo == 2.0 and np.isnan(x.hi) and x.steps[2].row.name == "w4a4-4" and x.steps[2].row.quant_alpha == 4.0
    rows = [s.row for s in x.steps]
    assert {mechanism(r, rows) for r in rows} == {"alpha:nvfp4/nvfp4/none"}


def test_a_redrawn_noise_edge_is_read_against_the_redrawn_grid(toy_config):
    e = experiment(toy_config, edges=[EDGE, {**EDGE, "name": "redraw", "fixed": {"noise_redraw": True}}],
                   rows=[{"name": "n1", "noise_sigma": 0.1}, {"name": "n1-redraw", "noise_sigma": 0.1,
                                                              "noise_redraw": True}])
    fixed, redraw = e.edges
    assert [r.name for r in P.axis_rows(e, fixed)] == ["bf16", "n1"]
    assert [r.name for r in P.axis_rows(e, redraw)] == ["bf16", "n1-redraw"]
    row = P.edge_row(e, redraw, ["qwen-s"], 0.05)
    assert row.noise_redraw and row.noise_sigma == 0.05 and row.name == "redraw-0p05"
    # the noise edge's rows carry nothing else: written as before fixed existed
    assert P.edge_row(e, fixed, ["qwen-s"], 0.05).written() == {
        "name": "edge-0p05", "noise_sigma": 0.05, "students": ["qwen-s"],
        "description": "edge 'edge': noise_sigma = 0.05, bisected (opd.plan)"}


def test_edges_frame_lists_every_value_in_order(toy_config):
    e = experiment(toy_config, edges=[EDGE])
    p = calibrate(e, World(quadratic(0.07), run_sd=0.01))[-1]
    f = P.edges_frame(p)
    assert list(f["order"]) == list(range(len(p.edges[0].steps)))
    assert set(f["verdict"]) <= {"pass", "fail"} and (f["value"] > 0).all()


def test_the_plan_never_reads_a_run_the_cache_check_finds_stale_or_damaged(toy_config, tmp_path, monkeypatch):
    """A run the first plan read as complete and the check then finds computed from another spec is read as missing
    by the plan returned (planned again until no new one turns up); a damaged run is never read at all."""
    e = experiment(toy_config, edges=[EDGE])
    world = World(quadratic(0.07), run_sd=0.01)
    world.train(P.planned(e, world.given()))  # round 1 complete: the bracket's ends and the baseline
    on_disk = dict(world.results)
    monkeypatch.setattr(P.Results, "_read", staticmethod(lambda run_dir: on_disk.get(run_dir.name)))
    checks = []

    def stale(planned_experiment):  # the check: the first plan's experiment has one run computed from another spec
        checks.append({r.run_id for r in planned_experiment.runs()})
        return ["edge-0p2.qwen-s.s0"]
    before = P.planned(e, P.Given(dict(world.results)))
    assert "edge-0p2.qwen-s.s0" not in before.pending and len(before.edges[0].steps) == 3  # it read the run
    plan = P.checked(e, tmp_path, lambda rid: True, stale)
    assert len(checks) == 2 and plan.pending == ("edge-0p2.qwen-s.s0",) and len(plan.edges[0].steps) == 2
    # a damaged run (the check's `sound` says no) is read as missing from the first plan on
    checks.clear()
    damaged = P.checked(e, tmp_path, lambda rid: rid != "edge-0p2.qwen-s.s0", lambda x: [])
    assert damaged.pending == plan.pending and len(checks) == 0


def test_one_value_is_one_row_on_every_student_that_reaches_it(toy_config):
    cfg = copy.deepcopy(toy_config)
    t = cfg["experiments"]["toy"]
    t.pop("sequential", None), t.pop("base_draws", None)
    t["seeds"] = [0]  # each value one seed (the experiment's)
    t["rows"] = [{**next(r for r in t["rows"] if r.get("baseline")), "students": ["qwen-s", "qwen-m"],
                  "seeds": [0, 1, 2, 3]}]
    t["edges"] = [{**EDGE, "students": ["qwen-s", "qwen-m"]}]
    C.validate(cfg)
    e = Experiment.of(cfg)
    world = World(lambda r: 0.0 if r.baseline else TAU * (r.noise_sigma / 0.07) ** 2, run_sd=0.01)
    end = calibrate(e, world)[-1]
    names = [r.name for r in end.experiment.rows]
    assert len(names) == len(set(names))
    both = end.experiment.row("edge-0p02")
    assert both.students == ("qwen-s", "qwen-m")
    assert {r.run_id for r in end.experiment.runs() if r.name == "edge-0p02"} == {"edge-0p02.qwen-s.s0",
                                                                                  "edge-0p02.qwen-m.s0"}


def test_a_diverged_value_fails(toy_config):
    e = experiment(toy_config, edges=[EDGE])
    world = World(quadratic(10.0), run_sd=0.01)  # every value passes, but 0.2's run diverges
    p = P.planned(e, world.given())
    world.train(p)
    bad = world.results["edge-0p2.qwen-s.s0"]
    world.results["edge-0p2.qwen-s.s0"] = P.RunResult(bad.kl * np.inf, bad.D)
    x = P.planned(e, world.given()).edges[0]
    assert [s.state.verdict for s in x.steps[:2]] == ["pass", "fail"]


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("change, message", [
    (lambda e: e["rows"].append({"name": "x", "noise_sigma": 0.1, "seeds": "sequential"}),
     "row 2 ('x'), field 'seeds': `sequential` needs the experiment's `sequential` rule"),
    (lambda e: (e.update(sequential={"max_seeds": 2}), e["rows"][0].update(seeds="sequential")),
     "field 'seeds': the baseline runs its full design"),
    (lambda e: (e.update(sequential={"max_seeds": 2}),
                e["rows"].append({"name": "r", "algorithm": "reinforce", "seeds": "sequential"})),
     "an RL row has no Δ verdict"),
    (lambda e: e.update(edges=[{**EDGE, "bracket": [0.2, 0.1]}]), "edge 1 ('edge'), field 'bracket': needs lo < hi"),
    (lambda e: e.update(edges=[{**EDGE, "students": ["nobody"]}]), "field 'students': unknown student 'nobody'"),
    (lambda e: e.update(edges=[{**EDGE, "name": "bf16"}]), "field 'name': already the name of a row"),
    (lambda e: (e["rows"].append({"name": "edge-1", "noise_sigma": 0.1}), e.update(edges=[EDGE])),
     "its rows are named edge-<value>, as are row(s) ['edge-1']"),
    (lambda e: e.update(sequential={"max_seeds": 2}, edges=[{**EDGE, "field": "lr"}]), "'lr' is not one of"),
    (lambda e: (e.update(seeds=[0], edges=[EDGE]), e["rows"][0].update(seeds=[0, 1])),
     "edge 1 ('edge'): against the baseline 'bf16': 1 candidate + 2 reference seeds are too few"),
    (lambda e: (e.update(sequential={"max_seeds": 2}), e["rows"].append({"name": "ref", "lr": 1e-5, "seeds": [0]}),
                e["rows"].append({"name": "x", "lr": 1e-5, "noise_sigma": 0.1, "reference": "ref",
                                  "seeds": "sequential"})),
     "row 3 ('x'), field 'seeds': against 'ref': 1 candidate + 1 reference seeds are too few"),
    (lambda e: e.update(edges=[{**EDGE, "students": ["qwen-s", "qwen-s"]}]), "non-unique"),
    # the dials and their fixed fields
    (lambda e: e.update(edges=[{**STALE, "bracket": [1, 2.5]}]),
     "edge 1 ('stale'), field 'bracket': [1, 2.5]: staleness is an integer dial"),
    (lambda e: e.update(edges=[{**ALPHA, "bracket": [0.5, 20]}]),
     "edge 1 ('w4a4'), field 'bracket': [0.5, 20] leaves quant_alpha's range, (0, 16]"),
    (lambda e: e.update(edges=[{**ALPHA, "bracket": [0, 2]}]),
     "experiment 'toy', field 'edges.0.bracket.0': 0 is less than or equal to the minimum of 0"),  # the schema's
    (lambda e: e.update(edges=[{**ALPHA, "fixed": {"noise_sigma": 0.1}}]),
     "edge 1 ('w4a4'), field 'fixed': quant_alpha scales the row's quantization error (x_bf16 + quant_alpha "
     "(Q(x) - x_bf16)), but the row quantizes nothing (noise_sigma is weight noise"),
    (lambda e: e.update(edges=[{**EDGE, "fixed": {"noise_sigma": 0.1}}]),
     "edge 1 ('edge'), field 'fixed.noise_sigma': the edge's own field"),
    (lambda e: e.update(edges=[{**EDGE, "fixed": {"seeds": [0]}}]),
     "edge 1 ('edge'), field 'fixed.seeds': says where or how a row runs"),
    (lambda e: e.update(edges=[{**EDGE, "fixed": {"noise_redrew": True}}]),
     "edge 1 ('edge'), field 'fixed.noise_redrew': not a row field; did you mean 'noise_redraw'?"),
    (lambda e: e.update(edges=[{**ALPHA, "fixed": {"weights": "nvfp5"}}]),
     "edge 1 ('w4a4'), field 'fixed.weights': 'nvfp5' is not one of"),
    (lambda e: e.update(edges=[{**STALE, "fixed": {"noise_redraw": True}}]),
     "edge 1 ('stale'), field 'fixed.noise_redraw': redraws the noise direction but the row has no noise_sigma"),
    (lambda e: e.update(edges=[{**EDGE, "fixed": {"quant_alpha": 0.5}}]),
     "edge 1 ('edge'), field 'fixed.quant_alpha': scales the row's quantization error"),
    (lambda e: e.update(edges=[{**ALPHA, "fixed": {"kv_cache": "fp8_e4m3", "bf16_layers": [0, 1]}}]),
     "edge 1 ('w4a4'), field 'fixed.bf16_layers': keeps every layer of student 'qwen-s' in BF16"),
    (lambda e: e.update(edges=[{**STALE, "fixed": {"variant": "tis"}}]),
     "edge 1 ('stale'), field 'fixed.variant': an edge bisects a budget"),
])
def test_an_adaptive_design_that_cannot_run_is_named_before_any_job(toy_config, change, message):
    cfg = copy.deepcopy(toy_config)
    e = cfg["experiments"]["toy"]
    e["rows"] = [next(r for r in e["rows"] if r.get("baseline"))]
    e.pop("sequential", None), e.pop("edges", None), e.pop("base_draws", None)
    change(e)
    with pytest.raises(C.ConfigError, match=None) as err:
        C.validate(cfg)
    assert message in str(err.value), str(err.value)


# ---------------------------------------------------------------- through snakemake, round by round

def small_edge(c):
    """One student, the baseline at 3 seeds and an edge of 3 values at one seed each, 6 short steps a run."""
    e = c["experiments"]["toy"]
    e["students"] = {"qwen-s": e["students"]["qwen-s"]}
    own_base_models(e)  # trained here: the toy's pinned ones retrain bit for bit only on the CPU kind that made them
    e["seeds"] = [0]
    e["train"].update(steps=6, prompts_per_step=4, responses_per_prompt=4, eval_every=3, checkpoint_every=3)
    e["infra"]["window"] = [0, 6]
    e["rows"] = [{**r, "students": ["qwen-s"], "seeds": [0, 1, 2]} for r in e["rows"] if r.get("baseline")]
    e.pop("sequential", None), e.pop("base_draws", None)  # each value one seed: a round is one new value
    e["edges"] = [{"name": "edge", "field": "noise_sigma", "bracket": [0.05, 0.2], "max_rows": 3,
                   "students": ["qwen-s"]}]


def test_a_bisected_edge_runs_round_by_round_through_snakemake(toy_clone):
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    edit_config(clone, small_edge)
    first = planned_runs(planned(clone, "analysis"))
    assert first == {"bf16.qwen-s.s0", "bf16.qwen-s.s1", "bf16.qwen-s.s2", "edge-0p05.qwen-s.s0", "edge-0p2.qwen-s.s0"}
    r = snakemake(clone, "-c", "2", "analysis")
    assert "plan: 1 run(s) to train next: `snakemake -c 2` trains them" in r.stderr  # said at the end of the round
    cfg = C.load(clone / "config.yaml")
    e = Experiment.of(cfg)
    now = P.planned(e, P.Results(clone / "results" / "toy"))
    second = planned_runs(planned(clone, "analysis"))
    assert second == set(now.pending) and len(second) == 1  # `snakemake -n` shows the next round: one value
    (value,) = [s.value for s in now.edges[0].steps[2:]]
    assert second == {f"edge-{P.value_text(value)}.qwen-s.s0"}
    done = subprocess.run([sys.executable, "-m", "opd.cli", "calibrate", "--", "-c", "2", "analysis"], cwd=clone,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calibrate: done after 1 round(s)" in done.stdout
    end = P.planned(e, P.Results(clone / "results" / "toy"))
    assert not end.pending and end.edges[0].stopped == "max_rows"
    assert not planned_runs(planned(clone, "analysis"))  # nothing left to train
    verdicts = store.read_table(clone / "results" / "toy" / "analysis" / "verdicts.parquet")
    assert {s.row.name for s in end.edges[0].steps} <= set(verdicts["config"])  # analysed like any row


@pytest.mark.parametrize("given, targets, config", [
    (["-c", "2"], ["plan_round"], []),
    (["-c", "2", "analysis"], ["analysis", "plan_round"], []),
    (["-c", "2", "--config", "x=1"], ["plan_round"], ["x=1"]),  # plan_round was read as one more name=value
    (["-c", "2", "--config", "x=1", "--", "analysis"], ["analysis", "plan_round"], ["x=1"])])
def test_calibrate_with_an_experiment_gives_snakemake_the_round_as_a_target(tmp_path, given, targets, config):
    """`calibrate --experiment NAME -- ARGS` runs one `snakemake` per round whose arguments Snakemake's own parser
    reads as ARGS' targets and plan_round, with the config experiment=NAME added to the user's own --config (Snakemake
    keeps only the last --config): plan_round after --config was read as one more name=value (round 1 failed so), and
    before options followed by a target Snakemake refuses the call. The plan
    is real (the toy's adaptive design planned from an empty results/ in a scratch folder: round 1 has runs to
    train); a fake `snakemake` first on PATH records its arguments and trains nothing, so round 2 finds the same
    runs planned and stops."""
    from snakemake.cli import get_argument_parser
    bin_dir, work, calls = tmp_path / "bin", tmp_path / "work", tmp_path / "calls.jsonl"
    bin_dir.mkdir(), work.mkdir()
    fake = bin_dir / "snakemake"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nwith open({str(calls)!r}, 'a') as f:\n"
                    f"    f.write(json.dumps(sys.argv[1:]) + '\\n')\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run([sys.executable, "-m", "opd.cli", "calibrate", "--experiment", "toy", "--", *given], cwd=work,
                       env=env, capture_output=True, text=True, timeout=300)
    assert "calibrate: round 1: " in r.stdout, r.stdout + r.stderr
    assert r.returncode == 1 and "round 1 trained none of" in r.stderr, r.stdout + r.stderr  # the fake trained nothing
    (argv,) = [json.loads(line) for line in calls.read_text().splitlines()]  # one call: round 1's
    try:
        read = get_argument_parser().parse_args(argv)  # as `snakemake` reads it
    except SystemExit:
        pytest.fail(f"snakemake refuses the arguments of round 1: {argv}")
    assert (set(read.targets), read.config, read.cores) == (set(targets), [*config, "experiment=toy"], 2), argv


def test_the_bisection_table_and_figure_come_from_the_analysis_tables(toy_config, tmp_path):
    """Rule bisection replays the plan from the analysis's heldout and steps tables and sets the grid's budget beside
    it; figure_bisection draws it."""
    from types import SimpleNamespace

    from opd import report
    e = experiment(toy_config, rows=[{"name": "grid-lo", "noise_sigma": 0.03}, {"name": "grid-hi", "noise_sigma": 0.15},
                                     {"name": "other", "weights": "nvfp4"}],  # not on the axis: not the grid
                   edges=[EDGE], base_seeds=(0, 1, 2))
    world = World(quadratic(0.07), run_sd=0.01)
    end = calibrate(e, world)[-1]
    heldout = pd.concat([pd.DataFrame({"run_id": rid, "config": rid.split(".")[0], "student": "qwen-s",
                                       "seed": int(rid.split(".")[2][1:]), "step": 100, "prompt_id": r.kl.index,
                                       "kl": r.kl.to_numpy()}) for rid, r in world.results.items()])
    steps = pd.DataFrame({"run_id": list(world.results), "d_n": [r.D for r in world.results.values()]})
    deltas = {c: g for c, g in heldout.groupby("config")}
    # `other` passes at a D above every noise row's: in the grid it would move grid_lo
    verdicts = pd.DataFrame([{"student": "qwen-s", "config": c,
                              "D": 0.5 if c == "other" else 0.001 + end.experiment.row(c).noise_sigma ** 2,
                              "delta": quadratic(0.07)(end.experiment.row(c)), "ci_lo_seeds": 0.01, "ci_hi_seeds": 9.0,
                              "ci_lo": 0.01, "ci_hi": 9.0, "n_runs": g["run_id"].nunique()} for c, g in deltas.items()])
    paths = {}
    for name, df in (("heldout", heldout), ("steps", steps), ("verdicts", verdicts)):
        paths[name] = str(tmp_path / f"synthetic-{name}.parquet")  # not the contract names: only the columns read
        df.to_parquet(paths[name])

    cfg_e = {**toy_config["experiments"]["toy"], "rows": [r.written() for r in e.rows], "edges": [EDGE]}
    cfg_e.pop("sequential", None), cfg_e.pop("base_draws", None)
    out = tmp_path / "bisection.parquet"
    load_script("bisection").main(SimpleNamespace(**paths), [str(out)], SimpleNamespace(name="toy", experiment=cfg_e))
    t = store.read_table(out)
    assert list(t["row"]) == [s.row.name for s in end.edges[0].steps]
    # the grid: grid-lo passes (Delta 0.037 < tau), grid-hi fails (0.92 >= tau, interval above 0); the baseline passes
    assert t["grid_lo"].iloc[0] == pytest.approx(0.001 + 0.03 ** 2) and t["grid_hi"].iloc[0] == pytest.approx(0.001 + 0.15 ** 2)
    assert t["grid_rows"].iloc[0] == 3
    fig = SimpleNamespace(pdf=str(tmp_path / "e.pdf"), png=str(tmp_path / "e.png"))
    load_script("figure_bisection").main([str(out)], fig, SimpleNamespace(primary="qwen-s"))
    assert (tmp_path / "e.png").stat().st_size > 10_000 and report.input_hashes([str(out)])



def test_a_fresh_clone_reads_the_committed_decisions_back_and_decides_nothing_again(toy_config, monkeypatch,
                                                                                    tmp_path):
    """The committed record of the toy plan's decisions (rule plan_decisions) covers the plan of the committed runs:
    with it and no memo of its own (a fresh clone), a checkout plans the toy without computing one decision, so its
    first dry run costs what its second does; and it is the plan computed afresh, whose decisions it records."""
    out = Path(__file__).resolve().parent.parent / "results/toy"
    e = Experiment.of(toy_config)
    monkeypatch.chdir(tmp_path)  # this checkout's memo (.snakemake/opd) starts empty and stays out of the tree
    fresh = P.checked(e, out, lambda rid: True, lambda x: [], memo=False)
    decide = P._decide
    monkeypatch.setattr(P, "_decide", lambda *a: pytest.fail("a decision was computed again"))
    read_back = P.checked(e, out, lambda rid: True, lambda x: [])
    assert read_back.pending == fresh.pending == () and read_back.summary() == fresh.summary()
    assert read_back.decisions.keys() == fresh.decisions.keys()
    assert store.read_json(P.decisions_path(out)).keys() == fresh.decisions.keys()  # the record holds no other
    monkeypatch.setattr(P, "_decide", decide)
