"""A row of the configuration matrix: one rollout configuration, with its defaults and predicates
written once. Rules, the analysis, the figure and table scripts and both backends read rows through
`Row`; nothing else spells a default or asks "is this a plain OPD row?" by itself.

A row comes from config.yaml (validated by opd.config) or back from the analysis's rows.parquet,
where unset optional fields read back as NaN; `Row.of` accepts both.
"""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields, replace

# Fields that say where or how often a row runs, not what it computes: kept out of a run's params so
# that editing them never reruns existing runs.
SEQUENTIAL = "sequential"  # a row's `seeds` when the experiment's sequential rule chooses them
PLACEMENT_FIELDS = ("students", "seeds", "description", "baseline", "reference")
# What a rollout engine is: its numerics and its staleness (whatever the algorithm or update variant).
ENGINE_FIELDS = ("weights", "activations", "kv_cache", "bf16_layers", "quant_alpha", "staleness", "noise_sigma",
                 "noise_redraw")
# The fields that quantize (a recipe of opd.recipes.RECIPES each): whose error Q(x) - x_bf16 quant_alpha scales.
QUANT_FIELDS = ("weights", "activations", "kv_cache")
# quant_alpha's range, (0, QUANT_ALPHA_MAX]: below 1 the recipes' error shrunk towards BF16, above 1 amplified (the
# same entries and signs, alpha times larger); the row schema's `maximum` and opd.plan.DIALS say the same
QUANT_ALPHA_MAX = 16.0


def _unset(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


# What each guard action's engine keeps of the row's engine: (its numerics, its staleness). What is not kept is
# the standard engine's: BF16 numerics, staleness 0. The one statement of the actions' meaning (Guard's
# keeps_numerics and keeps_staleness read it; the backends and Row read those).
_GUARD_KEEPS = {"fallback": (False, False), "sync": (True, False), "fallback_numerics": (False, True)}
GUARD_ACTIONS = tuple(_GUARD_KEEPS)


@dataclass(frozen=True)
class Guard:
    """The mismatch guard of a row: when the running mean of d_n over `window` steps of the row's own
    engine crosses `d_max` (window 1: the step that crosses), the next `cooldown` steps' rollouts come from
    `action`'s engine (GUARD_ACTIONS: `fallback`, the standard BF16 engine, synchronous; `sync`, staleness 0
    with the row's numerics; `fallback_numerics`, BF16 numerics with the row's staleness); then the row's engine
    again, watching afresh. `d_max` is a number (nats/token) or "budget" (opd.spec.Experiment.guard_line).
    `flush`: on a stale row (k > 0), the batches already sampled for the next k steps are discarded when the
    guard acts, so the action's engine starts at the step after the one that crossed (an asynchronous trainer's
    pipeline flush, its rollouts wasted); without it they are trained on, and the action starts k steps later.
    `reject` (window 1; tiny backend): the batch whose d_n crosses is not trained on either: it is discarded and its
    step sampled again by the action's engine, so the span starts at the crossing step itself (a stale row's batches
    in flight go with it, so there it needs `flush`); without it the crossing batch is trained on and the span starts
    after it (the guard's first semantics, which the results committed before `reject` were trained with)."""
    d_max: float | str
    window: int
    action: str
    cooldown: int
    flush: bool = False
    reject: bool = False

    @classmethod
    def of(cls, g: "dict | str | Guard") -> "Guard":
        """From a config mapping, or the JSON string rows.parquet holds."""
        if isinstance(g, Guard):
            return g
        if isinstance(g, str):
            g = json.loads(g)
        return cls(**g)

    def as_dict(self) -> dict:
        """The fields config.yaml holds: a field with a default only where it is set (a default added later, such
        as `flush` or `reject`, changes no existing row's spec and so reruns nothing)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.default is MISSING or getattr(self, f.name) != f.default}

    def resolved(self, line: float) -> "Guard":
        """The guard a run runs: `d_max: budget` resolved to `line` (the experiment's admission line L,
        opd.spec.Experiment.guard_line), a number as a float."""
        return replace(self, d_max=float(line) if self.d_max == "budget" else float(self.d_max))

    @property
    def keeps_numerics(self) -> bool:
        """Whether the action's engine keeps the row's numerics (`sync`); otherwise BF16 weights and cache."""
        return _GUARD_KEEPS[self.action][0]

    @property
    def keeps_staleness(self) -> bool:
        """Whether the action's engine keeps the row's staleness (`fallback_numerics`); otherwise synchronous."""
        return _GUARD_KEEPS[self.action][1]


@dataclass(frozen=True)
class Row:
    name: str
    weights: str = "none"  # a weight recipe of opd.recipes.RECIPES
    activations: str = "none"  # an activation recipe: the inputs of the quantized layers' linear layers
    kv_cache: str = "none"  # a KV-cache recipe of opd.recipes.RECIPES
    bf16_layers: tuple[int, ...] = ()  # decoder layers the recipes leave in BF16 (negative: from the end)
    # the recipes' dial, in (0, 16]: every quantization becomes x_bf16 + quant_alpha (Q(x) - x_bf16), the recipes'
    # own error scaled (1: the recipes as they are; towards 0: the BF16 engine; above 1: the same error amplified;
    # tiny backend only)
    quant_alpha: float = 1.0
    staleness: int = 0  # k: the batch of update n is sampled by policy version n - k
    noise_sigma: float = 0.0  # fixed-direction Gaussian weight noise, relative to each tensor's RMS
    noise_redraw: bool = False  # the noise direction drawn afresh at every step (same size, no persistent bias)
    algorithm: str = "opd"  # opd, or an RL contrast (reinforce, grpo)
    variant: str = "none"  # an update variant (score_centering, advantage_offset, tis)
    speculative: bool = False  # verl: EAGLE-3 speculative decoding in the rollout engine
    baseline: bool = False  # the experiment's standard engine, every comparison's reference
    lr: float | None = None  # the row's own learning rate (else the experiment's)
    reference: str | None = None  # the row its Delta is measured against (else the baseline)
    guard: Guard | None = None  # the mismatch guard (opd.guard), if the row has one
    students: tuple[str, ...] | None = None  # default: the experiment's first student
    seeds: "tuple[int, ...] | str | None" = None  # default: the experiment's seeds; or SEQUENTIAL (opd.plan)
    description: str | None = None
    given: tuple[str, ...] = field(default=(), compare=False, repr=False)  # the fields written, in order

    @classmethod
    def of(cls, row: "dict | Row") -> "Row":
        """From a config row, or a record of rows.parquet (unset fields NaN, lists as arrays)."""
        if isinstance(row, Row):
            return row
        unknown = set(row) - set(FIELD_TYPES)
        if unknown:
            raise ValueError(f"row {row.get('name')!r}: unknown field(s) {sorted(unknown)}")
        vals = {}
        for k, v in row.items():
            v = v.tolist() if hasattr(v, "tolist") else v  # numpy arrays and scalars from Parquet
            if _unset(v) and k != "name":
                continue
            vals[k] = tuple(v) if isinstance(v, list) else FIELD_TYPES[k](v) if FIELD_TYPES[k] else v
        return cls(**vals, given=tuple(vals))

    # ------------------------------------------------------------------ views

    def written(self) -> dict:
        """The fields config.yaml wrote, in its order (lists as lists)."""
        return {k: _plain(getattr(self, k)) for k in self.given}

    def resolved(self) -> dict:
        """ROW_DEFAULTS overlaid with the written fields: the form run.json and rows.parquet hold (the
        guard as a JSON string: its d_max may be a number or "budget", which one Parquet column cannot type)."""
        out = {**ROW_DEFAULTS, **self.written()}
        if self.guard is not None:
            out["guard"] = json.dumps(out["guard"], sort_keys=True)
        return out

    def params(self) -> dict:
        """What a job computes from: the row's own fields as config.yaml wrote them, placement left out.
        A job spec holds exactly this, so a default added later never reruns existing runs."""
        return {k: v for k, v in self.written().items() if k not in PLACEMENT_FIELDS}

    # ------------------------------------------------------------------ predicates

    @property
    def sequential(self) -> bool:
        """Its seeds are chosen one at a time by the experiment's sequential rule (`seeds: sequential`, opd.plan)."""
        return self.seeds == SEQUENTIAL

    @property
    def is_plain_opd(self) -> bool:
        """OPD with no update variant and one engine throughout (no guard): the paper's algorithm as it is."""
        return self.algorithm == "opd" and self.variant == "none" and self.guard is None

    @property
    def in_budget(self) -> bool:
        """A row the budget is measured on: a plain OPD engine trained with the experiment's own
        settings and compared with the baseline (a guarded row is not one engine: not plain OPD)."""
        return self.is_plain_opd and self.lr is None and self.reference is None

    @property
    def is_reference_row(self) -> bool:
        """A row trained with its own settings (its own lr) or measured against another row (`reference`): its Δ
        is not a mismatch's against the standard engine, and its verdict is labelled so wherever it is shown."""
        return self.algorithm == "opd" and (self.lr is not None or self.reference is not None)

    @property
    def role(self) -> str:
        """What a row's verdict means, as tables label it: baseline, budget (a mismatch source the budget is
        measured on), reference (is_reference_row), guarded, variant (an update variant), rl."""
        if self.baseline:
            return "baseline"
        if self.algorithm != "opd":
            return "rl"
        if self.is_reference_row:
            return "reference"
        if self.guard is not None:
            return "guarded"
        return "variant" if self.variant != "none" else "budget"

    @property
    def admission_checked(self) -> bool:
        """The offline admission check measures this row's engine: a budget row without staleness (the check has no
        training to be stale), the baseline included (its D_hat is measured, but it is not a decision)."""
        return self.in_budget and not self.staleness

    @property
    def is_admission_candidate(self) -> bool:
        """An engine the admission check decides on: a row it measures other than the baseline."""
        return self.admission_checked and not self.baseline

    @property
    def engine_key(self) -> tuple:
        """What the rollout engine is (numerics and staleness), whatever the algorithm or variant."""
        return tuple(getattr(self, k) for k in ENGINE_FIELDS)

    @property
    def quantizes(self) -> bool:
        """Whether a recipe quantizes something (weights, activations or the KV cache): what quant_alpha acts on."""
        return any(getattr(self, k) != "none" for k in QUANT_FIELDS)

    @property
    def has_standard_numerics(self) -> bool:
        """The standard engine's numerics (no recipe, no noise), whatever the staleness."""
        return self.weights == "none" and self.activations == "none" and self.kv_cache == "none" and self.noise_sigma == 0

    @property
    def is_standard_engine(self) -> bool:
        """The standard engine: its numerics, synchronous."""
        return self.has_standard_numerics and self.staleness == 0

    @property
    def guard_falls_back_to_standard(self) -> bool:
        """A guard whose fallback is the standard engine (BF16 numerics, synchronous): what the action keeps of the
        row's engine is standard already (`fallback`; `sync` on a row whose numerics are BF16, a staleness row)."""
        g = self.guard
        return (g is not None and (not g.keeps_numerics or self.has_standard_numerics)
                and (not g.keeps_staleness or self.staleness == 0))

    @property
    def family(self) -> str:
        """Which mismatch source a row is about, for colours and grouping: quantized weights alone
        ("weights"), quantized activations (with their weights or not: "activations"), the KV cache,
        staleness, noise, or more than one ("combined")."""
        if self.baseline:
            return "baseline"
        if self.algorithm != "opd":
            return "rl"
        kinds = [k for k, on in (("weights", self.weights != "none" and self.activations == "none"),
                                 ("activations", self.activations != "none"),
                                 ("kv_cache", self.kv_cache != "none"),
                                 ("staleness", self.staleness > 0), ("noise", self.noise_sigma > 0)) if on]
        if not kinds:  # the standard engine under other training settings (an ablation's reference)
            return "baseline"
        return kinds[0] if len(kinds) == 1 else "combined"

    def unguarded_in(self, rows) -> "Row | None":
        """The same engine without a guard among `rows` (same numerics and staleness, same lr and reference,
        plain OPD): what a guarded row is compared with. None if the experiment does not run it."""
        return next((r for r in rows if r.is_plain_opd and r.engine_key == self.engine_key
                     and r.lr == self.lr and r.reference == self.reference), None)

    def students_or(self, first: str) -> tuple[str, ...]:
        return self.students or (first,)


# ---------------------------------------------------------------- mechanisms: the dials a budget edge is found on
# A mechanism is one way of making mismatch whose size one field of the row sets (its dial): fixed-direction weight
# noise (sigma), noise redrawn every step (sigma), staleness (k) at the experiment's learning rate or at a row's own
# (against that row's reference), and a quantization recipe scaled by `quant_alpha` (its error times alpha). Each
# mechanism of a student has its own Delta = tau edge (opd.stats.edges); a row that turns two dials at once
# (combinations, BF16 layers), a guard, an update variant or RL is on no dial.
NOISE_FIXED, NOISE_REDRAWN, STALENESS = "noise_fixed", "noise_redrawn", "staleness"
STALENESS_AT = "staleness@lr="  # + the row's own learning rate (format g): staleness at another lr
QUANT_ALPHA = "alpha:"  # + <weights>/<activations>/<kv_cache>: a recipe scaled by quant_alpha
_DIAL_OF = {NOISE_FIXED: "noise_sigma", NOISE_REDRAWN: "noise_sigma", STALENESS: "staleness"}


def _recipe(row: Row) -> tuple[str, str, str]:
    return row.weights, row.activations, row.kv_cache


def mechanism(row: Row, rows=(), *, lr: float | None = None) -> str | None:
    """The mechanism (dial) a row lies on, or None. `rows`: the experiment's rows (the alpha = 1 row of a recipe is on
    its dial only where some row scales that recipe); `lr`: the experiment's learning rate (a row whose `lr` is this
    one is at the experiment's lr).

    - NOISE_FIXED: noise_sigma > 0, the direction fixed, nothing else (the bisected edges' rows on noise_sigma,
      opd.plan, are such rows); NOISE_REDRAWN: the same with noise_redraw;
    - STALENESS: staleness > 0 only, at the experiment's lr, against the baseline; STALENESS_AT + f"{lr:g}": the same
      at the row's own lr, against its own reference (the k = 0 row at that lr);
    - QUANT_ALPHA + "<weights>/<activations>/<kv_cache>": a recipe alone (no BF16 layers, staleness or noise) with
      quant_alpha != 1 (shrunk below 1, amplified above), or at quant_alpha = 1 where a row of the same recipe has
      quant_alpha != 1.
    The baseline, reference rows at k = 0, BF16 layers, combinations, guards, update variants, speculative decoding
    and RL are on no dial: None."""
    if not row.is_plain_opd or row.baseline or row.bf16_layers or row.speculative:
        return None
    own_lr = row.lr is not None and (lr is None or not math.isclose(row.lr, lr))
    numerics, noise, stale = row.quantizes, row.noise_sigma > 0, row.staleness > 0
    if own_lr:  # only staleness has a dial at another lr, measured against that lr's own k = 0
        return f"{STALENESS_AT}{row.lr:g}" if stale and not numerics and not noise and row.reference else None
    if row.reference is not None:
        return None
    if noise and not numerics and not stale:
        return NOISE_REDRAWN if row.noise_redraw else NOISE_FIXED
    if stale and not numerics and not noise:
        return STALENESS
    if numerics and not noise and not stale:
        alpha = row.quant_alpha
        scaled = alpha != 1 or any(
            r.quant_alpha != 1 and _recipe(r) == _recipe(row) and mechanism(r, (), lr=lr) for r in rows)
        return f"{QUANT_ALPHA}{'/'.join(_recipe(row))}" if scaled else None
    return None


def dial(mechanism_name: str) -> str:
    """The row field a mechanism's rows differ in: noise_sigma, staleness or quant_alpha."""
    if mechanism_name.startswith(STALENESS_AT):
        return "staleness"
    if mechanism_name.startswith(QUANT_ALPHA):
        return "quant_alpha"
    return _DIAL_OF[mechanism_name]


def dial_value(row: Row, mechanism_name: str) -> float:
    """Where a row sits on its mechanism's dial (sigma, k or alpha)."""
    return float(getattr(row, dial(mechanism_name)))


# The mechanisms in their order: (a name, or the prefix of a family of names; whether the name is exact).
MECHANISM_ORDER = ((NOISE_FIXED, True), (NOISE_REDRAWN, True), (STALENESS, True), (STALENESS_AT, False),
                   (QUANT_ALPHA, False))


def mechanism_order(mechanism_name: str) -> tuple:
    """A sort key: fixed noise, redrawn noise, staleness (the experiment's lr, then others), then the recipes
    (MECHANISM_ORDER); a name none of them covers last."""
    for i, (prefix, exact) in enumerate(MECHANISM_ORDER):
        if mechanism_name == prefix or (not exact and mechanism_name.startswith(prefix)):
            return i, mechanism_name
    return len(MECHANISM_ORDER), mechanism_name


def _plain(v):
    return list(v) if isinstance(v, tuple) else v.as_dict() if isinstance(v, Guard) else v


# Every computed field's default (placement fields without one are absent), derived from Row itself.
ROW_DEFAULTS = {f.name: _plain(f.default) for f in fields(Row)
                if f.name not in ("name", "given", "students", "seeds", "description")}
# How a value read back from Parquet is restored (None: as it is; lists become tuples).
FIELD_TYPES = {"name": str, "weights": str, "activations": str, "kv_cache": str, "bf16_layers": None,
               "quant_alpha": float, "staleness": int, "noise_sigma": float, "noise_redraw": bool, "algorithm": str,
               "variant": str, "speculative": bool, "baseline": bool, "lr": float, "reference": str, "guard": Guard.of,
               "students": None, "seeds": None, "description": str}
