"""Typed specs: an experiment as config.yaml gives it, and each job's spec as its file holds it.

Two kinds of object, one pattern each:

- An experiment's settings (`Settings`, `Student`, `Admission`, `Slurm`, ...; `Experiment` holds them all):
  frozen dataclasses whose field defaults are the one home of every default. `of(mapping)` builds one from
  config.yaml's mapping (or a spec file's), remembering which fields were written (`given`); `written()`
  gives back exactly those. A default is therefore never written into a spec file, and a default added
  later reruns nothing (opd.rows.Row does the same for a row).
- A job's spec (`TrainSpec`, `BaseSpec`, `AdmissionSpec`, `KVAttributionSpec`, `ThroughputSpec`,
  `MemoryBoundSpec`): what one compute job computes from. opd.dag builds it once from the Experiment, the
  rule writes `to_json()` as the job's spec file (its input: a changed spec reruns the job), opd.cli parses
  the file once (`from_json`) and passes the object to the backend, which reads attributes only. Its
  fields without a default are always written; a field with a default is written only when set to
  something else. `sha256()` hashes the canonical JSON (`dumps`).

Torch-free and verl-free (stdlib and opd.rows only): config validation and every Snakemake call import it.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar, Mapping

from opd.errors import ConfigError
from opd.rows import Guard, Row


class SpecError(ValueError):
    pass


MAX_SPEC_BYTES = 64 * 1024  # the bytes one job's spec file may hold (the largest of config.yaml's is about 1 KB)


def spec_text(spec: dict, path="a job's spec") -> str:
    """A job's spec as its file holds it (canonical JSON); a spec past MAX_SPEC_BYTES is refused, naming `path`."""
    text = json.dumps(spec, sort_keys=True, indent=1) + "\n"
    if len(text.encode()) > MAX_SPEC_BYTES:
        raise ConfigError(f"{path}: the job's spec would be {len(text.encode()):,} bytes, more than the "
                          f"{MAX_SPEC_BYTES:,} a spec may hold (the largest of config.yaml's is about 1 KB)")
    return text


def dumps(obj) -> str:
    """Canonical JSON (sorted keys, no spaces): the form hashes use."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def results_dir(experiment: str) -> str:
    """Where an experiment's results live, relative to the repository root (as Snakemake's paths): its runs,
    base models, analysis and job specs."""
    return f"results/{experiment}"


def run_id(row_name: str, student: str, seed: int) -> str:
    """A run's id, `<row>.<student>.s<seed>`: it depends on nothing else, so adding a column to the matrix
    never renames existing results."""
    return f"{row_name}.{student}.s{seed}"


def draw_of(seed, n_draws: int):
    """The base-model draw (SFT seed offset) an OPD run seed trains from: seed % n_draws (draw 0: the student's
    own base models). The one home of the rule: ints here, numpy arrays through opd.stats.draw_of."""
    return seed % n_draws


def base_name(student: str, draw: int = 0) -> str:
    """The folder of a student's base models on one draw (under results/<experiment>/_models/): the student's name
    for draw 0, `<student>.d<draw>` otherwise (names hold no dot, so it never clashes with a student's)."""
    return student if draw == 0 else f"{student}.d{draw}"


def _plain(v):
    """A value as JSON holds it: tuples as lists, typed settings as what was written."""
    if isinstance(v, Written):
        return v.written()
    if isinstance(v, Row):
        return v.params()
    if isinstance(v, Guard):
        return v.as_dict()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _tuples(v):
    """A list read from YAML or JSON as a tuple (the frozen form), nested lists too."""
    return tuple(_tuples(x) for x in v) if isinstance(v, (list, tuple)) else v


def _required(cls) -> list[str]:
    return [f.name for f in fields(cls) if f.init and f.default is MISSING and f.default_factory is MISSING]


# ---------------------------------------------------------------- an experiment's settings

@dataclass(frozen=True)
class Written:
    """Base of the settings objects: built from a mapping by `of`, which remembers the fields written
    (`given`, in their order); `written()` gives exactly those back, defaults left out. A subclass's
    `NESTED` maps a field to the type its mapping is parsed into."""
    given: tuple[str, ...] = field(default=(), compare=False, repr=False, kw_only=True)
    NESTED: ClassVar[dict[str, type]] = {}

    @classmethod
    def of(cls, m: "Mapping | Written | None" = None, where: str | None = None):
        """From config.yaml's (validated) mapping or a spec file's; an instance is returned as it is."""
        if isinstance(m, cls):
            return m
        where = where or cls.__name__
        m = {} if m is None else m
        if not isinstance(m, Mapping):
            raise SpecError(f"{where}: expected a mapping, got {type(m).__name__}")
        known = {f.name for f in fields(cls) if f.name != "given"}
        unknown = sorted(set(m) - known)
        if unknown:
            raise SpecError(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")
        missing = [k for k in _required(cls) if k not in m and k != "given"]
        if missing:
            raise SpecError(f"{where}: missing field(s) {missing}")
        vals = {k: cls.NESTED[k].of(v, f"{where}.{k}") if k in cls.NESTED and v is not None else _tuples(v)
                for k, v in m.items()}
        return cls(**vals, given=tuple(m))

    def written(self) -> dict:
        """The fields that were written, as they were written (lists as lists)."""
        return {k: _plain(getattr(self, k)) for k in self.given}

    def with_(self, **changes) -> "Written":
        """A copy with `changes` written (they join `given`)."""
        return replace(self, **changes, given=self.given + tuple(k for k in changes if k not in self.given))


@dataclass(frozen=True)
class Settings(Written):
    """A run's training settings: the experiment's `train:` with the row's overrides (`for_row`). Both backends
    read them; the last three only the verl backend (the tiny task fixes its lengths and samples at 1)."""
    steps: int = 100
    prompts_per_step: int = 8
    responses_per_prompt: int = 8
    lr: float = 3e-4
    lr_schedule: str = "constant"  # or "cosine": from lr at step 0 towards 0 (0 would be step `steps`, as in verl)
    # held-out evaluation every this many steps, and at the last; 0: none. Unset: the first and the last step
    # only, the one evaluation schedule every backend can honour (verl evaluates checkpointed steps only, and
    # always checkpoints the last) and the analysis needs (its verdicts read the final evaluation)
    eval_every: int | None = None
    eval_responses: int = 4
    checkpoint_every: int = 10
    advantage_offset: float = 0.1  # the advantage_offset variant's offset
    tis_cap: float = 2.0  # the tis variant's cap C of min(p_theta / q, C)
    task_seed: int = 0
    temperature: float | None = None  # verl only
    max_prompt_length: int | None = None  # verl only
    max_response_length: int | None = None  # verl only

    VERL_ONLY: ClassVar[tuple[str, ...]] = ("temperature", "max_prompt_length", "max_response_length")
    ROW_OVERRIDES: ClassVar[tuple[str, ...]] = ("lr",)  # row fields that override the experiment's settings

    def for_row(self, row: Row) -> "Settings":
        """A run's settings: these, with the row's overrides (ROW_OVERRIDES) where it sets them."""
        over = {k: getattr(row, k) for k in self.ROW_OVERRIDES if getattr(row, k) is not None}
        return self.with_(**over) if over else self

    def eval_steps(self) -> list[int]:
        """The training steps a run's held-out evaluation scores (both backends): 0, every `eval_every`
        steps, and the last; none when `eval_every` is 0; the first and the last when it is unset."""
        every = self.steps if self.eval_every is None else self.eval_every
        if every <= 0:
            return []
        return sorted({*range(0, self.steps, every), self.steps})

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step `step` (0-based)."""
        if self.lr_schedule == "constant":
            return self.lr
        if self.lr_schedule == "cosine":
            import numpy as np  # numpy's cos, as the committed runs were trained with
            return self.lr * 0.5 * (1 + np.cos(np.pi * step / self.steps))
        raise ValueError(f"unknown lr_schedule {self.lr_schedule!r}")


@dataclass(frozen=True)
class Converge(Written):
    """A tiny student's converged SFT recipe (opd.backends.tiny.sft.train_converged; docs/methods.md): the teacher
    trained until the held-out teacher-forced cross-entropy, measured every `eval_every` steps, improved the best by
    less than `tol` (relative) over the last `window` evaluations (checked from the student's `teacher_steps` on), or
    to `max_steps`; the student the first checkpoint (one every `save_every` steps) whose held-out KL to that
    teacher is below `student_kl`."""
    student_kl: float
    eval_every: int
    save_every: int
    window: int
    tol: float
    max_steps: int


@dataclass(frozen=True)
class Student(Written):
    """A student as config.yaml describes it. tiny: its architecture and how the pipeline trains it (SFT to
    `student_steps` is the student, on to `teacher_steps` its teacher); verl: its checkpoint, its teacher's,
    its size and its EAGLE-3 draft model. Each backend needs its own fields (NEEDS; config validation says
    which is missing)."""
    layers: int
    family: str | None = None  # qwen2 or llama
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    d_ff: int | None = None
    sft_lr: float | None = None
    sft_batch: int | None = None
    student_steps: int | None = None
    teacher_steps: int | None = None
    seed: int = 0  # the SFT's seed (tiny)
    model: str | None = None  # verl: Hugging Face Hub name or local path
    teacher: str | None = None
    n_params: float | None = None
    eagle3: str | None = None  # verl: the EAGLE-3 draft model of speculative rows
    converge: Converge | None = None  # tiny: the converged recipe, in place of the fixed student_steps

    NESTED = {"converge": Converge}
    NEEDS: ClassVar[dict[str, tuple[str, ...]]] = {
        "tiny": ("family", "heads", "kv_heads", "head_dim", "d_ff", "sft_lr", "sft_batch", "student_steps",
                 "teacher_steps"),
        "verl": ("model", "teacher", "n_params")}

    def needs(self, backend: str) -> tuple[str, ...]:
        """The fields `backend` needs: NEEDS, less student_steps where the converged recipe picks the student."""
        return tuple(k for k in self.NEEDS.get(backend, ()) if not (k == "student_steps" and self.converge))

    def params(self) -> float:
        """The student's size: `n_params` where the config gives it (real checkpoints), else the parameters
        of the tiny architecture's blocks (attention and MLP; they dominate the cost of a step). Used to start
        the largest students' runs first, so no long job is left running alone at the end."""
        if self.n_params is not None:
            return float(self.n_params)
        d = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        per_layer = 2 * d * d + 2 * d * kv + 3 * d * self.d_ff
        return float(self.layers * per_layer)


@dataclass(frozen=True)
class BaseAcceptance(Written):
    """The base models' pre-registered acceptance band (opd.base_check): across a student's draws, every initial
    held-out KL within `kl_within` (relative) of the draws' mean, and the teachers' final held-out cross-entropies
    within `teacher_loss_ratio` (max / min)."""
    kl_within: float
    teacher_loss_ratio: float


@dataclass(frozen=True)
class Bootstrap(Written):
    resamples: int
    level: float
    seed: int


@dataclass(frozen=True)
class Admission(Written):
    """The offline admission check: its sample (`prompts` x `responses`, drawn with `seed`) and the rule
    admit iff alpha * D_hat < L."""
    prompts: int
    responses: int
    alpha: float
    L: float
    seed: int = 0


@dataclass(frozen=True)
class FrozenRule(Written):
    """An admission rule beside the paper's, fixed in config.yaml's `frozen_rules` (tiny backend; beyond the paper)
    under its `name`: admit a candidate engine iff its step-0 `statistic` (a key of opd.stats.PREDICTORS) is at most
    `at_most` (or at least `at_least`). It was fitted on the candidates `fitted_on` names (student -> rows); every
    other candidate is decided before its runs train, so its agreement with training is a prospective test of the
    rule, not a fit. Rules are only ever added: an earlier rule keeps its record when a later one is refitted."""
    name: str
    statistic: str
    fitted_on: tuple[tuple[str, tuple[str, ...]], ...]  # ((student, rows), ...): config.yaml's mapping, frozen
    at_most: float | None = None
    at_least: float | None = None

    def __post_init__(self):
        if isinstance(self.fitted_on, Mapping):
            object.__setattr__(self, "fitted_on", tuple((s, tuple(r)) for s, r in self.fitted_on.items()))

    def written(self) -> dict:
        return {**super().written(), "fitted_on": {s: list(r) for s, r in self.fitted_on}}

    @property
    def cut_at(self) -> tuple[int, float]:
        """(sign, t): admit iff sign * x <= t (opd.stats.Threshold.of makes the rule of it)."""
        return (1, self.at_most) if self.at_most is not None else (-1, -self.at_least)

    def prospective(self, student: str, row: str) -> bool:
        """Whether the candidate (row, student) was not among those the rule was fitted on."""
        return row not in dict(self.fitted_on).get(student, ())


@dataclass(frozen=True)
class RLCollapse(Written):
    """The RL collapse rule's thresholds (opd.stats.rl_collapse), fixed before the runs: collapsed if, at the
    final held-out evaluation against the same algorithm on the standard engine, accuracy fell by
    `accuracy_points` or more, or held-out entropy or mean response length changed by the factor either way."""
    accuracy_points: float = 5.0
    entropy_factor: float = 1.5
    length_factor: float = 1.2

    def thresholds(self) -> dict:
        """Every threshold, written or default: stats.rl_collapse's keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "given"}


@dataclass(frozen=True)
class Sequential(Written):
    """The pre-registered sequential-seeds rule of an experiment's rows with `seeds: sequential` and of its edges
    (opd.plan; the rule itself is opd.calibration.SequentialRule): a row runs seeds 0 .. start_seeds - 1, then
    one more while the seed-aware interval of its Delta straddles tau, up to max_seeds. While a row has one seed,
    its run SD is taken as at most one_seed_ratio x its reference's. With near_edge_seeds, a row whose D lies within
    near_edge_factor of its student's edge (opd.plan.near_edge) runs at least that many seeds before it is decided
    (the edge is worked out again as seeds are added; a row floored on the way keeps its floor)."""
    max_seeds: int
    start_seeds: int = 1
    one_seed_ratio: float = 1.0
    near_edge_seeds: int | None = None
    near_edge_factor: float = 3.0


@dataclass(frozen=True)
class Edge(Written):
    """A budget edge found by bisection (opd.plan.edge_state): rows of `field` (a dial of opd.plan.DIALS:
    noise_sigma, quant_alpha or staleness) at the bracket's ends, then at the geometric midpoint of the largest
    passing and the smallest failing value until their D are within `factor` or `max_rows` values have run, on
    each student alone. `fixed`: the other row fields every row of the edge carries, as config.yaml writes them
    (e.g. {noise_redraw: true}, or the quantization a quant_alpha edge dials), held as ((field, value), ...) so
    that an Edge stays hashable; `fixed_fields` gives the mapping."""
    name: str
    field: str
    bracket: tuple[float, float]
    students: tuple[str, ...]
    fixed: tuple[tuple[str, Any], ...] = ()
    factor: float = 1.5
    max_rows: int = 6
    description: str | None = None

    @classmethod
    def of(cls, m: "Mapping | Edge | None" = None, where: str | None = None) -> "Edge":
        if isinstance(m, Mapping) and isinstance(m.get("fixed"), Mapping):
            m = {**m, "fixed": tuple(m["fixed"].items())}  # lists inside become tuples (Written.of)
        return super().of(m, where)

    @property
    def fixed_fields(self) -> dict:
        """`fixed` as the mapping config.yaml writes (lists as lists)."""
        return {k: _plain(v) for k, v in self.fixed}

    def row_fields(self, value) -> dict:
        """The computed fields of the edge's row at `value`: `fixed`, then the edge's field at `value`."""
        return {**self.fixed_fields, self.field: value}

    def written(self) -> dict:
        out = super().written()
        if "fixed" in out:
            out["fixed"] = self.fixed_fields
        return out


@dataclass(frozen=True)
class KVAttribution(Written):
    """The per-layer FP8 KV-cache attribution's sample."""
    prompts: int = 64
    responses: int = 4


@dataclass(frozen=True)
class Infra(Written):
    """The infrastructure measurements: the window of steps the throughput columns average over (unset:
    every step), one device's peak FLOP/s (the MFU estimate; unset: none), the tiny backend's measured
    throughput runs and memory-bound batches."""
    window: tuple[int, int] | None = None
    peak_flops: float | None = None
    throughput_steps: int | None = None
    memory_bound_batches: tuple[int, ...] | None = None
    kv_budget_sequences: int | None = None


@dataclass(frozen=True)
class Slurm(Written):
    """A Slurm job's shape and the launcher's polling: the site's settings (config.yaml's `slurm:`), overlaid
    by the experiment's, and for a verl run the nodes its layout needs (opd.launch)."""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    exclusive: bool = False  # whole nodes, shared with no other job (a verl training job's layout sets it)
    cpus_per_task: int = 1
    mem_gb: float = 4
    time_min: int = 60
    setup: tuple[str, ...] = ()  # shell lines run before each job (module loads)
    poll_s: float = 5  # how often a waiting rule asks Slurm about its job
    dead_after_s: float = 120  # how long a job Slurm no longer knows may go without a result
    max_requeues: int = 3  # requeues after a timeout before the job fails
    signal_delay_s: int | None = None  # Slurm's USR2 this long before the time limit (unset: submitit's 90 s)
    # per job kind (a JobSpec.KIND: heldout, admission, kv_attribution, ...): the sizes of that kind's one-process
    # jobs (cpus_per_task, mem_gb, time_min), in place of the experiment's training-job sizes (for_kind)
    jobs: dict = field(default_factory=dict)

    SIZES: ClassVar[tuple[str, ...]] = ("cpus_per_task", "mem_gb", "time_min")
    SIGNAL_DELAY_S: ClassVar[int] = 90  # submitit's default signal_delay_s (submitit/slurm/slurm.py:415, 482)

    def for_kind(self, kind: str | None) -> "Slurm":
        """The shape of a one-process job of `kind`: these settings with that kind's sizes (`jobs`) where given."""
        sizes = dict(self.jobs.get(kind) or {}) if kind else {}
        return self.with_(**sizes) if sizes else self

    @property
    def signal_lead_s(self) -> int:
        """Seconds before the time limit at which Slurm signals the job (submitit then requeues it)."""
        return self.SIGNAL_DELAY_S if self.signal_delay_s is None else int(self.signal_delay_s)


@dataclass(frozen=True)
class Launcher(Written):
    """Where jobs run (`launcher`: local, or slurm through submitit) and the Slurm settings: the launcher file
    opd.cli's --launcher reads (not a job input: switching launcher reruns nothing)."""
    launcher: str = "local"
    slurm: Slurm = Slurm()
    NESTED = {"slurm": Slurm}

    def to_json(self) -> dict:
        return {"launcher": self.launcher, "slurm": self.slurm.written()}

    @classmethod
    def from_json(cls, d: Mapping | None) -> "Launcher":
        return cls.of(d or {}, "launcher")


@dataclass(frozen=True)
class Probes(Written):
    """The gradient probes of a probed run (opd/backends/tiny/probes.py): `prompts` x `responses` per probe
    seed, at every step of `steps` with `probe_seed`, and at the first and last with each of `extra_seeds`;
    `sample_prefixes` per-prefix rows kept for plots. opd.dag.probes sets them for the mechanism stage
    (workflow/rules/mechanism.smk)."""
    prompts: int
    responses: int
    probe_seed: int
    steps: tuple[int, ...]
    extra_seeds: tuple[int, ...] = ()
    sample_prefixes: int = 200


@dataclass(frozen=True)
class VerlData(Written):
    train: str  # training prompts in verl's parquet format
    heldout: tuple[str, ...]  # held-out sets, in prompt-id order


@dataclass(frozen=True)
class Speculative(Written):
    method: str
    num_speculative_tokens: int


@dataclass(frozen=True)
class LayoutSettings(Written):
    """Where a verl run's pools go (opd.backends.verl.layout turns them into verl's pools and a Slurm shape)."""
    gpus_per_node: int = 4
    trainer_nodes: int = 1  # the trainer (k = 0: also the rollout replicas)
    teacher_nodes: int = 1
    rollout_nodes: int = 1  # k > 0 only: the fully-async rollout pool
    rollout_tp: int = 1
    teacher_tp: int = 1


@dataclass(frozen=True)
class Network(Written):
    """A training job's network: the interface NCCL, Gloo and Ray use between nodes (None: their own choice), and
    Ray's dashboard (off unless asked for)."""
    interface: str | None = None  # e.g. ib0: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME, and Ray's node IP from it
    dashboard: bool = False


@dataclass(frozen=True)
class Verl(Written):
    """The verl backend's settings: data, speculative decoding, the cluster layout and extra vLLM engine
    arguments for the standalone engines (admission check, held-out evaluation, KV attribution)."""
    data: VerlData | None = None
    speculative: Speculative | None = None
    layout: LayoutSettings = LayoutSettings()
    engine: dict = field(default_factory=dict)
    attention: str = "sdpa"  # the actor's attn_implementation in transformers (flash_attention_2: flash-attn installed)
    logger: tuple[str, ...] = ("console", "file")  # verl's trainer.logger (file always: opd.backends.verl.logparse)
    extra_overrides: tuple[str, ...] = ()  # more Hydra overrides, validated (opd.backends.verl.overrides)
    # False: the training job prunes optimizer states older than its latest checkpoint, and each held-out
    # evaluation job removes its step's model state and merged folder once its part is written
    # (opd.backends.verl.checkpoints); True keeps every checkpoint
    keep_checkpoints: bool = False
    # steps between the synchronous trainer's checkpoints (a divisor of train.checkpoint_every; unset: that): what a
    # requeued k = 0 run can lose, since verl's v1 synchronous trainer has no save on a deadline (k > 0 runs save
    # before the time limit: opd.backends.verl.gpu.deadline_env)
    resume_every: int | None = None
    network: Network | None = None  # the training job's network and Ray settings (opd.backends.verl.gpu)
    NESTED = {"data": VerlData, "speculative": Speculative, "layout": LayoutSettings, "network": Network}


# ---------------------------------------------------------------- the experiment

@dataclass(frozen=True)
class Run:
    """One run: a row x one student x one seed."""
    run_id: str
    experiment: str
    row: Row
    student: str
    seed: int

    @property
    def name(self) -> str:
        return self.row.name


@dataclass(frozen=True)
class Experiment:
    """One experiment of a validated config, every default resolved: built once (`of`), read by the rules
    (workflow/rules/common.smk), by opd.dag (the job specs) and by the analysis's parameters."""
    name: str
    backend: str
    seeds: tuple[int, ...]
    tau: float
    taus: tuple[float, ...]
    bootstrap: Bootstrap
    admission: Admission
    students: dict[str, Student]
    train: Settings
    rows: tuple[Row, ...]
    launcher: Launcher = Launcher()  # the site's Slurm settings overlaid by the experiment's
    rl_collapse: RLCollapse = RLCollapse()
    frozen_rules: tuple[FrozenRule, ...] = ()  # admission rules fixed before their prospective candidates ran
    kv_attribution: KVAttribution = KVAttribution()
    infra: Infra = Infra()
    verl: Verl | None = None
    description: str | None = None
    sequential: Sequential | None = None  # the rule of rows with `seeds: sequential` (opd.plan)
    edges: tuple[Edge, ...] = ()  # bisected edges; their rows are added by opd.plan.planned
    # the seeds opd.plan chose so far for each sequential row and student, ((row, student, seeds), ...)
    planned: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
    # tiny backend: base models per student (SFT seeds student.seed + 0 .. base_draws - 1); run seed s trains from
    # draw s % base_draws (opd.stats.draw_of), so a row's seeds spread over the draws and every comparison pairs
    # the two sides on the same draws
    base_draws: int = 1
    base_acceptance: BaseAcceptance | None = None  # tiny: the base models' acceptance band (opd.base_check)
    predictors: bool = True  # tiny: the predictor study (step-0 statistics of every admission candidate)

    @classmethod
    def of(cls, cfg: dict, name: str | None = None) -> "Experiment":
        """Experiment `name` (default: the config's `experiment`) of a config opd.config.validate accepted."""
        name = name or cfg["experiment"]
        e = cfg["experiments"][name]
        where = f"experiment {name!r}"
        return cls(
            name=name, backend=e["backend"], seeds=tuple(e["seeds"]), tau=e["tau"], taus=tuple(e.get("taus", [e["tau"]])),
            bootstrap=Bootstrap.of(e["bootstrap"], f"{where}, bootstrap"),
            admission=Admission.of(e["admission"], f"{where}, admission"),
            students={s: Student.of(v, f"{where}, student {s!r}") for s, v in e["students"].items()},
            train=Settings.of(e["train"], f"{where}, train"), rows=tuple(Row.of(r) for r in e["rows"]),
            launcher=Launcher.of({"launcher": cfg.get("launcher", "local"),
                                  "slurm": {**(cfg.get("slurm") or {}), **e.get("slurm", {})}}, f"{where}, slurm"),
            rl_collapse=RLCollapse.of(e.get("rl_collapse"), f"{where}, rl_collapse"),
            frozen_rules=tuple(FrozenRule.of(r, f"{where}, frozen_rules[{i}]")
                               for i, r in enumerate(e.get("frozen_rules") or ())),
            kv_attribution=KVAttribution.of(e.get("kv_attribution"), f"{where}, kv_attribution"),
            infra=Infra.of(e.get("infra"), f"{where}, infra"),
            verl=Verl.of(e["verl"], f"{where}, verl") if "verl" in e else None, description=e.get("description"),
            sequential=Sequential.of(e["sequential"], f"{where}, sequential") if "sequential" in e else None,
            edges=tuple(Edge.of(x, f"{where}, edge {i + 1}") for i, x in enumerate(e.get("edges", ()))),
            base_draws=e.get("base_draws", 1),
            base_acceptance=BaseAcceptance.of(e["base_acceptance"], f"{where}, base_acceptance")
            if "base_acceptance" in e else None, predictors=e.get("predictors", True))

    @property
    def adaptive(self) -> bool:
        """Whether opd.plan chooses some of its runs from the results (sequential rows or edges)."""
        return bool(self.edges) or any(r.sequential for r in self.rows)

    def is_edge_row(self, row: Row) -> bool:
        """A row a bisected edge adds (named <edge>-<value>): whether it exists depends on the results."""
        return any(row.name.startswith(x.name + "-") for x in self.edges)

    @property
    def slurm(self) -> Slurm:
        return self.launcher.slurm

    @property
    def baseline(self) -> Row:
        return next(r for r in self.rows if r.baseline)

    @property
    def primary(self) -> str:
        """The primary student: the first the config names."""
        return next(iter(self.students))

    def row(self, name: str) -> Row:
        try:
            return next(r for r in self.rows if r.name == name)
        except StopIteration:
            raise KeyError(f"experiment {self.name!r} has no row {name!r}") from None

    def runs(self) -> list[Run]:
        """Every run: each row x its students (default: the primary) x its seeds (seeds_of)."""
        return [Run(run_id(r.name, s, seed), self.name, r, s, seed)
                for r in self.rows for s in r.students_or(self.primary) for seed in self.seeds_of(r, s)]

    def draw_of(self, seed: int) -> int:
        """The base-model draw run seed `seed` trains from (draw_of)."""
        return draw_of(seed, self.base_draws)

    def draws(self) -> range:
        return range(self.base_draws)

    def base_student(self, student: str, draw: int = 0) -> "Student":
        """A student's spec on base-model draw `draw`: the config's (draw 0), or the same student with SFT seed
        `seed + draw`. Draw 0's spec is the config's unchanged, so its base models and every run on it keep their
        spec (and their cached results) when an experiment adds draws."""
        s = self.students[student]
        return s if draw == 0 else s.with_(seed=s.seed + draw)

    def seeds_of(self, row: Row, student: str) -> tuple[int, ...]:
        """The seeds a row runs on a student: its own, else the experiment's; for `seeds: sequential` the ones
        opd.plan chose from the results so far (`planned`; before any, the rule's first seeds)."""
        if not row.sequential:
            return row.seeds or self.seeds
        chosen = {(r, s): seeds for r, s, seeds in self.planned}
        return chosen.get((row.name, student), tuple(range(self.sequential.start_seeds if self.sequential else 1)))

    def resolved_row(self, row: Row) -> dict:
        """A row as rows.parquet holds it (Row.resolved), a sequential row's seeds those chosen on any student."""
        out = row.resolved()
        if row.sequential:
            out["seeds"] = sorted({s for st in row.students_or(self.primary) for s in self.seeds_of(row, st)})
        return out

    def settings(self, row: Row) -> Settings:
        """A run of `row`'s training settings."""
        return self.train.for_row(row)

    @property
    def guard_line(self) -> float:
        """What `d_max: budget` means: the experiment's admission line L. It is the in-training level the
        admission rule protects (admit iff alpha * D_hat < L, alpha turning the offline D_hat into in-training
        D), and the guard watches in-training d_n, so L (not L / alpha, the line on the offline D_hat). A fixed
        number of the config, not the measured budget of the analysis: a run whose line came from the
        analysis would depend on every other run (and the analysis on it), and would retrain whenever one
        more run moved the measured edge."""
        return float(self.admission.L)

    def guard(self, row: Row) -> Guard | None:
        """The guard a run of `row` runs, its d_max a number (Guard.resolved), or None."""
        return row.guard.resolved(self.guard_line) if row.guard is not None else None


# ---------------------------------------------------------------- the jobs' specs

@dataclass(frozen=True)
class JobSpec:
    """Base of the job specs. `KIND` names the job (its specs' folder under results/<experiment>/_jobs/);
    `PARSE` maps a field to how its JSON value is read back. `threads` is how many threads the job may use
    (the rule's, from the command line): not part of the spec, never written."""
    KIND: ClassVar[str] = ""
    PARSE: ClassVar[dict[str, Any]] = {}
    threads: int = field(default=1, compare=False, kw_only=True)

    @property
    def name(self) -> str:
        """The spec file's name (without .json) in its kind's folder."""
        return self.student

    def to_json(self) -> dict:
        """What the job's spec file holds."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "threads" or (f.default is not MISSING and v == f.default):
                continue  # a field with a default is written only when set to something else
            out[f.name] = _plain(v)
        return out

    @classmethod
    def from_json(cls, d: Mapping, where: str | None = None):
        """From a spec file's JSON (its keys exactly the fields, less any left at their default)."""
        where = where or f"{cls.KIND} spec"
        if not isinstance(d, Mapping):
            raise SpecError(f"{where}: expected a mapping, got {type(d).__name__}")
        known = {f.name for f in fields(cls)} - {"threads"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise SpecError(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")
        missing = [k for k in _required(cls) if k not in d]
        if missing:
            raise SpecError(f"{where}: missing field(s) {missing}")
        return cls(**{k: cls.PARSE[k](v) if k in cls.PARSE and v is not None else _tuples(v) for k, v in d.items()})

    @classmethod
    def of(cls, spec: "JobSpec | Mapping"):
        """A spec as it is, or parsed from a spec file's JSON (the entry of tests and benchmarks that hold one)."""
        return spec if isinstance(spec, cls) else cls.from_json(spec)

    def sha256(self) -> str:
        """The sha256 of the spec's canonical JSON."""
        return hashlib.sha256(dumps(self.to_json()).encode()).hexdigest()


_PARSE = {"row": Row.of, "student_spec": Student.of, "settings": Settings.of, "guard": Guard.of,
          "probes": Probes.of, "verl": Verl.of}


@dataclass(frozen=True)
class BaseSpec(JobSpec):
    """Train a tiny student and its teacher (SFT), on base-model draw `draw` (its student_spec's seed is the draw's
    SFT seed: opd.spec.Experiment.base_student)."""
    KIND = "base"
    PARSE = _PARSE
    experiment: str
    backend: str
    task_seed: int
    student: str
    student_spec: Student
    draw: int = 0
    # the converged recipe's held-out KL: the responses per held-out problem of the experiment's runs (train's
    # eval_responses), so the student's target is their initial held-out KL; None (unwritten) for the fixed recipe
    eval_responses: int | None = None

    @property
    def name(self) -> str:
        return base_name(self.student, self.draw)


@dataclass(frozen=True)
class TrainSpec(JobSpec):
    """One training run: its row's computed fields (Row.params: placement left out), the student and its spec,
    the run's settings (the row's overrides applied), the base models (tiny) or the verl settings (verl), the
    resolved guard (d_max a number) and the probes of a probed run. The task seed is the settings' (the file
    holds it at the top too)."""
    KIND = "train"
    PARSE = _PARSE
    experiment: str
    backend: str
    run_id: str
    row: Row
    student: str
    seed: int
    settings: Settings
    student_path: str | None
    teacher_path: str | None
    student_spec: Student | None = None  # the DAG's always hold it; the tiny trainer reads the base models' paths
    guard: Guard | None = None
    probes: Probes | None = None
    verl: Verl | None = None

    def __post_init__(self):
        if self.backend == "verl" and (self.student_spec is None or self.verl is None):
            raise SpecError(f"{self.run_id}: a verl run's spec needs its student_spec and verl settings")
        if self.guard is not None and isinstance(self.guard.d_max, str):
            raise SpecError(f"{self.run_id}: the guard's d_max must be resolved to a number (Experiment.guard)")
        if self.guard is not None and self.probes is not None:  # the probes describe the row's engine alone
            raise SpecError(f"{self.run_id}: a guarded run cannot be probed")
        if self.row.noise_redraw and self.probes is not None:  # the probes read one fixed direction per run
            raise SpecError(f"{self.run_id}: a run whose noise is redrawn every step (noise_redraw) cannot be probed")

    @property
    def name(self) -> str:
        return self.run_id

    @property
    def task_seed(self) -> int:
        return self.settings.task_seed

    def to_json(self) -> dict:
        return {**super().to_json(), "task_seed": self.task_seed}

    @classmethod
    def from_json(cls, d: Mapping, where: str | None = None) -> "TrainSpec":
        d = dict(d)
        top = d.pop("task_seed", None)
        spec = super().from_json(d, where)
        if top is not None and top != spec.task_seed:
            raise SpecError(f"{where or 'train spec'}: task_seed {top!r} differs from settings.task_seed "
                            f"{spec.task_seed!r}")
        return spec


@dataclass(frozen=True)
class _OfflineSpec(JobSpec):
    """A job that measures without training (the student's weights as given): the base models' paths (tiny) or,
    for verl, the student's spec, the verl settings and the experiment's training settings."""
    PARSE = _PARSE
    experiment: str
    backend: str
    task_seed: int
    student: str
    student_path: str | None
    teacher_path: str | None


@dataclass(frozen=True)
class AdmissionSpec(_OfflineSpec):
    """The offline admission estimate of one row on one student: `prompts` x `responses` drawn with `seed`."""
    KIND = "admission"
    row: Row
    prompts: int
    responses: int
    seed: int
    student_spec: Student | None = None
    verl: Verl | None = None
    settings: Settings | None = None

    @property
    def name(self) -> str:
        return f"{self.row.name}.{self.student}"


@dataclass(frozen=True)
class PredictorSpec(_OfflineSpec):
    """The offline statistics of one row's engine on one student at its step-0 weights (the mechanism probes'
    quantities at one probe point, opd.backends.tiny.probes.step0_statistics): what might predict training's
    outcome before any training. Engine randomness (a noise direction) drawn with `seed`, as the admission check's;
    `horizon`, a training run's steps, is the horizon of the run-horizon error (T_run_U_param)."""
    KIND = "predictors"
    row: Row
    probes: Probes
    seed: int
    horizon: int

    @property
    def name(self) -> str:
        return f"{self.row.name}.{self.student}"


@dataclass(frozen=True)
class KVAttributionSpec(_OfflineSpec):
    """The per-layer FP8 KV-cache attribution of one student, for each recipe of `recipes`."""
    KIND = "kv_attribution"
    recipes: tuple[str, ...]
    prompts: int
    responses: int
    seed: int
    student_spec: Student | None = None
    verl: Verl | None = None
    settings: Settings | None = None


@dataclass(frozen=True)
class ThroughputSpec(_OfflineSpec):
    """Measured short OPD runs of `steps` steps at each staleness of `ks` with the experiment's settings."""
    KIND = "throughput"
    seed: int
    ks: tuple[int, ...]
    settings: Settings
    steps: int
    student_spec: Student | None = None
    verl: Verl | None = None


@dataclass(frozen=True)
class MemoryBoundSpec(_OfflineSpec):
    """Engine generation rates at memory-bound batch sizes (`batches`) under a KV budget of
    `kv_budget_sequences` BF16 sequences, the best of `repeats` tries each."""
    KIND = "memory_bound"
    batches: tuple[int, ...]
    kv_budget_sequences: int
    repeats: int = 3
    student_spec: Student | None = None
    verl: Verl | None = None
    settings: Settings | None = None


@dataclass(frozen=True)
class HeldoutSpec(JobSpec):
    """The verl backend's held-out evaluation of one policy: the student as given (step 0, `run_id` None: the
    same for every run of the student, since the draw depends on the step only) or a run's weights after `step`
    updates, read from verl's checkpoint folder `checkpoint` and merged into `merged` (a Hugging Face folder).
    `settings` holds the evaluation's own settings (eval_responses, the lengths), so a row's training settings
    do not rerun the student's step-0 evaluation."""
    KIND = "heldout"
    PARSE = _PARSE
    experiment: str
    backend: str
    student: str
    student_spec: Student
    settings: Settings
    verl: Verl
    step: int
    run_id: str | None = None
    checkpoint: str | None = None
    merged: str | None = None

    def __post_init__(self):
        if (self.step == 0) != (self.checkpoint is None):
            raise SpecError(f"heldout spec {self.name}: step 0 evaluates the student as given, every later step "
                            f"a checkpoint (step {self.step}, checkpoint {self.checkpoint!r})")

    @property
    def name(self) -> str:
        return f"{self.run_id or self.student}.step{self.step}"


JOB_SPECS: dict[str, type[JobSpec]] = {s.KIND: s for s in (BaseSpec, TrainSpec, AdmissionSpec, KVAttributionSpec,
                                                            ThroughputSpec, MemoryBoundSpec, HeldoutSpec,
                                                            PredictorSpec)}
