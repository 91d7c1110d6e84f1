"""The self-checking cache of runs.

A run folder is complete when its run.json says `"status": "complete"`; every file in it is renamed
into place only once fully written (opd.store.files), so a killed job never leaves a file that looks finished.

A complete run's run.json records the size and sha256 of each of its files (`files`) and the sha256 of the spec it
was computed from. `inspect_all` checks them while the DAG is built, reading only; a job's first step (`prepare`, rule
job_spec) sets a stale run aside under its spec (results/<exp>/_set_aside/, restored by `restore` when that spec is
asked for again) and moves a damaged one to results/<exp>/_quarantine/, so Snakemake reruns exactly those runs and
nothing computed is lost. `heal_runs` does the same on request (`python -m opd.cli check-runs`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from opd.provenance import sha256_file
from opd.store.files import SchemaError, read_json, read_table, rewrite_table, write_json


def is_complete(run_dir) -> bool:
    """Whether a run's run.json says complete; False for a missing, unreadable or malformed one (the cache check,
    inspect names it: this only answers)."""
    p = Path(run_dir) / "run.json"
    try:
        meta = read_json(p) if p.exists() else None
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("status") == "complete"


# ---------------------------------------------------------------- the self-checking cache of runs

RUN_FILES = ("steps.parquet", "heldout.parquet")  # every complete run's files
# A run's checkpoint (tiny backend) and its record of attempts (opd.training), in its folder while the run is not
# complete: a rerun continues from them; removed once the final run.json is in place (and never moved aside).
CHECKPOINT = "checkpoint.pt"
ATTEMPTS = "attempts.json"
# a probed run's files besides (the mechanism's gradient probes, written by its own training job)
PROBE_FILES = {"probes": "probes.parquet", "prefix": "probes_prefix.parquet"}
ALL_RUN_FILES = (*RUN_FILES, *PROBE_FILES.values())  # what a complete run.json records (`files`), where present


def file_records(run_dir) -> dict:
    """{name: {size, sha256}} of a run's files (those of ALL_RUN_FILES it has), as run.json records them."""
    run_dir = Path(run_dir)
    return {n: {"size": (run_dir / n).stat().st_size, "sha256": sha256_file(run_dir / n)}
            for n in ALL_RUN_FILES if (run_dir / n).exists()}


def record_files(run_dir) -> None:
    """Re-record a complete run's file hashes in its run.json (after a file was deliberately rewritten,
    e.g. a re-run of the held-out evaluation); a run that is not complete, or has no run.json (an
    evaluation run by hand), is left alone."""
    p = Path(run_dir) / "run.json"
    if not p.exists():
        return
    meta = read_json(p)
    if meta.get("status") == "complete":
        write_json({**meta, "files": file_records(run_dir)}, p)


def parquet_problem(path) -> str | None:
    """Why a Parquet file of the run contract is unreadable (magic bytes, footer, every page decoded,
    columns and dtypes), or None. What a run.json without hashes (written before they were recorded) is
    checked against."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4))
            tail = f.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            return f"{path}: not a complete Parquet file (no PAR1 magic bytes at its start and end: truncated?)"
        read_table(path)
    except (SchemaError, pa.ArrowException, OSError) as e:
        return str(e).split(". If it is a run's file")[0]
    return None


def foreign_rows(path, run_id: str) -> str | None:
    """Why a run's Parquet file is not its own (rows whose run_id is another run's: a file copied from another run
    into a folder whose run.json records no hashes), or None."""
    import pyarrow.compute as pc
    col = pq.read_table(path, columns=["run_id"])["run_id"]
    other = pc.unique(pc.filter(col, pc.not_equal(col, run_id))).to_pylist()
    return (f"{path}: holds rows of run(s) {', '.join(map(str, other[:3]))}, not of {run_id} (copied from another "
            f"run?)") if other else None


_HEX64 = frozenset("0123456789abcdef")


def _is_sha(v) -> bool:
    return isinstance(v, str) and len(v) == 64 and set(v) <= _HEX64


def record_problems(meta, path: Path, status=("running", "complete"), files=RUN_FILES) -> list[str]:
    """What is wrong with a run.json's (or a base.json's) form: a JSON object with a `status` of `status`, for
    run.json a `run_id` that is its folder's name, and for a complete one `files` naming each of `files` with
    its size (an integer) and sha256 (64 hex digits); [] when well-formed. `files` may be absent (written before
    hashes were recorded: checked by reading, check_run)."""
    if not isinstance(meta, dict):
        return [f"{path}: not a JSON object but {type(meta).__name__}"]
    out = []
    if meta.get("status") not in status:
        out.append(f"{path}: status {meta.get('status')!r}, expected one of {list(status)}")
    if path.name == "run.json" and meta.get("status") == "complete" and meta.get("run_id") != path.parent.name:
        out.append(f"{path}: run_id {meta.get('run_id')!r}, expected its folder's name {path.parent.name!r}")
    if path.name == "run.json" and meta.get("backend") == "verl":  # its heldout.parquet is another rule's
        files = tuple(n for n in files if n != "heldout.parquet")
    if meta.get("status") == "complete" and "files" in meta:
        rec = meta["files"]
        if not isinstance(rec, dict):
            return out + [f"{path}: files is {type(rec).__name__}, expected a mapping of file name to size and sha256"]
        out += [f"{path}: files records no {n}" for n in files if n not in rec]
        out += [f"{path}: files[{n!r}] is {v!r}, expected {{'size': <bytes>, 'sha256': <64 hex digits>}}"
                for n, v in rec.items() if not (isinstance(v, dict) and isinstance(v.get("size"), int)
                                                and not isinstance(v.get("size"), bool) and _is_sha(v.get("sha256")))]
    for k in ("spec_sha256", "row_hash"):
        if k in meta and not _is_sha(meta[k]):
            out.append(f"{path}: {k} is {meta[k]!r}, expected 64 hex digits")
    return out


def spec_problems(meta: dict, spec, path: Path) -> list[str]:
    """Whether a complete run (or base models) was computed from `spec` (an opd.spec JobSpec): its record's
    `spec_sha256` against the spec's sha256. A run.json written before spec hashes were recorded is compared
    field by field where it can be (its row_hash, settings, student and seed; a base.json its student's spec)."""
    if spec is None:
        return []
    want = spec.sha256()
    if "spec_sha256" in meta:
        if meta["spec_sha256"] == want:
            return []
        return [f"{path}: computed from another spec (sha256 {meta['spec_sha256'][:12]}...) than the job's spec now "
                f"({want[:12]}...): the config changed since it ran"]
    from opd.provenance import sha256_text
    from opd.spec import dumps
    if path.name == "base.json":
        same = {"spec": meta.get("spec"), "student": meta.get("student")} == {
            "spec": spec.student_spec.written(), "student": spec.student}
    elif "row_hash" in meta:
        same = (meta["row_hash"] == sha256_text(dumps(spec.row.params())) and meta.get("settings") == spec.settings.written()
                and meta.get("student") == spec.student and meta.get("seed") == spec.seed)
    else:
        return [f"{path}: records neither spec_sha256 nor row_hash, so nothing says which spec it was computed from"]
    return [] if same else [f"{path}: its recorded row, settings or student differ from the job's spec now: the config "
                            f"changed since it ran"]


def check_run(run_dir, verified: dict, hash_all: bool = False, files=RUN_FILES,
              meta_name: str = "run.json", absent_ok=()) -> list[str] | None:
    """The problems of a complete run's files ([] when sound), or None when the run is not complete (no
    run.json, or a well-formed one with `"status": "running"`: a killed or running job, which the DAG reruns).

    A run.json that is not well-formed (record_problems) is a problem (whether it was computed from its job's spec
    now is inspect's question: spec_problems). With hashes in run.json: sizes are
    compared every time, a file is hashed when its size or mtime differs from what `verified` (this checkout's
    record of files already hashed) remembers, or always with hash_all. Without them (a run.json written before
    hashes were recorded): each file must be a readable Parquet file of the contract the first time it is
    seen, and its hash is then remembered in `verified` against that run.json, so a later change to the file is
    caught like any other. `files` and `meta_name`: base models' (base.json: student.pt, teacher.pt) the same way.
    `absent_ok`: files that may be missing where the record pins their sha256 (a base model's weights, which an
    experiment may leave uncommitted: inspect calls such a folder `pinned`)."""
    run_dir = Path(run_dir)
    meta_path = run_dir / meta_name
    if not meta_path.exists():
        return None
    raw = meta_path.read_bytes()
    try:
        meta = json.loads(raw)
    except ValueError as e:
        return [f"{meta_path}: not readable JSON ({e})"]
    if meta_name == "base.json" and isinstance(meta, dict):
        meta = {"status": "complete", **meta}  # a base.json is written once its models are
    problems = record_problems(meta, meta_path, files=files, status=("running", "complete") if meta_name == "run.json"
                               else ("complete",))
    if problems:
        return problems
    if meta["status"] != "complete":
        return None
    meta_sha = hashlib.sha256(raw).hexdigest()
    recorded = meta.get("files")
    for name in (recorded or {n: None for n in files}):
        path = run_dir / name
        key = str(path)
        try:
            st = path.stat()
        except FileNotFoundError:
            if name in absent_ok and recorded:
                continue
            problems.append(f"{path}: missing, though {meta_name} says {'the run is' if meta_name == 'run.json' else 'it is'} complete")
            continue
        want = (recorded or {}).get(name)
        seen = verified.get(key)
        if seen and want is None and seen.get("run_json") != meta_sha:
            seen = None  # a different run.json (a rerun, a pull): verify from scratch
        if want is not None and st.st_size != want["size"]:
            problems.append(f"{path}: {st.st_size} bytes, {meta_name} records {want['size']}")
            continue
        expected = want["sha256"] if want is not None else (seen or {}).get("sha256")
        if (not hash_all and seen and expected and seen["sha256"] == expected
                and (seen["size"], seen["mtime_ns"]) == (st.st_size, st.st_mtime_ns)):
            continue
        if expected is None and name.endswith(".parquet"):  # first sight of a file without a recorded hash
            why = parquet_problem(path) or (foreign_rows(path, run_dir.name) if meta_name == "run.json" else None)
            if why:
                problems.append(why)
                continue
        digest = sha256_file(path)
        if expected is not None and digest != expected:
            problems.append(f"{path}: content changed (sha256 {digest[:12]}..., "
                            f"{meta_name + ' records' if want else 'verified earlier as'} {expected[:12]}...)")
            continue
        verified[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest,
                         **({} if want else {"run_json": meta_sha})}
    return problems


BASE_FILES = ("student.pt", "teacher.pt")  # a tiny student's base models (base.json records them)
# the converged recipe's SFT curves beside them (opd.backends.tiny.sft.train_converged; base.json records them too)
BASE_CURVES = "curves.parquet"


class WeightsDiffer(RuntimeError):
    """Base models retrained where base.json pins other weights (check_pinned)."""


def pinned_weights(d, spec) -> dict[str, str]:
    """{weight file: sha256} that base-model folder `d`'s base.json pins, read before the base-model job retrains
    it (rule base_models keeps base.json while it runs: its output is flagged `update`), where the base.json is of
    `spec` (its spec_sha256) and records them; {} where there is none (new base models; a stale or damaged folder,
    which the job's first step moved aside)."""
    try:
        meta = read_json(Path(d) / "base.json")
    except (OSError, ValueError):
        return {}
    if (not isinstance(meta, dict) or meta.get("spec_sha256") != spec.sha256()
            or not isinstance(meta.get("files"), dict)):
        return {}
    return {n: v["sha256"] for n, v in meta["files"].items()
            if n in BASE_FILES and isinstance(v, dict) and _is_sha(v.get("sha256"))}


def check_pinned(d, spec, pinned: dict[str, str]) -> None:
    """The weights just retrained in base-model folder `d` against the sha256 its base.json pinned (pinned_weights):
    where one differs, every retrained weight file is removed (base.json stays as it was) and WeightsDiffer says
    which experiment, student and draw, and both hashes. The runs and measurements already computed from this base
    model read the pinned weights: going on from other ones would mix results of two base models under one spec
    (torch on another kind of CPU, or another torch, can give other bits)."""
    d = Path(d)
    got = {n: sha256_file(d / n) for n in pinned if (d / n).exists()}
    differ = {n: (want, got.get(n)) for n, want in pinned.items() if got.get(n) != want}
    if not differ:
        return
    for n in BASE_FILES:
        (d / n).unlink(missing_ok=True)
    files = "; ".join(f"{n}: sha256 {have or 'not written'} retrained here, {want} pinned"
                      for n, (want, have) in differ.items())
    raise WeightsDiffer(
        f"experiment {spec.experiment!r}, student {spec.student!r}, base-model draw {spec.draw} ({d}): the retrained "
        f"weights differ from the ones {d / 'base.json'} pins ({files}). The runs and measurements already computed "
        f"from this base model were trained from the pinned weights, so nothing is computed from these (they are "
        f"removed; base.json is kept). Retrain where the pinned weights were made (the same kind of CPU and torch "
        f"build), or copy those weights into {d}/: {history_hint(d)}. (Starting this base model over means computing "
        f"again every run and measurement computed from it.)")


def history_hint(d) -> str:
    """How to take base-model folder `d`'s weights from git's history, where a commit held them before they stopped
    being committed (the toy's: docs/architecture.md): the parent of the last commit that touched them has them."""
    files = " ".join(f"{Path(d) / n}" for n in BASE_FILES)
    return (f"where an earlier commit held them, `git restore --source=$(git rev-list -1 HEAD -- "
            f"{Path(d) / BASE_FILES[0]})~1 -- {files}` restores them from this clone's history (into the working tree only)")


def quarantine(run_dir, dest_root, names=("run.json", *ALL_RUN_FILES)) -> Path:
    """Move a run's run.json and its files (ALL_RUN_FILES: the train rules' outputs) to
    dest_root/<run_id>/<UTC time>/; anything else in the folder (a checkpoint, Slurm logs) stays."""
    run_dir = Path(run_dir)
    dest = Path(dest_root) / run_dir.name / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    _move(run_dir, dest, names)
    return dest


def another_invocation(workdir=".") -> bool:
    """Whether another snakemake runs in this working directory: it holds Snakemake's locks
    (.snakemake/locks/). Read before this call takes any lock of its own (a dry
    run takes none); a lock left by a killed snakemake counts too until `snakemake --unlock`. While another one
    runs, `check-runs` moves nothing its jobs read."""
    locks = Path(workdir) / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


# ---------------------------------------------------------------- what a folder holds, read only

def ledger_path(experiment: str) -> Path:
    """This checkout's record of the files of an experiment already hashed (size, mtime, sha256): a file is hashed
    again only when its size or mtime changed. Under .snakemake/, never a result."""
    return Path(f".snakemake/opd/verified-{experiment}.json")


def read_ledger(ledger) -> dict:
    try:
        verified = read_json(ledger)
    except (OSError, ValueError):
        return {}
    return verified if isinstance(verified, dict) else {}


def write_ledger(ledger, verified: dict, before: str | None = None) -> None:
    """Write the ledger back if it changed since `before` (its JSON when read); a read-only checkout keeps none."""
    if before is not None and json.dumps(verified, sort_keys=True) == before:
        return
    try:
        write_json(verified, ledger)
    except OSError:
        pass


class Found(NamedTuple):
    """What a run folder (or a base-model folder) holds against its job's spec now: `state` is one of
    `current` (complete, sound, computed from the spec), `pinned` (base models only: base.json is sound and of the
    spec, but weights it records are absent, as where an experiment does not commit them: the first job that must
    run and reads them has rule base_models retrain them, which checks them against base.json's sha256), `stale`
    (complete and sound, computed from another spec: set aside, never deleted), `damaged` (its files differ from its
    record, or the record is malformed: quarantined), `incomplete` (a record that is not complete: a killed or
    running job) or `missing`; with the reasons (`problems`) and `sha`, the spec sha256 a stale one was computed
    from."""
    state: str
    problems: tuple[str, ...] = ()
    sha: str | None = None

    @property
    def reruns(self) -> bool:
        """Whether its job must run: a pinned folder's only when a job that runs reads its weights."""
        return self.state not in ("current", "pinned")


def inspect(d, verified: dict, spec=None, hash_all: bool = False, meta_name: str = "run.json",
            files=RUN_FILES) -> Found:
    """What folder `d` holds (Found), reading only (`verified`, this checkout's ledger of hashed files, is
    updated in memory): check_run's verdict split into stale (only its spec differs) and damaged."""
    d = Path(d)
    if not (d / meta_name).exists():
        return Found("incomplete" if d.is_dir() and any((d / n).exists() for n in ALL_RUN_FILES + BASE_FILES)
                     else "missing")
    weights = BASE_FILES if meta_name == "base.json" else ()
    problems = check_run(d, verified, hash_all, files=files, meta_name=meta_name, absent_ok=weights)
    if problems is None:
        return Found("incomplete", (f"{d}: incomplete (its job was killed or is running)",))
    if problems:
        return Found("damaged", tuple(problems))
    meta = read_json(d / meta_name)
    stale = spec_problems(meta, spec, d / meta_name)
    if stale:
        return Found("stale", tuple(stale), meta.get("spec_sha256"))
    absent = [n for n in weights if not (d / n).exists()]
    if absent:
        return Found("pinned", (f"{d}: {', '.join(absent)} absent (base.json pins their sha256)",),
                     meta.get("spec_sha256"))
    return Found("current", sha=meta.get("spec_sha256"))


def inspect_all(out_dir, run_ids, ledger, specs: dict | None = None, base_specs: dict | None = None,
                hash_all: bool = False) -> dict[str, Found]:
    """Found for every run of `run_ids` under out_dir/runs/ (against `specs`, {run_id: TrainSpec}) and, with
    `base_specs` ({folder: BaseSpec}), every base-model folder under out_dir/_models/ (keyed `base models of
    <folder>`), reading only: nothing under results/ is moved or written. `ledger` (this checkout's record of
    files already hashed, under .snakemake/) is rewritten when it changes, so a file is hashed again only when its
    size or mtime changed. This is the DAG's check (workflow/rules/common.smk): what it finds, a job's own first
    step acts on (prepare)."""
    out_dir, ledger = Path(out_dir), Path(ledger)
    verified = read_ledger(ledger)
    before = json.dumps(verified, sort_keys=True)
    found = {r: inspect(out_dir / "runs" / r, verified, (specs or {}).get(r), hash_all) for r in run_ids}
    found.update({f"base models of {s}": inspect(out_dir / "_models" / s, verified, spec, hash_all, "base.json",
                                                 BASE_FILES) for s, spec in (base_specs or {}).items()})
    write_ledger(ledger, verified, before)
    return found


def _some(keys, n=3) -> str:
    """A few of `keys` by name, and how many more."""
    keys = sorted(keys)
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")


def say_found(found: dict, out_dir, specs: dict, base_specs: dict, log=None) -> None:
    """What the DAG's check found (inspect_all), in a few lines on stderr: each damaged folder by name with why; the
    stale and the incomplete ones counted, a few named; and how many of the stale and missing ones the set-aside
    store holds for their spec now (restored by their job instead of computed). Nothing when all is current. Said
    the same by a dry run, which acts on none of it."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    by: dict[str, list[str]] = {}
    for k, f in found.items():
        by.setdefault(f.state, []).append(k)
    for k in sorted(by.get("damaged", [])):
        log(f"opd: {k if k.startswith('base models of ') else 'run ' + k} is damaged: " + "; ".join(found[k].problems)
            + f". Its job quarantines it ({out_dir}/_quarantine/) and reruns it.")
    stale = by.get("stale", [])
    if stale:
        log(f"opd: {len(stale)} run(s) or base models were computed from another spec than the config asks for now "
            f"({_some(stale)}): their jobs set them aside in {set_aside_root(out_dir)}/ (kept, never deleted: "
            f"`python -m opd.cli set-aside` lists them) and rerun them")
    incomplete = by.get("incomplete", [])
    if incomplete:
        log(f"opd: {len(incomplete)} run(s) are incomplete (killed, or running elsewhere): {_some(incomplete)}; their "
            f"jobs resume them from their checkpoint where they have one")
    back = [k for k in (*stale, *by.get("missing", []))
            if set_aside_root(out_dir).is_dir() and (
                kept(out_dir, k.removeprefix("base models of "), base_specs[k.removeprefix("base models of ")],
                     "base.json") if k.startswith("base models of ") else kept(out_dir, k, specs[k]))]
    if back:
        log(f"opd: {len(back)} of them are kept in {set_aside_root(out_dir)}/ for the spec asked for now: their jobs "
            f"restore them instead of computing them again ({_some(back)})")


def unreadable(paths, ledger) -> dict[str, str]:
    """{path: why} for each existing Parquet file of `paths` that does not read in full (a measurement's output:
    truncated, overwritten, not Parquet), read again only where its size or mtime changed since this checkout read
    it whole (the ledger)."""
    verified = read_ledger(ledger)
    before = json.dumps(verified, sort_keys=True)
    out = {}
    for p in paths:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        seen = verified.get(str(p))
        if seen and (seen.get("size"), seen.get("mtime_ns")) == (st.st_size, st.st_mtime_ns) and seen.get("reads"):
            continue
        why = parquet_problem(p)
        if why:
            out[str(p)] = why
            verified.pop(str(p), None)
        else:
            verified[str(p)] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "reads": True}
    write_ledger(ledger, verified, before)
    return out


# ---------------------------------------------------------------- the set-aside store: nothing computed is lost

SET_ASIDE = "_set_aside"  # results/<experiment>/_set_aside/<folder>/<spec sha256>/: runs kept for their spec


def set_aside_root(out_dir) -> Path:
    return Path(out_dir) / SET_ASIDE


def set_aside_dir(out_dir, folder: str, sha: str, models: bool = False) -> Path:
    """Where a complete run (or base models: `models`) computed from the spec with sha256 `sha` is kept once its
    folder is asked for another spec."""
    return set_aside_root(out_dir) / ("_models" if models else "") / folder / sha


def _meta_of(meta_name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every file the folder's record may list, the files it must list) for run.json or base.json."""
    return ((ALL_RUN_FILES, RUN_FILES) if meta_name == "run.json" else ((*BASE_FILES, BASE_CURVES), BASE_FILES))


def prepare(d, spec, out_dir, meta_name: str = "run.json", log=None, verified: dict | None = None
            ) -> tuple[Found, Path | None]:
    """A compute job's first step on its folder `d` (a run, or a student's base models), acting on what inspect
    finds (every file hashed, and against `verified`, the ledger, for records without hashes). A sound result, stale
    or current, is set aside under out_dir/_set_aside/ keyed by the spec it was computed from, with everything in its
    folder (never deleted: its job, or a later config that asks for that spec again, gets it back: restore; a current
    one is set aside because Snakemake deletes a job's outputs before it runs it); a damaged one is quarantined
    (out_dir/_quarantine/<folder>/<UTC time>/, logged in _quarantine/log.json); an incomplete one's outputs written
    before its record are quarantined (its checkpoint stays, and the job resumes from it). Returns what it found and
    where it went (None: nowhere)."""
    d, out_dir = Path(d), Path(out_dir)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    names, files = _meta_of(meta_name)
    models = meta_name == "base.json"
    verified = read_ledger(ledger_path(out_dir.name)) if verified is None else verified
    found = inspect(d, verified, spec, hash_all=True, meta_name=meta_name, files=files)
    what = f"{'base models of ' if models else 'run '}{d.name}"
    dest = None
    if found.state in ("stale", "current") and found.sha:
        dest = set_aside_dir(out_dir, d.name, found.sha, models)
        if dest.exists():  # a copy of the same spec's result kept earlier: this one replaces it
            shutil.rmtree(dest)
        _move(d, dest)
        log(f"opd: {what} " + (f"was computed from another spec ({found.sha[:12]}...): set aside in {dest}/ "
                               f"(`python -m opd.cli set-aside` lists it; a config asking for that spec again gets "
                               f"it back)" if found.state == "stale" else
                               f"is current: set aside in {dest}/ while its job runs, which restores it"))
    elif found.state in ("damaged", "stale"):  # stale without a spec sha (an old record): nothing to key it by
        dest = quarantine(d, out_dir / "_quarantine" / ("_models" if models else ""), (meta_name, *names))
        _log_quarantine(out_dir, d.name, found.problems, dest)
        log(f"opd: {what} {'are' if models else 'is'} {found.state}: " + "; ".join(found.problems)
            + f". {'Their' if models else 'Its'} files are moved to {dest}/.")
    elif found.state == "incomplete":
        left = [n for n in names if (d / n).exists()]
        if left:
            dest = quarantine(d, out_dir / "_quarantine" / ("_models" if models else ""), left)
            _log_quarantine(out_dir, d.name, [f"{d}: incomplete: its outputs written before it was killed"], dest)
    return found, dest


def _move(d: Path, dest: Path, names=None) -> None:
    """Move `names` (default: everything) from folder `d` into the new folder `dest`."""
    dest.mkdir(parents=True, exist_ok=False)
    for name in (os.listdir(d) if names is None else names):
        if (d / name).exists():
            os.replace(d / name, dest / name)


def _log_quarantine(out_dir: Path, name: str, problems, dest: Path) -> None:
    """Append a quarantine to the experiment's log, under a lock: jobs that quarantine run side by side."""
    import fcntl
    record = quarantine_log(out_dir)
    lock_path = Path(".snakemake") / "opd" / f"quarantine-{Path(out_dir).name}.lock"  # beside this checkout's ledger
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            old = read_json(record)
        except (OSError, ValueError):
            old = []
        write_json((old if isinstance(old, list) else []) + [{"time": dest.name, "run_id": name,
                                                               "problems": list(problems), "moved_to": str(dest)}],
                   record)


def kept(out_dir, folder: str, spec, meta_name: str = "run.json") -> Path | None:
    """A sound copy of `folder` computed from `spec` in the set-aside store (every file hashed), or None."""
    root = set_aside_dir(out_dir, folder, "", meta_name == "base.json")
    sha = spec.sha256()
    d = root / sha
    return d if d.is_dir() and _sound(d, sha, meta_name) else None


def _sound(d: Path, sha: str, meta_name: str) -> bool:
    """Whether a set-aside folder's record says complete, names spec `sha` and every file its record lists
    matches its size and sha256 (its record names the folder it was computed in, not the store's)."""
    try:
        meta = read_json(d / meta_name)
    except (OSError, ValueError):
        return False
    _, files = _meta_of(meta_name)
    if not isinstance(meta, dict) or meta.get("spec_sha256") != sha or (
            meta_name == "run.json" and meta.get("status") != "complete"):
        return False
    rec = meta.get("files")
    if meta.get("backend") == "verl":  # its heldout.parquet is another rule's (record_problems)
        files = tuple(n for n in files if n != "heldout.parquet")
    return isinstance(rec, dict) and all(n in rec for n in files) and all(
        isinstance(v, dict) and (d / n).exists() and (d / n).stat().st_size == v.get("size")
        and sha256_file(d / n) == v.get("sha256") for n, v in rec.items())


def restore(d, spec, out_dir, meta_name: str = "run.json", log=None) -> bool:
    """Move a sound set-aside copy of folder `d` computed from `spec` back into `d` (kept), with everything it holds,
    so the job has nothing to compute; False when the store has none."""
    d = Path(d)
    src = kept(out_dir, d.name, spec, meta_name)
    if src is None:
        return False
    names, _ = _meta_of(meta_name)
    d.mkdir(parents=True, exist_ok=True)
    for n in (meta_name, *names, CHECKPOINT, ATTEMPTS):  # what a run computed now would leave (Snakemake removes
        (d / n).unlink(missing_ok=True)                 # the outputs before a job; a killed attempt's remains)
    for n in sorted(os.listdir(src)):  # the record last: the folder is complete only once every file is in place
        if n != meta_name:
            if (d / n).is_dir():
                shutil.rmtree(d / n)
            os.replace(src / n, d / n)
    os.replace(src / meta_name, d / meta_name)
    for n in (*names, meta_name):  # newer than the spec file written before the job: current by Snakemake's times too
        if (d / n).exists():
            os.utime(d / n)
    shutil.rmtree(src, ignore_errors=True)
    (log or (lambda m: print(m, file=sys.stderr, flush=True)))(
        f"opd: {'base models of ' if meta_name == 'base.json' else 'run '}{d.name}: restored from {src}/ (computed "
        f"from this spec before; nothing to compute)")
    return True


def set_aside_entries(out_dir) -> list[dict]:
    """Every folder in the set-aside store: {folder, kind (run or base models), sha (the spec it was computed
    from), path, bytes, time (when set aside: its record's mtime)}, sorted by folder then time."""
    root = set_aside_root(out_dir)
    out = []
    for meta in sorted(root.glob("*/*/run.json")) + sorted(root.glob("_models/*/*/base.json")):
        d = meta.parent
        if d.parent.parent.name == "_models" and meta.name == "run.json":
            continue
        out.append({"folder": d.parent.name, "kind": "base models" if meta.name == "base.json" else "run",
                    "sha": d.name.split(".")[0], "path": str(d),
                    "bytes": sum(f.stat().st_size for f in d.iterdir() if f.is_file()),
                    "time": datetime.fromtimestamp(d.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")})
    return out


def prune_set_aside(out_dir, keep_shas: set[str]) -> list[dict]:
    """Delete every set-aside folder whose spec sha256 is not in `keep_shas`; returns what was deleted."""
    gone = [e for e in set_aside_entries(out_dir) if e["sha"] not in keep_shas]
    for e in gone:
        shutil.rmtree(e["path"])
    return gone


PENDING = "_pending"  # older ledgers' key (the runs a checkout had named incomplete); ignored


def heal_runs(out_dir, run_ids, ledger, hash_all: bool = False, log=None, specs: dict | None = None,
              base_specs: dict | None = None) -> dict:
    """The explicit check (`python -m opd.cli check-runs`, never the DAG's parse): inspect every run of `run_ids`
    and, with `base_specs`, every base-model folder (inspect_all), then act as a job's first step would (prepare):
    a damaged one is named on stderr and quarantined, a stale one set aside under its spec. While another
    snakemake runs in this folder nothing is moved. A folder that cannot be written (read-only results) is named
    and left as it is. Returns {what: (problems, where it went or None)} for the damaged and stale ones."""
    out_dir = Path(out_dir)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    found = inspect_all(out_dir, run_ids, ledger, specs, base_specs, hash_all)
    verified = read_ledger(ledger)
    busy = another_invocation(out_dir.parent.parent)  # out_dir: results/<experiment> under the working directory
    out = {}
    for what, f in found.items():
        if f.state not in ("damaged", "stale"):
            continue
        base = what.startswith("base models of ")
        folder = what.removeprefix("base models of ")
        d = out_dir / ("_models" if base else "runs") / folder
        label = what if base else f"run {what}"
        if busy:
            out[what] = (list(f.problems), None)
            log(f"opd: {label} {'are' if base else 'is'} {f.state}: " + "; ".join(f.problems) + ". Another snakemake "
                "is running in this folder (.snakemake/locks/), so nothing is moved: rerun once it is done (after a "
                "killed snakemake: `snakemake --unlock -c 1` first).")
            continue
        spec = (base_specs or {}).get(folder) if base else (specs or {}).get(folder)
        try:
            _, dest = prepare(d, spec, out_dir, "base.json" if base else "run.json", log=log, verified=verified)
        except OSError as e:
            out[what] = (list(f.problems), None)
            log(f"opd: {label} {'are' if base else 'is'} {f.state}: " + "; ".join(f.problems)
                + f". It cannot be moved aside ({e.strerror}: {e.filename}), so it is left as it is: make "
                f"{out_dir} writable and rerun; jobs that read it fail, the others run.")
            continue
        for name in (*BASE_FILES, BASE_CURVES, *ALL_RUN_FILES):
            verified.pop(str(d / name), None)
        out[what] = (list(f.problems), dest)
    write_ledger(ledger, verified)
    return out


def record_legacy(out_dir, run_ids, specs: dict | None = None, base_specs: dict | None = None) -> list[str]:
    """Write `files` (sizes and sha256) into each complete run.json of run_ids that has none (written before
    hashes were recorded), once each of its files reads in full against the Parquet contract; and, with `specs`
    ({run_id: TrainSpec}), `spec_sha256` into each complete run.json that has none, once its recorded row_hash,
    settings, student and seed agree with the spec (spec_problems); with `base_specs` ({folder: BaseSpec}), the
    same into each base-model folder's base.json (its files: student.pt and teacher.pt, once their spec agrees with
    base.json's). Returns what was recorded (run ids, `base models of <student>`). Committed, the hashes protect
    those runs in every clone from the first check on."""
    recorded = []
    checks = [(r, Path(out_dir) / "runs" / r, "run.json", RUN_FILES, (specs or {}).get(r)) for r in run_ids]
    checks += [(f"base models of {s}", Path(out_dir) / "_models" / s, "base.json", BASE_FILES, spec)
               for s, spec in (base_specs or {}).items()]
    for what, d, meta_name, files, spec in checks:
        try:
            meta = read_json(d / meta_name)
        except (OSError, ValueError):
            continue
        full = {"status": "complete", **meta} if meta_name == "base.json" and isinstance(meta, dict) else meta
        if record_problems(full, d / meta_name, files=files) or full.get("status") != "complete":
            continue
        new = dict(meta)
        if "files" not in meta:
            if any(not (d / n).exists() or (n.endswith(".parquet") and parquet_problem(d / n)) for n in files):
                continue  # the check reruns such a run
            new["files"] = file_records(d) if meta_name == "run.json" else {
                n: {"size": (d / n).stat().st_size, "sha256": sha256_file(d / n)} for n in files}
        if spec is not None and "spec_sha256" not in meta and not spec_problems(meta, spec, d / meta_name):
            new["spec_sha256"] = spec.sha256()
        if new != meta:
            write_json(new, d / meta_name)
            recorded.append(what)
    return recorded


def rewrite_tables(out_dir) -> tuple[int, int, int]:
    """Every Parquet file under `out_dir` (an experiment's results, _set_aside/ and _quarantine/ left alone) written
    again with the store's options (files.rewrite_table, lossless), and the sizes and sha256 that a run.json or
    base.json beside it records for it written anew; call it after a full check (heal_runs with hash_all), so only
    sound files are re-recorded. A derived table's record of its inputs then no longer matches: the next
    `snakemake` remakes the analysis (the same numbers). Returns (files, bytes before, bytes after)."""
    out_dir = Path(out_dir)
    n = before = after = 0
    for path in sorted(out_dir.rglob("*.parquet")):
        if path.relative_to(out_dir).parts[0] in (SET_ASIDE, "_quarantine"):
            continue
        b, a = rewrite_table(path)
        n, before, after = n + 1, before + b, after + a
        for meta_name in ("run.json", "base.json"):
            meta_path = path.parent / meta_name
            meta = read_json(meta_path) if meta_path.exists() else {}
            if path.name in (meta.get("files") or {}):
                files = {**meta["files"], path.name: {"size": a, "sha256": sha256_file(path)}}
                write_json({**meta, "files": files}, meta_path)
    return n, before, after


def missing_weights(paths, experiment: str) -> str | None:
    """Why base-model weights cannot be read: those of `paths` that are missing (an experiment may leave them
    uncommitted: its base.json pins them), with the command that retrains them and checks them against their
    base.json; None where every one is there."""
    missing = [str(f) for f in paths if f and not Path(f).exists()]
    if not missing:
        return None
    return (f"the base-model weights it reads are missing ({', '.join(missing)}; not committed?). Make them first: "
            f"`snakemake -c 1 {' '.join(missing)} --config experiment={experiment}` retrains them and checks them "
            f"against their base.json; {history_hint(Path(missing[0]).parent)}")


def require_weights(base_dir, experiment: str, who: str) -> None:
    """Stop (SystemExit, naming `who`) with the command that retrains them where the base models in `base_dir` have
    no weights in this checkout (an experiment that does not commit them: its base.json pins them)."""
    why = missing_weights([Path(base_dir) / n for n in BASE_FILES], experiment)
    if why:
        raise SystemExit(f"{who}: {why}")


def quarantine_log(out_dir) -> Path:
    """Every quarantine of the experiment (what, why, where it went), newest last."""
    return Path(out_dir) / "_quarantine" / "log.json"
