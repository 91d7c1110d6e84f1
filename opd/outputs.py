"""Every figure and table the pipeline renders, declared once: its script, the analysis files it reads
and what the experiment must hold for it to mean something. workflow/rules/outputs.smk makes one rule
per entry, the README's figure list and tests/test_figures.py read the same table, so adding a figure
is its script, one line here and its caption in workflow/report/<rule>.rst (`snakemake --report`).

Inputs are names of the analysis stage's files (results/<experiment>/analysis/<name>.parquet, or
<name>.json); the rules resolve them to the producing rules' outputs. An output whose `needs` is false
for an experiment (no KV-cache rows for the KV attribution, no RL rows for the RL contrast, ...) is not
in that experiment's DAG at all, so a small experiment builds what it can show and nothing crashes on
what it lacks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from opd.rows import Row, mechanism

# what an output needs from an experiment: its rows, its baseline's seed count and its backend
Needs = Callable[["Matrix"], bool]


@dataclass(frozen=True)
class Matrix:
    """What `needs` predicates read: an experiment's rows (opd.rows.Row), seeds and backend."""
    rows: tuple[Row, ...]
    seeds: tuple[int, ...]
    backend: str
    edges: tuple[str, ...] = ()  # the bisected edges' names (opd.plan)
    predictors: bool = True  # the experiment's `predictors` (the predictor study)

    @classmethod
    def of(cls, experiment: dict) -> "Matrix":
        return cls(tuple(Row.of(r) for r in experiment["rows"]), tuple(experiment["seeds"]), experiment["backend"],
                   tuple(x["name"] for x in experiment.get("edges", ())), experiment.get("predictors", True))

    def has(self, pred: Callable[[Row], bool]) -> bool:
        return any(pred(r) for r in self.rows)

    @property
    def baseline_seeds(self) -> int:
        b = next(r for r in self.rows if r.baseline)
        return len(b.seeds or self.seeds)


def engine_rows(m: Matrix) -> bool:
    """Budget engines other than the baseline: something to judge."""
    return m.has(lambda r: r.in_budget and not r.baseline)


def admission_rows(m: Matrix) -> bool:
    """Engines the offline admission check can estimate (no staleness: it has no training to be stale)."""
    return m.has(lambda r: r.is_admission_candidate)


def predictor_rows(m: Matrix) -> bool:
    """Admission candidates on the tiny backend with the predictor study on (`predictors`), whose step-0 statistics
    rule predictor_stats measures (refused on verl: opd.dag.predictor_spec)."""
    return m.backend == "tiny" and m.predictors and admission_rows(m)


def mechanism_rows(m: Matrix) -> bool:
    """Rows on a dial (opd.rows.mechanism: noise, staleness, a scaled recipe), whose edges the edges figure shows. The
    bisected edges' rows (opd.plan) are added from the results; an experiment with edges has noise rows in any
    case."""
    return bool(m.edges) or m.has(lambda r: mechanism(r, m.rows) is not None)


def guarded_rows(m: Matrix) -> bool:
    """Rows with a mismatch guard (opd.guard)."""
    return m.has(lambda r: r.guard is not None)


# The analysis stage's files (results/<experiment>/analysis/), by the names outputs' `inputs` use: the tables the
# analysis script (workflow/scripts/analysis.py) writes, then those other rules write. A figure that needs a new
# analysis table adds its name here and reads it in its `inputs`; workflow/rules/common.smk makes the paths and the
# analysis rule's outputs from this list.
ANALYSIS_TABLES: tuple[str, ...] = (
    "steps", "heldout", "rows", "verdicts", "budget", "admission", "admission_summary.json", "rl", "noise",
    "null_deltas", "staleness_lr", "time_to_kl", "infra", "decides", "edge", "draws", "edges", "edge_ratios")
OTHER_ANALYSIS_FILES: tuple[str, ...] = (
    "kv_attribution",  # rule kv_attribution (offline.smk)
    "async_throughput",  # rule throughput (tiny) or throughput_from_runs (verl: async_throughput_runs.parquet)
    "memory_bound",  # rule memory_bound
    "guard",  # rule guard_analysis (analysis.smk)
    "bisection",  # rule bisection (analysis.smk): the bisected edges' trace
    "probes", "probes_prefix",  # rule probes (mechanism.smk)
    "predictor_stats", "predictors",  # rule predictors (analysis.smk)
    "plan_decisions.json",  # rule plan_decisions (analysis.smk): an adaptive plan's decisions, the DAG's memo
)


def analysis_file(name: str) -> str:
    """An analysis file's name in results/<experiment>/analysis/: `<name>.parquet`, or the name itself for JSON."""
    return name if name.endswith(".json") else f"{name}.parquet"


# The paths of the files the rules write and `verdict` reads, in an experiment's results folder `out`
# (results/<experiment>): the one home of their layout.
def analysis_path(out: str, name: str) -> str:
    """An analysis file (ANALYSIS_TABLES, OTHER_ANALYSIS_FILES) in `out`: `<out>/analysis/<name>.parquet`."""
    return f"{out}/analysis/{analysis_file(name)}"


def admission_path(out: str, row: str, student: str) -> str:
    """One row's admission check on one student, in an experiment's results folder `out` (rule admission writes it,
    `verdict` reads it)."""
    return f"{out}/admission/{row}.{student}.parquet"


def predictor_path(out: str, row: str, student: str) -> str:
    """One row's offline statistics at the step-0 student, in `out` (rule predictor_stats writes it, `verdict` reads
    it)."""
    return f"{out}/predictors/{row}.{student}.parquet"


def analysis_key(name: str) -> str:
    """The analysis rule's output name of a file (a Python identifier: `admission_summary.json` is
    `admission_summary`), as the analysis script reads it (`output.<key>`)."""
    return name.removesuffix(".json")


# The report's categories (`snakemake --report`), in the paper's order; every output names one of them, and
# the rules outside this table (mechanism, findings, run provenance) use the same names.
BUDGET, ADMISSION, KV_CACHE, THROUGHPUT, RL, MECHANISM, INFRA, INSTRUMENT, FINDINGS = CATEGORIES = (
    "Budget", "Admission", "KV cache", "Throughput", "RL contrast", "Mechanism", "Infrastructure", "Instrument",
    "Findings")


@dataclass(frozen=True)
class Output:
    name: str
    kind: str  # "figure" (PDF + PNG) or "table" (Markdown + LaTeX + HTML)
    inputs: tuple[str, ...]
    needs: Needs
    about: str
    category: str  # the report's category, one of CATEGORIES
    # analysis files it also shows where the experiment has them (and, for `snakemake figures`, their measurements
    # exist): other rules' files (OTHER_ANALYSIS_FILES) that a backend or a matrix may lack
    optional: tuple[str, ...] = ()

    def __post_init__(self):
        if self.category not in CATEGORIES:
            raise ValueError(f"output {self.rule}: category {self.category!r} is not one of {CATEGORIES}")
        if not set(self.optional) <= set(OTHER_ANALYSIS_FILES):
            raise ValueError(f"output {self.rule}: optional inputs {self.optional} are not other rules' files "
                             f"(opd.outputs.OTHER_ANALYSIS_FILES): the analysis script's are always there")
        unknown = [i for i in (*self.inputs, *self.optional) if i not in (*ANALYSIS_TABLES, *OTHER_ANALYSIS_FILES)]
        if unknown:
            raise ValueError(f"output {self.rule}: inputs {unknown} are not analysis files (opd.outputs.ANALYSIS_TABLES)")

    @property
    def script(self) -> str:
        return f"{self.kind}_{self.name}.py"

    @property
    def rule(self) -> str:
        return f"{self.kind}_{self.name}"

    @property
    def extensions(self) -> tuple[str, ...]:
        return ("pdf", "png") if self.kind == "figure" else ("md", "tex", "html")

    @property
    def shown(self) -> str:
        """The extension the report shows (Snakemake's report displays images and HTML, not Markdown)."""
        return "png" if self.kind == "figure" else "html"

    @property
    def caption(self) -> str:
        """The report caption's file (reStructuredText), relative to the repository root."""
        return f"{CAPTIONS}/{self.rule}.rst"


def _always(m: Matrix) -> bool:
    return True


OUTPUTS: tuple[Output, ...] = (
    # figures
    Output("budget", "figure", ("verdicts", "budget", "rows"), engine_rows,
           "quality change Delta against run mismatch D, the fail line and the budget", BUDGET),
    Output("admission", "figure", ("admission", "admission_summary.json"), admission_rows,
           "offline estimate D_hat against the training runs' D, with the admission line; beside it the fitted "
           "rule's statistic against Delta, where the step-0 statistics exist", ADMISSION,
           optional=("predictor_stats", "predictors")),
    Output("kv_attribution", "figure", ("kv_attribution",), lambda m: m.has(lambda r: r.kv_cache != "none"),
           "per-layer attribution of the FP8 KV cache's offline mismatch", KV_CACHE),
    Output("async_throughput", "figure", ("async_throughput",), lambda m: m.has(lambda r: r.staleness > 0),
           "measured rollout throughput against staleness k", THROUGHPUT),
    Output("memory_bound", "figure", ("memory_bound",),
           lambda m: m.backend == "tiny" and m.has(lambda r: r.kv_cache != "none"),
           "engine throughput at memory-bound batch sizes, BF16 against FP8 KV cache", THROUGHPUT),
    Output("rl_vs_opd", "figure", ("rl", "heldout", "steps", "rows"), lambda m: m.has(lambda r: r.algorithm != "opd"),
           "RL under the same engines as OPD", RL),
    Output("mismatch_steps", "figure", ("steps", "rows"), lambda m: m.has(lambda r: r.algorithm == "opd" and not r.baseline),
           "per-step mismatch d_n of each engine", BUDGET),
    Output("heldout_kl", "figure", ("heldout", "rows", "verdicts"), _always,
           "held-out KL to the teacher over training", BUDGET),
    Output("noise", "figure", ("null_deltas", "noise"), lambda m: m.baseline_seeds >= 2,
           "the instrument's noise: seed-vs-seed Delta of the standard engine", INSTRUMENT),
    Output("staleness_lr", "figure", ("staleness_lr",), lambda m: m.has(lambda r: r.staleness > 0),
           "staleness against the learning rate", BUDGET),
    Output("edges", "figure", ("edges",), mechanism_rows,
           "each mechanism's Delta = tau edge in D per student, with its interval", BUDGET),
    Output("bisection", "figure", ("bisection",), lambda m: bool(m.edges),
           "the bisected budget edges: each value tried, in order, and the bracket narrowing", BUDGET),
    Output("predictors", "figure", ("predictor_stats", "predictors"), predictor_rows,
           "which offline statistic at the step-0 student predicts training: held-out agreement and rank correlation",
           ADMISSION),
    Output("guard", "figure", ("guard", "steps"), guarded_rows,
           "the mismatch guard: d_n per step with its activations, Delta against throughput", BUDGET),
    # tables
    Output("runs", "table", ("verdicts", "rows"), _always, "every configuration: D, Delta, intervals, verdicts",
           BUDGET),
    Output("budget", "table", ("budget",), engine_rows, "the budget at each tau, under both rules", BUDGET),
    Output("admission", "table", ("admission", "admission_summary.json"), admission_rows,
           "the admission record, the paper's rule and (where the step-0 statistics exist) the fitted rule",
           ADMISSION, optional=("predictor_stats", "predictors")),
    Output("time_to_kl", "table", ("time_to_kl",), _always, "steps and time to reach a held-out KL", INFRA),
    Output("variants", "table", ("verdicts", "rows"), lambda m: m.has(lambda r: r.variant != "none"),
           "OPD update variants under the same engine", BUDGET),
    Output("infra", "table", ("infra",), _always, "measured cost of a step and its parts", INFRA),
    Output("rl", "table", ("rl",), lambda m: m.has(lambda r: r.algorithm != "opd"), "the RL contrast", RL),
    Output("noise", "table", ("noise",), lambda m: m.baseline_seeds >= 2, "the instrument's noise per student",
           INSTRUMENT),
    Output("guard", "table", ("guard",), guarded_rows,
           "the mismatch guard: Delta guarded and unguarded, cheap-engine share, throughput, activations", BUDGET),
)


CAPTIONS = "workflow/report"  # each result's caption, `<rule>.rst`, relative to the repository root


def caption_title(path) -> str:
    """A result's title in `snakemake --report`'s menu: its caption's first bold phrase (workflow/report/<rule>.rst),
    without a closing full stop."""
    import re
    from pathlib import Path
    m = re.search(r"\*\*(.+?)\*\*", Path(path).read_text())
    if not m:
        raise ValueError(f"{path}: a caption opens with its title in bold (**...**)")
    return m.group(1).rstrip(".")


def selected(experiment: dict, outputs: Iterable[Output] = OUTPUTS) -> list[Output]:
    """The outputs an experiment (config.yaml's shape) builds."""
    m = Matrix.of(experiment)
    return [o for o in outputs if o.needs(m)]
