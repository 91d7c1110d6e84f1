"""What a Slurm site must provide before a verl job holds a node (issue #41): the driver check, model and data
locations, the pre-submission presence check, speculative rows, checkpoint retention and disk, the cost report.
CPU only. The one stand-in is `nvidia-smi` (no NVIDIA driver exists here): a script printing a driver version."""
import copy
import json
import os
import stat
from pathlib import Path

import pytest

from opd import config as C
from opd import launch
from opd.backends.verl import checkpoints, cost, plan, site
from opd.spec import Experiment, Student


def fake_nvidia_smi(tmp_path, version: str) -> str:
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\necho {version}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_a_driver_too_old_for_cuda_13_fails_in_the_jobs_first_seconds(tmp_path, monkeypatch):
    old = site.driver_version(fake_nvidia_smi(tmp_path, "570.124.06"))
    assert old == (570, 124, 6)
    (msg,) = site.driver_errors(cuda="13.0", driver=old)
    assert "570.124.06 is older than 580.65.06" in msg and "CUDA 13" in msg and "docs/cluster.md" in msg
    assert site.driver_errors(cuda="13.0", driver=(580, 82, 7)) == []
    assert site.driver_errors(cuda="12.8", driver=old) == []  # a CUDA 12 build runs on it
    assert "no NVIDIA driver" in site.driver_errors(cuda="13.0", driver=None)[0]
    assert "CPU build" in site.driver_errors(cuda="", driver=(580, 82, 7))[0]
    # the jobs' entry: nvidia-smi on PATH reports the old driver; this torch's CUDA build decides the minimum
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    import torch
    if torch.version.cuda and int(torch.version.cuda.split(".")[0]) >= 13:
        with pytest.raises(RuntimeError, match="bf16.r1-7b.s0: the NVIDIA driver 570.124.06"):
            site.check_driver("bf16.r1-7b.s0")
    else:  # a CPU torch: the job refuses to start at all, saying why
        with pytest.raises(RuntimeError, match="bf16.r1-7b.s0: .*(CPU build|older)"):
            site.check_driver("bf16.r1-7b.s0")
    from opd.backends.verl import admission_job
    with pytest.raises(RuntimeError, match="admission x.r1-7b"):  # before vLLM is imported
        admission_job(None, tmp_path / "x.r1-7b.parquet")


def test_models_are_a_folder_made_absolute_or_an_org_name_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a job's working directory is not the repository: relative means the repository's
    assert site.location("results/toy/_models") == ("folder", str(site.ROOT / "results/toy/_models"))
    assert site.location(str(tmp_path)) == ("folder", str(tmp_path))
    assert site.location("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B") == ("hub", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")
    for bad in ("GT-Llama-3.2-3B-Instruct-MATH", "./missing/model", str(tmp_path / "missing"), "a/b/c"):
        with pytest.raises(ValueError, match="neither an existing folder"):
            site.location(bad)
    assert site.data_path("data/train.parquet") == str(site.ROOT / "data/train.parquet")


def paper_cfg():
    return copy.deepcopy(C.load())


def test_the_llama_teacher_as_the_paper_names_it_is_refused_before_any_job():
    cfg = paper_cfg()
    e = cfg["experiments"]["paper"]
    e["students"]["llama-3b"] = {"model": "meta-llama/Llama-3.2-3B-Instruct", "teacher": "GT-Llama-3.2-3B-Instruct-MATH",
                                 "layers": 28, "n_params": 3.21e9, "family": "llama"}
    e["rows"][0]["students"].append("llama-3b")
    with pytest.raises(C.ConfigError, match=r"field 'students.llama-3b.teacher'.*'GT-Llama-3.2-3B-Instruct-MATH' is "
                                            r"neither an existing folder"):
        C.validate(cfg)


def test_a_speculative_row_without_a_draft_is_refused_and_with_one_names_it():
    cfg = paper_cfg()
    e = cfg["experiments"]["paper"]
    e["rows"][1]["speculative"] = True
    with pytest.raises(C.ConfigError, match=r"row 2 .*field 'speculative'.*\['r1-7b', 'r1-1p5b'\] name no draft model"):
        C.validate(cfg)
    for s in e["students"].values():
        s["eagle3"] = "yuhuili/EAGLE3-draft"  # any org/name: the validation checks the form, prefetch the download
    C.validate(cfg)
    from opd.backends.verl.overrides import run_overrides
    run = next(r for r in C.runs(cfg, "paper") if r.row.name == e["rows"][1]["name"])
    (spec,) = [o for o in run_overrides(cfg, run) if "speculative_config" in o]
    assert "'model':'yuhuili/EAGLE3-draft'" in spec.replace(" ", "") or "model:'yuhuili/EAGLE3-draft'" in spec
    del e["verl"]["speculative"]
    with pytest.raises(C.ConfigError, match="no verl.speculative"):
        C.validate(cfg)


def test_a_job_whose_model_or_data_is_not_on_this_machine_is_not_submitted(tmp_path, monkeypatch):
    """Before sbatch (none exists here, so reaching it would fail differently): a Hub model not in the local cache
    and a missing data file are named with the command that fixes each."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    e = Experiment.of(C.load(), "paper")
    from opd import dag
    spec = dag.train_spec(e, e.runs()[0], {})
    with pytest.raises(launch.JobFailed) as err:
        launch.run_train(spec, tmp_path / "run", {"launcher": "slurm", "slurm": {}})
    msg = str(err.value)
    assert "bf16.r1-7b.s0: not submitted" in msg and "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B" in msg
    assert "python -m opd.backends.verl prefetch" in msg and "data/train.parquet is missing" in msg
    assert not (tmp_path / "run" / "slurm").exists()  # nothing was submitted
    # a local folder is present as it is; prefetch downloads Hub models only (the download is the stand-in here)
    got = site.prefetch(e, download=lambda name: tmp_path / name)
    assert set(got) == {m for s in e.students.values() for m in site.models(s).values()}


def verl_checkpoint(folder: Path, n: int, world: int = 2) -> Path:
    """A checkpoint in verl's FSDP layout (fsdp_checkpoint_manager.py:316-318) with one-byte files."""
    actor = folder / f"global_step_{n}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for r in range(world):
        for kind in ("model", "optim", "extra_state"):
            (actor / f"{kind}_world_size_{world}_rank_{r}.pt").write_bytes(b"x")
    (folder / f"global_step_{n}" / "data.pt").write_bytes(b"x")
    (folder / "latest_checkpointed_iteration.txt").write_text(str(n))
    return actor


def test_retention_keeps_one_optimizer_state_and_the_evaluated_weights_until_their_evaluation(tmp_path):
    ck = tmp_path / "verl_checkpoints"
    for n in (10, 20, 30, 40):  # resume checkpoints every 10 steps, evaluated steps every 40
        verl_checkpoint(ck, n)
    assert checkpoints.prune_training(ck, evaluated={40, 80}) == [ck / f"global_step_{n}" for n in (10, 20, 30)]
    for n in (50, 60, 70, 80):
        verl_checkpoint(ck, n)
    checkpoints.prune_training(ck, evaluated={40, 80})
    assert sorted(checkpoints.saved(ck)) == [40, 80]
    assert sorted(p.name for p in (ck / "global_step_40" / "actor").glob("*.pt")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]  # its optimizer went; the latest keeps its own
    assert len(list((ck / "global_step_80" / "actor").glob("optim_*"))) == 2
    merged = tmp_path / "hf" / "step_40"
    merged.mkdir(parents=True)
    assert checkpoints.prune_evaluated(ck, 40, merged, finished=False) == [ck / "global_step_40", merged]
    # the latest stays while the run may resume, and goes once the run has finished training
    assert checkpoints.prune_evaluated(ck, 80, tmp_path / "hf" / "step_80", finished=False) == []
    assert checkpoints.prune_evaluated(ck, 80, tmp_path / "hf" / "step_80", finished=True) == [ck / "global_step_80"]


def test_a_runs_disk_with_and_without_retention():
    e = Experiment.of(C.load(), "paper")
    run = next(r for r in e.runs() if r.run_id == "bf16.r1-7b.s0")
    n = e.students["r1-7b"].params()
    d = checkpoints.disk(e.students["r1-7b"], e.settings(run.row), 0, e.verl)
    # 5 evaluated steps' fp32 weights, two optimizer states and one resume checkpoint's weights while training
    assert d.training == pytest.approx((5 * 4 + 2 * 8 + 4) * n) and d.after == 0
    kept = checkpoints.disk(e.students["r1-7b"], e.settings(run.row), 0, e.verl.with_(keep_checkpoints=True))
    assert kept.training == pytest.approx(20 * 12 * n)  # every 10 steps' model + optimizer (verl.resume_every)
    assert kept.training / 1e9 == pytest.approx(20 * 91.2, rel=0.01)  # the 91 GB per 7B checkpoint


def test_the_cost_command_prints_each_job_kinds_request_gpu_hours_and_disk(capsys):
    from opd.backends.verl.__main__ import main
    assert main(["cost", "--experiment", "paper"]) == 0
    out = capsys.readouterr().out
    assert "| heldout | 1 | 1 | 16 | 96 | 4 h | no |" in out and "| train (k = 0) | 2 | 8 | 128 | 800 | 8 h | yes |" in out
    assert "| total" in out and "checkpoint disk (retention on)" in out and "attention mask (sdpa)" in out
    e = Experiment.of(C.load(), "paper")
    # measured times (the smoke's --times file) replace the estimates; a run longer than the time limit pays
    # its restarts and what each cut loses
    h = cost.gpu_hours(e, {"train_h": {"*": 20.0}})
    assert h["  of which requeue loss"] > 0
    limit = e.slurm.time_min / 60
    hours, n = cost.attempts(20.0, limit, 10 / 60, lost_h=0.5)
    assert n == 3 and hours == pytest.approx(20.0 + 2 * (10 / 60 + 0.5))


def test_the_attention_mask_at_the_papers_lengths():
    e = Experiment.of(C.load(), "paper")
    m = plan.attention_mask_gib(e.train, "sdpa")
    assert m["update"] == pytest.approx(34816 ** 2 * 2 / 2 ** 30) and m["log_prob"] == pytest.approx(52224 ** 2 * 2 / 2 ** 30)
    assert plan.attention_mask_gib(e.train, "flash_attention_2") == {"update": 0.0, "log_prob": 0.0}


def test_the_network_settings_reach_every_ray_process_through_verls_runtime_env():
    from opd.backends.verl import gpu
    from opd.backends.verl.overrides import run_overrides
    from opd.spec import Network
    cfg = paper_cfg()
    cfg["experiments"]["paper"]["verl"]["network"] = {"interface": "lo", "dashboard": True}
    C.validate(cfg)
    net = Experiment.of(cfg, "paper").verl.network
    assert net == Network.of({"interface": "lo", "dashboard": True})
    assert gpu.network_env(net) == {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
    assert gpu.node_ip(net) == ["--node-ip-address=127.0.0.1"]
    run = C.runs(cfg, "paper")[0]
    ov = run_overrides(cfg, run, env=gpu.network_env(net))
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.NCCL_SOCKET_IFNAME='lo'" in ov
    assert gpu.network_env(None) == {} and gpu.node_ip(Network()) == []
    json.dumps(Experiment.of(cfg, "paper").verl.written())  # the spec stays JSON
