"""What a `snakemake` call says when it ends (the Snakefile's `onsuccess:`), in at most MAX_LINES lines: what ran,
which verdicts are new or changed, where the plan stands, where the findings are, and last the decision of each
admission check and step-0 measurement the call made (an admission or predictors target ends with its decision).
During the run the terminal shows only what the jobs themselves say (opd.smk.quiet_terminal); Snakemake's log, named
in the first line, has every job."""
from __future__ import annotations

import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

from opd.progress import duration

MAX_LINES = 10
SHOWN = 3  # the verdict changes shown one a line; the rest are counted
DECISIONS_SHOWN = 2  # the decisions shown one a line (the last ones made); the rest are counted
TRAINING = {"train", "train_probed"}  # the rules that train a run (workflow/rules/train.smk, mechanism.smk)
DECIDING = {"admission": "admission", "predictor_stats": "predictors"}  # rule -> the kind of decision it makes
LISTED = 6  # the kinds of job named in the first line; the rest are counted


def _kind(rule: str) -> str:
    """A job's kind as the first line counts it: figure_* and table_* by their kind, any other rule by its name."""
    return next((k for k in ("figure", "table") if rule.startswith(k + "_")), rule)


def ran(jobs: list[tuple[str, dict]], seconds: float, logfile: str | None) -> str:
    """The first line: how long, how many jobs (`jobs`: (rule, wildcards) of each job that ran), how many trained a
    run, the kinds of job by count, and Snakemake's log."""
    trained = sum(rule in TRAINING for rule, _ in jobs)
    kinds = Counter(_kind(rule) for rule, _ in jobs if rule not in TRAINING and rule != "job_spec")
    # "14 figures", "11 tables"; a rule's name is not a noun to pluralise: "base_models x3"
    named = [k if n == 1 else f"{n} {k}s" if k in ("figure", "table") else f"{k} x{n}"
             for k, n in sorted(kinds.items(), key=lambda kn: (-kn[1], kn[0]))]
    rest = f", {len(named) - LISTED} other kinds" if len(named) > LISTED else ""
    what = f" ({', '.join(named[:LISTED])}{rest})" if named else ""
    runs = f"{trained} run(s) trained" if trained else "no run trained"
    log = f"; every job in Snakemake's log {logfile}" if logfile else ""
    return f"done in {duration(seconds)}: {len(jobs)} job(s), {runs}{what}{log}"


def _some(lines: list[str], more: str) -> list[str]:
    """The first SHOWN of `lines`, and one line counting the rest."""
    return lines[:SHOWN] + ([more.format(n=len(lines) - SHOWN)] if len(lines) > SHOWN else [])


def lines(first: str, changes: list[str], plan: str | None, findings: str | None, decisions: list[str],
          more: int = 0) -> list[str]:
    """The summary, at most MAX_LINES lines: `first` (ran), the verdict changes (opd.verdict.changes; SHOWN of them),
    the plan's headline (opd.plan.Plan.headline; None without an adaptive design), where the findings are (None where
    none were made), then the measurements' decisions last: DECISIONS_SHOWN of them, `more` others counted before
    them."""
    out = [first, *(_some(changes, "verdicts: {n} more row(s) new or changed (`python -m opd.cli verdict ROW`)")
                    if changes else ["verdicts: none new or changed"])]
    out += [plan] if plan else []
    out += [f"findings: {findings}"] if findings else []
    more += max(0, len(decisions) - DECISIONS_SHOWN)
    if more:
        out.append(f"decisions: {more} more made before these (`python -m opd.cli verdict ROW`)")
    out += decisions[-DECISIONS_SHOWN:]
    assert len(out) <= MAX_LINES, out
    return out


def at_end(workflow, log, cfg: dict, experiment, before: dict, findings: str, adaptive: bool, stream=None) -> list[str]:
    """Prints and returns the summary of a successful run of `workflow` (Snakemake's; `log` its onsuccess argument,
    the log files): the jobs that ran (their DAG's finished jobs that make files, not the targets), the verdicts
    against `before` (opd.verdict.announce, which records them), the plan (`adaptive`), the findings file where it
    exists, and the decisions of the admission checks and step-0 statistics made (on `experiment`, the DAG's)."""
    from opd import plan as P
    from opd import verdict as V
    from opd.spec import Experiment, results_dir
    jobs = [(j.rule.name, dict(j.wildcards_dict)) for j in workflow.dag.finished_jobs if j.output]
    first = ran(jobs, (datetime.now() - workflow.start_time).total_seconds(), next(iter(log or []), None))
    changes = V.announce(cfg, experiment.name, before)
    plan = P.next_round(Experiment.of(cfg, experiment.name), results_dir(experiment.name)) if adaptive else None
    made = [(DECIDING[rule], w["row"], w["student"]) for rule, w in jobs if rule in DECIDING]
    decisions = [V.measured_decision(experiment, *m) for m in made[-DECISIONS_SHOWN:]]  # (the others are counted)
    where = f"{findings} (every figure and table in {Path(findings).parent}/)" if Path(findings).exists() else None
    out = lines(first, changes, plan, where, decisions, len(made) - len(decisions))
    for line in out:
        print(line, file=stream or sys.stderr, flush=True)
    return out


def failed(log, stream=None) -> str:
    """What a failed run says last (the Snakefile's `onerror:`): Snakemake's log, which has every job and the failed
    one's error (its terminal shows the errors, not the jobs)."""
    line = f"failed: every job in Snakemake's log {next(iter(log or []), '(none)')}"
    print(line, file=stream or sys.stderr, flush=True)
    return line
