"""Command line for the DAG's compute jobs: `python -m opd.cli <job> --spec FILE ...`.

Each job reads its spec from the JSON file its rule wrote under results/<experiment>/_jobs/, so a
job depends only on that file; editing library code never reruns anything by itself. The file is parsed
once, into the job's typed spec (opd.spec: SPECS below), which the backend receives. `--launcher` names a
JSON file saying where the job runs (here, or on Slurm through submitit: opd.spec.Launcher)."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from pathlib import Path

from opd.spec import (AdmissionSpec, BaseSpec, Experiment, HeldoutSpec, JobSpec, KVAttributionSpec, Launcher,
                      MemoryBoundSpec, PredictorSpec, ThroughputSpec, TrainSpec, results_dir)

SPECS: dict[str, type[JobSpec]] = {"train": TrainSpec, "base": BaseSpec, "admission": AdmissionSpec,
                                   "kv-attribution": KVAttributionSpec, "throughput": ThroughputSpec,
                                   "memory-bound": MemoryBoundSpec, "heldout": HeldoutSpec,
                                   "predictors": PredictorSpec}
JOBS = {  # job -> what it writes (opd.backends.JOBS says which backend computes it with which function)
    "base": "train a student and its teacher (tiny backend)",
    "admission": "offline admission estimate D_hat for one row and student",
    "kv-attribution": "per-layer FP8 KV-cache attribution of the offline mismatch",
    "throughput": "measured async throughput against staleness k",
    "memory-bound": "engine throughput at memory-bound batch sizes, BF16 against FP8 KV cache",
    "predictors": "offline statistics of one row's engine at the step-0 student (tiny backend)",
    "heldout": "held-out evaluation of one policy (the student, or a run's step) as a part file (verl backend)",
}


def dag_spec_kinds() -> list[str]:
    from opd import dag
    return list(dag.SPEC_CLASSES)


def _json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m opd.cli", description=__doc__)
    sub = p.add_subparsers(dest="job", required=True)
    t = sub.add_parser("train", help="one training run (row x student x seed)")
    t.add_argument("--run-dir", type=Path, required=True)
    parsers = [t]
    for job, help_ in JOBS.items():
        parsers.append(sub.add_parser(job, help=help_))
        parsers[-1].add_argument("--out", type=Path, required=True)
        parsers[-1].add_argument("--threads", type=int, default=None,
                                 help="processes or threads the job may use (the rule's threads; not part of the spec)")
    for sp in parsers:
        sp.add_argument("--spec", required=True, help="the job's spec (JSON file)")
        sp.add_argument("--launcher", default=None, help="launcher JSON file (default: run here)")
    c = sub.add_parser("check-runs", help="check every complete run's files against its run.json, as every "
                       "`snakemake` does while building the DAG, and act on what it finds now: a damaged run's files "
                       "move to results/<experiment>/_quarantine/, a stale run's to results/<experiment>/_set_aside/ "
                       "(kept for its spec), and the next `snakemake` reruns them")
    c.add_argument("--experiment", default=None, help="default: config.yaml's `experiment`")
    c.add_argument("--config", type=Path, default=None, help="default: the repository's config.yaml")
    c.add_argument("--hash", action="store_true", help="hash every file, also those whose size and mtime "
                   "are unchanged since this checkout last hashed them (bit rot)")
    c.add_argument("--record-legacy", action="store_true", help="write sizes and sha256 into the run.json of "
                   "complete runs that have none (written before hashes were recorded), after the full check, and "
                   "the spec's sha256 into those whose row, settings, student and seed agree with their job's spec; "
                   "the same into each student's base.json")
    c.add_argument("--rewrite-tables", action="store_true", help="after a full check (every file hashed) that "
                   "finds nothing damaged, write every Parquet file of the experiment again as the store writes "
                   "them now (opd.store.parquet_options: smaller, lossless, each read back equal first) and "
                   "record the new sizes and sha256 in run.json and base.json; the next `snakemake` remakes the "
                   "analysis from them (the same numbers)")
    sa = sub.add_parser("set-aside", help="list the runs and base models kept because the config stopped asking for "
                        "the spec they were computed from (results/<experiment>/_set_aside/); a config that asks for "
                        "that spec again gets them back without computing; --prune deletes them")
    sa.add_argument("--experiment", default=None, help="default: config.yaml's `experiment`")
    sa.add_argument("--config", type=Path, default=None, help="default: the repository's config.yaml")
    sa.add_argument("--prune", action="store_true", help="delete every kept folder whose spec the config does not "
                    "ask for now (those it asks for are restored by the next `snakemake`, never pruned)")
    pj = sub.add_parser("prepare-job", help="(rule job_spec) a compute job's folder made ready for its spec (a stale "
                        "result set aside, a damaged one quarantined), then its spec file written")
    pj.add_argument("--kind", required=True, choices=sorted(dag_spec_kinds()))
    pj.add_argument("--spec-json", required=True, help="the spec, as JSON text")
    pj.add_argument("--out", required=True, help="the spec file to write: results/<experiment>/_jobs/<kind>/<name>.json")
    pj.add_argument("--folder", default="-", help="the job's folder (a run's, a student's base models'); - for none")
    v = sub.add_parser("verdict", help="is this row's engine within budget? Its verdicts, budget and admission "
                       "decision per student, from the analysis files alone (never trains), and what is missing")
    v.add_argument("row", help="a row of the experiment (config.yaml)")
    v.add_argument("--student", default=None, help="default: every student the row runs")
    v.add_argument("--experiment", default=None, help="default: config.yaml's `experiment`")
    v.add_argument("--config", type=Path, default=None, help="default: the repository's config.yaml")
    cmp_ = sub.add_parser("compare", help="two verdict tables of one experiment row by row (the committed results "
                          "and a regeneration, say): changed verdicts, Deltas outside the first's interval, and a "
                          "summary; exit 1 when a second Delta lies outside the first's interval")
    cmp_.add_argument("first", help="verdicts.parquet, a results directory, or REV:PATH (a git revision's file)")
    cmp_.add_argument("second", help="the same kinds as FIRST")
    cmp_.add_argument("--rule", choices=["seeds", "paper"], default="seeds",
                      help="whose interval and verdict: the seed-aware rule's (default) or the paper's")
    x = sub.add_parser("export", help="per-step and held-out curves of complete runs as TensorBoard event files "
                       "and/or W&B offline runs (one run, a row, or the whole experiment); optional extra: "
                       "pip install -e '.[export]'")
    x.add_argument("--tensorboard", type=Path, default=None, metavar="DIR", help="write event files to DIR/<run_id>/")
    x.add_argument("--wandb", type=Path, default=None, metavar="DIR", help="write W&B offline runs under DIR/wandb/")
    x.add_argument("--project", default=None, help="W&B project (default: opd-budget-<experiment>)")
    x.add_argument("--run", default=None, help="one run id, <row>.<student>.s<seed>")
    x.add_argument("--row", default=None, help="every run of one row")
    x.add_argument("--student", default=None, help="with --row or alone: only this student's runs")
    x.add_argument("--experiment", default=None, help="default: config.yaml's `experiment`")
    x.add_argument("--config", type=Path, default=None, help="default: the repository's config.yaml")
    cal = sub.add_parser("calibrate", help="an adaptive design (sequential seeds, bisected edges: opd.plan) to the "
                         "end: `snakemake ARGS` once per round, until a round leaves no run to train")
    cal.add_argument("--experiment", default=None, help="default: config.yaml's `experiment`")
    cal.add_argument("--config", type=Path, default=None, help="default: the repository's config.yaml")
    cal.add_argument("--max-rounds", type=int, default=50, help="stop after this many rounds (default 50)")
    cal.add_argument("snakemake", nargs=argparse.REMAINDER, help="snakemake's arguments, after `--` (e.g. -- -c 2); "
                     "name the config and experiment with calibrate's own --config and --experiment, which plan with "
                     "them and pass them on")
    ba = sub.add_parser("base-acceptance", help="(tiny backend) measure every student's base-model draws from the saved "
                        "models (initial held-out KL, teacher's held-out cross-entropy) and judge them against the "
                        "pre-registered band (base_acceptance: opd.base_check); exit 1 when a student is outside it")
    ba.add_argument("--config", type=Path, action="append", default=None, help="a config file; repeat to merge several "
                    "in order as Snakemake's --configfile does (default: the repository's config.yaml)")
    ba.add_argument("--experiment", default=None, help="default: the config's `experiment`")
    ba.add_argument("--band-from", default=None, help="judge against this experiment's band (default: the experiment's own)")
    ba.add_argument("--out", type=Path, required=True, help="the folder of base_acceptance.parquet, base_draws.parquet "
                    "and base_acceptance.md")
    args = p.parse_args(argv)
    if args.job == "base-acceptance":
        from opd import base_check
        from opd import config as C
        try:
            return base_check.main(args.config or [C.ROOT / "config.yaml"], args.experiment, args.band_from, args.out)
        except (C.ConfigError, ValueError) as e:
            print(f"opd base-acceptance: {e}", file=sys.stderr)
            return 2
    if args.job == "calibrate":
        return calibrate(args.experiment, args.config, args.max_rounds, args.snakemake)

    from opd import store
    if args.job == "check-runs":
        return check_runs(args.experiment, args.config, args.hash, args.record_legacy, args.rewrite_tables)
    if args.job == "prepare-job":
        from opd import dag
        spec = dag.SPEC_CLASSES[args.kind].from_json(json.loads(args.spec_json), where=args.out)
        dag.prepare_job(spec, args.out, None if args.folder == "-" else args.folder, str(Path(args.out).parents[2]))
        return 0
    if args.job == "set-aside":
        return set_aside(args.experiment, args.config, args.prune)
    if args.job == "export":
        from opd import config as C
        from opd import export
        if not (args.tensorboard or args.wandb):
            p.error("export: give --tensorboard DIR, --wandb DIR, or both")
        try:
            return export.main(args)
        except (C.ConfigError, RuntimeError) as e:
            print(f"opd export: {e}", file=sys.stderr)
            return 2
    if args.job == "compare":
        from opd import compare
        try:
            return compare.main(args.first, args.second, args.rule)
        except (compare.Unreadable, store.DamagedFile) as e:
            print(f"opd compare: {e}", file=sys.stderr)
            return 2
    if args.job == "verdict":
        from opd import config as C
        from opd import verdict
        try:
            return verdict.main(args.row, args.student, args.experiment, args.config)
        except C.ConfigError as e:
            print(f"opd verdict: {e}", file=sys.stderr)
            return 2
    try:
        return run(p, args)
    except store.DiskFull as e:  # the message says which file, which filesystem and what to do
        print(f"opd {args.job}: {e}", file=sys.stderr)
        return 1


def calibrate(experiment, config_path, max_rounds: int, snakemake_args: list[str]) -> int:
    """Each round: the plan from the results so far (opd.plan), then `snakemake` with the given arguments (and
    --config experiment=... when one is named) and the target plan_round (the round's runs), which trains that
    round and nothing else (the analysis and figures are not rebuilt between rounds: the plan reads the runs themselves);
    until a plan leaves no run to train. After the last round, one `snakemake` with the given arguments builds
    every output from the final results. Stops with 1 when a snakemake call fails or a round trains nothing of
    what it planned."""
    import subprocess
    from opd import config as C
    from opd import plan
    cfg = C.load(config_path or C.ROOT / "config.yaml")
    exp = experiment or cfg["experiment"]
    given = snakemake_args[1:] if snakemake_args[:1] == ["--"] else snakemake_args  # calibrate's own `--`
    options, targets = snakemake_argv(given, config_path, experiment)
    args = [*options, *(["--", *targets] if targets else [])]
    before = None
    for round_ in range(1, max_rounds + 1):
        p = plan.checked_plan(Experiment.of(cfg, exp), results_dir(exp))  # the plan the DAG will build
        if not p.pending:
            print("\n".join(p.summary()) if p.adaptive else f"calibrate: {exp!r} has no adaptive rows; nothing planned")
            print(f"calibrate: done after {round_ - 1} round(s)", flush=True)
            if round_ > 1 and subprocess.run(["snakemake", *args]).returncode != 0:
                print("calibrate: every round is trained, but the snakemake that builds the outputs from them failed",
                      file=sys.stderr)
                return 1
            return 0
        if p.pending == before:
            print(f"calibrate: round {round_ - 1} trained none of {len(before)} planned run(s) ({', '.join(before)}); "
                  f"stopping", file=sys.stderr)
            return 1
        print(f"calibrate: round {round_}: {len(p.pending)} run(s) to train", flush=True)
        # rule plan_round: p.pending, beside any target the given arguments name
        if subprocess.run(["snakemake", *options, "--", *targets, "plan_round"]).returncode != 0:
            print(f"calibrate: snakemake failed in round {round_}; the runs it finished are kept: rerun to resume",
                  file=sys.stderr)
            return 1
        before = p.pending
    print(f"calibrate: stopped after {max_rounds} rounds with runs still planned", file=sys.stderr)
    return 1


def snakemake_argv(given: list[str], config_path, experiment) -> tuple[list[str], list[str]]:
    """The options and the targets of a `snakemake` call made of the user's arguments `given` and calibrate's own
    (--configfile, --config experiment=...), as Snakemake's own parser reads them. Snakemake reads its targets as one
    run of words and keeps only the last --config (or --configfile) given, so the targets are taken out of `given`
    (the caller puts them after `--`, where plan_round joins them) and calibrate's values are added to the user's in
    one last --config. Raises SystemExit naming what it cannot split."""
    from snakemake.cli import get_argument_parser
    parse = get_argument_parser().parse_args
    try:
        read = parse(given)
    except SystemExit:
        raise SystemExit(f"calibrate: snakemake refuses the arguments {' '.join(given)!r}") from None
    targets = list(read.targets or ())
    options = list(given)
    for t in reversed(targets):  # the last occurrence of each target word is the target, checked below
        del options[len(options) - 1 - options[::-1].index(t)]
    options = [a for a in options if a != "--"]  # a `--` only ever separates targets
    if targets and (again := parse(options)).targets:
        raise SystemExit(f"calibrate: cannot tell the targets {targets} from the options in {' '.join(given)!r}; "
                         f"name the targets first")
    plain = lambda v: vars(v) if hasattr(v, "__dict__") else v  # noqa: E731 (Snakemake's settings objects)
    same = lambda a, b: {k: plain(v) for k, v in vars(a).items() if k != "targets"} == \
        {k: plain(v) for k, v in vars(b).items() if k != "targets"}  # noqa: E731
    if targets and not same(read, again):
        raise SystemExit(f"calibrate: cannot take the targets {targets} out of {' '.join(given)!r}; name them first")
    files = [*map(str, read.configfile or ()), *([str(config_path)] if config_path else [])]
    config = [*(read.config or ()), *([f"experiment={experiment}"] if experiment else [])]
    return options + (["--configfile", *files] if config_path else []) + (["--config", *config] if config else []), \
        targets


def check_runs(experiment, config_path, hash_all, record_legacy=False, rewrite=False) -> int:
    """Paths are relative to the current folder (the repository root), as Snakemake's are."""
    from opd import config as C
    from opd import store
    from opd import dag
    from opd import plan
    cfg = C.load(config_path or C.ROOT / "config.yaml")
    exp = experiment or cfg["experiment"]
    e = plan.experiment(cfg, exp)  # an adaptive design's runs as the DAG plans them
    specs = dag.train_specs(e, f"{results_dir(exp)}/_models")  # as the DAG's (workflow/rules/common.smk)
    bases = dag.base_specs(e)
    runs = list(specs)
    damaged = store.heal_runs(results_dir(exp), runs, store.ledger_path(exp), hash_all=hash_all or rewrite,
                              specs=specs, base_specs=bases)
    print(f"{len(runs)} runs of {exp!r} checked{' (every file hashed)' if hash_all or rewrite else ''}: "
          + (f"{len(damaged)} damaged or stale, moved aside ({', '.join(damaged)}); `snakemake` reruns them"
             if damaged else "no damaged run"))
    if record_legacy:
        recorded = store.record_legacy(results_dir(exp), runs, specs, bases)
        print(f"file or spec hashes written into the run.json or base.json of {len(recorded)} run(s) or base "
              f"models that had none (each after checking its files read and its record agrees with its spec)")
    if rewrite and not damaged:
        n, before, after = store.rewrite_tables(results_dir(exp))
        print(f"{n} Parquet files of {exp!r} written again: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB; "
              "`snakemake` remakes the analysis from them")
    elif rewrite:
        print("nothing rewritten: rerun the damaged or stale runs first")
    return 1 if damaged else 0


def set_aside(experiment, config_path, prune: bool) -> int:
    """`python -m opd.cli set-aside [--prune]`: one line per kept folder (what, the spec's sha256, size, when set
    aside, and whether the config asks for that spec now), then a total; with --prune, those it does not ask for are
    deleted."""
    from opd import config as C
    from opd import dag, plan, store
    cfg = C.load(config_path or C.ROOT / "config.yaml")
    exp = experiment or cfg["experiment"]
    e = plan.experiment(cfg, exp)
    out = results_dir(exp)
    wanted = {s.sha256() for s in dag.train_specs(e, f"{out}/_models").values()}
    wanted |= {s.sha256() for s in dag.base_specs(e).values()}
    entries = store.set_aside_entries(out)
    for x in entries:
        asked = "asked for now: the next `snakemake` restores it" if x["sha"] in wanted else "not asked for now"
        print(f"{x['kind']} {x['folder']}  spec {x['sha'][:12]}  {x['bytes'] / 2**20:.2f} MiB  set aside "
              f"{x['time']}  {asked}")
    total = sum(x["bytes"] for x in entries)
    print(f"{len(entries)} folder(s) kept in {store.set_aside_root(out)}/, {total / 2**20:.1f} MiB")
    if prune and store.another_invocation():
        print("not pruned: another snakemake runs in this folder (.snakemake/locks/), and its jobs may be restoring "
              "from the store; prune once it is done", file=sys.stderr)
        return 1
    if prune:
        gone = store.prune_set_aside(out, wanted)
        print(f"pruned {len(gone)} folder(s) whose spec the config does not ask for, "
              f"{sum(x['bytes'] for x in gone) / 2**20:.1f} MiB freed")
    return 0


def parse(p, args) -> tuple[JobSpec, Launcher]:
    """The job's spec file as its typed spec, and the launcher file as a Launcher; a bad file is a usage error
    naming it."""
    try:
        spec = SPECS[args.job].from_json(_json(args.spec), where=args.spec)
        launcher = Launcher.from_json(_json(args.launcher) if args.launcher else None)
    except (OSError, ValueError) as e:  # json.JSONDecodeError and SpecError are ValueErrors
        p.error(str(e))
    if getattr(args, "threads", None) is not None:
        spec = dataclasses.replace(spec, threads=args.threads)
    return spec, launcher


class _Tee:
    """A text stream writing to each of `streams` (the terminal and the job's log)."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
            s.flush()
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()

    def isatty(self) -> bool:  # as the terminal's: a progress bar there stays a bar (opd.progress)
        return self.streams[0].isatty()


@contextlib.contextmanager
def job_log(path):
    """What the job prints, on the terminal as before and in its log `path` (opd.dag.log_path: the path the job's
    rule declares as its `log:`; the command never names it, so declaring it reran nothing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as log, contextlib.redirect_stdout(_Tee(sys.stdout, log)), \
            contextlib.redirect_stderr(_Tee(sys.stderr, log)):
        yield path


def run(p, args) -> int:
    from opd import dag, store
    spec, launcher = parse(p, args)
    with job_log(dag.spec_log_path(spec)):
        try:
            return _run(p, args, spec, launcher)
        except store.WeightsDiffer as e:  # on the terminal and in the job's log: which base model, both hashes
            print(f"opd {args.job}: {e}", file=sys.stderr)
            return 1


def missing_weights(spec) -> str | None:
    """Why a tiny-backend job cannot start: base-model weights its spec names are missing (an experiment may leave
    them uncommitted, and the DAG gives a job the weights only where it decides the job runs: common.smk's
    base_inputs; a job forced to run, -R/--forcerun, has not had them retrained); None where they are there."""
    from opd import store
    why = store.missing_weights([getattr(spec, "student_path", None), getattr(spec, "teacher_path", None)],
                                spec.experiment)
    return f"{spec.name}: {why}" if why else None


def _run(p, args, spec, launcher) -> int:
    from opd import launch, store
    if args.job == "train":
        if not store.restore(args.run_dir, spec, results_dir(spec.experiment)):  # computed before: nothing to do
            if why := missing_weights(spec):
                print(f"opd train: {why}", file=sys.stderr)
                return 1
            launch.run_train(spec, args.run_dir, launcher)
        return 0
    if args.job == "base" and store.restore(args.out, spec, results_dir(spec.experiment), "base.json"):
        return 0
    if why := missing_weights(spec):
        print(f"opd {args.job}: {why}", file=sys.stderr)
        return 1
    from opd import backends
    try:
        fn = backends.job(args.job, spec.backend)
    except ValueError as e:
        p.error(str(e))
    launch.run_job(fn, spec, args.out, launcher if args.job != "base" else Launcher())
    if args.job == "admission":
        admission_summary(spec, args.out)
    return 0


def admission_summary(spec: AdmissionSpec, out: Path) -> None:
    """The admission check's decision, once its file is written (either backend, either launcher): D_hat +- SE
    against the experiment's line and admit / reject. The line and the bootstrap come from the file the DAG writes
    (opd.dag.admission_line_path), not the spec: changing the line never reruns a check. Without that file (a job
    run by hand) there is no line to decide against, and nothing is printed."""
    from opd import dag, store, verdict
    try:
        line = _json(dag.admission_line_path(spec.experiment))
    except (OSError, ValueError):
        return
    d = verdict.admission_estimate(store.read_table(out), line["alpha"], line["L"], line["resamples"], line["seed"],
                                   str(out))
    print(verdict.decision_line("admission", spec.row.name, spec.student, d.text()), file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
