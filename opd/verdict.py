""""Is my engine within budget?": one row's answer from the analysis files, and what changed since the last run.

`python -m opd.cli verdict ROW` reads only what the pipeline has written (results/<experiment>/analysis/,
the admission check's files and the runs' run.json); it never trains and needs no job spec. For every
student of the row it gives D, Delta with both intervals and both verdicts, where the row sits against each
mechanism's Delta = tau edge on that student (within it, beyond it, or inside its interval: undecided; the
student's budget B_emp under both rules where the analysis has no edges), the offline estimate D_hat +- SE against the admission line with
the decision, and what is still missing, with the command that makes it.

At the end of a `snakemake` run (the Snakefile's `onsuccess:`) `announce` prints one line per row whose
verdict is new or changed since the verdicts this checkout saw before (`.snakemake/opd/verdicts-<exp>.json`;
when that record is absent, the analysis files as the run found them)."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

from types import SimpleNamespace

import pandas as pd

from opd import config as C
from opd import scorecard
from opd import outputs as O
from opd import stats, store
from opd.rows import ENGINE_FIELDS, FIELD_TYPES, PLACEMENT_FIELDS, Row
from opd.spec import Experiment, FrozenRule, results_dir, run_id

RULE_NAMES, RULE_COLUMNS = stats.RULE_NAMES, stats.RULE_COLUMNS


def state_path(experiment: str) -> Path:
    """The record of the verdicts this checkout has seen (relative to the repository root, as Snakemake's paths)."""
    return Path(f".snakemake/opd/verdicts-{experiment}.json")


def analysis_target(experiment: str) -> str:
    """The smallest target that gives every row a verdict: it trains what is missing, then the analysis."""
    return O.analysis_path(results_dir(experiment), "verdicts")


def admission_target(experiment: str, row: str, student: str) -> str:
    """The admission check of one row on one student: no training, seconds on the tiny backend."""
    return O.admission_path(results_dir(experiment), row, student)


def predictor_target(experiment: str, row: str, student: str) -> str:
    """One row's offline statistics at the step-0 student (tiny backend): no training, seconds."""
    return O.predictor_path(results_dir(experiment), row, student)


def command(target: str) -> str:
    return f"snakemake -c 2 {target}"


def experiment_of(cfg: dict, name: str | None = None) -> Experiment:
    """Experiment `name` of a validated config (opd.spec.Experiment), or a ConfigError naming the known ones."""
    name = name or cfg["experiment"]
    if name not in cfg["experiments"]:
        raise C.ConfigError(f"unknown experiment {name!r}; known: {sorted(cfg['experiments'])}")
    from opd import plan
    return plan.experiment(cfg, name)  # with an adaptive design's rows as the DAG plans them


def find_row(exp: Experiment, name: str) -> Row:
    """A row of the experiment by name, or a ConfigError with a did-you-mean."""
    try:
        return exp.row(name)
    except KeyError:
        hint = C.did_you_mean(name, [r.name for r in exp.rows])
        raise C.ConfigError(f"experiment {exp.name!r} has no row {name!r}{hint}") from None


def run_ids(exp: Experiment, row: Row, student: str) -> list[str]:
    return [run_id(row.name, student, s) for s in exp.seeds_of(row, student)]


def out_dir(exp: Experiment) -> Path:
    return Path(results_dir(exp.name))


# ---------------------------------------------------------------- what one row's verdict is made of

@dataclass(frozen=True)
class BudgetPlace:
    """A student's budget at tau under one rule, [lo, hi] = [largest passing D, smallest failing D], and
    where a D lies in it."""
    lo: float
    hi: float
    consistent: bool

    def where(self, D: float) -> str:
        lo, hi = self.lo, self.hi
        if math.isnan(lo) and math.isnan(hi):
            return "no configuration judged"
        if math.isnan(hi):
            return ("within it: every configuration passes" if D <= lo else
                    "beyond every passing D (no configuration fails)")
        if math.isnan(lo):
            return "at or beyond the smallest failing D" if D >= hi else "below every failing D (none passes)"
        if not self.consistent:  # a fail below a pass: between them passes and fails mix
            return ("below every failing D" if D < hi else "above every passing D" if D > lo
                    else f"where passes and fails overlap ({_g(hi)} to {_g(lo)})")
        if D <= lo:
            return "at its edge: the largest passing D" if D == lo else f"within it ({_ratio(D, lo)} the largest passing D)"
        if D >= hi:
            return "at its edge: the smallest failing D" if D == hi else f"past its edge ({_ratio(D, hi)} the smallest failing D)"
        return "between the largest pass and the smallest fail, where the edge lies"

    def text(self) -> str:
        if self.consistent or math.isnan(self.lo) or math.isnan(self.hi):
            return f"[{_g(self.lo)}, {_g(self.hi)}]"
        return f"none (a fail at D = {_g(self.hi)} lies below a pass at D = {_g(self.lo)})"


@dataclass(frozen=True)
class RuleVerdict:
    rule: str
    ci_lo: float
    ci_hi: float
    verdict: str | None  # pass, fail, or None where the rule cannot judge (too few runs)
    budget: BudgetPlace | None


@dataclass(frozen=True)
class AdmissionDecision:
    d_hat: float
    se: float
    n_prompts: int
    alpha: float
    L: float
    admit: bool
    source: str  # "analysis" or the admission check's own file, not yet read by the analysis
    outcome: str | None = None  # the training verdict the record compares it with (the paper's rule)

    @property
    def line(self) -> float:
        return self.L / self.alpha

    def text(self) -> str:
        away = (self.line - self.d_hat) / self.se if self.se > 0 else float("nan")
        side = f"{abs(away):.3g} SE {'below' if away > 0 else 'above'} the line" if math.isfinite(away) else ""
        agrees = ("" if self.outcome is None else
                  f"; training: {self.outcome} (paper's rule), the check {'agrees' if self.admit == (self.outcome == 'pass') else 'disagrees'}")
        return (f"D̂ = {_g(self.d_hat)} ± {_g(self.se)} ({self.n_prompts} prompts) against the line D̂ < L/α = "
                f"{_g(self.L)}/{_g(self.alpha)} = {_g(self.line)}: {'admit' if self.admit else 'reject'}"
                + (f" ({side})" if side else "") + agrees)


@dataclass(frozen=True)
class FittedDecision:
    """The fitted admission rule (beyond the paper; opd.stats.fitted_rule_of) applied to one candidate: the rule
    fitted on every candidate with an outcome, and, where this candidate is one of them, its held-out decision (the
    rule chosen and fitted without it), which is the one its agreement with training counts."""
    rule: stats.FittedRule
    value: float
    admit: bool
    held_out: bool | None
    source: str  # "analysis" or the statistics' own file, not yet read by the analysis

    def text(self) -> str:
        own = ("" if self.held_out is None else
               f"; fitted without this candidate: {'admit' if self.held_out else 'reject'}")
        return (f"{stats.PREDICTORS.get(self.rule.statistic, self.rule.statistic)} = {_g(self.value)}, admitted iff "
                f"{self.rule.cut}: {'admit' if self.admit else 'reject'}{own} (the rule agrees with training on "
                f"{self.rule.n_agree_held_out} of {self.rule.n_held_out} candidates held out)")


@dataclass(frozen=True)
class FrozenDecision:
    """A frozen admission rule (one of config.yaml's frozen_rules; beyond the paper) applied to one candidate: its
    decision, and whether the rule was fitted on the candidate or decided it before its runs (prospective)."""
    rule: FrozenRule
    value: float
    source: str  # "analysis" or the statistics' own file, not yet read by the analysis

    @property
    def admit(self) -> bool:
        return bool(stats.Threshold.of(self.rule).admits(self.value))

    def text(self, student: str, row: str) -> str:
        how = ("prospective: decided before this candidate's runs (not among those it was fitted on)"
               if self.rule.prospective(student, row) else "fitted on this candidate")
        return (f"{stats.PREDICTORS.get(self.rule.statistic, self.rule.statistic)} = {_g(self.value)}, admitted iff "
                f"{stats.Threshold.of(self.rule).cut}: {'admit' if self.admit else 'reject'} ({how})")


@dataclass(frozen=True)
class StudentVerdict:
    row: str
    student: str
    reference: str | None
    D: float | None
    delta: float | None
    n_runs: int | None
    n_runs_reference: int | None
    rules: tuple[RuleVerdict, ...]
    in_budget: bool
    not_in_budget_why: str | None
    admission: AdmissionDecision | None
    fitted: FittedDecision | None  # the fitted admission rule's decision (tiny backend, beyond the paper)
    frozen: tuple[FrozenDecision, ...]  # config.yaml's frozen admission rules' decisions (tiny, beyond the paper)
    rl: str | None  # an RL row's collapse verdict: "collapsed (criteria)" or "did not collapse"
    rl_accuracy_change: float | None  # its held-out accuracy against the same algorithm on the standard engine
    missing: tuple[str, ...]
    edges: tuple = ()  # the student's Delta = tau edge per mechanism (edges.parquet, seed-aware rule), as records

    @property
    def verdicts(self) -> dict:
        """What `announce` records: each rule's verdict, the admission decision, an RL row's collapse (the
        VERDICT_KEYS it compares; None where absent) and D and Delta (shown, not compared)."""
        out = {r.rule: r.verdict for r in self.rules}
        out["admit"] = None if self.admission is None else self.admission.admit
        out["rl"] = self.rl
        return {**out, "D": self.D, "delta": self.delta}


def _g(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def _pct(x) -> str:
    return f"{100 * x:+.1f}%"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2g}x" if b else "n/a"


REFERENCE_ROW = "a reference row"  # how not_in_budget begins for Row.is_reference_row; a verdict line repeats it


def not_in_budget(row: Row) -> str | None:
    """Why a row's D and Delta are not part of its student's budget (Row.in_budget), or None."""
    if row.in_budget:
        return None
    if row.algorithm != "opd":
        return f"an RL row ({row.algorithm}): the budget is OPD's"
    if row.guard is not None:
        return "a guarded row mixes two engines"
    if row.variant != "none":
        return f"an update variant ({row.variant})"
    if row.lr is not None:
        return f"{REFERENCE_ROW}: its own learning rate ({row.lr:g})"
    return f"{REFERENCE_ROW}: measured against {row.reference!r}, not the baseline"


class Analysis:
    """The analysis files of one experiment, each read once (absent files read as None)."""

    def __init__(self, exp: Experiment):
        self.exp, self._t, self._index = exp, {}, {}

    def table(self, name: str) -> pd.DataFrame | None:
        if name not in self._t:
            p = Path(O.analysis_path(results_dir(self.exp.name), name))
            self._t[name] = store.read_table(p) if p.exists() else None
        return self._t[name]

    def one(self, table: str, **keys) -> dict | None:
        """The first record of `table` whose columns equal `keys` (floats to 12 decimals), or None."""
        t = self.table(table)
        if t is None:
            return None
        names = tuple(keys)
        if (table, names) not in self._index:
            index = {}
            for rec in t.to_dict("records"):
                index.setdefault(tuple(_key(rec[k]) for k in names), rec)
            self._index[table, names] = index
        return self._index[table, names].get(tuple(_key(v) for v in keys.values()))


def _key(v):
    return round(float(v), 12) if isinstance(v, float) else v


def admission_estimate(seqs: pd.DataFrame, alpha: float, L: float, resamples: int, boot_seed: int,
                       source: str) -> AdmissionDecision:
    """D_hat +- SE of one admission check's sequences, as the analysis computes it (stats.offline_estimates with
    the experiment's bootstrap), and the decision (stats.admit)."""
    est = stats.offline_estimates(seqs, ["student", "config"], n_boot=resamples, seed=boot_seed).iloc[0]
    return AdmissionDecision(float(est["d_hat"]), float(est["se"]), int(est["n_prompts"]), alpha, L,
                             stats.admit(float(est["d_hat"]), alpha=alpha, L=L), source)


def student_verdict(a: Analysis, row: Row, student: str) -> StudentVerdict:
    exp = a.exp
    missing = []
    runs = run_ids(exp, row, student)
    absent = [r for r in runs if not store.is_complete(out_dir(exp) / "runs" / r)]
    if absent:
        missing.append(f"training not run yet ({len(absent)} of {len(runs)} runs: {', '.join(absent)}): "
                       f"`{command(analysis_target(exp.name))}`")
    v = a.one("verdicts", student=student, config=row.name) if row.algorithm == "opd" else None
    rl = a.one("rl", student=student, config=row.name) if row.algorithm != "opd" else None
    judged = v if row.algorithm == "opd" else rl
    if a.table("verdicts") is None:
        if not absent:
            missing.append(f"the analysis has not run: `{command(analysis_target(exp.name))}`")
    elif judged is None and not absent:
        missing.append(f"the analysis predates this row's runs: `{command(analysis_target(exp.name))}` (no training)")
    elif v is not None and not absent and int(v["n_runs"]) != len(runs):
        missing.append(f"the analysis used {int(v['n_runs'])} of the row's {len(runs)} runs: "
                       f"`{command(analysis_target(exp.name))}` (no training)")
    analysed = a.one("rows", name=row.name)
    if judged is not None and analysed is not None:
        changed = changed_fields(Row.of({k: x for k, x in analysed.items() if k in _ROW_KEYS}), row)
        if changed:
            missing.append(f"the row changed since the analysis ({', '.join(changed)}): what follows is the old row's; "
                           f"`{command(analysis_target(exp.name))}` retrains it")
    rules = []
    if v is not None:
        for rule, (lo, hi, verdict) in RULE_COLUMNS.items():
            b = a.one("budget", student=student, rule=rule, tau=exp.tau) if a.table("budget") is not None else None
            place = BudgetPlace(float(b["lo"]), float(b["hi"]), bool(b["consistent"])) if b is not None else None
            rules.append(RuleVerdict(rule, float(v[lo]), float(v[hi]), v[verdict] if isinstance(v[verdict], str) else None,
                                     place))
    adm = None
    if row.admission_checked:
        rec = a.one("admission", student=student, config=row.name)
        if rec is not None:
            adm = AdmissionDecision(float(rec["d_hat"]), float(rec["se"]), int(rec["n_prompts"]), float(rec["alpha"]),
                                    float(rec["L"]), bool(rec["admit"]), "analysis",
                                    rec["outcome"] if isinstance(rec["outcome"], str) else None)
        else:
            f = Path(admission_target(exp.name, row.name, student))
            if f.exists():
                adm = admission_estimate(store.read_table(f), exp.admission.alpha, exp.admission.L, exp.bootstrap.resamples, exp.bootstrap.seed, str(f))
            else:
                missing.append(f"admission check not run: `{command(admission_target(exp.name, row.name, student))}` "
                               f"(no training)")
    fitted = fitted_decision(a, row, student) if row.admission_checked else None
    frozen = frozen_decisions(a, row, student) if row.admission_checked else ()
    if fitted is None and not frozen and row.admission_checked \
            and (a.table("predictors") is not None or exp.frozen_rules) \
            and not Path(predictor_target(exp.name, row.name, student)).exists():
        missing.append(f"step-0 statistics not measured (the fitted rule's input): "
                       f"`{command(predictor_target(exp.name, row.name, student))}` (no training)")
    edges = a.table("edges")
    edges = () if edges is None else tuple(SimpleNamespace(**e) for e in edges[
        (edges["student"] == student) & (edges["rule"] == "seeds")
        & ((edges["tau"] - exp.tau).abs() < 1e-12)].to_dict("records"))
    rl_text = None
    if rl is not None:
        rl_text = f"collapsed ({rl['collapse_criteria']})" if rl["collapsed"] else "did not collapse"
    return StudentVerdict(
        row.name, student, v["reference"] if v is not None else (rl["reference"] if rl is not None else None),
        float(v["D"]) if v is not None else (float(rl["D"]) if rl is not None else None),
        float(v["delta"]) if v is not None else None,
        int(v["n_runs"]) if v is not None else None,
        int(v["n_runs_reference"]) if v is not None and "n_runs_reference" in v else None,
        tuple(rules), row.in_budget, not_in_budget(row), adm, fitted, frozen, rl_text,
        float(rl["accuracy_change"]) if rl is not None else None, tuple(missing), edges)


def fitted_decision(a: Analysis, row: Row, student: str) -> FittedDecision | None:
    """The fitted rule's decision on one candidate, from the predictors stage's record (None where it has not run:
    verl, or too few candidates) and the candidate's step-0 statistics (the analysis's, else its own file)."""
    record = a.table("predictors")
    rule = stats.fitted_rule_of(record) if record is not None else None
    if rule is None:
        return None
    rec, source = step0_statistics(a, row, student)
    value = float(rec.get(rule.statistic, float("nan"))) if rec is not None else float("nan")
    if not math.isfinite(value):
        return None
    held = rec.get("fitted_admit") if rec.get("fitted_statistic") and isinstance(rec.get("outcome"), str) \
        and rec["outcome"] in ("pass", "fail") else None
    return FittedDecision(rule, value, bool(stats.Threshold(rule.sign, rule.threshold).admits(value)),
                          None if held is None or not math.isfinite(held) else bool(held), source)


def frozen_decisions(a: Analysis, row: Row, student: str) -> tuple[FrozenDecision, ...]:
    """config.yaml's frozen rules on one candidate, in their order (none without a frozen rule or the candidate's
    statistics; a rule whose statistic is missing is left out)."""
    if not a.exp.frozen_rules:
        return ()
    rec, source = step0_statistics(a, row, student)
    out = []
    for rule in a.exp.frozen_rules:
        value = float(rec.get(rule.statistic, float("nan"))) if rec is not None else float("nan")
        if math.isfinite(value):
            out.append(FrozenDecision(rule, value, source))
    return tuple(out)


def step0_statistics(a: Analysis, row: Row, student: str) -> tuple[dict | None, str]:
    """A candidate's step-0 statistics: the analysis's (predictor_stats), else its own file before the analysis
    has read it, else None; with where they came from."""
    rec = a.one("predictor_stats", student=student, config=row.name)
    if rec is not None:
        return rec, "analysis"
    f = Path(predictor_target(a.exp.name, row.name, student))
    return (store.read_table(f).iloc[0].to_dict(), str(f)) if f.exists() else (None, "")


_ROW_KEYS = set(Row.__dataclass_fields__) - {"given"}
# What a row computes (its engine, ENGINE_FIELDS, then the other fields a job computes from) and what its Delta is
# against (`reference`, a placement field that changes the comparison).
_COMPARED = (*ENGINE_FIELDS, *(f for f in FIELD_TYPES if f not in (*ENGINE_FIELDS, "name", *PLACEMENT_FIELDS)),
             "reference")


def changed_fields(analysed: Row, now: Row) -> list[str]:
    """The fields that say what a row computes and differ between the row the analysis read and the row now."""
    return [f for f in _COMPARED if getattr(analysed, f) != getattr(now, f)]


def row_verdicts(cfg: dict, row: str, student: str | None = None, experiment: str | None = None) -> list[StudentVerdict]:
    exp = experiment_of(cfg, experiment)
    r = find_row(exp, row)
    students = r.students_or(exp.primary)
    if student is not None and student not in students:
        raise C.ConfigError(f"row {row!r} of experiment {exp.name!r} does not run student {student!r}; "
                            f"it runs {', '.join(students)}")
    a = Analysis(exp)
    return [student_verdict(a, r, s) for s in ([student] if student else students)]


def render(exp: Experiment, sv: StudentVerdict) -> str:
    head = f"{sv.row} on {sv.student} (experiment {exp.name}, τ = {exp.tau:.0%})"
    lines = [head]
    if sv.D is not None:
        lines.append(f"  D = {_g(sv.D)} nats/token" + (f", Δ = {_pct(sv.delta)} against {sv.reference}"
                                                       f" ({sv.n_runs} runs against {sv.n_runs_reference})"
                                                       if sv.delta is not None else ""))
    width = max(len(n) for n in RULE_NAMES.values())
    for r in sv.rules:
        ci = f"[{_pct(r.ci_lo)}, {_pct(r.ci_hi)}]" if math.isfinite(r.ci_lo) else "none (too few runs)"
        ref = f" ({sv.not_in_budget_why})" if sv.not_in_budget_why and sv.not_in_budget_why.startswith(REFERENCE_ROW) \
            and r.verdict else ""
        lines.append(f"  {RULE_NAMES[r.rule]:<{width}}  95% interval {ci}: {r.verdict or 'cannot judge'}{ref}")
    outside = "" if sv.in_budget else f" (this row is not part of them: {sv.not_in_budget_why})"
    if sv.edges and sv.D is not None:
        lines.append(f"  edges of {sv.student} at τ = {exp.tau:.0%}, one per mechanism (seed-aware rule){outside}:")
        lines += [f"    {scorecard.edge_place(sv.D, e)}" for e in sorted(
            sv.edges, key=lambda e: scorecard.mechanism_order(e.mechanism))]
    budgets = [r for r in sv.rules if r.budget is not None] if not sv.edges else []
    same = len(budgets) == 2 and budgets[0].budget == budgets[1].budget
    for r in budgets[:1] if same else budgets:
        where = ("" if sv.D is None else f"; this row: {r.budget.where(sv.D)}"
                 + ("" if sv.in_budget else f" (not part of the budget: {sv.not_in_budget_why})"))
        rule = "both rules" if same else RULE_NAMES[r.rule]
        lines.append(f"  budget of {sv.student} at τ = {exp.tau:.0%} ({rule}): {r.budget.text()}{where}")
    if sv.rl is not None:
        lines.append(f"  RL collapse rule against {sv.reference}: held-out accuracy {sv.rl_accuracy_change:+.1f} points; "
                     f"{sv.rl}")
    if sv.admission is not None:
        src = "" if sv.admission.source == "analysis" else f" (from {sv.admission.source}; not in the analysis yet)"
        lines.append(f"  admission: {sv.admission.text()}{src}")
    elif find_row(exp, sv.row).admission_checked is False and sv.rl is None:
        lines.append("  admission: not checked for this row (the check runs on budget rows without staleness)")
    if sv.fitted is not None:
        src = "" if sv.fitted.source == "analysis" else f" (from {sv.fitted.source}; not in the analysis yet)"
        lines.append(f"  fitted rule (beyond the paper): {sv.fitted.text()}{src}")
    for f in sv.frozen:
        src = "" if f.source == "analysis" else f" (from {f.source}; not in the analysis yet)"
        lines.append(f"  frozen rule {f.rule.name} (config.yaml; beyond the paper): {f.text(sv.student, sv.row)}{src}")
    lines += [f"  missing: {m}" for m in sv.missing] or ["  missing: nothing"]
    return "\n".join(lines)


def stale(exp: Experiment, row: Row, students) -> list[str]:
    """Why the analysis files cannot answer for `row` on `students` now ([] when they can): they record another tau
    or other settings (opd.dag.analysis_inputs), a run of the row or of its reference that they read has changed
    since, or such a run was computed from another spec than the config asks for now (its retraining is due)."""
    from opd import dag
    verdicts = Path(O.analysis_path(results_dir(exp.name), "verdicts"))
    if not verdicts.exists():
        return []  # nothing analysed yet: student_verdict says what is missing
    rec = store.read_inputs(verdicts)
    if rec is None:
        return ["the analysis files record no inputs (made before they were recorded)"]
    out = []
    if rec.get("tau") != exp.tau:
        out.append(f"they are at tau {rec.get('tau')}, the config asks for {exp.tau}")
    if rec.get("settings") != dag.settings_record(exp):
        out.append("the experiment's settings the analysis reads (bootstrap, students, admission, ...) changed")
    rows_file = Path(O.analysis_path(results_dir(exp.name), "rows"))
    rows = store.read_table(rows_file) if rows_file.exists() else None
    analysed = rows[rows["name"] == row.name].to_dict("records") if rows is not None else []
    changed = changed_fields(Row.of({k: x for k, x in analysed[0].items() if k in _ROW_KEYS}), row) if analysed else []
    if changed:
        out.append(f"the row changed since the analysis ({', '.join(changed)})")
    specs = dag.train_specs(exp, f"{out_dir(exp)}/_models")
    ref = exp.row(row.reference) if row.reference else exp.baseline
    bad: dict[str, list[str]] = {}
    read = rec.get("runs", {})
    for s in students:
        for rid in (*run_ids(exp, row, s), *run_ids(exp, ref, s)):
            found = store.inspect(out_dir(exp) / "runs" / rid, {}, specs.get(rid))
            if found.state == "stale":
                bad.setdefault("computed from another spec than the config asks for now", []).append(rid)
            elif found.state == "damaged":
                bad.setdefault("damaged", []).append(rid)
            elif found.state == "current" and rid not in read:
                bad.setdefault("trained after the analysis was made", []).append(rid)
            elif rid in read and read[rid] != dag.run_record(str(out_dir(exp)), rid):
                bad.setdefault("changed since the analysis read them", []).append(rid)
    for why, rids in bad.items():
        out.append(f"{len(rids)} run(s) {why} ({', '.join(rids[:3])}{', ...' if len(rids) > 3 else ''})")
    # the row's admission checks the analysis read, measured again since (one measured after it is read directly)
    from opd.provenance import sha256_file
    read = rec.get("measurements") if isinstance(rec.get("measurements"), dict) else {}
    changed = [p for s in students if (p := O.admission_path(results_dir(exp.name), row.name, s)) in read
               and (not Path(p).exists() or sha256_file(p) != read[p])]
    if changed:
        out.append(f"its admission check(s) {', '.join(changed)} changed since the analysis read them")
    return out


def main(row: str, student: str | None, experiment: str | None, config_path) -> int:
    cfg = C.load(config_path or C.ROOT / "config.yaml")
    exp = experiment_of(cfg, experiment)
    r = find_row(exp, row)
    if student is not None and student not in r.students_or(exp.primary):
        raise C.ConfigError(f"row {row!r} of experiment {exp.name!r} does not run student {student!r}; "
                            f"it runs {', '.join(r.students_or(exp.primary))}")
    why = stale(exp, r, [student] if student else r.students_or(exp.primary))
    if why:
        print(f"opd verdict {row}: the analysis files are stale for this row, so no verdict is given: "
              + "; ".join(why) + f". Refresh them: `{command(analysis_target(exp.name))}`", file=sys.stderr)
        return 2
    out = [render(exp, sv) for sv in row_verdicts(cfg, row, student, exp.name)]
    print("\n\n".join(out))
    return 0


# ---------------------------------------------------------------- what changed since the last run

def seen(cfg: dict, experiment: str) -> dict:
    """{row: {student: {rule: verdict, ..., admit: bool}}} for every row the analysis files judge now."""
    exp = experiment_of(cfg, experiment)
    a = Analysis(exp)
    out = {}
    for r in exp.rows:
        for s in r.students_or(exp.primary):
            sv = student_verdict(a, r, s)
            if sv.D is not None:
                out.setdefault(r.name, {})[s] = sv.verdicts
    return out


def before(cfg: dict, experiment: str) -> dict:
    """The verdicts to compare the end of a run with: this checkout's record, or (none yet) the analysis as it
    stands before the run. Called while the Snakefile is read."""
    p = state_path(experiment)
    try:
        return store.read_json(p) if p.exists() else seen(cfg, experiment)
    except Exception as e:  # a damaged analysis file is the DAG's to rebuild; it must not stop the Snakefile
        print(f"opd: the verdicts before this run could not be read ({e}); every verdict will show as new",
              file=sys.stderr)
        return {}


VERDICT_KEYS = ("paper", "seeds", "admit", "rl")  # what a changed verdict is


def _verdict_text(v: dict) -> str:
    parts = [f"{v[k]} ({RULE_NAMES[k].split(' (')[0]})" for k in RULE_COLUMNS if v.get(k)]
    if v.get("rl"):
        parts.append(f"RL: {v['rl']}")
    if v.get("admit") is not None:
        parts.append("admission: " + ("admit" if v["admit"] else "reject"))
    return ", ".join(parts) or "no verdict"


def _numbers(v: dict) -> str:
    d, delta = v.get("D"), v.get("delta")
    return (f"D = {_g(d)}" if d is not None else "") + (f", Δ = {_pct(delta)}" if delta is not None else "")


def changes(old: dict, new: dict) -> list[str]:
    """One line per row whose verdict (VERDICT_KEYS) is new or changed between two `seen` records."""
    lines = []
    for row, students in new.items():
        parts = []
        for s, v in students.items():
            was = old.get(row, {}).get(s)
            if was is None:
                parts.append(f"{s}: new: {_numbers(v)}: {_verdict_text(v)}")
            elif any(was.get(k) != v.get(k) for k in VERDICT_KEYS):
                parts.append(f"{s}: changed: {_verdict_text(was)} -> {_verdict_text(v)} ({_numbers(v)})")
        if parts:
            lines.append(f"verdict of {row}: {'; '.join(parts)} (`python -m opd.cli verdict {row}`)")
    return lines


def announce(cfg: dict, experiment: str, old: dict, stream=None) -> list[str]:
    """At the end of a successful `snakemake` run: the lines of `changes` (printed on `stream` where one is given;
    opd.summary prints them in the run's summary), and what was seen recorded for the next run."""
    try:
        new = seen(cfg, experiment)
        lines = changes(old, new)
    except Exception as e:  # the run itself succeeded; say why there is no verdict line
        lines, new = [f"opd: verdicts not compared: {e}"], None
    for line in lines if stream else ():
        print(line, file=stream, flush=True)
    if new is not None:
        store.write_json(new, state_path(experiment))
    return lines


# ---------------------------------------------------------------- the decisions of the offline measurements

def decision_line(kind: str, row: str, student: str, text: str) -> str:
    """How a measurement's decision is said, by its job (opd.cli) and at the end of the run that made it."""
    return f"{kind} {row}.{student}: {text}"


def measured_decision(exp: Experiment, kind: str, row: str, student: str) -> str:
    """The decision line of one offline measurement just made (`kind`: admission or predictors): the admission check's
    D_hat +- SE against the line from its own file, as its job says it; the step-0 statistics' decisions by the
    fitted rule and config.yaml's frozen rules (as `python -m opd.cli verdict ROW` gives them)."""
    if kind == "admission":
        f = admission_target(exp.name, row, student)
        d = admission_estimate(store.read_table(f), exp.admission.alpha, exp.admission.L, exp.bootstrap.resamples,
                               exp.bootstrap.seed, f)
        return decision_line(kind, row, student, d.text())
    a, r = Analysis(exp), exp.row(row)
    said = []  # (which rule, its statistic, the candidate's value, the rule's cut, admit)
    fitted = fitted_decision(a, r, student)
    if fitted is not None:
        said.append(("fitted rule", fitted.rule.statistic, fitted.value, fitted.rule.cut, fitted.admit))
    for f in frozen_decisions(a, r, student):
        said.append((f"frozen rule {f.rule.name}", f.rule.statistic, f.value, stats.Threshold.of(f.rule).cut, f.admit))
    text = "; ".join(f"{rule} {'admit' if admit else 'reject'} ({stats.PREDICTORS.get(s, s)} = {_g(v)}, admitted iff "
                     f"{cut})" for rule, s, v, cut, admit in said)
    return decision_line(kind, row, student, (text or "no fitted or frozen rule decides yet")
                         + f" (`python -m opd.cli verdict {row}` explains)")
