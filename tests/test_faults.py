"""Faults from outside the code, on a real Snakemake DAG in a fresh `git clone` of this tree: a damaged
cache heals (issue 17, item 1) and a full disk fails clearly and resumes (item 4). The time limit and the
node failure on Slurm are in tests/test_slurm.py. Issue 24 (trust the cache): a hostile or unlucky input
never slips through as a number (NaN, floats for integers, bombs), runs are current only if their spec says
so, files are readable by the people who share them."""
import errno
import os
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from conftest import TRAIN_RULES, edit_config, jobs_in, small_toy, snakemake
from opd import config as C
from opd import store
from opd.spec import MAX_SPEC_BYTES

TIMING = ["step_s", "rollout_s", "teacher_s", "train_s", "weight_sync_s", "wait_s"]
# analysis columns computed from those times (the rest of each file is compared)
FROM_TIMING = {"infra.parquet": ["median_step_s", "tokens/s", "ratio", "rollout wait %", "MFU % (est.)"],
               "time_to_kl.parquet": ["s to final", "s to 90%", "speed-up to final", "speed-up to 90%"]}


def tree_state(clone) -> dict:
    """Every file under results/ and figures/ with its size and mtime: what a dry run must not change."""
    return {str(p.relative_to(clone)): (p.stat().st_size, p.stat().st_mtime_ns)
            for top in ("results", "figures") for p in (clone / top).rglob("*") if p.is_file()}


def analysis_content(clone) -> dict:
    out = {}
    for p in sorted((clone / "results" / "toy" / "analysis").glob("*.parquet")):
        df = store.read_table(p)
        out[p.name] = df.drop(columns=[c for c in TIMING + FROM_TIMING.get(p.name, []) if c in df.columns])
    return out


def test_a_truncated_and_an_overwritten_run_are_rerun_and_nothing_else(small_toy_clone):
    clone = small_toy_clone  # small_toy after `snakemake -c 2 analysis` (conftest.small_toy_built), copied
    before = analysis_content(clone)
    runs = clone / "results" / "toy" / "runs"
    for r in ("bf16.qwen-s.s0", "bf16.qwen-s.s1", "noise-15.qwen-s.s0"):
        assert "files" in store.read_json(runs / r / "run.json")
    with open(runs / "bf16.qwen-s.s1" / "steps.parquet", "r+b") as f:  # a copy cut short by a quota
        f.truncate(f.seek(0, 2) // 2)
    p = runs / "noise-15.qwen-s.s0" / "heldout.parquet"  # bytes overwritten in place, same size
    b = bytearray(p.read_bytes())
    b[len(b) // 2: len(b) // 2 + 8] = bytes(8)
    p.write_bytes(bytes(b))
    probes = runs / "bf16.qwen-s.s0" / "probes_prefix.parquet"  # a probed run's probe file, the same way
    assert "probes_prefix.parquet" in store.read_json(runs / "bf16.qwen-s.s0" / "run.json")["files"]
    pb = bytearray(probes.read_bytes())
    pb[len(pb) // 2: len(pb) // 2 + 8] = bytes(8)
    probes.write_bytes(bytes(pb))

    r = snakemake(clone, "-c", "2", "analysis")
    out = r.stdout + r.stderr
    damaged = ["bf16.qwen-s.s0", "bf16.qwen-s.s1", "noise-15.qwen-s.s0"]
    assert {w for rule, w in jobs_in(r) if rule in TRAIN_RULES} == {f"run_id={d}" for d in damaged}
    # the s0 runs are probed runs; job_spec is each damaged run's first step (it quarantines the run)
    assert {rule for rule, _ in jobs_in(r)} == TRAIN_RULES | {"analysis", "job_spec"}
    assert all(f"run {d} is damaged" in out for d in damaged)
    quarantined = clone / "results" / "toy" / "_quarantine"
    assert sorted(p.name for p in quarantined.iterdir()) == sorted(damaged + ["log.json"])
    # the log's entries and folders: this call's (the first call, small_toy_built's, set the committed runs aside in
    # _set_aside/: stale under small_toy, not damaged)
    assert sorted(e["run_id"] for e in store.read_json(quarantined / "log.json")[-3:]) == damaged
    assert (max((quarantined / "bf16.qwen-s.s0").iterdir()) / "probes_prefix.parquet").read_bytes() == bytes(pb)
    assert (max((quarantined / "noise-15.qwen-s.s0").iterdir()) / "heldout.parquet").read_bytes() == bytes(b)
    after = analysis_content(clone)
    assert after.keys() == before.keys()
    for name in before:  # training is deterministic: every non-timing number comes back
        pd.testing.assert_frame_equal(after[name], before[name], obj=name)


@pytest.fixture
def tmpfs(tmp_path):
    """Mounts a 16 MiB tmpfs at a given folder (root only, as CI runs) and unmounts it afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the tests as root)")
    mounted = []

    def mount(where):
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)], check=True)
        mounted.append(where)
    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)


def fill(folder) -> Path:
    """Another user's file takes every byte left on the folder's filesystem."""
    ballast = folder / "ballast"
    with open(ballast, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return ballast


def test_a_full_disk_fails_naming_it_leaves_nothing_partial_and_the_rerun_resumes(toy_clone, tmpfs, tmp_path):
    clone = toy_clone  # the toy experiment selected: its rows and results/toy

    def one_run(c):
        small_toy(c)
        c["experiments"]["toy"]["train"].update(steps=12, checkpoint_every=3)
    edit_config(clone, one_run)
    runs = clone / "results" / "toy" / "runs"
    tmpfs(runs)  # the results folder of the runs on a small filesystem of its own
    run = runs / "bf16.qwen-s.s0"
    target = "results/toy/runs/bf16.qwen-s.s0/steps.parquet"
    filled = {}

    def fill_after_the_first_checkpoint():
        deadline = time.time() + 120
        while not (run / "checkpoint.pt").exists() and time.time() < deadline:
            time.sleep(0.01)
        filled["ballast"] = fill(runs)
    t = threading.Thread(target=fill_after_the_first_checkpoint)
    t.start()
    r = snakemake(clone, "-c", "1", target, check=False)
    t.join()
    log = clone / "logs" / "toy" / "train" / "bf16.qwen-s.s0.log"  # where the train rule sends the job's output
    out = r.stdout + r.stderr + (log.read_text() if log.exists() else "")
    assert r.returncode != 0
    assert f"disk full: no space left on the filesystem mounted at {runs}" in out
    assert "while writing results/toy/runs/bf16.qwen-s.s0/checkpoint.pt" in out
    # nothing partial, nothing that looks complete: the last checkpoint, whole, the attempts' record
    # (opd.training: what the next attempt's run.json counts) and no run.json saying complete
    left = sorted(p.name for p in run.iterdir())
    assert left in (["attempts.json", "checkpoint.pt"], ["attempts.json", "checkpoint.pt", "run.json"]), left
    assert not store.is_complete(run)
    ck = torch.load(run / "checkpoint.pt", weights_only=False)
    assert ck["step"] in (3, 6, 9)
    first_attempt = pd.DataFrame(ck["steps_rows"])

    filled["ballast"].unlink()  # space is freed
    snakemake(clone, "-c", "1", target)
    assert store.is_complete(run) and not (run / "checkpoint.pt").exists()
    steps = store.read_table(run / "steps.parquet")
    assert steps["step"].tolist() == list(range(12))
    # continued from the checkpoint: its steps are the first attempt's (their timings too), not retrained
    pd.testing.assert_frame_equal(steps.iloc[:ck["step"]][first_attempt.columns].reset_index(drop=True),
                                  first_attempt, check_dtype=False)
    # and every step once, as an uninterrupted run computes it
    from opd.backends.tiny.trainer import train_run
    spec = store.read_json(clone / "results" / "toy" / "_jobs" / "train" / "bf16.qwen-s.s0.json")
    spec.update(student_path=str(clone / spec["student_path"]), teacher_path=str(clone / spec["teacher_path"]))
    train_run(spec, tmp_path / "straight")
    straight = store.read_table(tmp_path / "straight" / "steps.parquet")
    pd.testing.assert_frame_equal(steps.drop(columns=TIMING), straight.drop(columns=TIMING))


# ---------------------------------------------------------------- issue 24: nothing invalid gets in

def config_error(cfg) -> str:
    with pytest.raises(C.ConfigError) as e:
        C.validate(cfg)
    return str(e.value)


@pytest.mark.parametrize("where,value,field", [
    (lambda e: e, "tau", "field 'tau'"),
    (lambda e: e["rows"][1], "noise_sigma", "row 2 ('fp8w'), field 'noise_sigma'"),
    (lambda e: e["rows"][1], "lr", "row 2 ('fp8w'), field 'lr'"),
    (lambda e: e["admission"], "L", "field 'admission.L'"),
    (lambda e: e["admission"], "alpha", "field 'admission.alpha'"),
    (lambda e: next(r for r in e["rows"] if "guard" in r)["guard"], "d_max", "field 'guard.d_max'"),
])
@pytest.mark.parametrize("bad", [float("nan"), -float("inf")])
def test_nan_and_infinity_are_refused_naming_experiment_row_and_field(toy_config, where, value, field, bad):
    where(toy_config["experiments"]["toy"])[value] = bad
    msg = config_error(toy_config)
    assert f"experiment 'toy', " in msg and field in msg and "not a finite number" in msg, msg


@pytest.mark.parametrize("edit,field", [
    (lambda e: e["train"].update(steps=20.0), "field 'train.steps': 20.0 is not of type 'integer'"),
    (lambda e: e.update(seeds=[1.0]), "field 'seeds.0': 1.0 is not of type 'integer'"),
    (lambda e: e["students"]["qwen-s"].update(heads="4"), "field 'students.qwen-s.heads': '4' is not of type"),
    (lambda e: e["rows"][1].update(staleness=True), "row 2 ('fp8w'), field 'staleness': True is not of type"),
])
def test_integer_fields_refuse_floats_strings_and_booleans(toy_config, edit, field):
    edit(toy_config["experiments"]["toy"])
    assert field in config_error(toy_config)


def test_a_nan_in_a_runs_results_is_refused_naming_file_and_column(tmp_path):
    src = store.read_table(C.ROOT / "results/toy/runs/bf16.qwen-s.s0/heldout.parquet")
    src.loc[[3, 7, 9, 11, 13], "kl"] = np.nan  # the probe of issue 24: Δ moved 34.52% -> 34.59% without a word
    store.write_table(src, tmp_path / "heldout.parquet", store.HELDOUT)
    with pytest.raises(store.SchemaError, match=r"heldout.parquet: column 'kl': 5 NaN, infinite or missing values "
                                                 r"\(first at row 3\)"):
        store.read_table(tmp_path / "heldout.parquet")
    steps = store.read_table(C.ROOT / "results/toy/runs/bf16.qwen-s.s0/steps.parquet")
    steps.loc[0, "d_n"] = np.inf
    store.write_table(steps, tmp_path / "steps.parquet", store.STEPS)
    with pytest.raises(store.SchemaError, match="column 'd_n': 1 NaN"):
        store.read_table(tmp_path / "steps.parquet")


def test_names_match_in_full_are_bounded_and_unique_whatever_the_case(toy_config):
    e = toy_config["experiments"]["toy"]
    e["rows"][1]["name"] = "fp8w\n"  # would split the shell line and create results/toy\n/
    assert "row 2 ('fp8w\\n'), field 'name': 'fp8w\\n' is not a name" in config_error(toy_config)
    e["rows"][1]["name"] = "x" * 300  # an OSError traceback deep in a job before
    assert "field 'name': 300 characters, more than the 64 allowed" in config_error(toy_config)
    e["rows"][1]["name"] = "BF16"  # the same folder as bf16 on a case-insensitive filesystem
    assert "row 2 ('BF16'), field 'name': duplicate of row 1 ('bf16'" in config_error(toy_config)
    e["rows"][1]["name"] = "fp8w"
    e["students"]["Qwen-S"] = e["students"]["qwen-s"]
    assert "students 'qwen-s' and 'Qwen-S' differ in case only" in config_error(toy_config)


def test_an_alias_bomb_and_free_form_keys_are_refused_before_anything_expands_them(toy_config):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi"))  # 10^9 values from under 1 KB of YAML
    toy_config["experiments"]["toy"]["description"] = yaml.safe_load(bomb)["i"]
    t = time.perf_counter()
    assert "more than 20,000 values once YAML's aliases" in config_error(toy_config)
    assert time.perf_counter() - t < 1
    toy_config["experiments"]["toy"].pop("description")
    engine = toy_config["experiments"]["paper"]["verl"]["engine"]
    engine["nested"] = {"a": [1, 2]}  # a free-form key's value: vLLM's engine arguments are single values
    assert "experiment 'paper', field 'verl.engine.nested': {'a': [1, 2]} is not of type" in config_error(toy_config)


def test_a_job_spec_past_the_size_limit_is_refused_naming_its_file(tmp_path):
    with pytest.raises(C.ConfigError, match=r"x.json: the job's spec would be [\d,]+ bytes, more than the 65,536"):
        C.write_if_changed(tmp_path / "x.json", {"k": "v" * MAX_SPEC_BYTES})
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_files_are_written_with_the_process_umask_as_open_would(tmp_path, umask):
    old = os.umask(umask)
    try:
        store.write_json({"a": 1}, tmp_path / "run.json")
        store.write_table(pd.DataFrame({"x": [1]}), tmp_path / "t.parquet")
        store.atomic_torch_save({"w": torch.zeros(1)}, tmp_path / "m.pt")
        C.write_if_changed(tmp_path / "spec.json", {"k": 1})
        with open(tmp_path / "plain", "w"):
            pass
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(["run.json", "t.parquet", "m.pt", "spec.json", "plain"], 0o666 & ~umask)


# ---------------------------------------------------------------- issue 24: a run is current only if its spec says so

def set_sigma(sigma):
    def edit(c):
        next(r for r in c["experiments"]["toy"]["rows"] if r["name"] == "noise-15")["noise_sigma"] = sigma
    return edit


NOISE_15 = {f"noise-15.{student}.s{s}" for student in next(r for r in C.load()["experiments"]["toy"]["rows"]
                                                           if r["name"] == "noise-15")["students"] for s in range(3)}


@pytest.mark.parametrize("case", ["specs committed without their runs", "run files with a future mtime"])
def test_a_run_computed_from_another_spec_is_rerun_whatever_the_file_times(toy_clone, case):
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    edit_config(clone, set_sigma(0.30))
    runs = clone / "results" / "toy" / "runs"
    if case == "specs committed without their runs":
        # what a clone of a commit holding the edited config and the specs a dry run rewrote, but the old runs,
        # checks out: git writes _jobs/ before runs/, so every run looks newer than its new spec
        from opd import dag
        from opd.spec import Experiment
        e = Experiment.of(yaml.safe_load((clone / "config.yaml").read_text()))
        for r, spec in dag.train_specs(e, "results/toy/_models").items():
            p = clone / dag.spec_path("results/toy", spec)
            C.write_if_changed(p, spec.to_json())
            os.utime(p, (time.time() - 3600,) * 2)
    else:  # results copied with fresh times, or a clock that ran ahead
        for r in NOISE_15:
            for f in (runs / r).iterdir():
                os.utime(f, (time.time() + 86400,) * 2)
    before = tree_state(clone)
    r = snakemake(clone, "-n", "-c", "2")
    assert {w.split("=", 1)[1] for rule, w in jobs_in(r) if rule in TRAIN_RULES} == NOISE_15
    assert (f"opd: {len(NOISE_15)} run(s) or base models were computed from another spec than the config asks for "
            f"now") in r.stderr
    assert tree_state(clone) == before  # a dry run moves and writes nothing: the real run's jobs set them aside


def test_a_run_without_a_well_formed_run_json_and_a_missing_run_are_rerun(toy_clone):
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    runs = clone / "results" / "toy" / "runs"
    import shutil
    shutil.rmtree(runs / "fp8w.qwen-s.s0")  # a hand-deleted run folder
    (runs / "fp8w.qwen-s.s1" / "run.json").unlink()  # a run without run.json
    (runs / "fp8w.qwen-s.s2" / "run.json").write_text("null")  # parses, but is no run.json
    (runs / "nvfp4.qwen-s.s0" / "run.json").write_text("[]")
    meta = store.read_json(runs / "nvfp4.qwen-s.s1" / "run.json")
    store.write_json({**meta, "files": {}}, runs / "nvfp4.qwen-s.s1" / "run.json")
    store.write_json({**meta, "run_id": "nvfp4.qwen-s.s2", "files": {"steps.parquet": "x"}},
                     runs / "nvfp4.qwen-s.s2" / "run.json")
    m = store.read_json(runs / "fp8w-l0.qwen-s.s0" / "run.json")
    store.write_json({k: v for k, v in m.items() if k != "status"}, runs / "fp8w-l0.qwen-s.s0" / "run.json")
    # a killed run: its checkpoint and a running run.json (the only out-of-date job when it was killed)
    k = runs / "fp8w-l0.qwen-s.s1"
    store.write_json({**store.read_json(k / "run.json"), "status": "running"}, k / "run.json")
    (k / "checkpoint.pt").write_bytes(b"a checkpoint")
    broken = {"fp8w.qwen-s.s0", "fp8w.qwen-s.s1", "fp8w.qwen-s.s2", "nvfp4.qwen-s.s0", "nvfp4.qwen-s.s1",
              "nvfp4.qwen-s.s2", "fp8w-l0.qwen-s.s0", "fp8w-l0.qwen-s.s1"}
    r = snakemake(clone, "-n", "-c", "2")
    assert {w.split("=", 1)[1] for rule, w in jobs_in(r) if rule in TRAIN_RULES} == broken
    assert "opd: 2 run(s) are incomplete (killed, or running elsewhere): fp8w-l0.qwen-s.s1, fp8w.qwen-s.s1" in r.stderr
    assert "fp8w.qwen-s.s2/run.json: not a JSON object but NoneType" in r.stderr
    assert "nvfp4.qwen-s.s1/run.json: files records no steps.parquet" in r.stderr
    assert "nvfp4.qwen-s.s2/run.json: files['steps.parquet'] is 'x'" in r.stderr
    assert "fp8w-l0.qwen-s.s0/run.json: status None" in r.stderr
    # a second call (nothing ran in between) still reruns them: the dry run changed nothing
    assert {w.split("=", 1)[1] for rule, w in jobs_in(snakemake(clone, "-n", "-c", "2"))
            if rule in TRAIN_RULES} == broken


def test_a_dry_run_beside_a_running_snakemake_changes_nothing_its_jobs_read(toy_clone):
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    import json
    import sys
    from opd.spec import TrainSpec

    def longer(c):
        small_toy(c)
        c["experiments"]["toy"]["train"].update(steps=40, eval_every=20, checkpoint_every=10)
    edit_config(clone, longer)
    run = clone / "results" / "toy" / "runs" / "bf16.qwen-s.s1"
    spec = clone / "results" / "toy" / "_jobs" / "train" / "bf16.qwen-s.s1.json"
    first = subprocess.Popen([sys.executable, "-m", "snakemake", "-c", "1", f"{run.relative_to(clone)}/run.json"],
                             cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    locks = clone / ".snakemake" / "locks"
    train_log = clone / "logs" / "toy" / "train" / "bf16.qwen-s.s1.log"  # its training job has started
    deadline = time.time() + 120
    while not (locks.is_dir() and any(locks.iterdir()) and spec.exists() and train_log.exists()) \
            and first.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert first.poll() is None, first.communicate()[0][-3000:]
    before = spec.read_bytes()
    # the probe: an edited config and a dry run while the first one trains
    edit_config(clone, lambda c: c["experiments"]["toy"]["train"].update(steps=12))
    r = snakemake(clone, "-n", "-c", "2", check=False)
    # it plans, or, once the first one's job has started, Snakemake itself refuses that job's output as
    # incomplete (its metadata marks a running job's outputs so): which of the two depends on timing, and
    # neither may change what the running job reads
    assert r.returncode == 0 or "IncompleteFilesException" in r.stdout + r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    assert first.poll() is None, "the first snakemake ended before the dry run: make its run longer"
    assert spec.read_bytes() == before  # building the DAG never writes a spec file
    out = first.communicate(timeout=600)[0]
    assert first.returncode == 0, out[-3000:]
    meta = store.read_json(run / "run.json")
    assert meta["spec_sha256"] == TrainSpec.from_json(json.loads(before)).sha256()
    assert store.read_table(run / "steps.parquet")["step"].max() == 39  # the spec it started with, throughout
    # once it is done, the next call reads the edited config: the run is stale, named and rerun
    r = snakemake(clone, "-n", "-c", "2", f"{run.relative_to(clone)}/run.json")
    assert "run(s) or base models were computed from another spec than the config asks for now (" in r.stderr
    assert "bf16.qwen-s.s1" in r.stderr.split("computed from another spec")[1].split(")")[0]
    assert ("train", "run_id=bf16.qwen-s.s1") in jobs_in(r)


def test_provenance_counts_every_attempt_and_the_checkpoint_outlives_a_failed_final_write(tmp_path, monkeypatch):
    import json
    import shutil
    from opd import backends, training
    from opd.spec import TrainSpec
    committed = C.ROOT / "results" / "toy" / "runs" / "bf16.qwen-s.s1"
    spec = TrainSpec.from_json(json.loads((C.ROOT / "results/toy/_jobs/train/bf16.qwen-s.s1.json").read_text()))
    run = tmp_path / "bf16.qwen-s.s1"
    attempt = []

    def job(spec, run_dir, progress=None):  # the backend: checkpoints, killed in its first attempt
        attempt.append(1)
        time.sleep(0.3)
        (run_dir / store.CHECKPOINT).write_bytes(b"the last checkpoint")
        if len(attempt) == 1:
            raise KeyboardInterrupt  # killed after its checkpoint
        for f in store.RUN_FILES:
            shutil.copy(committed / f, run_dir / f)
        return {}
    monkeypatch.setattr(backends, "job", lambda kind, backend: job)
    with pytest.raises(KeyboardInterrupt):
        training.train(spec, run)
    first_start = store.read_json(run / "run.json")["start"]
    (run / "run.json").unlink()  # Snakemake removes a failed job's outputs
    write_json = store.write_json

    def full_disk_at_the_end(obj, path):
        if obj.get("status") == "complete":
            raise store.DiskFull(errno.ENOSPC, "disk full")
        write_json(obj, path)
    monkeypatch.setattr(store, "write_json", full_disk_at_the_end)
    with pytest.raises(store.DiskFull):
        training.train(spec, run)
    assert (run / store.CHECKPOINT).exists()  # what the next attempt resumes from
    monkeypatch.setattr(store, "write_json", write_json)
    meta = training.train(spec, run)
    assert meta["attempts"] == 3 and meta["start"] == first_start
    assert meta["wall_s"] >= 0.9  # three attempts of at least 0.3 s each, up to their last checkpoint
    assert sorted(p.name for p in run.iterdir()) == ["heldout.parquet", "run.json", "steps.parquet"]


@pytest.fixture
def read_only(tmp_path):
    """Makes a folder read-only: a read-only bind mount as root (root writes through file modes), else its modes."""
    done = []

    def make(where):
        if os.geteuid() == 0:
            subprocess.run(["mount", "--bind", str(where), str(where)], check=True)
            subprocess.run(["mount", "-o", "remount,ro,bind", str(where)], check=True)
        else:
            for p in [where, *where.rglob("*")]:
                p.chmod(0o555 if p.is_dir() else 0o444)
        done.append(where)
    yield make
    for where in done:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(where)], check=False)
        else:
            for p in [where, *where.rglob("*")]:
                p.chmod(0o755 if p.is_dir() else 0o644)


def test_a_damaged_run_in_a_read_only_results_folder_is_named_and_the_rest_goes_on(tmp_path, read_only):
    import shutil
    out = tmp_path / "results" / "toy"
    for r in ("bf16.qwen-s.s1", "bf16.qwen-s.s2"):
        shutil.copytree(C.ROOT / "results" / "toy" / "runs" / r, out / "runs" / r)
    with open(out / "runs" / "bf16.qwen-s.s2" / "steps.parquet", "r+b") as f:
        f.truncate(100)
    read_only(out)
    said = []
    damaged = store.heal_runs(out, ["bf16.qwen-s.s1", "bf16.qwen-s.s2"], tmp_path / "verified.json", log=said.append)
    assert list(damaged) == ["bf16.qwen-s.s2"] and damaged["bf16.qwen-s.s2"][1] is None
    msg = next(m for m in said if "bf16.qwen-s.s2" in m)
    assert "run bf16.qwen-s.s2 is damaged" in msg and "steps.parquet: 100 bytes" in msg
    assert f"cannot be moved aside" in msg and f"make {out} writable" in msg
    assert (out / "runs" / "bf16.qwen-s.s2" / "steps.parquet").stat().st_size == 100  # nothing moved


def test_base_models_are_checked_against_base_json_and_their_spec(tmp_path):
    import shutil
    from opd import dag
    from opd.spec import Experiment
    out = tmp_path / "results" / "lean"
    committed = C.ROOT / "results" / "lean" / "_models" / "qwen-s"  # (the toy does not commit its weights)
    shutil.copytree(committed, out / "_models" / "qwen-s")
    e = Experiment.of(C.load(), "lean")  # its committed base models, copied above
    bases = {"qwen-s": dag.base_spec(e, "qwen-s")}
    ledger = tmp_path / "verified.json"
    assert store.heal_runs(out, [], ledger, base_specs=bases) == {}
    teacher = out / "_models" / "qwen-s" / "teacher.pt"
    size = teacher.stat().st_size
    with open(teacher, "r+b") as f:  # torch would say "PytorchStreamReader failed", naming no file
        f.truncate(size // 2)
    said = []
    damaged = store.heal_runs(out, [], ledger, base_specs=bases, log=said.append)
    problems, dest = damaged["base models of qwen-s"]
    assert problems == [f"{teacher}: {size // 2} bytes, base.json records {size}"]
    assert dest.parent == out / "_quarantine" / "_models" / "qwen-s" and (dest / "teacher.pt").exists()
    assert said[0].startswith("opd: base models of qwen-s are damaged: ")
    # base models trained from another student spec are stale: set aside under their spec, not quarantined
    shutil.copytree(committed, out / "_models" / "qwen-s", dirs_exist_ok=True)
    import dataclasses
    other = dataclasses.replace(bases["qwen-s"], student_spec=bases["qwen-s"].student_spec.with_(d_ff=256))
    problems, dest = store.heal_runs(out, [], ledger, base_specs={"qwen-s": other})["base models of qwen-s"]
    assert "base.json: computed from another spec" in problems[0]
    assert dest == store.set_aside_dir(out, "qwen-s", bases["qwen-s"].sha256(), models=True)
    assert store.kept(out, "qwen-s", bases["qwen-s"], "base.json") == dest  # the spec asked for again gets it back
