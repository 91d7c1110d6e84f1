"""The adaptive design, opt-in per experiment: runs spent only where a decision is still open.

- Sequential seeds: a row with `seeds: sequential` runs the experiment's `sequential.start_seeds` seeds, then one
  more seed while the seed-aware interval of its Delta straddles tau, up to `max_seeds`
  (opd.calibration.SequentialRule and next_seeds: the pre-registered rule and its simulated error rates).
- Bisected edges: an `edges` entry trains rows of one engine dial (DIALS: noise_sigma, quant_alpha, or staleness, an
  integer dial), every row carrying the edge's `fixed` fields besides, at its bracket's two ends, then at the
  geometric midpoint of the largest passing and the smallest failing value, until the two values' D are within
  `factor` or `max_rows` values have run, on each of its students alone. A value's verdict is the seed-aware rule's
  on its (sequential, where the experiment has a rule) seeds.

The plan is a pure function of the configuration and the results on disk: `planned` replays every decision from
the complete runs each time the DAG is built, so the same results give the same next runs, a killed round resumes
(its missing runs are planned again), and Slurm plans as the local launcher does (Snakemake builds the DAG on the
submitting host). One `snakemake` call trains one round: the runs planned when it starts. `snakemake -n` shows the
next round; `python -m opd.cli calibrate` calls snakemake until a round plans nothing new. Each planned row is an
ordinary row of the DAG (cached, checked, analysed and shown like any other); an edge's rows are named
`<edge>-<value>` with the value's digits (0.0632: `0p0632`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd

from opd import calibration as cal
from opd import stats
from opd.rows import ENGINE_FIELDS, QUANT_ALPHA_MAX, SEQUENTIAL, Row
from opd.spec import Edge, Experiment, results_dir, run_id

def memo_path(experiment: str) -> str:
    """Where this checkout keeps an experiment's decided rows (Results' memo): not a result, never a job input."""
    return f".snakemake/opd/plan-{experiment}.json"


def decisions_path(out: str | Path) -> Path:
    """The committed record of an adaptive plan's decisions (rule plan_decisions writes it from the runs; keyed on
    the runs' content like the memo): a fresh clone's first plan reads its decisions back instead of recomputing
    them (each is 10,000 bootstrap resamples)."""
    from opd.outputs import analysis_file
    return Path(out) / "analysis" / analysis_file("plan_decisions.json")


MEMO_VERSION = 1  # raise it when a decision's computation changes (opd.stats, opd.calibration, _decide)
DIGITS = 4  # an edge value's significant digits: its row name and the value trained are the same number


class Dial(NamedTuple):
    """A row field an edge may bisect: whether its values are integers, the range they stay in (inclusive; a
    geometric bisection never reaches 0), and that range in words."""
    integer: bool = False
    lo: float = 0.0
    hi: float = float("inf")
    span: str = "above 0"

    def snap(self, v: float):
        """The value a row trains for a point `v` of the axis: DIGITS significant digits (an integer dial: the nearest
        integer, halves up), inside the dial's range."""
        x = int(np.floor(v + 0.5)) if self.integer else rounded(v)
        if x < self.lo:
            return int(self.lo) if self.integer else self.lo
        return self.hi if x > self.hi else x

    def inside(self, v: float) -> bool:
        return self.lo <= v <= self.hi


# The dials an edge bisects (config schema's `field` enum lists the same): noise_sigma (fixed-direction weight noise,
# or redrawn with fixed noise_redraw), quant_alpha (the row's quantization error scaled by alpha, x_bf16 +
# alpha (Q(x) - x_bf16): below 1 towards BF16, above 1 the recipe's own error amplified; in (0, 16], so a recipe that
# passes at alpha = 1 still has an edge to find beyond it) and staleness (an integer k >= 1; k = 0 is the synchronous
# engine)
DIALS = {"noise_sigma": Dial(), "quant_alpha": Dial(hi=QUANT_ALPHA_MAX, span=f"(0, {QUANT_ALPHA_MAX:g}]"),
         "staleness": Dial(integer=True, lo=1, span="the integers from 1 (0 is the synchronous engine)")}


# ---------------------------------------------------------------- what the plan reads: the complete runs' results

class RunResult:
    """A complete run's final held-out KL per problem (`kl`, indexed by prompt_id) and its D (mean d_n over its
    steps), read when first used; `sig`: what identifies its content (its run.json, which records its files' sha256),
    None for results given in memory."""

    def __init__(self, kl: pd.Series | None = None, D: float | None = None, *, sig: str | None = None, load=None):
        self._kl, self._D, self.sig, self._load = kl, D, sig, load

    def _read(self):
        if self._kl is None:
            self._kl, self._D = self._load()

    @property
    def kl(self) -> pd.Series:
        self._read()
        return self._kl

    @property
    def D(self) -> float:
        self._read()
        return self._D


class Results:
    """The complete runs of an experiment's folder (results/<experiment>), each read when first needed: a run is
    there when its run.json says complete (opd.store.is_complete) and `usable(run_id)` says so (checked_plan: the
    cache check finds it sound and current; a damaged or stale run is read as missing, never read). With `memo` (a
    JSON file), a row's decision on runs whose content is unchanged is read back instead of recomputed (each
    interval is 10,000 resamples; the DAG plans on every `snakemake` call). `decided`: a committed record of
    decisions (decisions_path), read only; its entries are keyed on content as the memo's are, so a decision is read
    back from it only for the same runs under the same rule."""

    def __init__(self, out: str | Path, memo: str | Path | None = None, usable=None,
                 decided: str | Path | None = None):
        self.out = Path(out)
        self._cache: dict[str, RunResult | None] = {}
        self.usable = usable or (lambda rid: True)
        self.memo_path = Path(memo) if memo else None
        self.memo: dict = {}
        for path in (decided, self.memo_path):  # this checkout's own memo over the committed record
            if path:
                try:
                    from opd import store
                    self.memo.update(store.read_json(path))
                except (OSError, ValueError):
                    pass
        self._memo_before = dict(self.memo)
        self.used: set[str] = set()

    def get(self, rid: str) -> RunResult | None:
        if rid not in self._cache:
            self._cache[rid] = self._read(self.out / "runs" / rid) if self.usable(rid) else None
        return self._cache[rid]

    @staticmethod
    def _read(run_dir: Path) -> RunResult | None:
        from opd import store
        if not store.is_complete(run_dir) or not (run_dir / "heldout.parquet").exists():
            return None  # not trained yet (verl: or not yet evaluated, rule heldout)

        def load():
            held = stats.final_heldout(store.read_table(run_dir / "heldout.parquet", store.HELDOUT))
            steps = store.read_table(run_dir / "steps.parquet")
            return held.set_index("prompt_id")["kl"].sort_index(), float(steps["d_n"].mean())
        # what identifies the content (opd.dag.run_record, the analysis record's too): the same in every clone, and
        # new for a re-evaluated verl run
        from opd.dag import run_record
        return RunResult(sig=run_record(str(run_dir.parent.parent), run_dir.name), load=load)

    def save(self) -> None:
        """Write the memo back if it changed, kept to the decisions this Results' plans used."""
        self.memo = {k: v for k, v in self.memo.items() if k in self.used}
        if self.memo_path and self.memo != self._memo_before:
            from opd import store
            self.memo_path.parent.mkdir(parents=True, exist_ok=True)
            store.write_json(self.memo, self.memo_path)


class Given(Results):
    """Results given in memory (run id -> RunResult): the tests' and the benchmarks' replay of a design."""

    def __init__(self, runs: Mapping[str, RunResult]):
        super().__init__(".")
        self._cache = dict(runs)

    def get(self, rid: str) -> RunResult | None:
        return self._cache.get(rid)

    @classmethod
    def of_frames(cls, heldout: pd.DataFrame, steps: pd.DataFrame) -> "Given":
        """From the analysis's tables of every run (heldout.parquet, steps.parquet): what the DAG's plan read from
        the run folders, so the edges table is made from the analysis's inputs alone."""
        fin = stats.final_heldout(heldout)
        D = steps.groupby("run_id")["d_n"].mean()
        return cls({rid: RunResult(g.set_index("prompt_id")["kl"].sort_index(), float(D[rid]))
                    for rid, g in fin.groupby("run_id") if rid in D.index})


# ---------------------------------------------------------------- one row on one student

class RowState(NamedTuple):
    """Where a row's sequential seeds stand on one student: the seeds to have (those run and those planned next),
    whether its verdict is decided, and on the seeds run when it is: Delta, the interval and the verdict."""
    seeds: tuple[int, ...]
    decided: bool
    delta: float = np.nan
    ci_lo: float = np.nan
    ci_hi: float = np.nan
    verdict: str | None = None
    D: float = np.nan


def rule_of(e: Experiment) -> cal.SequentialRule:
    """The experiment's sequential rule (opd.calibration.SequentialRule) at its tau and bootstrap settings; without
    a `sequential` entry, a rule that runs every seed of the experiment at once."""
    s = e.sequential
    own = ({"max_seeds": s.max_seeds, "start_seeds": s.start_seeds, "one_seed_ratio": s.one_seed_ratio} if s
           else {"max_seeds": len(e.seeds), "start_seeds": len(e.seeds)})
    return cal.SequentialRule(tau=e.tau, n_boot=e.bootstrap.resamples, ci=e.bootstrap.level, seed=e.bootstrap.seed,
                              n_draws=e.base_draws, **own)


def _matrix(results: list[RunResult]) -> np.ndarray:
    """(S, n) final KL of runs, on the problems every one of them has, in prompt_id order."""
    common = results[0].kl.index
    for r in results[1:]:
        common = common.intersection(r.kl.index)
    return np.stack([r.kl.loc[common].to_numpy(float) for r in results])


def row_state(e: Experiment, row: Row, student: str, results: Results, floor: int = 0) -> RowState:
    """A row's state on one student. Sequential (row.sequential): its first seeds 0, 1, ... that are complete in
    order; while fewer than the rule's start seeds are, or the reference row's seeds are not all complete, the
    next seeds are the ones to run up to the start; after that the rule decides in order (_decide: the first seeds
    on which the interval clears tau, else one more seed up to max_seeds). A fixed row's seeds are all its seeds,
    decided once they are all complete. `floor`: the seeds a sequential row runs at least before it is decided
    (near_edge; at most max_seeds). Read back from results.memo where the same runs were decided before."""
    rule = rule_of(e)
    ref = e.row(row.reference) if row.reference else e.baseline
    ref_runs = [results.get(run_id(ref.name, student, s)) for s in e.seeds_of(ref, student)]
    # a sequential row's seeds 0 .. max_seeds - 1 as a range (sliced lazily: max_seeds may be large)
    candidates = range(rule.max_seeds) if row.sequential else tuple(e.seeds_of(row, student))
    done = []
    for s in candidates:
        r = results.get(run_id(row.name, student, s))
        if r is None:
            break
        done.append(r)
    start = min(max(rule.start_seeds, floor), rule.max_seeds) if row.sequential else len(candidates)
    if len(done) < start or any(r is None for r in ref_runs):
        return RowState(tuple(candidates[:max(start, len(done))]), False)
    ref_seeds = np.asarray(e.seeds_of(ref, student))
    sigs = [r.sig for r in (*done, *ref_runs)]
    key = None if None in sigs else hashlib.sha256(json.dumps(
        [MEMO_VERSION, rule._asdict(), row.sequential, start, list(map(int, ref_seeds)), sigs]).encode()).hexdigest()
    if key:
        results.used.add(key)
    if key and key in results.memo:
        n, verdict, delta, lo, hi, D = results.memo[key]
        if verdict is None:
            return RowState(tuple(candidates[:n]), False)
        return RowState(tuple(candidates[:n]), True, delta, lo, hi, verdict, D)
    state = _decide(row, rule, start, candidates, done, ref_runs, ref_seeds)
    if key:
        results.memo[key] = [len(state.seeds), state.verdict, state.delta, state.ci_lo, state.ci_hi, state.D]
    return state


def _decide(row, rule, start, candidates, done, ref_runs, ref_seeds) -> RowState:
    """row_state's decision on complete runs (the rule in order; see row_state)."""
    n = start  # the rule in order: the first seeds on which the interval clears tau (or max_seeds) decide
    while True:
        m = _matrix([*done[:n], *ref_runs])  # only the seeds the rule reads (later ones are not the plan's)
        iv = cal.interval_on_seeds(m[:n], m[n:], rule, seeds_cand=list(candidates[:n]), seeds_base=ref_seeds)
        diverged = not np.isfinite([iv.delta, iv.ci_lo, iv.ci_hi]).all()
        if diverged or not row.sequential or n >= rule.max_seeds or not cal.straddles(iv.ci_lo, iv.ci_hi, rule.tau):
            break
        if n == len(done):
            return RowState(tuple(candidates[:n + 1]), False)
        n += 1
    # a held-out KL that is not finite (a diverged run) fails: no interval can clear it
    verdict = "fail" if diverged else stats.verdict_of(*iv, rule.tau)
    return RowState(tuple(candidates[:n]), True, float(iv.delta), float(iv.ci_lo), float(iv.ci_hi), verdict,
                    float(np.mean([r.D for r in done[:n]])))


# ---------------------------------------------------------------- one edge on one student

def value_text(v: float) -> str:
    """An edge value as a row name holds it: DIGITS significant digits, `.` written `p` (0.0632: 0p0632)."""
    return f"{v:.{DIGITS}g}".replace(".", "p").replace("-", "m").replace("+", "")


def rounded(v: float) -> float:
    return float(f"{v:.{DIGITS}g}")


def edge_fields(edge: Edge, students, value, sequential: bool) -> dict:
    """An edge's row at one value as config.yaml would write it: named `<edge>-<value>`, the edge's `fixed` fields
    and its own field at `value`, on `students` (left out where none), sequential where the experiment has a rule."""
    fixed = edge.fixed_fields
    with_ = f" with {', '.join(f'{k} = {v}' for k, v in fixed.items())}" if fixed else ""
    return {"name": f"{edge.name}-{value_text(value)}", **edge.row_fields(value),
            **({"students": list(students)} if len(students) else {}),
            **({"seeds": SEQUENTIAL} if sequential else {}),
            "description": f"edge {edge.name!r}: {edge.field} = {value:g}{with_}, bisected (opd.plan)"}


def edge_row(e: Experiment, edge: Edge, students, value: float) -> Row:
    """The row an edge trains at one value on the students whose bisection reached it (sequential where the
    experiment has a rule): one row per value, as a configured row runs several students; it carries the edge's
    `fixed` fields besides its own field's value (edge_fields)."""
    return Row.of(edge_fields(edge, students, value, e.sequential is not None))


def axis_rows(e: Experiment, edge: Edge) -> list[Row]:
    """The experiment's own rows on an edge's axis (the grid it is compared with): the baseline and the budget rows no
    edge made whose engine is the edge's rows' but for the edge's field (the same numerics and staleness otherwise:
    the fixed-direction noise rows for a noise_sigma edge, the same recipes for a quant_alpha edge)."""
    like = edge_row(e, edge, (), edge.bracket[0])
    same = [k for k in ENGINE_FIELDS if k != edge.field]
    return [r for r in e.rows if r.in_budget and not e.is_edge_row(r)
            and (r.baseline or all(getattr(r, k) == getattr(like, k) for k in same))]


class EdgeStep(NamedTuple):
    """One value of a bisected edge: its row and its state on the edge's student."""
    value: float
    row: Row
    state: RowState


class EdgeState(NamedTuple):
    """A bisected edge on one student: the values in the order the bisection chose them, the bracket [largest
    passing, smallest failing] value so far (NaN where that side has none) with their D, and why it stopped
    (None while running): `factor` (the bracket's D within the edge's factor), `max_rows`, `digits` (the
    midpoint rounds onto a value already run), `adjacent` (an integer dial's bracket ends are adjacent integers:
    no value lies between them) or `range` (the next value lies past the dial's range, DIALS, and its end has run:
    the edge lies beyond it)."""
    edge: str
    student: str
    steps: tuple[EdgeStep, ...]
    lo: float
    hi: float
    D_lo: float
    D_hi: float
    stopped: str | None

    @property
    def factor(self) -> float:
        return self.D_hi / self.D_lo if self.D_lo > 0 else np.nan


def _bracket(steps):
    """The largest passing value below the smallest failing one, and the smallest failing value (NaN: none)."""
    fails = [s for s in steps if s.state.verdict == "fail"]
    hi = min(fails, key=lambda s: s.value) if fails else None
    passes = [s for s in steps if s.state.verdict == "pass" and (hi is None or s.value < hi.value)]
    lo = max(passes, key=lambda s: s.value) if passes else None
    return lo, hi


def edge_state(e: Experiment, edge: Edge, student: str, results: Results, floors=None) -> EdgeState:
    """Replays the bisection of one edge on one student from the results: the bracket's two ends first; then,
    once every value so far is decided, the next value: the geometric midpoint of the bracket, or beyond the end
    that does not straddle the edge by the bracket's ratio, each snapped to its dial (Dial.snap: 4 significant
    digits, an integer, inside the dial's range); until the bracket's D are within edge.factor or edge.max_rows
    values have run (or no new value is left: `digits`, `adjacent`, `range`). Undecided values are the frontier
    the next runs train. `floors`: {(row, student): seeds at least} (near_edge)."""
    floors = floors or {}
    dial = DIALS[edge.field]
    lo0, hi0 = (dial.snap(v) for v in edge.bracket)
    ratio = hi0 / lo0
    values = [lo0, hi0]
    while True:
        steps = [EdgeStep(v, r := edge_row(e, edge, [student], v),
                          row_state(e, r, student, results, floors.get((r.name, student), 0))) for v in values]
        lo, hi = _bracket(steps)
        bracket = (lo.value if lo else np.nan, hi.value if hi else np.nan, lo.state.D if lo else np.nan,
                   hi.state.D if hi else np.nan)
        if not all(s.state.decided for s in steps):
            return EdgeState(edge.name, student, tuple(steps), *bracket, None)
        if lo and hi and hi.state.D <= edge.factor * lo.state.D:
            return EdgeState(edge.name, student, tuple(steps), *bracket, "factor")
        if len(values) >= edge.max_rows:
            return EdgeState(edge.name, student, tuple(steps), *bracket, "max_rows")
        if lo and hi and dial.integer and hi.value - lo.value <= 1:
            return EdgeState(edge.name, student, tuple(steps), *bracket, "adjacent")
        if lo and hi:
            point = np.sqrt(lo.value * hi.value)
        elif hi:  # every value below the smallest failing one fails: look lower
            point = min(values) / ratio
        else:  # nothing fails: look higher
            point = max(values) * ratio
        nxt = dial.snap(point)
        if nxt in values:
            return EdgeState(edge.name, student, tuple(steps), *bracket, "digits" if dial.inside(point) else "range")
        values.append(nxt)


# ---------------------------------------------------------------- the experiment as the DAG builds it

@dataclass(frozen=True)
class Plan:
    """The experiment with its adaptive parts resolved from the results so far: `experiment` (every sequential
    row's seeds chosen, every edge's rows added), the sequential rows' states ((row, student) -> RowState) and
    the edges' (EdgeState). `pending`: the experiment's runs without a complete result (the round the next
    `snakemake` trains, fixed rows' runs included); `open`: rows or edges whose decision is still open."""
    experiment: Experiment
    rows: dict
    edges: tuple[EdgeState, ...]
    pending: tuple[str, ...]
    decisions: dict = field(default_factory=dict, compare=False)  # the decisions it was made from, keyed as the memo

    @property
    def adaptive(self) -> bool:
        return bool(self.rows or self.edges)

    def written(self, experiment: dict) -> dict:
        """The experiment as config.yaml writes it (`experiment`) with the edges' rows added, as they would be
        written: the form opd.outputs decides the outputs from."""
        ours = {r["name"] for r in experiment["rows"]}
        return {**experiment, "rows": [*experiment["rows"],
                                       *(r.written() for r in self.experiment.rows if r.name not in ours)]}

    @property
    def open(self) -> list[str]:
        return ([f"row {r!r} on {s}" for (r, s), st in self.rows.items() if not st.decided]
                + [f"edge {x.edge!r} on {x.student}" for x in self.edges if x.stopped is None])

    def summary(self) -> list[str]:
        """One line per sequential row and edge: what it ran and where it stands."""
        out = []
        for (r, s), st in self.rows.items():
            state = (f"decided: {st.verdict} (Δ {st.delta:+.1%}, seed-aware [{st.ci_lo:+.1%}, {st.ci_hi:+.1%}])"
                     if st.decided else "undecided")
            out.append(f"plan: row {r!r} on {s}: seeds {list(st.seeds)}, {state}")
        for x in self.edges:
            tried = ", ".join(f"{v.value:g} {v.state.verdict or '?'}" for v in x.steps)
            where = (f"bracket [{x.lo:g}, {x.hi:g}], D [{x.D_lo:.3g}, {x.D_hi:.3g}] (x{x.factor:.2f})"
                     if np.isfinite(x.lo) and np.isfinite(x.hi) else f"no fail yet (largest pass {x.lo:g})"
                     if np.isfinite(x.lo) else f"no pass below the smallest fail ({x.hi:g}) yet" if np.isfinite(x.hi)
                     else "no verdict yet")
            out.append(f"plan: edge {x.edge!r} on {x.student}: {len(x.steps)} values ({tried}); {where}; "
                       + (f"stopped ({x.stopped})" if x.stopped else "open"))
        return out + ([self.headline()] if self.adaptive else [])

    def headline(self) -> str:
        """The plan in one line: the runs it has without a result (what `snakemake -c 2` trains next), and the
        decisions still open. Said of the experiment, not of the call that prints it (a call with a target trains
        only what its target needs)."""
        todo = (f"{len(self.pending)} run(s) to train next: `snakemake -c 2` trains them (`snakemake -n` lists them; "
                f"`python -m opd.cli calibrate -- -c 2` runs every round to the end)" if self.pending
                else "no run left to train")
        return f"plan: {todo}; " + ("open: " + ", ".join(self.open) if self.open else "every decision is made")


def near_edge(e: Experiment, states: dict, edges) -> set[tuple[str, str]]:
    """The (row, student) pairs the plan decides (sequential rows and edge values) whose D lies within the rule's
    near_edge_factor of their student's edge: the geometric mean of the largest passing and the smallest failing D
    among the decided rows in the budget (as opd.stats.budget_edge has it, also where a fail lies below a pass).
    Empty without near_edge_seeds, or for a student without both a pass and a fail."""
    seq = e.sequential
    if seq is None or seq.near_edge_seeds is None:
        return set()
    decided = {k: st for k, st in states.items() if st.decided and e.row(k[0]).in_budget}
    decided.update({(step.row.name, x.student): step.state for x in edges for step in x.steps if step.state.decided})
    out = set()
    for student in {s for _, s in decided}:
        mine = {k: st for k, st in decided.items() if k[1] == student and np.isfinite(st.D)}
        passes = [st.D for st in mine.values() if st.verdict == "pass"]
        fails = [st.D for st in mine.values() if st.verdict == "fail"]
        edge = stats.edge_point(max(passes), min(fails)) if passes and fails else float("nan")
        if np.isfinite(edge):
            keys = list(mine)
            near = stats.near_edge([mine[k].D for k in keys], edge, seq.near_edge_factor)
            out |= {k for k, n in zip(keys, near) if n}
    return out


def planned(e: Experiment, results: Results) -> Plan:
    """The experiment's Plan from the results so far (deterministic in them). With the rule's near_edge_seeds,
    the rows near their student's edge (near_edge) run at least that many seeds: the states are worked out again
    with those floors until no new row comes near an edge (floors only grow, so this ends; a row floored on the way
    keeps its floor even if the final edge lies further from it)."""
    rule_rows = [r for r in e.rows if r.sequential]
    floors: dict[tuple[str, str], int] = {}
    while True:
        states = {(r.name, s): row_state(e, r, s, results, floors.get((r.name, s), 0))
                  for r in rule_rows for s in r.students_or(e.primary)}
        edges = tuple(edge_state(e, x, s, results, floors) for x in e.edges for s in x.students)
        new = near_edge(e, states, edges) - set(floors)
        if not new:
            break
        floors.update({k: e.sequential.near_edge_seeds for k in new})
    reached: dict[tuple[Edge, float], list[str]] = {}  # each value's row once, on every student that reached it
    for edge, x in zip((x for x in e.edges for _ in x.students), edges):
        for step in x.steps:
            reached.setdefault((edge, step.value), []).append(x.student)
    new_rows = tuple(edge_row(e, edge, students, v) for (edge, v), students in reached.items())
    chosen = tuple((r, s, st.seeds) for (r, s), st in states.items())
    chosen += tuple((step.row.name, x.student, step.state.seeds) for x in edges for step in x.steps
                    if step.row.sequential)
    out = replace(e, rows=e.rows + new_rows, planned=chosen)
    pending = tuple(r.run_id for r in out.runs() if results.get(r.run_id) is None)
    results.save()
    return Plan(out, states, edges, pending, {k: v for k, v in results.memo.items() if k in results.used})


def next_round(e: Experiment, out: str | Path) -> str:
    """What a `snakemake` call says of the plan when it ends (`e` the experiment as configured, unplanned): the
    headline of the plan the results now give (opd.summary)."""
    return checked_plan(e, str(out)).headline()


def checked(e: Experiment, out: str | Path, sound, stale, memo: bool = True) -> Plan:
    """The Plan from current runs only, reading only: `sound(run_id)` says whether a run's files match its record
    (opd.store.inspect; a damaged run is never read), `stale(experiment)` names the planned experiment's runs that
    were computed from another spec than it asks for now. Those are read as missing, and the plan made again while
    a new one turns up (each time one at least, so it ends). `memo`: read decisions back from the committed record
    (decisions_path) and this checkout's memo (memo_path), and keep the memo; else compute every one."""
    bad: set[str] = set()
    while True:
        plan = planned(e, Results(out, memo_path(e.name) if memo else None,
                                  usable=lambda rid: rid not in bad and sound(rid),
                                  decided=decisions_path(out) if memo else None))
        new = set(stale(plan.experiment)) - bad
        if not new:
            return plan
        bad |= new


def checked_plan(e: Experiment, out: str, memo: bool = True) -> Plan:
    """The DAG's plan (workflow/rules/common.smk), `opd.cli calibrate`'s and every reader's: `checked` with the cache
    check of opd.store.inspect (this checkout's ledger of hashed files, opd.store.ledger_path:
    a file is hashed again only when its size or mtime changed). Moves and writes nothing under results/. `memo`:
    as `checked` (rule plan_decisions computes every decision afresh, for the record it writes)."""
    from opd import dag, store
    ledger = store.ledger_path(e.name)
    verified = store.read_ledger(ledger)
    before = json.dumps(verified, sort_keys=True)
    runs = Path(out) / "runs"

    def sound(rid):
        return store.inspect(runs / rid, verified).state == "current"

    def stale(x):
        return [r for r, spec in dag.train_specs(x, f"{out}/_models").items()
                if store.inspect(runs / r, verified, spec).state == "stale"]
    plan = checked(e, out, sound, stale, memo)
    store.write_ledger(ledger, verified, before)
    return plan


def experiment(cfg: dict, name: str | None = None, out: str | None = None) -> Experiment:
    """Experiment `name` of a validated config as the DAG builds it: planned from the results under `out`
    (default results/<name>) where it is adaptive, as it is otherwise."""
    e = Experiment.of(cfg, name)
    return checked_plan(e, out or results_dir(e.name)).experiment if e.adaptive else e


BISECTION_COLUMNS = ("edge", "student", "order", "value", "row", "n_seeds", "verdict", "delta", "ci_lo", "ci_hi", "D",
                "lo_after", "hi_after", "D_lo_after", "D_hi_after", "stopped")


def edges_frame(plan: Plan) -> pd.DataFrame:
    """Every edge's values on each student in the order the bisection tried them: its row, the seeds it ran, its
    seed-aware verdict with Delta and the interval, its D; the bracket once it was decided (`*_after`: the
    largest passing and the smallest failing value and their D over the values up to it, NaN for an empty
    side); and why the edge stopped (None: still open)."""
    out = []
    for x in plan.edges:
        for i, st in enumerate(x.steps):
            s = st.state
            lo, hi = _bracket(x.steps[:i + 1])
            out.append({"edge": x.edge, "student": x.student, "order": i, "value": st.value, "row": st.row.name,
                        "n_seeds": len(s.seeds), "verdict": s.verdict, "delta": s.delta, "ci_lo": s.ci_lo,
                        "ci_hi": s.ci_hi, "D": s.D, "lo_after": lo.value if lo else np.nan,
                        "hi_after": hi.value if hi else np.nan, "D_lo_after": lo.state.D if lo else np.nan,
                        "D_hi_after": hi.state.D if hi else np.nan, "stopped": x.stopped})
    return pd.DataFrame(out, columns=list(BISECTION_COLUMNS))
