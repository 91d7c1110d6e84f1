"""The mismatch guard: train with a cheap rollout engine, fall back when its measured mismatch crosses a line.

Backend-independent state machine, fed one d_n per training step in step order (the tiny trainer and the
verl weight-sync hook both drive it). It watches the running mean of d_n over the last `window` steps
rolled out by the row's own engine (window 1: each step's own d_n); when that mean exceeds `d_max` at step n,
it activates: the rollouts of a span of `cooldown` steps come from the action's engine. Where the span starts:

- `reject` (window 1): at n itself. The batch that crossed is not trained on: the trainer measures d_n before
  its optimizer step, discards the batch and samples step n again with the action's engine (and, on a stale
  row, the batches after it already in flight: `reject` there needs `flush`). Every batch the row's engine
  gets trained on is then at or under d_max. The tiny backend only (verl trains on a batch before its d_n is
  known to the guard).
- `flush`: at n + 1. The batch of step n is trained on; the batches of steps n + 1 ... n + lag (the row's
  staleness), sampled ahead, are discarded and sampled again by the action's engine: the trainer restarts its
  rollout pipeline there (opd.backends.tiny.trainer), as an asynchronous trainer flushes its queue.
- neither: at n + 1 + lag. The batches of steps n + 1 ... n + lag are already sampled, or may be, in the
  asynchronous schedule, and are trained on.

Deciding from the d_n known when a batch's weights exist (or discarding what was decided before) keeps a run
deterministic whatever the threads' timing; between activations the rollout runs k steps ahead as without a
guard. After the span the row's engine returns and the window starts empty.

Back-off: each activation that follows the previous one without a full window of the row's engine at or
under d_max in between doubles the cooldown, up to `cap` (the run's length); a full window at or under
d_max resets it. An engine that is always past d_max therefore gets at most
`max_activations(steps, cooldown)` = ceil(log2(steps / cooldown + 1)) activations in a run, the last
lasting to its end: it settles on the fallback instead of oscillating every cooldown.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from opd.rows import Guard

ROW_ENGINE = "row"  # the `engine` column of a step rolled out by the row's own engine


def max_activations(steps: int, cooldown: int) -> int:
    """The most activations a run of `steps` steps can have when every window re-triggers: cooldowns
    c, 2c, 4c, ... cover the run after a activations once c (2^a - 1) >= steps."""
    return max(1, math.ceil(math.log2(steps / cooldown + 1)))


class Span(NamedTuple):
    """The steps [start, end) one activation's rollouts come from the action's engine."""
    start: int
    end: int


@dataclass
class GuardState:
    d_max: float
    window: int
    action: str
    cooldown: int
    lag: int = 0  # the row's staleness k
    flush: bool = False  # the batches in flight are discarded when it acts: the span starts at the next step
    reject: bool = False  # the batch that crosses is discarded too: the span starts at the step that crossed
    cap: int = 1 << 30  # the longest cooldown (the run's length)
    recent: list = field(default_factory=list)  # d_n of the row engine's steps since watching (re)started
    next_cooldown: int = 0  # the next activation's cooldown (back-off); 0: `cooldown`
    spans: list = field(default_factory=list)  # [start, end) steps of each activation
    watch_from: int = 0  # the first step whose d_n counts (the end of the last activation)

    @classmethod
    def of(cls, guard: Guard, lag: int, steps: int) -> "GuardState":
        """The state of a run's guard at its start: `guard` with d_max a number (opd.spec.Experiment.guard, as a
        job spec holds it), the row's staleness `lag`, the run's `steps` (the longest cooldown)."""
        if isinstance(guard.d_max, str):
            raise ValueError(f"guard d_max {guard.d_max!r}: resolve it to a number first (opd.spec.Experiment.guard)")
        return cls(d_max=float(guard.d_max), window=int(guard.window), action=guard.action,
                   cooldown=int(guard.cooldown), lag=lag, flush=bool(guard.flush), reject=bool(guard.reject), cap=steps)

    def observe(self, step: int, d_n: float) -> Span | None:
        """Step `step`'s measured d_n; returns the activation it triggers ([start, end)), if any. With `reject`
        the span starts at `step`: the caller discards the batch it measured and samples the step again."""
        if step < self.watch_from:
            return None
        self.recent = (self.recent + [float(d_n)])[-self.window:]
        if len(self.recent) < self.window:
            return None
        if sum(self.recent) / self.window <= self.d_max:
            self.next_cooldown = 0  # a full clean window: the back-off starts over
            return None
        length = self.next_cooldown or self.cooldown
        start = step if self.reject else step + 1 + (0 if self.flush else self.lag)
        span = Span(start, start + length)
        self.spans.append(span)
        self.watch_from, self.recent = span[1], []
        self.next_cooldown = min(2 * length, self.cap)
        return span

    def active(self, step: int) -> bool:
        """Whether step `step`'s rollout comes from the action's engine (known once step - 1 - lag is observed, or,
        with flush, final once step - 1 is, and with reject once step is: an activation in between discards the
        rollouts sampled ahead)."""
        return any(a <= step < b for a, b in self.spans)

    def engine(self, step: int) -> str:
        """The `engine` column of step `step`: ROW_ENGINE or the action."""
        return self.action if self.active(step) else ROW_ENGINE

    @property
    def activations(self) -> int:
        return len(self.spans)

    def state(self) -> dict:
        """Everything a checkpoint needs to resume in the same state."""
        return {k: (list(map(list, v)) if k == "spans" else list(v) if isinstance(v, list) else v)
                for k, v in asdict(self).items()}

    @classmethod
    def from_state(cls, state: dict) -> "GuardState":
        """The state `state()` gave (a checkpoint written before `reject` existed lacks it: false)."""
        return cls(**{**state, "spans": [Span(*s) for s in state["spans"]]})
