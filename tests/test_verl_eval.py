"""The verl backend's evaluation jobs by design (issue #28: GPU-hours): the training job ends with training, the
held-out evaluation is one 1-GPU job per evaluated step (the student's step 0 once per student), the KV
attribution keeps one part per case, and a job that times out is requeued and keeps what it did. The GPU parts
(vLLM, transformers) are replaced by recorders here; tests/test_vllm.py runs them in a real engine."""
import os
import pickle
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import jobs_in, snakemake
from helpers import load_script
from opd import config as C
from opd import dag, launch, store
from opd.backends.verl import evaluate
from opd.spec import Experiment, HeldoutSpec, KVAttributionSpec


@pytest.fixture(scope="module")
def paper():
    return Experiment.of(C.load(), "paper")


def test_the_paper_dag_evaluates_each_step_in_a_job_of_its_own(built_clone, paper):
    """`snakemake -n` of the paper: no training job writes heldout.parquet; each run's evaluated steps are jobs
    of their own after its training (155 for the 31 runs), the students' step 0 two jobs, and a local gather
    per run writes the run's heldout.parquet; each evaluation job is one GPU on Slurm."""
    r = snakemake(built_clone, "-n", "-p", "--config", "experiment=paper")  # a copy: a dry run writes caches
    jobs = jobs_in(r)
    count = lambda rule: sum(1 for j, _ in jobs if j == rule)  # noqa: E731
    runs = paper.runs()
    assert count("train") == len(runs) == 31  # the llama-3b student is out until its teacher is named (config.yaml)
    assert count("heldout_step") == sum(len(paper.settings(run.row).eval_steps()) - 1 for run in runs) == 155
    assert count("heldout_base") == len({run.student for run in runs}) == 2
    assert count("heldout_gather") == len(runs)
    text = r.stdout + r.stderr
    for block in re.split(r"\n(?=(?:local)?rule )", text):
        if block.startswith("rule train:"):
            outputs = re.search(r"output: (.*)", block).group(1)
            assert "heldout" not in outputs and "steps.parquet" in outputs and "run.json" in outputs
        if block.startswith("rule heldout_step:"):
            assert "run.json" in re.search(r"input: (.*)", block).group(1)  # after the run's training
            assert "opd.cli heldout --spec" in block
    shape = launch.single_job_shape("verl", paper.launcher.slurm, "heldout")
    assert (shape.nodes, shape.gpus_per_node, shape.tasks_per_node) == (1, 1, 1)
    # its own sizes, not the training job's 64 CPUs, 400 GB and 8 h (config.yaml's paper slurm.jobs)
    assert (shape.cpus_per_task, shape.mem_gb, shape.time_min) == (16, 96, 240)


def test_one_spec_per_evaluated_step_and_one_for_the_students_own_evaluation(paper):
    """Every run's step 0 is its student's evaluation (the same spec, hence one job); later steps name verl's
    checkpoint folder of that step (per parameter version for k > 0) and are the run's own."""
    seen = {}
    for run in paper.runs():
        train = dag.train_spec(paper, run, {})
        assert dag.heldout_spec(train, 0, "R") == dag.heldout_base_spec(paper, run.student)
        for step in paper.settings(run.row).eval_steps()[1:]:
            s = dag.heldout_spec(train, step, f"runs/{run.run_id}")
            k = max(1, run.row.staleness)
            assert s.checkpoint == f"runs/{run.run_id}/verl_checkpoints/global_step_{step // k}/actor"
            assert s.merged == f"runs/{run.run_id}/hf/step_{step}" and s.run_id == run.run_id
            assert HeldoutSpec.from_json(s.to_json()) == s and pickle.loads(pickle.dumps(s)) == s
            seen[s.name] = s
    assert len(seen) == 155
    lr = next(r for r in paper.runs() if r.name == "bf16")
    import dataclasses
    other = dataclasses.replace(dag.train_spec(paper, lr, {}), settings=paper.train.with_(lr=3e-6))
    assert dag.heldout_spec(other, 0, "R") == dag.heldout_base_spec(paper, lr.student)  # a row's lr: same step 0
    train = dag.train_spec(paper, lr, {})
    moved = dataclasses.replace(train, verl=train.verl.with_(layout=train.verl.layout.with_(teacher_tp=2),
                                                             logger=("console",)))
    assert dag.heldout_spec(moved, 40, "R") == dag.heldout_spec(train, 40, "R")  # the layout reruns no evaluation
    with pytest.raises(ValueError, match="step 0 evaluates the student"):
        dataclasses.replace(dag.heldout_base_spec(paper, lr.student), step=40)


def _part(step, n=3, offset=0.0):
    return pd.DataFrame({"step": step, "prompt_id": np.arange(n), "kl": offset + np.arange(n) / 10,
                         "kl_sampled": 0.0, "n_tokens": 7, "correct": 0.5})


def test_a_runs_heldout_file_joins_its_parts_in_step_order(tmp_path):
    parts = []
    for step in (40, 0, 80):
        parts.append(tmp_path / f"{step}.parquet")
        store.write_table(_part(step, offset=step), parts[-1])
    out = tmp_path / "run" / "heldout.parquet"
    evaluate.gather_heldout(parts, out, run_id="bf16.r1-7b.s0", config="bf16", student="r1-7b", seed=0)
    got = store.read_table(out, store.HELDOUT)
    assert got["step"].tolist() == [0] * 3 + [40] * 3 + [80] * 3 and set(got["run_id"]) == {"bf16.r1-7b.s0"}
    assert got.loc[got["step"] == 40, "kl"].tolist() == pytest.approx([40, 40.1, 40.2])
    evaluate.gather_heldout([], out, run_id="x", config="x", student="s", seed=0)  # train.eval_every 0
    assert store.read_table(out, store.HELDOUT).empty
    with pytest.raises(ValueError, match="repeat a step"):
        evaluate.gather_heldout(parts + parts[:1], out, run_id="x", config="x", student="s", seed=0)


def _heldout_spec(tmp_path, step=40):
    e = Experiment.of(C.load(), "paper")
    run = next(r for r in e.runs() if r.name == "bf16")
    return dag.heldout_spec(dag.train_spec(e, run, {}), step, str(tmp_path / "run"))


def test_a_requeued_evaluation_scores_the_responses_its_first_attempt_generated(tmp_path, monkeypatch):
    """The first attempt generates, then dies while scoring (a timeout); the requeued attempt scores the kept
    responses without generating again. A new checkpoint of the step (a retrained run) generates afresh."""
    spec = _heldout_spec(tmp_path)
    merged = Path(spec.merged)
    merged.mkdir(parents=True)
    (merged / "config.json").write_text("{}")
    monkeypatch.setattr(evaluate, "policy_model", lambda s: str(merged))
    calls = {"generate": 0, "score": 0}

    def generate(s, model):
        calls["generate"] += 1
        return pd.DataFrame({"prompt_id": [0, 0, 1], "prompt": [[1, 2]] * 3, "response": [[3], [4, 5], [6]],
                             "text": ["a", "b", "c"]})

    fail = [True]

    def score(s, model, samples):
        calls["score"] += 1
        if fail and fail.pop():
            raise TimeoutError("Slurm's USR2: time limit")
        assert samples["response"].map(list).tolist() == [[3], [4, 5], [6]]
        return _part(s.step, n=2)

    monkeypatch.setattr(evaluate, "generate_heldout", generate)
    monkeypatch.setattr(evaluate, "score_heldout", score)
    out = tmp_path / "run" / "heldout" / "step_40.parquet"
    with pytest.raises(TimeoutError):
        evaluate.heldout_step_job(spec, out)
    assert not out.exists() and evaluate.samples_path(out).exists()
    evaluate.heldout_step_job(spec, out)
    assert calls == {"generate": 1, "score": 2}
    assert store.read_table(out).columns.tolist() == evaluate.PART_COLUMNS and not evaluate.samples_path(out).exists()
    assert not merged.exists()  # retention (verl.keep_checkpoints false): the evaluated step's weights are gone
    # the run is retrained (a new merge of the step), cut again after generating, then merged anew once more:
    # responses of the earlier weights must not be scored
    merged.mkdir(parents=True)
    (merged / "config.json").write_text('{"retrained": 1}')
    fail.append(True)
    with pytest.raises(TimeoutError):
        evaluate.heldout_step_job(spec, out)
    (merged / "config.json").write_text('{"retrained": true}')
    evaluate.heldout_step_job(spec, out)
    assert calls == {"generate": 3, "score": 4}


def test_a_steps_checkpoint_is_merged_once_atomically_and_again_when_retrained(tmp_path, monkeypatch):
    ckpt, merged = tmp_path / "verl_checkpoints" / "global_step_5" / "actor", tmp_path / "hf" / "step_40"
    ckpt.mkdir(parents=True)
    (ckpt / "model_world_size_1_rank_0.pt").write_text("w1")
    merges = []

    def run(cmd, check):
        target = Path(cmd[cmd.index("--target_dir") + 1])
        assert target != merged and target.parent == merged.parent  # built under another name, then renamed
        merges.append(cmd[cmd.index("--local_dir") + 1])
        if len(merges) == 2:
            (target / "config.json").write_text("half")
            raise RuntimeError("merge killed")
        (target / "config.json").write_text((ckpt / "model_world_size_1_rank_0.pt").read_text())
    monkeypatch.setattr(evaluate.subprocess, "run", run)
    assert evaluate.merged_checkpoint(ckpt, merged) == merged and (merged / "config.json").read_text() == "w1"
    evaluate.merged_checkpoint(ckpt, merged)
    assert len(merges) == 1  # up to date: not merged again
    time.sleep(0.01)
    (ckpt / "model_world_size_1_rank_0.pt").write_text("w2")
    later = time.time_ns() + 10**9
    os.utime(ckpt / "model_world_size_1_rank_0.pt", ns=(later, later))
    with pytest.raises(RuntimeError):
        evaluate.merged_checkpoint(ckpt, merged)
    assert (merged / "config.json").read_text() == "w1"  # a killed merge leaves the old folder whole
    assert [p.name for p in merged.parent.iterdir()] == ["step_40"]  # and no half-merged folder
    evaluate.merged_checkpoint(ckpt, merged)
    assert (merged / "config.json").read_text() == "w2" and len(merges) == 3
    import shutil
    shutil.rmtree(ckpt)  # checkpoints deleted to save space: the merged folder is what is left
    assert evaluate.merged_checkpoint(ckpt, merged) == merged
    with pytest.raises(FileNotFoundError, match="checkpoint of this step is missing"):
        evaluate.merged_checkpoint(ckpt, tmp_path / "hf" / "step_80")


def test_a_timed_out_kv_attribution_keeps_its_cases_and_the_requeued_job_skips_them(tmp_path, monkeypatch):
    """57 cases for a 28-layer student (every layer, each alone, all but each): the first attempt is cut after
    10 candidates; the requeued one samples only the other 47, rescores every case once, and writes the
    student's file with every case in order."""
    from opd.backends.verl import gpu
    e = Experiment.of(C.load(), "paper")
    spec = dag.kv_attribution_spec(e, "r1-7b", {}, ["fp8_e4m3"])
    assert isinstance(spec, KVAttributionSpec) and len(evaluate.attribution_cases(spec)) == 57
    sampled, rescored = [], []

    def candidate(s, row, messages, budget=[10]):
        if not budget[0]:
            raise TimeoutError("time limit")
        budget[0] -= 1
        sampled.append(row.name)
        return [([1, 2], [3, 4], [-0.5, -0.25])] * (s.prompts * s.responses)

    monkeypatch.setattr(gpu, "offline_messages", lambda s: [[{"role": "user", "content": "1+1"}]] * s.prompts)
    monkeypatch.setattr(gpu, "_candidate_samples", candidate)
    monkeypatch.setattr(gpu, "reference_engine", lambda s: "ref")

    def rescore(ref, seqs):
        rescored.append(len(seqs))
        return gpu.LogRatios(np.full(len(seqs), 0.1), np.full(len(seqs), 2, dtype=np.int64))
    monkeypatch.setattr(gpu, "rescore", rescore)
    out = tmp_path / "kv_attribution" / "r1-7b.parquet"
    with pytest.raises(TimeoutError):
        evaluate.kv_attribution_job(spec, out)
    assert len(sampled) == 10 and not out.exists()
    monkeypatch.setattr(gpu, "_candidate_samples", lambda s, row, m: candidate(s, row, m, [100]))
    evaluate.kv_attribution_job(spec, out)
    assert len(sampled) == 57 == len(set(sampled)) and len(rescored) == 57
    got = store.read_table(out)
    assert len(got) == 57 * spec.prompts * spec.responses
    assert got.groupby(["mode", "layer"], sort=False).ngroups == 57 and got["mode"].iloc[0] == "all"
    evaluate.kv_attribution_job(spec, out)  # every part there: nothing sampled or rescored again
    assert len(sampled) == 57 and len(rescored) == 57


def test_a_slurm_job_that_times_out_is_requeued_with_the_same_call(tmp_path):
    """What submitit calls on Slurm's timeout signal: the job asks to be resubmitted with its own arguments
    (the training job does so already: launch.CheckpointableTrain)."""
    import submitit
    from opd.backends.verl import heldout_step_job
    job = launch.CheckpointableJob(heldout_step_job)
    spec, out = _heldout_spec(tmp_path), tmp_path / "step_40.parquet"
    again = job.checkpoint(spec, out)
    assert isinstance(again, submitit.helpers.DelayedSubmission)
    assert again.function is job and again.args == (spec, out)
    assert pickle.loads(pickle.dumps(job)).fn is heldout_step_job


def test_cluster_cost_counts_the_evaluation_on_its_own_gpus(paper):
    """benchmarks/cluster_cost.py: after the change the evaluation's GPU-hours are its 157 one-GPU jobs and no
    allocated GPU idles; before, every evaluation hour held the whole allocation (8 or 12 GPUs); measured times
    replace the estimates."""
    cc = load_script("benchmarks/cluster_cost.py")
    times = {k: {s: 0.5 for s in paper.students} for k in ("eval_step_h", "merge_h", "eval_job_start_h")}
    times["train_h"] = {s: 1.0 for s in paper.students}
    c = cc.costs(paper, times)
    assert c["after"]["held-out evaluation"] == pytest.approx(155 * 1.5 + 2 * 1.0) and c["after"][cc.IDLE] == 0
    from opd.backends.verl.layout import layout
    gpus = {r.run_id: layout(paper.verl, r.row).gpus for r in paper.runs()}  # 8; 12 for k > 0; 4 without teacher
    assert sorted(set(gpus.values())) == [4, 8, 12]
    # 1 h of training, 6 steps and 5 merges of 0.5 h fit the 8-h limit: the evaluation held every GPU 5.5 h
    assert c["before"]["held-out evaluation"] == pytest.approx(5.5 * sum(gpus.values()))
    assert c["before"][cc.IDLE] == pytest.approx(5.5 * sum(g - 3 for g in gpus.values()))  # 3 of them worked
    assert c["before"]["training"] == c["after"]["training"] == pytest.approx(sum(gpus.values()))
    assert "eval_step_h" not in c["sources"] and "kv_case_h" in c["sources"]
    est = cc.costs(paper)
    assert cc.total(est["after"]) < cc.total(est["before"]) and any("KV attribution of r1-7b" in n for n in est["notes"])
