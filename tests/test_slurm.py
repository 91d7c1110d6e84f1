"""The Slurm launcher on a real single-node Slurm (Debian's slurm-wlm), started by tests/slurm/cluster.sh.
Run with `pytest -m slurm`; CI runs them."""
import json
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, edit_config, planned, planned_runs, small_toy, snakemake
from opd import launch, store

pytestmark = pytest.mark.slurm
TIMING = ["step_s", "rollout_s", "teacher_s", "train_s", "weight_sync_s", "wait_s"]
SITE = {"poll_s": 1, "dead_after_s": 20, "max_requeues": 3, "nodes": 1, "cpus_per_task": 1, "mem_gb": 2,
        "time_min": 20}


@pytest.fixture(scope="session")
def slurm_cluster():
    script = ROOT / "tests" / "slurm" / "cluster.sh"
    subprocess.run([str(script), "start"], check=True)
    yield
    subprocess.run(["scancel", "--user=root"], check=False)
    subprocess.run([str(script), "stop"], check=True)


def toy_spec(tmp_path, steps, name="r", **settings):
    base = ROOT / "results" / "lean" / "_models" / "qwen-s"  # committed (the toy's are not); the toy's shape
    return {"run_id": f"{name}.qwen-s.s0", "experiment": "toy", "backend": "tiny", "row": {"name": name},
            "student": "qwen-s", "seed": 0, "student_path": str(base / "student.pt"),
            "teacher_path": str(base / "teacher.pt"), "task_seed": 0,
            "settings": {"steps": steps, "prompts_per_step": 8, "responses_per_prompt": 8, "lr": 1e-4,
                         "eval_every": 0, "checkpoint_every": 5, **settings}}


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def submitted_job_id(run_dir: Path) -> str:
    wait_for(lambda: any((run_dir / "slurm").glob("*_submission.sh")), 60, "the submission")
    return next((run_dir / "slurm").glob("*_submission.sh")).name.split("_")[0]


def test_toy_rows_end_to_end_through_profile_slurm_two_in_flight(slurm_cluster, toy_clone):
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    new = [{"name": "slurm-a", "noise_sigma": 0.01, "seeds": [0], "students": ["qwen-s"]},
           {"name": "slurm-b", "noise_sigma": 0.02, "seeds": [0], "students": ["qwen-s"]}]
    # two rows added to small_toy (one student on base models of its own, three runs of 6 steps): every job on Slurm
    edit_config(clone, lambda c: (small_toy(c), c["experiments"]["toy"]["rows"].extend(new)))
    args = ("--profile", "slurm", "--config", "experiment=toy", "--resources", "slurm_jobs=2")
    runs = {"bf16.qwen-s.s0", "bf16.qwen-s.s1", "noise-15.qwen-s.s0", "slurm-a.qwen-s.s0", "slurm-b.qwen-s.s0"}
    assert planned_runs(planned(clone, *args)) == runs
    # the runs and the table that names them: the analysis behind it reads every run, no figure is needed here
    snakemake(clone, "figures/toy/tables/runs.md", *args)
    spans = []
    for run_id in sorted(runs):
        run = clone / "results" / "toy" / "runs" / run_id
        meta = json.loads((run / "run.json").read_text())
        assert meta["status"] == "complete" and meta["launcher"] == "slurm" and len(meta["slurm_job_ids"]) == 1
        assert store.read_table(run / "steps.parquet")["step"].tolist() == list(range(6))
        assert list((run / "slurm").glob("*_log.out"))  # the job's own log lands in the run folder
        spans.append((datetime.fromisoformat(meta["start"]), datetime.fromisoformat(meta["end"])))
    assert any(a0 < b1 and b0 < a1 for i, (a0, a1) in enumerate(spans) for b0, b1 in spans[i + 1:]), \
        "no two runs overlapped in time"
    table = (clone / "figures" / "toy" / "tables" / "runs.md").read_text()
    assert "slurm-a" in table and "slurm-b" in table


def test_requeue_after_timeout_signal_resumes_without_lost_or_duplicated_steps(slurm_cluster, tmp_path):
    spec = toy_spec(tmp_path, steps=60)
    reference = straight_run(spec, tmp_path / "straight")
    run = tmp_path / "run"
    result = {}
    t = threading.Thread(target=lambda: result.update(meta=launch.run_train(
        spec, run, {"launcher": "slurm", "slurm": SITE})))
    t.start()
    job = submitted_job_id(run)
    wait_for(lambda: (run / "checkpoint.pt").exists(), 120, "a checkpoint")
    # what Slurm sends signal_delay_s before the time limit: submitit checkpoints and requeues
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    t.join(timeout=300)
    assert not t.is_alive()
    meta = result["meta"]
    assert meta["status"] == "complete" and meta["attempts"] == 2 and meta["slurm_job_ids"] == [job, job]
    reference.join(timeout=300)
    same_steps(run, tmp_path / "straight", 60)


def train_in_background(spec: dict, run) -> tuple[threading.Thread, dict]:
    """launch.run_train on Slurm in a thread; the dict gets the JobFailed it raises, if any, as "e"."""
    err = {}

    def go():
        try:
            launch.run_train(spec, run, {"launcher": "slurm", "slurm": SITE})
        except launch.JobFailed as e:
            err["e"] = e
    t = threading.Thread(target=go)
    t.start()
    return t, err


def test_scancelled_job_fails_fast_and_clearly(slurm_cluster, tmp_path):
    spec = toy_spec(tmp_path, steps=2000, checkpoint_every=5)
    run = tmp_path / "run"
    t, err = train_in_background(spec, run)
    job = submitted_job_id(run)
    wait_for(lambda: (run / "checkpoint.pt").exists(), 120, "a checkpoint")
    cancelled = time.time()
    subprocess.run(["scancel", job], check=True)
    t.join(timeout=120)
    assert not t.is_alive() and "e" in err
    assert time.time() - cancelled < 30
    msg = str(err["e"])
    assert f"Slurm job {job} ended without a result (state CANCELLED" in msg and "tail of" in msg
    assert not store.is_complete(run) and not (run / "steps.parquet").exists()
    assert (run / "checkpoint.pt").exists()  # a rerun continues from here


def test_a_two_task_job_writes_run_json_once_and_the_rule_reads_every_tasks_result(slurm_cluster, tmp_path):
    """A multi-node verl run is one Slurm job with a task per node (opd.backends.verl.layout); here two
    tasks on the one test node. Only task 0 runs the run (one attempt in run.json, every step once); task 1
    serves it (the tiny backend: nothing to do) and returns None; the waiting rule collects both results
    (submitit's result() refuses a job with tasks) and returns task 0's."""
    import submitit
    spec = toy_spec(tmp_path, steps=4)
    run = tmp_path / "run"
    meta = launch.run_train(spec, run, {"launcher": "slurm", "slurm": {**SITE, "tasks_per_node": 2}})
    assert meta["status"] == "complete" and meta["attempts"] == 1 and len(meta["slurm_job_ids"]) == 1
    assert json.loads((run / "run.json").read_text()) == meta
    assert store.read_table(run / "steps.parquet")["step"].tolist() == list(range(4))
    job = submitit.SlurmJob(run / "slurm", meta["slurm_job_ids"][0], tasks=(0, 1))
    assert job.num_tasks == 2 and job.results()[1] is None
    assert "#SBATCH --ntasks-per-node=2" in next((run / "slurm").glob("*_submission.sh")).read_text()


def straight_run(spec, out: Path):
    """The same run uninterrupted, in a process of its own (started first, it trains while the Slurm job does)."""
    import multiprocessing
    from opd.backends.tiny.trainer import train_run
    p = multiprocessing.get_context("spawn").Process(target=train_run, args=(spec, out))
    p.start()
    return p


def steps_in(seconds: float, tmp_path: Path) -> int:
    """How many toy_spec steps this machine trains in `seconds` when nothing else runs: a test that needs a run
    longer than some event (a time limit, a node going down) sizes it from the machine it runs on rather than
    from the slowest machine it might meet. The median of a short run's own step times (steps.parquet's step_s),
    its first steps (warm-up) left out."""
    from opd.backends.tiny.trainer import train_run
    train_run(toy_spec(tmp_path, steps=12), tmp_path / "pace")
    step_s = store.read_table(tmp_path / "pace" / "steps.parquet")["step_s"].iloc[2:].median()
    return int(seconds / step_s)


def same_steps(run: Path, straight: Path, n: int):
    steps = store.read_table(run / "steps.parquet")
    assert steps["step"].tolist() == list(range(n))
    pd.testing.assert_frame_equal(steps.drop(columns=TIMING),
                                  store.read_table(straight / "steps.parquet").drop(columns=TIMING))


def test_slurms_own_time_limit_signals_and_the_run_requeues_until_every_step_is_done_once(slurm_cluster, tmp_path):
    """No simulated signal: the job asks for one minute and for USR2 40 s before its end (signal_delay_s), and
    slurmctld's own time-limit check (every 30 s) sends it; submitit checkpoints and requeues, and the run resumes
    from its last checkpoint. One attempt trains at most ~47 s (the signal comes 20-50 s in, after a few seconds of
    start-up), so the run is what this machine trains in 60 s alone (steps_in; with the uninterrupted reference
    sharing the cores it trains slower still): it cannot finish in one attempt on any CPU. Each later attempt's
    cycle is ~30 s (the check's period) of which ~15 s train (the requeued job starts again ~12 s after its signal:
    cred_expire 10 s); the requeue budget only says when to give up."""
    steps = steps_in(60, tmp_path)
    spec = toy_spec(tmp_path, steps=steps, checkpoint_every=5)
    reference = straight_run(spec, tmp_path / "straight")
    run = tmp_path / "run"
    site = {**SITE, "time_min": 1, "signal_delay_s": 40, "max_requeues": 20}
    meta = launch.run_train(spec, run, {"launcher": "slurm", "slurm": site})
    job = meta["slurm_job_ids"][0]
    sbatch = (run / "slurm" / f"{job}_submission.sh").read_text()
    assert "#SBATCH --time=1\n" in sbatch and "#SBATCH --signal=USR2@40\n" in sbatch
    assert meta["status"] == "complete" and meta["attempts"] >= 2 and meta["slurm_job_ids"] == [job] * meta["attempts"]
    log = next((run / "slurm").glob(f"{job}_0_log.err")).read_text()
    # every attempt but the last was signalled; the last may be signalled too if its limit comes as it finishes
    assert meta["attempts"] - 1 <= log.count("Caught signal SIGUSR2") <= meta["attempts"] and "this job is timed-out" in log
    reference.join(timeout=300)
    same_steps(run, tmp_path / "straight", steps)


NODE = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()


@pytest.fixture
def node_back_up():
    yield
    subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=resume"], capture_output=True)
    wait_for(lambda: subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%T"], capture_output=True, text=True)
             .stdout.strip() in ("idle", "mixed", "allocated"), 60, "the node back up")


def take_node_down_mid_job(run: Path, requeue: bool) -> tuple[str, float]:
    job = submitted_job_id(run)
    wait_for(lambda: (run / "checkpoint.pt").exists(), 120, "a checkpoint")
    if not requeue:  # as on a site without JobRequeue: the job ends with its node
        subprocess.run(["scontrol", "update", f"jobid={job}", "requeue=0"], check=True)
    subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=down", "reason=opd-test"], check=True)
    down = time.time()
    time.sleep(3)
    # back up (slurmd may have re-registered it already: ReturnToService=2)
    subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=resume"], capture_output=True)
    return job, down


def test_a_node_taken_down_mid_job_requeues_and_the_run_finishes_every_step_once(slurm_cluster, tmp_path,
                                                                                 node_back_up):
    """The node goes down once the run has written its first checkpoint (step 5); the run is what this machine
    trains in 20 s alone (steps_in), so it cannot end before its node does (a second or two later)."""
    steps = steps_in(20, tmp_path)
    spec = toy_spec(tmp_path, steps=steps)
    reference = straight_run(spec, tmp_path / "straight")
    run = tmp_path / "run"
    result = {}
    t = threading.Thread(target=lambda: result.update(meta=launch.run_train(
        spec, run, {"launcher": "slurm", "slurm": SITE})))
    t.start()
    job, _ = take_node_down_mid_job(run, requeue=True)
    t.join(timeout=900)
    assert not t.is_alive()
    meta = result["meta"]
    assert meta["status"] == "complete" and meta["attempts"] == 2 and meta["slurm_job_ids"] == [job, job]
    reference.join(timeout=900)
    same_steps(run, tmp_path / "straight", steps)


def test_a_node_failure_slurm_does_not_requeue_fails_within_dead_after_naming_the_state(slurm_cluster, tmp_path,
                                                                                         node_back_up):
    spec = toy_spec(tmp_path, steps=2000)
    run = tmp_path / "run"
    t, err = train_in_background(spec, run)
    job, down = take_node_down_mid_job(run, requeue=False)
    t.join(timeout=120)
    assert not t.is_alive() and "e" in err
    # it gave Slurm dead_after_s to requeue the job (as it does from NODE_FAIL where JobRequeue allows), no more
    assert SITE["dead_after_s"] <= time.time() - down < SITE["dead_after_s"] + 15
    assert f"Slurm job {job} ended without a result (state NODE_FAIL, not requeued within 20 s)" in str(err["e"])
    assert not store.is_complete(run) and (run / "checkpoint.pt").exists()  # a rerun continues from here
    assert launch.slurm_state(job) == "NODE_FAIL"  # and it stays ended: no late requeue trains unobserved


def test_a_verl_k_run_gets_verls_deadline_from_the_real_slurm_job(slurm_cluster, tmp_path):
    """A k > 0 verl run saves before its time limit through verl's own deadline save: the job reads its end from
    Slurm (scontrol) and the signal lead from the batch script submitit wrote (--signal=USR2@N), and verl's
    should_save_ckpt_esi (utils/checkpoint/checkpoint_manager.py:262-284) then asks for a save once the time left
    is within a step, 60 s and the margin, not before. Through the real Slurm: a job of a 5-minute limit."""
    from opd.backends.verl import gpu
    from opd.spec import Slurm
    shape = Slurm.of({**SITE, "time_min": 5, "signal_delay_s": 100})
    submitted = time.time()
    env = launch.submit_and_wait(gpu.deadline_env, (), tmp_path, shape, name="deadline")
    deadline = float(env[gpu.DEADLINE_VAR])
    # Slurm's end is the job's start + 5 min (to the second); the save time is 100 s before it
    assert submitted + 300 - 100 - 5 <= deadline <= time.time() + 300 - 100 + 1
    from verl.utils.checkpoint.checkpoint_manager import should_save_ckpt_esi
    import os
    from unittest import mock
    with mock.patch.dict(os.environ, env):  # what the Ray workers get through verl's runtime_env
        left = deadline - time.time()
        assert not should_save_ckpt_esi(max_steps_duration=max(1.0, left - 60 - 60 - 30), redundant_time=60)
        assert should_save_ckpt_esi(max_steps_duration=left, redundant_time=60)
