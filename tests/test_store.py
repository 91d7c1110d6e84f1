"""The run store: atomic writes, checked reads, what counts as complete, and the self-checking cache."""
import dataclasses
import errno
import os
import re
import subprocess

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opd import provenance, store


def steps_frame(n=3, schema=store.STEPS):
    cols = {f.name: ([0.5] * n if pa.types.is_floating(f.type) else [1] * n) for f in schema}
    cols.update(run_id=["r"] * n, config=["c"] * n, student=["s"] * n, step=list(range(n)))
    return pd.DataFrame(cols)


def test_round_trip_and_no_temporary_files_left(tmp_path):
    store.write_table(steps_frame(), tmp_path / "steps.parquet", store.STEPS)
    assert store.read_table(tmp_path / "steps.parquet")["step"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["steps.parquet"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=40),
       st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=40))
def test_tables_are_written_small_and_read_back_bit_for_bit(tmp_path_factory, xs, ys):
    """The committed results are written byte-stream split without statistics (opd.store.parquet_options): every
    float, -0.0 and infinities included, reads back with the same bits (a NaN as NaN), and the columns carry the encoding."""
    path = tmp_path_factory.mktemp("t") / "t.parquet"
    n = min(len(xs), len(ys))
    df = pd.DataFrame({"x": np.array(xs[:n], dtype=np.float64), "y": np.array(ys[:n], dtype=np.float32),
                       "run_id": ["r"] * n, "step": np.arange(n)})
    store.write_table(df, path)
    back = store.read_table(path)
    for c in ("x", "y"):  # every bit, but a NaN's (pandas writes NaN as null: it reads back as NaN)
        a, b = back[c].to_numpy(), df[c].to_numpy()
        assert a.dtype == b.dtype and (np.isnan(a) == np.isnan(b)).all()
        assert a[~np.isnan(a)].tobytes() == b[~np.isnan(b)].tobytes()
    assert back["step"].tolist() == list(range(n)) and back["run_id"].tolist() == ["r"] * n
    meta = pq.ParquetFile(path).metadata.row_group(0)
    columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert "BYTE_STREAM_SPLIT" in columns["x"].encodings and columns["x"].compression == "ZSTD"
    assert not columns["x"].is_stats_set


def test_reader_names_the_file_and_the_bad_columns(tmp_path):
    bad = steps_frame().drop(columns=["d_n"]).assign(n_tokens=["x", "y", "z"])
    path = tmp_path / "steps.parquet"
    store.write_table(bad, path)  # written without the contract
    with pytest.raises(store.SchemaError) as e:
        store.read_table(path)
    assert str(path) in str(e.value) and "d_n missing" in str(e.value) and "n_tokens is large_string, expected int64" in str(e.value)


def test_writer_refuses_a_frame_missing_contract_columns(tmp_path):
    with pytest.raises(store.SchemaError, match="missing columns \\['d_n'\\]"):
        store.write_table(steps_frame().drop(columns=["d_n"]), tmp_path / "steps.parquet", store.STEPS)
    assert not list(tmp_path.iterdir())


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    def boom(tmp):
        open(tmp, "w").write("half")
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError):
        store.atomic_write(tmp_path / "x.json", boom)
    assert not list(tmp_path.iterdir())


def test_run_is_complete_only_when_run_json_says_so(tmp_path):
    assert not store.is_complete(tmp_path)
    store.write_json({"status": "running"}, tmp_path / "run.json")
    assert not store.is_complete(tmp_path)
    store.write_json({"status": "complete"}, tmp_path / "run.json")
    assert store.is_complete(tmp_path)


# ---------------------------------------------------------------- the self-checking cache

def complete_run(runs, run_id="a.s.s0", hashes=True):
    d = runs / run_id
    store.write_table(steps_frame(20).assign(run_id=run_id), d / "steps.parquet", store.STEPS)
    store.write_table(steps_frame(7, store.HELDOUT).assign(run_id=run_id), d / "heldout.parquet", store.HELDOUT)
    meta = {"run_id": run_id, "status": "complete"}
    if hashes:
        meta["files"] = store.file_records(d)
    store.write_json(meta, d / "run.json")
    return d


def flip_byte(path, offset):
    b = bytearray(path.read_bytes())
    b[offset] ^= 0xFF
    path.write_bytes(bytes(b))


def test_run_json_records_size_and_hash_and_a_sound_run_is_left_alone(tmp_path):
    d = complete_run(tmp_path / "runs")
    meta = store.read_json(d / "run.json")
    assert meta["files"]["steps.parquet"] == {"size": (d / "steps.parquet").stat().st_size,
                                              "sha256": provenance.sha256_file(d / "steps.parquet")}
    ledger = tmp_path / "verified.json"
    assert store.heal_runs(tmp_path, ["a.s.s0"], ledger) == {}
    assert set(store.read_json(ledger)) == {str(d / "steps.parquet"), str(d / "heldout.parquet")}
    assert sorted(p.name for p in d.iterdir()) == ["heldout.parquet", "run.json", "steps.parquet"]


def test_a_truncated_file_moves_the_run_aside_by_name(tmp_path):
    d = complete_run(tmp_path / "runs")
    ledger, said = tmp_path / "verified.json", []
    store.heal_runs(tmp_path, ["a.s.s0"], ledger)
    with open(d / "steps.parquet", "r+b") as f:
        f.truncate(100)
    damaged = store.heal_runs(tmp_path, ["a.s.s0"], ledger, log=said.append)
    problems, dest = damaged["a.s.s0"]
    assert problems == [f"{d / 'steps.parquet'}: 100 bytes, run.json records {store.read_json(dest / 'run.json')['files']['steps.parquet']['size']}"]
    assert dest.parent == tmp_path / "_quarantine" / "a.s.s0"
    assert sorted(p.name for p in dest.iterdir()) == ["heldout.parquet", "run.json", "steps.parquet"]
    assert not any(d.iterdir())  # nothing left for Snakemake to take as done
    assert "run a.s.s0 is damaged" in said[0] and str(dest) in said[0]


def test_bytes_changed_in_place_are_caught_by_the_hash(tmp_path):
    d = complete_run(tmp_path / "runs")
    ledger = tmp_path / "verified.json"
    store.heal_runs(tmp_path, ["a.s.s0"], ledger)
    p = d / "heldout.parquet"
    st = p.stat()
    flip_byte(p, st.st_size // 2)  # same size, still PAR1 at both ends
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # bit rot: the mtime does not move
    assert store.heal_runs(tmp_path, ["a.s.s0"], ledger) == {}  # sizes and mtimes only, as documented
    damaged = store.heal_runs(tmp_path, ["a.s.s0"], ledger, hash_all=True)  # on request: every file hashed
    assert "content changed" in damaged["a.s.s0"][0][0]
    d2 = complete_run(tmp_path / "runs", "b.s.s0")
    store.heal_runs(tmp_path, ["b.s.s0"], ledger)
    flip_byte(d2 / "heldout.parquet", 200)  # an ordinary write: the mtime moves, so it is hashed
    assert "content changed" in store.heal_runs(tmp_path, ["b.s.s0"], ledger)["b.s.s0"][0][0]


def test_a_run_json_without_hashes_is_checked_by_reading_then_by_the_hash_it_had(tmp_path):
    d = complete_run(tmp_path / "runs", hashes=False)
    t = complete_run(tmp_path / "runs", "t.s.s0", hashes=False)
    with open(t / "heldout.parquet", "r+b") as f:  # damaged before it was ever checked
        f.truncate(300)
    ledger = tmp_path / "verified.json"
    damaged = store.heal_runs(tmp_path, ["a.s.s0", "t.s.s0"], ledger)
    assert list(damaged) == ["t.s.s0"] and "no PAR1 magic bytes" in damaged["t.s.s0"][0][0]
    assert store.read_json(d / "run.json") == {"run_id": "a.s.s0", "status": "complete"}  # results untouched
    flip_byte(d / "steps.parquet", 300)  # later damage: the hash recorded at first sight catches it
    assert "verified earlier as" in store.heal_runs(tmp_path, ["a.s.s0"], ledger)["a.s.s0"][0][0]


def test_runs_that_are_not_complete_are_named_and_their_job_moves_their_early_outputs_aside(tmp_path):
    d = complete_run(tmp_path / "runs")
    store.write_json({"status": "running"}, d / "run.json")
    (d / "steps.parquet").write_bytes(b"half")
    (d / store.CHECKPOINT).write_bytes(b"ck")
    found = store.inspect_all(tmp_path, ["a.s.s0", "never-ran.s.s0"], tmp_path / "v.json")
    assert {k: f.state for k, f in found.items()} == {"a.s.s0": "incomplete", "never-ran.s.s0": "missing"}
    said = []
    store.say_found(found, tmp_path, {}, {}, log=said.append)
    assert said == ["opd: 1 run(s) are incomplete (killed, or running elsewhere): a.s.s0; their jobs resume them "
                    "from their checkpoint where they have one"]  # a missing run is no problem to report
    assert sorted(p.name for p in d.iterdir()) == [store.CHECKPOINT, "heldout.parquet", "run.json", "steps.parquet"]
    # its job's first step: its outputs written before the kill are out of Snakemake's way; run.json and the
    # checkpoint stay (the job resumes from it)
    store.prepare(d, None, tmp_path)
    assert sorted(p.name for p in d.iterdir()) == [store.CHECKPOINT, "run.json"]
    assert [e["run_id"] for e in store.read_json(store.quarantine_log(tmp_path))] == ["a.s.s0"]


def test_a_run_json_without_hashes_is_refused_with_another_runs_files_copied_in(tmp_path):
    other = complete_run(tmp_path / "runs", "b.s.s0")
    d = complete_run(tmp_path / "runs", hashes=False)
    for n in ("steps.parquet", "heldout.parquet"):
        (d / n).write_bytes((other / n).read_bytes())
    found = store.inspect(d, {})
    assert found.state == "damaged" and "holds rows of run(s) b.s.s0, not of a.s.s0" in found.problems[0]


def test_a_verl_run_json_need_not_record_its_heldout_file_which_another_rule_writes(tmp_path):
    d = complete_run(tmp_path / "runs")
    meta = store.read_json(d / "run.json")
    meta["files"].pop("heldout.parquet")
    store.write_json({**meta, "backend": "verl"}, d / "run.json")
    assert store.inspect(d, {}).state == "current"
    store.write_json({**meta, "backend": "tiny"}, d / "run.json")  # the tiny backend's training writes both
    assert store.inspect(d, {}).state == "damaged"


class _Spec:
    """A stand-in for an opd.spec JobSpec: what the run store reads of one (its sha256)."""

    def __init__(self, sha):
        self._sha = sha

    def sha256(self):
        return self._sha


def test_a_stale_run_is_set_aside_under_its_spec_and_restored_when_that_spec_is_asked_for_again(tmp_path):
    old, new = _Spec("a" * 64), _Spec("b" * 64)
    d = complete_run(tmp_path / "runs")
    store.write_json({**store.read_json(d / "run.json"), "spec_sha256": old.sha256()}, d / "run.json")
    before = {n: (d / n).read_bytes() for n in ("run.json", "steps.parquet", "heldout.parquet")}
    assert store.inspect(d, {}, new).state == "stale" and store.inspect(d, {}, old).state == "current"
    found, dest = store.prepare(d, new, tmp_path, log=lambda m: None)
    assert found.state == "stale" and dest == store.set_aside_dir(tmp_path, "a.s.s0", old.sha256())
    assert not any(d.iterdir()) and store.kept(tmp_path, "a.s.s0", old) == dest
    assert store.kept(tmp_path, "a.s.s0", new) is None and not store.restore(d, new, tmp_path)
    [entry] = store.set_aside_entries(tmp_path)
    assert (entry["folder"], entry["kind"], entry["sha"]) == ("a.s.s0", "run", old.sha256())
    # the config asks for the old spec again: its job restores the run instead of computing it
    assert store.restore(d, old, tmp_path, log=lambda m: None)
    assert {n: (d / n).read_bytes() for n in before} == before and store.inspect(d, {}, old).state == "current"
    assert store.set_aside_entries(tmp_path) == []


def test_a_damaged_set_aside_copy_is_never_restored_and_prune_keeps_what_is_asked_for(tmp_path):
    old, new = _Spec("a" * 64), _Spec("b" * 64)
    for rid, sha in (("a.s.s0", old), ("b.s.s0", new)):
        d = complete_run(tmp_path / "runs", rid)
        store.write_json({**store.read_json(d / "run.json"), "spec_sha256": sha.sha256()}, d / "run.json")
        store.prepare(d, _Spec("c" * 64), tmp_path, log=lambda m: None)
    flip_byte(store.set_aside_dir(tmp_path, "a.s.s0", old.sha256()) / "steps.parquet", 100)
    assert store.kept(tmp_path, "a.s.s0", old) is None  # every file is hashed before a copy is restored
    gone = store.prune_set_aside(tmp_path, {new.sha256()})
    assert [g["folder"] for g in gone] == ["a.s.s0"]
    assert [e["folder"] for e in store.set_aside_entries(tmp_path)] == ["b.s.s0"]


def test_the_explicit_check_sets_a_stale_run_aside_and_quarantines_a_damaged_one(tmp_path):
    spec = _Spec("b" * 64)
    a, b = complete_run(tmp_path / "runs"), complete_run(tmp_path / "runs", "b.s.s0")
    for d in (a, b):
        store.write_json({**store.read_json(d / "run.json"), "spec_sha256": "a" * 64}, d / "run.json")
    with open(b / "steps.parquet", "r+b") as f:
        f.truncate(100)
    out = store.heal_runs(tmp_path, ["a.s.s0", "b.s.s0"], tmp_path / "v.json", specs={"a.s.s0": spec, "b.s.s0": spec},
                          log=lambda m: None)
    assert out["a.s.s0"][1] == store.set_aside_dir(tmp_path, "a.s.s0", "a" * 64)
    assert out["b.s.s0"][1].parent == tmp_path / "_quarantine" / "b.s.s0"


def test_a_damaged_file_read_by_the_analysis_is_named_with_what_to_do(tmp_path):
    p = tmp_path / "steps.parquet"
    store.write_table(steps_frame(), p, store.STEPS)
    p.write_bytes(p.read_bytes()[:-20])
    with pytest.raises(store.DamagedFile) as e:
        store.read_table(p)
    assert str(p) in str(e.value) and "_quarantine" in str(e.value) and "snakemake" in str(e.value)


def test_a_full_disk_names_the_file_and_the_filesystem_and_leaves_nothing(tmp_path):
    def full(tmp):
        open(tmp, "w").write("part")
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(store.DiskFull) as e:
        store.atomic_write(tmp_path / "x.json", full)
    assert "disk full" in str(e.value) and str(tmp_path / "x.json") in str(e.value)
    assert f"mounted at {store.mount_point(tmp_path)}" in str(e.value)
    assert not list(tmp_path.iterdir())
    with pytest.raises(RuntimeError, match="killed"):  # other failures stay what they are
        store.atomic_write(tmp_path / "x.json", lambda tmp: (_ for _ in ()).throw(RuntimeError("killed")))


def test_hashes_can_be_recorded_once_into_a_run_json_without_them(tmp_path):
    d = complete_run(tmp_path / "runs", hashes=False)
    t = complete_run(tmp_path / "runs", "t.s.s0", hashes=False)
    (t / "heldout.parquet").write_bytes(b"PAR1 not really PAR1")
    h = complete_run(tmp_path / "runs", "h.s.s0")
    before = (h / "run.json").read_bytes()
    assert store.record_legacy(tmp_path, ["a.s.s0", "t.s.s0", "h.s.s0", "none.s.s0"]) == ["a.s.s0"]
    assert store.read_json(d / "run.json") == {"run_id": "a.s.s0", "status": "complete",
                                               "files": store.file_records(d)}
    assert "files" not in store.read_json(t / "run.json") and (h / "run.json").read_bytes() == before


def test_heldout_entropy_is_optional_kept_when_written_and_checked_when_present(tmp_path):
    cols = {f.name: [0.5] * 2 if pa.types.is_floating(f.type) else [1] * 2 for f in store.HELDOUT}
    cols.update(run_id=["r"] * 2, config=["c"] * 2, student=["s"] * 2)
    old = pd.DataFrame(cols)  # a run written before the column existed
    store.write_table(old, tmp_path / "heldout.parquet", store.HELDOUT)
    assert "entropy" not in store.read_table(tmp_path / "heldout.parquet")
    store.write_table(old.assign(entropy=0.3), tmp_path / "a.parquet", store.HELDOUT)  # any name, the same contract
    assert store.read_table(tmp_path / "a.parquet", store.HELDOUT)["entropy"].tolist() == [0.3, 0.3]
    store.write_table(old.assign(entropy=["x", "y"]), tmp_path / "heldout.parquet")  # without the contract
    with pytest.raises(store.SchemaError, match="entropy is .*string, expected double"):
        store.read_table(tmp_path / "heldout.parquet")


def test_the_guard_columns_read_back_with_their_defaults_from_an_older_file_and_are_checked_when_present(tmp_path):
    """steps.parquet files written before the mismatch guard's columns (store.ADDED) read back as the row's
    engine, guard inactive, no batch rejected; a file that has them is type-checked like every column."""
    old = tmp_path / "old" / "steps.parquet"
    old.parent.mkdir()
    store.write_table(steps_frame().drop(columns=list(store.ADDED)), old)
    back = store.read_table(old)
    assert back["engine"].tolist() == ["row"] * 3 and back["guard_active"].tolist() == [False] * 3
    assert back["rejected_d_n"].isna().all()
    bad = tmp_path / "bad" / "steps.parquet"
    bad.parent.mkdir()
    store.write_table(steps_frame().assign(guard_active=[0.5, 0.5, 0.5]), bad)
    with pytest.raises(store.SchemaError, match="guard_active is double, expected bool"):
        store.read_table(bad)


def test_tables_written_by_older_code_are_rewritten_smaller_with_the_same_content_and_still_pass_the_check(tmp_path):
    """`check-runs --rewrite-tables`: a run written with snappy (older code) is written again with the store's
    options; its content, schema metadata included, is unchanged, run.json records the new bytes, the full check
    finds it sound, and files outside runs (a measurement) are rewritten too."""
    rng = np.random.default_rng(0)
    d = tmp_path / "runs" / "a.s.s0"
    d.mkdir(parents=True)
    steps = steps_frame(200).assign(run_id="a.s.s0", d_n=rng.random(200), loss=rng.normal(size=200))
    old = pa.Table.from_pandas(steps, preserve_index=False)
    pq.write_table(old, d / "steps.parquet", compression="snappy")
    store.write_table(steps_frame(7, store.HELDOUT).assign(run_id="a.s.s0"), d / "heldout.parquet", store.HELDOUT)
    store.write_json({"run_id": "a.s.s0", "status": "complete", "files": store.file_records(d)}, d / "run.json")
    pq.write_table(old, tmp_path / "measurement.parquet", compression="snappy")
    before = (d / "steps.parquet").stat().st_size

    n, b, a = store.rewrite_tables(tmp_path)
    assert n == 3 and a < b and (d / "steps.parquet").stat().st_size < before
    assert pq.read_table(d / "steps.parquet").equals(old, check_metadata=True)
    assert pq.read_table(tmp_path / "measurement.parquet").equals(old, check_metadata=True)
    assert store.read_json(d / "run.json")["files"] == store.file_records(d)
    assert store.heal_runs(tmp_path, ["a.s.s0"], tmp_path / "verified.json", hash_all=True) == {}


# ---------------------------------------------------------------- base models whose weights are not committed

def base_models(d, weights=(b"student weights", b"teacher weights"), draw=1):
    """A base-model folder as the base-model job leaves it (base.json pinning each weight file's size and sha256),
    and its spec."""
    from opd.spec import BaseSpec, Student
    spec = BaseSpec(experiment="t", backend="tiny", task_seed=0, student="s", draw=draw, student_spec=Student.of(
        {"family": "qwen2", "layers": 1, "heads": 1, "kv_heads": 1, "head_dim": 16, "d_ff": 32, "sft_lr": 3e-3,
         "sft_batch": 16, "student_steps": 5, "teacher_steps": 10, "seed": draw}))
    d.mkdir(parents=True)
    for n, b in zip(store.BASE_FILES, weights):
        (d / n).write_bytes(b)
    store.write_json({"student": "s", "spec_sha256": spec.sha256(), "files": {
        n: {"size": (d / n).stat().st_size, "sha256": provenance.sha256_file(d / n)} for n in store.BASE_FILES}},
        d / "base.json")
    return spec


def test_base_models_without_their_weights_are_pinned_not_damaged_and_left_in_place(tmp_path):
    d = tmp_path / "_models" / "s.d1"
    spec = base_models(d)
    check = dict(meta_name="base.json", files=store.BASE_FILES)
    assert store.inspect(d, {}, spec, **check).state == "current"
    (d / "student.pt").unlink()  # one missing, the other as base.json records it: pinned too
    assert store.inspect(d, {}, spec, **check).state == "pinned"
    (d / "teacher.pt").unlink()  # as a clone of an experiment that does not commit them has it
    found = store.inspect(d, {}, spec, **check)
    assert found.state == "pinned" and not found.reruns and found.sha == spec.sha256()
    # a job's first step leaves it alone: base.json stays, to check the retrained weights against
    assert store.prepare(d, spec, tmp_path, "base.json", log=lambda m: None) == (found, None)
    assert sorted(p.name for p in d.iterdir()) == ["base.json"]
    # nothing pins weights that base.json does not record, and a present one must still match
    meta = store.read_json(d / "base.json")
    store.write_json({k: v for k, v in meta.items() if k != "files"}, d / "base.json")
    assert store.inspect(d, {}, spec, **check).state == "damaged"
    store.write_json(meta, d / "base.json")
    (d / "teacher.pt").write_bytes(b"other weights")
    assert store.inspect(d, {}, spec, **check).state == "damaged"


def test_retrained_weights_that_differ_from_the_pinned_ones_fail_naming_both_hashes_and_are_removed(tmp_path):
    d = tmp_path / "_models" / "s.d1"
    spec = base_models(d)
    pinned = store.pinned_weights(d, spec)
    assert pinned == {n: v["sha256"] for n, v in store.read_json(d / "base.json")["files"].items()}
    assert store.pinned_weights(d, dataclasses.replace(spec, task_seed=1)) == {}  # another spec's base.json: nothing
    store.check_pinned(d, spec, pinned)  # retrained bit for bit: kept
    assert (d / "student.pt").exists() and (d / "teacher.pt").exists()
    before = (d / "base.json").read_bytes()
    (d / "teacher.pt").write_bytes(b"weights of another CPU")
    other = provenance.sha256_file(d / "teacher.pt")
    with pytest.raises(store.WeightsDiffer) as e:
        store.check_pinned(d, spec, pinned)
    msg = str(e.value)
    assert "experiment 't', student 's', base-model draw 1" in msg
    assert f"teacher.pt: sha256 {other} retrained here, {pinned['teacher.pt']} pinned" in msg
    assert "student.pt: sha256" not in msg  # the student matched
    assert "trained from the pinned weights" in msg
    # no retrained weight is left for a later call to take as the base model; base.json is as it was
    assert sorted(p.name for p in d.iterdir()) == ["base.json"] and (d / "base.json").read_bytes() == before


def test_the_command_a_pin_failure_names_restores_the_pinned_weights_from_git_history(tmp_path):
    """Weights that stopped being committed (the toy's) are still in a clone's history: the command the pin failure
    prints (store.history_hint) brings back exactly the pinned bytes, for a user whose CPU retrains other bits."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    d = tmp_path / "_models" / "s.d1"
    spec = base_models(d)
    pinned = store.pinned_weights(d, spec)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "weights committed"], cwd=tmp_path, check=True)
    subprocess.run([*git, "rm", "-q", "--cached", *(str(d / n) for n in store.BASE_FILES)], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "weights untracked"], cwd=tmp_path, check=True)
    (d / "teacher.pt").write_bytes(b"weights of another CPU")  # what a retraining on another CPU leaves
    with pytest.raises(store.WeightsDiffer) as e:
        store.check_pinned(d, spec, pinned)
    assert not (d / "teacher.pt").exists() and not (d / "student.pt").exists()
    command = re.search(r"`(git restore [^`]+)`", str(e.value)).group(1)
    subprocess.run(command, shell=True, cwd=tmp_path, check=True, capture_output=True)
    assert {n: provenance.sha256_file(d / n) for n in store.BASE_FILES} == pinned
    staged = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=tmp_path, capture_output=True, text=True)
    assert staged.stdout == ""  # restored into the working tree, nothing staged to be committed again
