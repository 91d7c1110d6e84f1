"""The mismatch guard's state machine (opd.guard): its back-off bound, its lag, its checkpointed state,
no false alarm on the standard engine's committed runs, and a guard that rejects the batch that crosses (its
state machine, its validation, and tiny-backend runs: D within its line, the batches recorded, deterministic,
resumed exactly)."""
import glob
import math

import numpy as np
import pandas as pd
import pytest
import torch

from opd import config as C
from opd import store
from opd.guard import GuardState, max_activations
from opd.rows import Guard, Row
from opd.spec import Experiment
from helpers import Crash, crash_at
from test_tiny import STUDENT, TIMING, spec


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


# ---------------------------------------------------------------- reject: the guard acts on the step that crosses

@pytest.mark.parametrize("lag", [0, 2])
def test_a_guard_that_rejects_starts_its_span_at_the_step_that_crossed(lag):
    """reject: the span starts at the crossing step itself (its batch is discarded and the step sampled again), so
    an engine past the line on every step has no step trained on its batches; the back-off is unchanged (each
    re-trigger at the step the last span ended). A single burst: the span [5, 15) where without reject it is
    [6, 16) (flush) or [6 + lag, 16 + lag)."""
    g = drive(GuardState(d_max=0.01, window=1, action="fallback", cooldown=10, lag=lag, flush=bool(lag), reject=True,
                         cap=100), lambda n: 1.0, 100)
    assert g.spans == [(0, 10), (10, 30), (30, 70), (70, 150)]
    assert [n for n in range(100) if not g.active(n)] == []
    burst = lambda n: 1.0 if n == 5 else 0.0  # noqa: E731
    for reject, flush, start in ((True, bool(lag), 5), (False, True, 6), (False, False, 6 + lag)):
        g = drive(GuardState(d_max=0.01, window=1, action="sync", cooldown=10, lag=lag, flush=flush, reject=reject,
                             cap=100), burst, 100)
        assert g.spans == [(start, start + 10)], (reject, flush)
    state = GuardState(d_max=0.01, window=1, action="sync", cooldown=10, reject=True).state()
    assert state["reject"] is True and GuardState.from_state(state).reject
    del state["reject"]  # a checkpoint written before `reject` existed
    assert GuardState.from_state(state).reject is False


def test_reject_is_written_into_a_spec_only_where_set_and_validated_naming_row_and_field():
    """`reject` defaults to false and is written only where set (the guarded rows trained before it keep their specs:
    tests/test_spec.py checks the committed ones); it needs window 1, and on a stale row flush; verl refuses it."""
    from opd.backends.verl import plan
    assert "reject" not in Guard(d_max=0.01, window=1, action="sync", cooldown=10).as_dict()
    assert Guard(d_max=0.01, window=1, action="fallback", cooldown=10, reject=True).as_dict()["reject"] is True
    assert all(e.guard(r).reject for e in [Experiment.of(C.load(), "lean")] for r in e.rows if r.guard)
    assert not any(r.guard.reject for r in Experiment.of(C.load(), "toy").rows if r.guard)
    for row, said in (({"name": "noise-guard-w2", "noise_sigma": 0.15, "guard": {
                           "d_max": 0.004, "window": 2, "action": "fallback", "cooldown": 10, "reject": True}},
                       r"noise-guard-w2.*'guard.reject'.*window 2.*needs window 1"),
                      ({"name": "stale-guard-noflush", "staleness": 4, "guard": {
                           "d_max": 0.004, "window": 1, "action": "sync", "cooldown": 10, "reject": True}},
                       r"stale-guard-noflush.*'guard.reject'.*staleness 4.*flush: true")):
        cfg = C.load()
        cfg["experiments"]["toy"]["rows"].append(row)
        with pytest.raises(C.ConfigError, match=said):
            C.validate(cfg)
    row = {"name": "n", "noise_sigma": 0.1,
           "guard": {"d_max": 0.004, "window": 1, "action": "fallback", "cooldown": 10, "reject": True}}
    assert any(e.startswith("guard.reject:") for e in plan.errors(row, C.load()["experiments"]["toy"]))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from opd.backends.tiny.sft import train_base
    out = tmp_path_factory.mktemp("base")
    train_base(STUDENT, task_seed=0, seed=0, out_dir=out)
    return out


FAR = {"name": "g", "noise_sigma": 1.0}  # on the test's student: d_n 0.15-0.33 on every step, BF16's |d_n| < 3e-4
D_MAX = 0.004


def far_spec(base, reject=True, row=FAR, steps=12, **guard):
    return {**spec(base, row, steps=steps, eval_every=0),
            "guard": {"d_max": D_MAX, "window": 1, "action": "fallback", "cooldown": 2,
                      **({"reject": True} if reject else {}), **guard}}


def test_a_guard_that_rejects_keeps_D_within_its_line_on_an_engine_always_far_past_it(base, tmp_path):
    """Issue 43's promise (config.yaml, lean's guard rows): a guarded run's D (its mean d_n over the batches trained
    on) within 1.25x its d_max, on an engine whose every step is ~50x past it. Without reject the crossing batch of
    each activation is trained on (steps 0, 3 and 8) and D is ~15x d_max; with it those batches are discarded and
    recorded (steps 0, 2 and 6: the spans [0, 2), [2, 6), [6, 14)), and every step trains on the fallback's batch."""
    from opd.backends.tiny.trainer import train_run
    train_run(far_spec(base, reject=False), tmp_path / "old")
    train_run(far_spec(base), tmp_path / "new")
    old, new = (store.read_table(tmp_path / d / "steps.parquet").set_index("step") for d in ("old", "new"))
    assert old.index[~old["guard_active"]].tolist() == [0, 3, 8] and old["rejected_d_n"].isna().all()
    assert old["d_n"].mean() > 5 * D_MAX
    assert new["guard_active"].all() and set(new["engine"]) == {"fallback"}
    rejected = new["rejected_d_n"].dropna()
    assert rejected.index.tolist() == [0, 2, 6] and (rejected > 20 * D_MAX).all()
    assert rejected[0] == old.loc[0, "d_n"]  # the same batch as the old run's step 0, measured the same way
    assert (new["staleness"] == 0).all() and (new["engine_version"] == new.index).all()
    D = new["d_n"].mean()
    assert D <= 1.25 * D_MAX and new["d_n"].abs().max() < 1e-3, D
    print(f"D / d_max: rejecting {D / D_MAX:.3f}, not rejecting {old['d_n'].mean() / D_MAX:.1f}")


def test_a_stale_guard_that_rejects_resamples_the_step_with_the_actions_engine(base, tmp_path):
    """On a stale row (k = 2, flush): step n is sampled again at version n (sync) or n - k (fallback_numerics), the
    batches in flight discarded with the rejected one; the row's engine never trains."""
    from opd.backends.tiny.trainer import train_run
    for action, stale in (("sync", 0), ("fallback_numerics", 2)):
        train_run(far_spec(base, row={**FAR, "staleness": 2}, action=action, flush=True), tmp_path / action)
        st = store.read_table(tmp_path / action / "steps.parquet").set_index("step")
        assert set(st["engine"]) == {action} and st["rejected_d_n"].dropna().index.tolist() == [0, 2, 6]
        assert (st["staleness"] == np.minimum(st.index, stale)).all(), action


def test_a_guard_that_rejects_is_deterministic_and_resumes_exactly_after_a_rejection(base, tmp_path):
    """Two straight runs are identical (whatever the rollout thread's timing), and a run killed after step 7 resumes
    from the checkpoint of step 6 (written after the rejections at steps 0 and 2: it holds them and their spans),
    rejects again at step 6 and gives the straight run's outputs. A stale row, so the worker samples ahead and is
    restarted at each rejection."""
    from opd.backends.tiny.trainer import train_run
    s = far_spec(base, row={**FAR, "staleness": 2}, action="sync", flush=True)
    s["settings"].update(eval_every=4, checkpoint_every=3)

    with pytest.raises(Crash):
        train_run(s, tmp_path / "run", progress=crash_at(8))
    ck = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert ck["step"] == 6 and ck["guard"]["spans"] == [[0, 2], [2, 6]]
    assert [r["step"] for r in ck["steps_rows"] if not math.isnan(r["rejected_d_n"])] == [0, 2]
    train_run(s, tmp_path / "run")
    for d in ("a", "b"):
        train_run(s, tmp_path / d)
    a, b, resumed = (store.read_table(tmp_path / d / "steps.parquet").drop(columns=TIMING) for d in ("a", "b", "run"))
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(resumed, a)
    assert resumed["rejected_d_n"].notna().sum() == 3
    held = [store.read_table(tmp_path / d / "heldout.parquet") for d in ("a", "run")]
    pd.testing.assert_frame_equal(*held)


def test_the_guard_record_counts_a_rejected_step_as_the_fallbacks():
    """workflow/scripts/guard_analysis.per_run: a step whose row-engine batch was rejected is a fallback step (the
    cheap engine's share counts only the steps trained on its batches) and is left out of the fallback's tokens/s
    (its wall time holds both rollouts); the run's rejected batches are counted."""
    import importlib.util
    from opd.config import ROOT
    sp = importlib.util.spec_from_file_location("guard_analysis", ROOT / "workflow/scripts/guard_analysis.py")
    mod = importlib.util.module_from_spec(sp)
    sp.loader.exec_module(mod)
    st = pd.DataFrame({"run_id": "r", "step": range(6), "trained_tokens": 100,
                       "step_s": [1.0, 3.0, 2.0, 2.0, 1.0, 3.0],
                       "guard_active": [False, True, True, False, False, True],
                       "rejected_d_n": [np.nan, 0.3, np.nan, np.nan, np.nan, 0.2]})
    r = mod.per_run(st).iloc[0]
    assert r["cheap_share"] == pytest.approx(0.5) and r["activations"] == 2 and r["rejected"] == 2
    assert r["fallback_tokens_per_s"] == pytest.approx(50.0) and r["cheap_tokens_per_s"] == pytest.approx(75.0)
