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

from conftest import ROOT, edit_config, planned, planned_runs, snakemake
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
    base = ROOT / "results" / "toy" / "_models" / "qwen-s"
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


def test_toy_rows_end_to_end_through_profile_slurm_two_in_flight(slurm_cluster, clone):
    edit_config(clone, lambda c: c["experiments"]["toy"]["rows"].extend(
        [{"name": "slurm-a", "noise_sigma": 0.01, "seeds": [0]}, {"name": "slurm-b", "noise_sigma": 0.02, "seeds": [0]}]))
    args = ("--profile", "slurm", "--config", "experiment=toy", "--resources", "slurm_jobs=2")
    assert planned_runs(planned(clone, *args)) == {"slurm-a.qwen-s.s0", "slurm-b.qwen-s.s0"}
    snakemake(clone, *args)
    spans = []
    for name in ("slurm-a", "slurm-b"):
        run = clone / "results" / "toy" / "runs" / f"{name}.qwen-s.s0"
        meta = json.loads((run / "run.json").read_text())
        assert meta["status"] == "complete" and meta["launcher"] == "slurm" and len(meta["slurm_job_ids"]) == 1
        assert store.read_table(run / "steps.parquet")["step"].tolist() == list(range(100))
        assert list((run / "slurm").glob("*_log.out"))  # the job's own log lands in the run folder
        spans.append([datetime.fromisoformat(meta["start"]), datetime.fromisoformat(meta["end"])])
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, "the two runs did not overlap in time"
    assert (clone / "figures" / "toy" / "budget.png").exists()
    assert "slurm-a" in (clone / "figures" / "toy" / "tables" / "runs.md").read_text()


def test_requeue_after_timeout_signal_resumes_without_lost_or_duplicated_steps(slurm_cluster, tmp_path):
    spec = toy_spec(tmp_path, steps=60)
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
    steps = store.read_table(run / "steps.parquet")
    assert steps["step"].tolist() == list(range(60))
    from opd.backends.tiny.trainer import train_run
    train_run(spec, tmp_path / "straight")
    straight = store.read_table(tmp_path / "straight" / "steps.parquet")
    pd.testing.assert_frame_equal(steps.drop(columns=TIMING), straight.drop(columns=TIMING))


def test_scancelled_job_fails_fast_and_clearly(slurm_cluster, tmp_path):
    spec = toy_spec(tmp_path, steps=2000, checkpoint_every=5)
    run = tmp_path / "run"
    err = {}

    def go():
        try:
            launch.run_train(spec, run, {"launcher": "slurm", "slurm": SITE})
        except launch.JobFailed as e:
            err["e"] = e
    t = threading.Thread(target=go)
    t.start()
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
