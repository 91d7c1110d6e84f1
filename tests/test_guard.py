"""The mismatch guard's state machine (opd.guard): its back-off bound, its lag, its checkpointed state,
and no false alarm on the standard engine's committed runs."""
import glob

import pytest

from opd import config as C
from opd import store
from opd.guard import GuardState, max_activations
from opd.rows import Guard, Row
from opd.spec import Experiment


def drive(g: GuardState, d, steps: int) -> GuardState:
    for n in range(steps):
        g.observe(n, d(n))
    return g


@pytest.mark.parametrize("steps,window,cooldown,lag", [(100, 10, 10, 0), (100, 10, 10, 8), (1000, 5, 3, 2), (40, 1, 1, 0)])
def test_an_engine_always_past_d_max_settles_on_the_fallback(steps, window, cooldown, lag):
    g = drive(GuardState(d_max=0.01, window=window, action="fallback", cooldown=cooldown, lag=lag, cap=steps),
              lambda n: 1.0, steps)
    lengths = [b - a for a, b in g.spans]
    assert 1 <= g.activations <= max_activations(steps, cooldown)
    assert lengths == [min(cooldown * 2 ** i, steps) for i in range(len(lengths))]  # doubling: no fixed oscillation
    assert g.spans[-1][1] >= steps  # the last activation lasts to the end of the run
    assert all(a == prev_b + window + lag for (a, _), (_, prev_b) in zip(g.spans[1:], g.spans))


def test_a_clean_window_resets_the_back_off_and_the_lag_delays_the_span():
    bad = {*range(0, 5), *range(30, 35), *range(60, 65)}  # three bursts, clean in between
    g = drive(GuardState(d_max=0.01, window=5, action="sync", cooldown=4, lag=2, cap=100),
              lambda n: 1.0 if n in bad else 0.0, 100)
    # the first burst fills the window at step 4; later ones cross at their first step (mean 0.2): + 1 + lag
    assert g.spans == [(7, 11), (33, 37), (63, 67)]  # the same cooldown each time: never doubled
    assert [g.engine(n) for n in (6, 7, 10, 11)] == ["row", "sync", "sync", "row"]


@pytest.mark.parametrize("lag", [0, 2, 8])
def test_a_guard_that_flushes_starts_at_the_next_step_whatever_the_lag(lag):
    """flush: the action's span starts at the step after the one that crossed, however many batches are in flight;
    window 1 acts on the crossing step itself, so with an engine past the line on every step, the row's engine
    rolls out only the steps that cross (one per activation)."""
    g = drive(GuardState(d_max=0.01, window=1, action="sync", cooldown=10, lag=lag, flush=True, cap=100),
              lambda n: 1.0, 100)
    assert g.spans == [(1, 11), (12, 32), (33, 73), (74, 154)]  # the last capped at the run's length
    assert [n for n in range(100) if not g.active(n)] == [0, 11, 32, 73]


def test_a_flushing_guard_is_written_into_a_spec_only_where_it_flushes():
    """`flush` defaults to false and is written only where set, so the guard rows written before it keep their
    specs (nothing reruns); a synchronous row cannot flush (a clear error naming the row and field)."""
    assert "flush" not in Guard(d_max=0.01, window=10, action="sync", cooldown=10).as_dict()
    assert Guard(d_max=0.01, window=1, action="sync", cooldown=10, flush=True).as_dict()["flush"] is True
    cfg = C.load()
    rows = cfg["experiments"]["toy"]["rows"]
    rows.append({"name": "noise-guard-flush", "noise_sigma": 0.15,
                 "guard": {"d_max": 0.004, "window": 1, "action": "fallback", "cooldown": 10, "flush": True}})
    with pytest.raises(C.ConfigError, match=r"noise-guard-flush.*'guard.flush'.*staleness 0"):
        C.validate(cfg)


def test_state_round_trip_continues_identically():
    d = lambda n: 0.02 if (n // 7) % 3 else 0.0  # noqa: E731
    a = GuardState(d_max=0.01, window=3, action="fallback", cooldown=2, cap=60)
    b = GuardState(d_max=0.01, window=3, action="fallback", cooldown=2, cap=60)
    for n in range(25):
        a.observe(n, d(n))
        b.observe(n, d(n))
    b = GuardState.from_state(b.state())
    for n in range(25, 60):
        a.observe(n, d(n))
        b.observe(n, d(n))
    assert a.state() == b.state() and a.activations > 1


def test_no_false_alarm_on_the_standard_engine():
    """Every committed BF16 run of the toy (every student and seed) through each guarded row's guard:
    no activation. The guard's line is more than 4x the largest window mean of the standard engine's d_n
    (window 1: its largest single step, 0.00096 on the committed runs), and more than 10x the seed-level spread
    of its D (the runs' mean d_n)."""
    e = Experiment.of(C.load(), "toy")
    guards = [e.guard(r) for r in e.rows if r.guard]
    paths = sorted(glob.glob("results/toy/runs/bf16.*/steps.parquet"))
    assert guards and len(paths) >= 8
    runs = [store.read_table(p) for p in paths]
    for guard in guards:
        for st in runs:
            g = drive(GuardState.of(guard, 0, len(st)), lambda n: st["d_n"].iloc[n], len(st))
            assert g.activations == 0, (guard, st["run_id"].iloc[0])
            assert st["d_n"].rolling(guard.window).mean().max() < guard.d_max / 4
        D = [st["d_n"].mean() for st in runs]
        assert max(D) - min(D) < guard.d_max / 10


@pytest.mark.parametrize("action,numerics,staleness", [("fallback", False, False), ("sync", True, False),
                                                       ("fallback_numerics", False, True)])
def test_what_each_action_keeps_of_the_row_engine(action, numerics, staleness):
    """Guard.keeps_numerics / keeps_staleness: the one statement of the actions' meaning; the fallback is the
    standard engine exactly where what the action keeps is standard already."""
    g = Guard(d_max=0.01, window=5, action=action, cooldown=5)
    assert (g.keeps_numerics, g.keeps_staleness) == (numerics, staleness)
    quant_stale = Row(name="q", weights="nvfp4", staleness=4, guard=g)
    stale = Row(name="s", staleness=4, guard=g)
    assert quant_stale.guard_falls_back_to_standard == (not numerics and not staleness)
    assert stale.guard_falls_back_to_standard == (not staleness)
