"""The verl backend's CPU-checkable parts: every paper run's overrides compose against verl's own Hydra
config and pass the checks verl's trainer makes before it asks Ray for GPUs (verl 0.9.1 installed with
its CPU-side dependencies; vLLM is not in this environment), the JSONL log parser, the weight-sync hook's
numerics and the data preparation. tests/test_vllm.py runs the vLLM jobs in a real engine."""
import copy
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from opd import config as C
from opd import quant
from opd.backends.verl import compose, data, hook, logparse, plan
from opd.backends.verl.__main__ import main as verl_cli
from opd.backends.verl.overrides import ASYNC_ENTRY, entry_point, overrides, run_overrides
from opd.spec import Experiment
from helpers import load_script

VERL = compose.VERL
FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent


def verl_compose(ov: list[str], asynchronous: bool):
    """verl's config for `ov`, composed as its entry point composes it (one helper: opd.backends.verl.compose)."""
    return compose.compose(ov, asynchronous)


@pytest.fixture(scope="module")
def paper():
    cfg = C.load()
    out = {}
    for r in C.runs(cfg, "paper"):
        out[r.run_id] = (r, run_overrides(cfg, r, run_dir=f"runs/{r.run_id}"))
    return out


def test_every_paper_run_composes_against_verls_config(paper, paper_composed):
    """Each run as conftest.paper_composed composed it (with hostile paths: tests/test_hydra_quoting.py)."""
    assert len(paper) >= 17 + 3 + 2 and paper_composed.keys() == paper.keys()
    for run_id, (_, _, r, run_dir, _, cfg) in paper_composed.items():
        k = r.row.staleness
        rollout = cfg.actor_rollout_ref.rollout
        assert rollout.n == 8 and rollout.temperature == 1.0 and cfg.data.max_response_length == 16384
        assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 8
        assert cfg.algorithm.rollout_correction.bypass_mode is False  # decoupled: the trainer recomputes log p_old
        assert rollout.tensor_model_parallel_size == 1  # verl's default is 2 (rollout.yaml:64)
        # verl runs inside the run folder: config.yaml's relative data paths and run folder must reach it absolute
        assert all(Path(f).is_absolute() for f in [*cfg.data.train_files, *cfg.data.val_files])
        assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == f"{run_dir}/verl.0.jsonl"
        if k == 0:
            assert cfg.trainer.total_training_steps == 200 and cfg.data.train_batch_size == 8
            # verl.resume_every: the synchronous trainer saves every 10 steps (the evaluated 40s among them)
            assert cfg.actor_rollout_ref.hybrid_engine and cfg.trainer.save_freq == 10
        else:
            assert not cfg.actor_rollout_ref.hybrid_engine and cfg.data.train_batch_size == 0
            assert cfg.rollout.total_rollout_steps == 200 * 8 and cfg.async_training.trigger_parameter_sync_step == k
            assert cfg.trainer.save_freq == 40 // k and cfg.trainer.test_freq == 200 // k + 1
            assert cfg.trainer.esi_redundant_time == 60  # the margin of verl's deadline save (gpu.deadline_env)
        if r.row.algorithm == "opd":
            loss = cfg.distillation.distillation_loss
            assert cfg.distillation.enabled and loss.loss_mode == "k1" and loss.use_policy_gradient
            assert not loss.use_task_rewards
        else:
            assert not cfg.distillation.enabled and cfg.algorithm.adv_estimator == "grpo"
        vllm = OmegaConf.to_container(rollout.engine_kwargs.vllm)
        if r.row.kv_cache != "none":
            assert vllm["kv_cache_dtype"] == r.row.kv_cache
        native = plan.native_quantization(r.row)
        assert rollout.quantization == native  # verl's own FP8 kernels for the pair vLLM runs, else None
        if native:
            assert (r.row.weights, r.row.activations) == ("fp8_block", "fp8_group128")
        if (r.row.weights != "none" and not native) or r.row.noise_sigma:
            assert vllm["worker_extension_cls"] == "opd.backends.verl.hook.WeightNumerics"
            assert vllm["additional_config"]["opd_numerics"]["weights"] == (r.row.weights if not native else "none")
        else:  # vLLM loads the synced weights as they are (and quantizes them itself where native)
            assert "worker_extension_cls" not in vllm
    assert sum(plan.native_quantization(r.row) is not None for r, _ in paper.values()) >= 1


def verl_startup_checks(cfg) -> None:
    """verl's synchronous start-up checks (opd.backends.verl.compose.startup_checks, which the smoke runs too)."""
    compose.startup_checks(cfg)


@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_every_synchronous_paper_run_passes_verls_own_startup_checks(paper, paper_composed):
    """Without token-budgeted micro-batches every paper run failed here ("Please set at least one of
    'actor.ppo_micro_batch_size' or ..."): caught on CPU instead of after a GPU allocation. (The fully-async
    entry point does not call validate_config: test_fully_async_trainer_and_rollouter_accept_the_k_rows.)"""
    checked = 0
    for run_id, (_, _, r, _, _, cfg) in paper_composed.items():
        if entry_point(r.row) != ASYNC_ENTRY:
            verl_startup_checks(copy.deepcopy(cfg))  # a copy: the composed config is the session's
            checked += 1
    assert checked >= 17
    r, ov = paper["bf16.r1-7b.s0"]
    with pytest.raises(Exception, match="micro_batch_size"):
        verl_startup_checks(verl_compose(ov + ["actor_rollout_ref.actor.use_dynamic_bsz=False"], False))


def test_kv_skip_layers_and_staleness_mapping(paper):
    r, ov = paper["kv-fp8-l0.r1-7b.s0"]
    cfg = verl_compose(ov, False)
    assert list(cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype_skip_layers) == ["0"]
    r, ov = paper["stale-k4.r1-7b.s1"]
    cfg = verl_compose(ov, True)
    assert cfg.async_training.trigger_parameter_sync_step == 4 and cfg.async_training.staleness_threshold == 0
    assert cfg.data.seed == 1


def test_an_unknown_key_fails_to_compose(paper):
    r, ov = paper["bf16.r1-7b.s0"]
    with pytest.raises(Exception, match="not_a_key"):
        verl_compose(ov + ["actor_rollout_ref.rollout.not_a_key=1"], False)


def load_smoke():
    return load_script("benchmarks/verl_smoke.py")


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory):
    """The smoke's inputs as its `prepare` writes them: the toy models exported, the toy task as verl parquet."""
    out = tmp_path_factory.mktemp("smoke")
    load_smoke().prepare(out)
    return out


@pytest.mark.filterwarnings("ignore")
def test_the_gpu_smoke_script_on_1_2_and_8_gpus(smoke_out, monkeypatch):
    """benchmarks/verl_smoke.py is a site's first command: on 1, 2 and 8 GPUs its default rows (one
    synchronous, one k = 2) either fit in verl 0.9.1's pools or are refused with the reason; what fits
    composes (opd.backends.verl.compose, as verl's entry point composes it), passes verl's startup checks (the
    smoke's own check_commands: the synchronous trainer's validate_config; here also the fully-async trainer's and
    rollouter's __init__ on the exported toy model and task), and fills the node's GPUs with TP 1 replicas; the
    context fits the toy models (prompt + response = their max_position_embeddings). The rows start Ray with the
    same settings (they share one Ray session: verl's run_ppo starts Ray only for the first), and each finds its
    log by its experiment name under one VERL_FILE_LOGGER_ROOT. On one GPU both rows run: Ray declares 2 GPU slots
    that are GPU 0, the rollout shares the trainer's."""
    from opd.backends.tiny import model as M
    from opd.backends.verl.overrides import shared_log
    tmp_path = smoke_out
    smoke = load_smoke()
    student = M.load(Path(__file__).parent.parent / "results/lean/_models/qwen-s/student.pt")  # the toy's shape
    sync, k2 = smoke.ROWS
    assert sync.get("staleness", 0) == 0 and k2["staleness"] == 2
    fits = {}
    for gpus in (1, 2, 8):
        for row in smoke.ROWS:
            k = row.get("staleness", 0)
            try:
                entry, ov = smoke.command(tmp_path, row, gpus)
            except ValueError as e:
                assert f"needs {3 if k else 2} GPUs" in str(e) and f"this node has {gpus}" in str(e)
                continue
            fits[gpus, row["name"]] = pools = smoke.plan(gpus, k)
            assert pools.rollout_replicas == (pools.rollout or pools.trainer).gpus
            assert (8 * 8) % pools.trainer.gpus == 0  # the step's 64 responses split evenly over the trainer
            cfg = verl_compose(ov, entry == ASYNC_ENTRY)
            env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
            assert env.VERL_FILE_LOGGER_ROOT == str(tmp_path) and "VERL_FILE_LOGGER_PATH" not in env
            assert shared_log(str(tmp_path), row["name"], "toy", 0) == str(
                tmp_path / cfg.trainer.project_name / f"{cfg.trainer.experiment_name}.jsonl")
            if gpus == 1:  # Ray's 2 slots, both GPU 0; the k > 0 row's rollout: hybrid replicas, no pool of its own
                assert pools.gpus == smoke.SHARED_SLOTS == cfg.ray_kwargs.ray_init.num_gpus and not pools.rollout
                assert env.CUDA_VISIBLE_DEVICES == "0"
                assert cfg.ray_kwargs.ray_init.address == "local"  # never another job's cluster
                engines = [cfg.actor_rollout_ref.rollout.gpu_memory_utilization,
                           cfg.distillation.teacher_models.teacher_model.inference.gpu_memory_utilization]
                assert sum(engines) <= 0.5 and cfg.actor_rollout_ref.rollout.enforce_eager
                if k:
                    assert cfg.async_training.use_dynamic_resource_scheduling and cfg.rollout.nnodes == 0
            else:
                assert pools.gpus == gpus
            assert cfg.trainer.total_training_steps == smoke.STEPS if not k else \
                cfg.rollout.total_rollout_steps == smoke.STEPS * 8
            assert cfg.data.max_prompt_length + cfg.data.max_response_length <= student.cfg.max_seq_len
            if k:
                _, rollouter_mod = async_modules()
                cfg, tok, trainer = async_parts(cfg, tmp_path / "log.jsonl", monkeypatch)
                rollouter_mod.FullyAsyncRollouter.__ray_actor_class__(config=cfg, tokenizer=tok, device_name="cuda")
    assert set(fits) == {(1, sync["name"]), (1, k2["name"]), (2, sync["name"]), (8, sync["name"]), (8, k2["name"])}
    # the smoke's own pre-GPU checks: composition, verl's synchronous checks, one set of Ray settings
    for gpus in (1, 8):
        cfgs = smoke.check_commands(tmp_path, smoke.ROWS, gpus)
        assert list(cfgs) == [sync["name"], k2["name"]]
    command = smoke.command

    def with_extra(extra, rows):  # the smoke's command with `extra` overrides for the named rows
        def patched(out, row, gpus):
            entry, ov = command(out, row, gpus)
            return entry, ov + (extra if row["name"] in rows else [])
        monkeypatch.setattr(smoke, "command", patched)

    with_extra(["+ray_kwargs.ray_init.runtime_env.env_vars.X=1"], {k2["name"]})
    with pytest.raises(ValueError, match=r"\['stale-k2'\] start Ray differently"):
        smoke.check_commands(tmp_path, smoke.ROWS, 1)
    with_extra(["actor_rollout_ref.actor.use_dynamic_bsz=False"], {sync["name"]})
    with pytest.raises(Exception, match="micro_batch_size"):  # verl's own check, run by the smoke before any GPU
        smoke.check_commands(tmp_path, [sync], 1)
    assert smoke.STEPS >= 3 and smoke.STEPS % k2["staleness"] == 0
    assert (fits[8, k2["name"]].trainer.gpus, fits[8, k2["name"]].rollout.gpus, fits[8, k2["name"]].teacher.gpus) == (4, 2, 2)
    # verl cannot score the toy task itself: it loads our reward function by path, as its reward loop does
    from verl.trainer.ppo.reward import get_custom_reward_fn
    fn = get_custom_reward_fn(verl_compose(command(tmp_path, sync, 2)[1], False))
    assert fn(data_source="opd-toy", solution_str="3+5=8,8+9=17;17", ground_truth="17", extra_info={}) == 1.0
    assert fn(data_source="opd-toy", solution_str="3+5=8,8+9=17;16", ground_truth="17", extra_info={}) == 0.0
    # the fp8 row: vLLM's block-FP8 shape rule refuses the toy's fused qkv (64 + 32 + 32), not a 128-multiple model
    assert "qkv [64, 32, 32]" in smoke.fp8_refusal(tmp_path / "student")
    wide = tmp_path / "wide"
    wide.mkdir(exist_ok=True)
    (wide / "config.json").write_text(json.dumps({"hidden_size": 1024, "num_attention_heads": 8,
                                                  "num_key_value_heads": 2, "intermediate_size": 2816}))
    assert smoke.fp8_refusal(wide) is None


# The smoke's training phase (benchmarks/verl_smoke.py: train_rows) in a process of its own, as on a GPU node: its
# rows' configs from check_commands, verl's own entry points (main_ppo.main, fully_async_main.main, each with its
# own start-up steps) and verl's run_ppo with its ray.init, with one stand-in: the task runner, whose real one
# builds GPU worker groups. The stand-in does what the smoke relies on: it places two actors named as verl names its
# vLLM servers (vllm_async_server.py:1365-1383) in a placement group of one GPU bundle per pool, as verl's pools
# (single_controller/ray/base.py:146-156), and logs through verl's own Tracking (tracking.py:534-539).
SMOKE_SESSION = """
import importlib.util, json, os, sys
from pathlib import Path
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

spec = importlib.util.spec_from_file_location("verl_smoke", sys.argv[1])
smoke = importlib.util.module_from_spec(spec)
spec.loader.exec_module(smoke)
out = Path(sys.argv[2])

@ray.remote(num_gpus=1, num_cpus=0)
class Server:
    def where(self):
        return os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_runtime_context().get_accelerator_ids()["GPU"]

@ray.remote(num_cpus=0)
class TaskRunnerStandIn:
    def run(self, config):
        from verl.utils.tracking import Tracking
        pg = placement_group([{"GPU": 1}] * 2)
        ray.get(pg.ready())
        self.servers = [Server.options(name=n, scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=i)).remote() for i, n in enumerate(["vllm_server_0_0", "vllm_server_teacher_0_0"])]
        logger = Tracking(project_name=config.trainer.project_name, experiment_name=config.trainer.experiment_name,
                          default_backend=list(config.trainer.logger))
        logger.log({"smoke/probe": 1.0}, step=0)
        logger.logger["file"].finish()
        ctx = ray.get_runtime_context()
        report = {"servers": ray.get([s.where.remote() for s in self.servers]), "gcs": ctx.gcs_address,
                  "job": ctx.get_job_id(), "runner_sees": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "device": config.trainer.device}
        (out / f"{config.trainer.experiment_name}.report.json").write_text(json.dumps(report))

from verl.experimental.fully_async_policy import fully_async_main
from verl.trainer import main_ppo
main_ppo.TaskRunnerV1 = fully_async_main.FullyAsyncTaskRunner = TaskRunnerStandIn
cfgs = smoke.check_commands(out, smoke.ROWS, 1)
phases = smoke.Phases()
trained = smoke.train_rows(cfgs, phases, after_row=lambda name: print("after", name, flush=True))
import time
from ray.util.placement_group import placement_group_table
deadline = time.monotonic() + 60  # the last row's runner and servers end (nothing removes its placement group)
while ray.util.list_named_actors() and time.monotonic() < deadline:
    time.sleep(0.5)
print(json.dumps({"trained": trained, "failed": phases.failed, "phases": list(phases.seconds),
                  "ray_started_by_verl": ray.is_initialized(), "named_left": ray.util.list_named_actors(),
                  "groups": sorted(v["state"] for v in placement_group_table().values())}))
"""


@pytest.mark.filterwarnings("ignore")
def test_the_one_gpu_smoke_trains_both_rows_in_one_ray_session(smoke_out):
    """What the one-GPU smoke relies on, through its own train_rows and verl's own entry points (the task runner,
    which needs GPUs, stood in: SMOKE_SESSION): verl's run_ppo starts Ray for the first row only and the second
    row's runner is in the same session (same GCS, same job); a Ray cluster of 2 GPU slots whose workers start with
    CUDA_VISIBLE_DEVICES=0 gives the worker of either slot GPU 0 (Ray maps slot i to the i-th id its workers
    started with, and a slot beyond them to all of them), so verl's trainer and teacher pools both land on it, and a
    worker without a GPU sees it as usual (not an empty device list, which a repeated id such as 0,0 would give:
    torch.cuda._parse_visible_devices, as CUDA reads it); the second row's servers take the first row's names only
    because the smoke waits for the first row's actors to go (wait_for_release); each row's log is verl's file
    logger's under the shared VERL_FILE_LOGGER_ROOT. Ray keeps a placement group whose creator actor is gone while
    the driver lives, which is why the smoke removes the first row's."""
    import os
    import subprocess
    import sys
    from opd.backends.verl import gpu
    from opd.backends.verl.overrides import shared_log
    smoke = load_smoke()
    env = gpu.ray_env(smoke_out)  # a token of its own: nothing written to ~/.ray
    gpu._write_ray_token(env)
    script = [sys.executable, "-c", SMOKE_SESSION, str(ROOT / "benchmarks" / "verl_smoke.py"), str(smoke_out)]
    for _ in range(2):  # Ray waits a fixed 30 s for its raylet (ray/_private/node.py:428): once more on a loaded CPU
        r = subprocess.run(script, env={**os.environ, **env, "CUDA_VISIBLE_DEVICES": "0"}, capture_output=True,
                           text=True, timeout=400, cwd=smoke_out)
        if "timed out during startup" not in r.stderr + r.stdout:
            break
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    names = [row["name"] for row in smoke.ROWS]
    assert result["failed"] == {} and result["trained"] == names and result["ray_started_by_verl"]
    assert [p.split(" (")[0] for p in result["phases"]] == [f"train {names[0]}", f"release {names[0]}", f"train {names[1]}"]
    assert "Ray start" in result["phases"][0] and "Ray start" not in result["phases"][2]
    assert r.stdout.count("ray init kwargs") == 1  # verl's run_ppo started Ray once (main_ppo.py:73)
    # why the smoke removes a finished row's placement groups: with its creator and its actors gone, Ray keeps the
    # group (and its GPU slots) while the driver lives; the first row's, removed by wait_for_release, is gone
    assert result["named_left"] == [] and result["groups"] == ["CREATED", "REMOVED"]
    reports = [json.loads((smoke_out / f"{n}.toy.s0.report.json").read_text()) for n in names]
    assert reports[0]["gcs"] == reports[1]["gcs"] and reports[0]["job"] == reports[1]["job"]
    for rep in reports:
        assert [where[0] for where in rep["servers"]] == ["0", "0"] and rep["runner_sees"] == "0"
    for n in names:
        assert json.loads(Path(shared_log(str(smoke_out), n, "toy", 0)).read_text().splitlines()[0])["data"] == {
            "smoke/probe": 1.0}


def test_a_resumed_run_keeps_every_step_of_every_attempt(tmp_path, monkeypatch):
    """verl's own file logger (it truncates its file at start) writing two attempts of a run: the first
    dies after step 3, the second resumes from the step-2 checkpoint and logs steps 3 and 4 again."""
    from verl.utils.tracking import FileLogger
    lines = [json.loads(x) for x in (FIXTURES / "verl_0.9_file_logger.jsonl").read_text().splitlines() if x.strip()]
    train = [r["data"] for r in lines if "rollout_corr/kl" in r["data"]]
    for attempt_steps in ([1, 2, 3], [3, 4]):
        log = logparse.attempt_log(tmp_path)
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(log))
        logger = FileLogger("opd-budget", "run")
        for step in attempt_steps:
            logger.log({**train[step % len(train)], "training/global_step": step, "actor/distillation/ppo_kl": 0.0,
                        "rollout_corr/kl": step / 1000 + (attempt_steps[0] == 3) / 10}, step=step)
        logger.finish()
    assert [p.name for p in logparse.attempt_logs(tmp_path)] == ["verl.0.jsonl", "verl.1.jsonl"]
    shared = tmp_path / "shared.jsonl"
    shared.write_text((tmp_path / "verl.0.jsonl").read_text())
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(shared))
    FileLogger("opd-budget", "run").finish()
    assert shared.read_text() == ""  # the premise: one file for every attempt would have lost attempt 0
    df = logparse.parse(logparse.attempt_logs(tmp_path), run_id="r", config="c", student="s", seed=0,
                        responses_per_step=64)
    assert df["step"].tolist() == [1, 2, 3, 4]
    assert df["d_n"].tolist() == pytest.approx([0.001, 0.002, 0.103, 0.104])  # steps 3, 4 from the second attempt


def test_cli_prints_every_run(capsys):
    assert verl_cli(["overrides", "--experiment", "paper", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {r.run_id for r in C.runs(C.load(), "paper")}


def test_jsonl_parser_on_a_verl_log(tmp_path):
    """The fixture's keys are verl 0.9's synchronous trainer's logger output (trainer.logger=file): OPD steps,
    a validation line, and a step logged again after a resume. (The fully-async trainer's log comes from
    its own loop: test_fully_async_trainers_own_loop_logs_every_step_and_checkpoints_what_the_evaluation_reads.)"""
    df = logparse.parse(FIXTURES / "verl_0.9_file_logger.jsonl", run_id="r", config="c", student="s", seed=0,
                        responses_per_step=64)
    assert df["step"].tolist() == [1, 2, 3]
    # d_n = rollout_corr/kl (log q - log p_old) + ppo_kl (log p_old - log p_theta)
    assert df.loc[0, "d_n"] == pytest.approx(0.00081 + 1e-5) and df.loc[2, "d_n"] == pytest.approx(0.00079 + 3e-5)
    # the optimised loss, not the zeroed task-reward loss OPD also logs
    assert df["loss"].tolist() == pytest.approx([-0.021, -0.022, -0.023]) and df["staleness"].eq(0).all()
    assert df.loc[0, "n_tokens"] == round(5012.5 * 64)
    assert df.loc[0, "wait_s"] == df.loc[0, "rollout_s"] == pytest.approx(812.4)
    assert df.loc[1, "staleness"] == 0
    assert df["teacher_s"].isna().all()  # verl 0.9 does not time the teacher: not measured, not zero
    logparse.write_steps(FIXTURES / "verl_0.9_file_logger.jsonl", tmp_path / "steps.parquet", run_id="r", config="c",
                         student="s", seed=0, responses_per_step=64)
    from opd import store
    assert len(store.read_table(tmp_path / "steps.parquet")) == 3


def tiny_model(layers=3, seed=0):
    from opd.backends.tiny.sft import model_config
    from opd.backends.tiny.model import Decoder
    torch.manual_seed(seed)
    return Decoder(model_config({"family": "qwen2", "layers": layers, "heads": 2, "kv_heads": 1, "head_dim": 32,
                                 "d_ff": 64}))


class LoadRecorder:
    """Stands in for verl's extension / vLLM's worker (neither can run in CI): records what would load."""

    def _update_weights(self, weights, *args, **kwargs):
        self.loaded = dict(weights)


class Worker(hook.WeightNumerics, LoadRecorder):
    pass


def test_hook_transforms_every_synced_bucket_before_vllm_loads_it(tmp_path):
    before = {k: v.clone() for k, v in tiny_model().state_dict().items()}
    numerics = {"weights": "fp8_tensor", "bf16_layers": [0], "noise_sigma": 0.0, "noise_seed": 0}
    out = dict(hook.transform_weights(before.items(), numerics, n_layers=3))
    name1, name0 = "model.layers.1.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(out[name1], quant.fp8_per_tensor(before[name1]))
    assert torch.equal(out[name0], before[name0])

    w = Worker()
    w.vllm_config = SimpleNamespace(
        additional_config={"opd_numerics": {"weights": "nvfp4", "bf16_layers": [-1], "noise_sigma": 0.1,
                                            "noise_seed": 3}},
        model_config=SimpleNamespace(hf_config=SimpleNamespace(num_hidden_layers=3)))
    w._update_weights(list(before.items()))
    expect = quant.engine_weights(before, weights="nvfp4", noise_sigma=0.1, noise_seed=3, bf16_layers=[-1], n_layers=3)
    assert w.loaded.keys() == before.keys()
    for k in before:
        assert torch.equal(w.loaded[k], expect[k]), k


def test_standalone_engine_reloads_a_checkpoint_with_or_without_the_numerics(tmp_path):
    from opd.backends.tiny.model import export_hf
    m, later = tiny_model(layers=2), tiny_model(layers=2, seed=1)
    export_hf(m, tmp_path / "start")
    export_hf(later, tmp_path / "step_50")
    calls = {}
    w = hook.WeightNumerics()
    w.vllm_config = SimpleNamespace(additional_config={}, model_config=SimpleNamespace(
        model=str(tmp_path / "start"), hf_config=SimpleNamespace(num_hidden_layers=2)))
    w.model_runner = SimpleNamespace(reload_weights=lambda weights_iterator, is_checkpoint_format: calls.update(
        weights=dict(weights_iterator), checkpoint=is_checkpoint_format))
    name = "model.layers.1.mlp.up_proj.weight"
    # the admission check: the engine's own checkpoint, with the row's numerics
    w.reload_checkpoint(None, {"weights": "fp8_tensor", "bf16_layers": [], "noise_sigma": 0.0, "noise_seed": 0})
    assert calls["checkpoint"] is True
    assert torch.equal(calls["weights"][name], quant.fp8_per_tensor(m.state_dict()[name]))
    # the held-out evaluation: a later step's checkpoint, exactly as saved
    w.reload_checkpoint(str(tmp_path / "step_50"), {})
    assert all(torch.equal(calls["weights"][k], v) for k, v in later.state_dict().items())
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        list(hook.checkpoint_weights(tmp_path / "missing"))


def test_the_hook_finds_a_hub_named_student_in_the_cache_vllm_downloaded_it_to(tmp_path):
    """vLLM keeps a Hub name as model_config.model: the admission check's reload must read the cached
    snapshot (Hugging Face's cache layout, here written by hand), and say so plainly when there is none."""
    from opd.backends.tiny.model import export_hf
    snap = tmp_path / "hub" / "models--org--student" / "snapshots" / ("a" * 40)
    export_hf(tiny_model(layers=2), snap)
    (tmp_path / "hub" / "models--org--student" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--student" / "refs" / "main").write_text("a" * 40)
    assert hook.local_checkpoint("org/student", None, str(tmp_path / "hub")) == snap
    assert hook.local_checkpoint(str(snap)) == snap
    with pytest.raises(FileNotFoundError, match="org/other: neither a folder nor a model in the local"):
        hook.local_checkpoint("org/other", None, str(tmp_path / "hub"))


def test_prompts_reach_vllm_as_the_chat_template_writes_them(tmp_path):
    """A chat template that writes the BOS itself (DeepSeek-R1-Distill's, Llama 3's) and a tokenizer that
    also adds one: text handed to vLLM would start with two; gpu.prompt_ids gives the template's tokens."""
    from tokenizers import processors
    from transformers import AutoTokenizer

    from opd.backends.tiny.task import BOS_ID, make_task, save_hf_tokenizer
    from opd.backends.verl.gpu import prompt_ids
    save_hf_tokenizer(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    bos = tok.convert_ids_to_tokens(BOS_ID)
    tok._tokenizer.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, BOS_ID)])
    _, held = make_task(0)
    messages = [{"role": "user", "content": "+".join(map(str, held.operands[3])) + "="}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok(text)["input_ids"].count(BOS_ID) == 2  # the premise: a tokenizer adding its own BOS
    assert prompt_ids(tok, messages) == held.prompts([3])[0].tolist()


def test_data_preparation(tmp_path):
    train = tmp_path / "dapo.parquet"
    pd.DataFrame({"prompt": [[{"role": "user", "content": "What is 1+1?"}], [{"role": "user", "content": "2+2?"}]],
                  "reward_model": [{"ground_truth": "2"}, {"ground_truth": "4"}]}).to_parquet(train)
    aime = tmp_path / "aime24.jsonl"
    aime.write_text('{"problem": "Find x.", "answer": 7}\n{"problem": "Find y.", "answer": "11"}\n')
    paths = data.prepare(train, {"aime24": aime}, tmp_path / "out")
    t, h = pd.read_parquet(paths["train"]), pd.read_parquet(paths["heldout"])
    assert len(t) == 2 and t["prompt"][0][0]["content"].startswith("What is 1+1?")
    assert t["reward_model"][1]["ground_truth"] == "4" and (t["opd_teacher_key"] == "math").all()
    assert h["reward_model"][0]["ground_truth"] == "7" and h["extra_info"][1]["prompt_id"] == 1
    assert (t["data_source"] == "math_dapo").all() and h["data_source"][0] == "aime24"  # names verl's scorer knows
    m500 = tmp_path / "math500.jsonl"
    m500.write_text('{"problem": "Compute 2+3.", "answer": "5"}\n')
    h = pd.read_parquet(data.prepare(train, {"aime24": aime, "math500": m500}, tmp_path / "out2")["heldout"])
    assert h["data_source"].tolist() == ["aime24", "aime24", "HuggingFaceH4/MATH-500"]
    assert [e["set"] for e in h["extra_info"]] == ["aime24", "aime24", "math500"]
    with pytest.raises(ValueError, match="'gsm8k'.*known"):
        data.prepare(train, {"gsm8k": m500}, tmp_path / "out3")
    with pytest.raises(ValueError, match="no prompt column"):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"text": "x", "answer": 1}\n')
        data.to_verl(bad, "x", "test")


def test_heldout_scoring_matches_the_tiny_backend_on_the_same_tokens(tmp_path):
    """The verl backend's held-out KL (transformers forwards of the exported checkpoints, chunked
    log-softmax) equals the tiny backend's exact KL on the same prompt and response tokens."""
    from transformers import AutoModelForCausalLM

    from opd.backends.tiny import model as M
    from opd.backends.tiny.engine import Rollout, token_logprobs
    from opd.backends.verl.gpu import _sequence_kl
    student, teacher = tiny_model(layers=2, seed=0), tiny_model(layers=2, seed=1)
    M.export_hf(student, tmp_path / "s")
    M.export_hf(teacher, tmp_path / "t")
    hs, ht = (AutoModelForCausalLM.from_pretrained(tmp_path / n, dtype=torch.float32).eval() for n in "st")
    prompt = torch.tensor([[0, 0, 0, 0, 1, 5, 13, 7, 13, 8, 14]])
    response = torch.tensor([[9, 16, 10, 3, 2]])
    roll = Rollout(prompt, response, None, torch.ones_like(response, dtype=torch.bool), 0)
    with torch.no_grad():
        (lp_s, full_s), (lp_t, full_t) = token_logprobs(student, roll), token_logprobs(teacher, roll)
    expect_kl = float((full_s.exp() * (full_s - full_t)).sum())
    expect_sampled = float((lp_s - lp_t).sum())
    for chunk in (2048, 2):  # one chunk, and a response split across chunks
        kl, sampled, n = _sequence_kl(hs, ht, torch.cat([prompt, response], 1), prompt.shape[1], chunk=chunk)
        assert n == 5
        assert kl == pytest.approx(expect_kl, rel=1e-4) and sampled == pytest.approx(expect_sampled, rel=1e-4, abs=1e-5)


def test_exported_toy_tokenizer_builds_the_tiny_prompts(tmp_path):
    """verl and vLLM build prompts through the chat template: it must give the tiny prompt token for token
    (left-padded with literal <pad>, which the tokenizer's own pad token, <eos>, leaves alone)."""
    from transformers import AutoTokenizer

    from opd.backends.tiny.task import EOS_ID, make_task, save_hf_tokenizer, solution
    save_hf_tokenizer(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    _, held = make_task(0)
    for i in (0, len(held) // 2, len(held) - 1):
        text = tok.apply_chat_template([{"role": "user", "content": "+".join(map(str, held.operands[i])) + "="}],
                                       tokenize=False, add_generation_prompt=True)
        assert tok(text)["input_ids"] == held.prompts([i])[0].tolist()
    assert tok.pad_token_id == EOS_ID
    assert tok.decode(held.solutions([0])[0], skip_special_tokens=True) == solution(held.operands[0])
    # verl 0.9's agent loop builds rollout prompts with its own token builder, chosen by model type
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder
    for model_type in ("qwen2", "llama"):
        builder = create_continuous_token_builder(tok, hf_model_type=model_type)
        messages = [{"role": "user", "content": "+".join(map(str, held.operands[1])) + "="}]
        assert builder.build_initial_tokens(messages) == held.prompts([1])[0].tolist()


def test_scoring_by_data_source():
    assert data.score("aime24", "so x = \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}") == 1.0
    assert data.score("HuggingFaceH4/MATH-500", "the answer is 7", "7") == 0.0  # verl's MATH scorer wants \boxed{}
    assert data.score("HuggingFaceH4/MATH-500", "so \\boxed{7}", "7") == 1.0
    # without verl (vLLM's environment): the last \boxed{}, braces balanced
    assert data.boxed("first \\boxed{1}, then \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}" and data.boxed("none") is None
    assert data.score(data.TOY_SOURCE, "3+5=8,8+9=17;17", "17") == 1.0
    assert data.score(data.TOY_SOURCE, "3+5=8,8+9=17;16", "17") == 0.0


def test_ray_workers_wait_for_the_head_to_listen():
    """A worker node joins Ray only once the head's port accepts connections (the head may start later)."""
    import socket
    import threading
    import time

    from opd.backends.verl.gpu import wait_for_port
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(RuntimeError, match=f"nothing listens on 127.0.0.1:{port}"):
        wait_for_port("127.0.0.1", port, timeout_s=0.5, poll_s=0.1)
    server = socket.socket()

    def start_late():
        time.sleep(0.5)
        server.bind(("127.0.0.1", port))
        server.listen()
    threading.Thread(target=start_late).start()
    t0 = time.monotonic()
    wait_for_port("127.0.0.1", port, timeout_s=10, poll_s=0.1)
    assert 0.4 < time.monotonic() - t0 < 10
    server.close()


def test_admission_and_attribution_jobs_take_one_gpu_not_the_training_shape():
    from opd import dag, launch
    from opd.spec import Slurm
    e = Experiment.of(C.load(), "paper")
    spec = dag.train_spec(e, next(r for r in e.runs() if r.name == "bf16"), {})
    train = launch.train_shape(spec, Slurm.of(C.load()["experiments"]["paper"]["slurm"]))
    assert train.nodes == 2 and train.gpus_per_node == 4  # a training run: teacher node + trainer node
    # what run_job passes: the site's and the experiment's settings as the launcher file holds them, and the job's
    # kind, whose sizes (slurm.jobs) replace the training job's 64 CPUs, 400 GB and 8 h
    sizes = C.load()["experiments"]["paper"]["slurm"]["jobs"]
    for kind in ("heldout", "admission", "kv_attribution"):
        shape = launch.single_job_shape(spec.backend, e.launcher.slurm, kind)
        assert shape.nodes == 1 and shape.gpus_per_node == 1 and not shape.exclusive
        assert (shape.cpus_per_task, shape.mem_gb, shape.time_min) == tuple(sizes[kind][k] for k in Slurm.SIZES)
        assert shape.cpus_per_task <= e.slurm.cpus_per_task // 4 and shape.mem_gb <= e.slurm.mem_gb / 4  # a GPU's share
        assert shape.tasks_per_node == 1 and shape.poll_s == C.load()["slurm"]["poll_s"]
    assert not launch.single_job_shape("tiny", Slurm.of({"nodes": 1, "cpus_per_task": 2})).gpus_per_node  # toy


def test_a_verl_experiment_without_one_gpu_job_sizes_is_refused_before_any_job():
    """Each one-GPU job kind needs its own Slurm sizes; without them it would ask for the training job's whole-node
    CPUs and memory (and sites that cap memory per GPU reject it). The error names the field."""
    import copy
    cfg = C.load()
    bad = copy.deepcopy(cfg)
    del bad["experiments"]["paper"]["slurm"]["jobs"]["admission"]
    with pytest.raises(C.ConfigError, match=r"experiment 'paper', field 'slurm.jobs'.*missing \['admission'\]"):
        C.validate(bad)
    bad = copy.deepcopy(cfg)
    bad["experiments"]["paper"]["slurm"]["jobs"]["heldout"]["mem_gb"] = 800
    with pytest.raises(C.ConfigError, match=r"slurm.jobs.heldout.mem_gb'.*800 is more than a whole training job"):
        C.validate(bad)
    bad = copy.deepcopy(cfg)
    bad["experiments"]["paper"]["slurm"]["jobs"]["evaluation"] = {"time_min": 10}  # not a job kind: the schema
    with pytest.raises(C.ConfigError, match="evaluation"):
        C.validate(bad)


# ---- verl's fully-async trainer and rollouter, as far as they run on a CPU --------------------------------------

def async_modules():
    """verl's fully-async trainer and rollouter modules. Their imports reach verl's rollout server (uvicorn,
    fastapi, cachetools), which verl 0.9.1 does not declare for a CPU install: the `test` extra adds them."""
    from verl.experimental.fully_async_policy import fully_async_rollouter, fully_async_trainer
    return fully_async_trainer, fully_async_rollouter


@pytest.fixture(scope="module")
def toy_verl_data(tmp_path_factory):
    """The toy task as verl parquet and the toy tokenizer: what verl's dataset code reads on a CPU."""
    from opd.backends.tiny.task import save_hf_tokenizer
    out = tmp_path_factory.mktemp("toy-verl-data")
    paths = data.toy_task(out, n_train=64, n_heldout=8)
    save_hf_tokenizer(out / "tok")
    return {"dir": out, **paths}


def async_parts(cfg, log: Path, monkeypatch):
    """verl's own fully-async trainer object for a composed config, built the way its task runner builds it
    (fully_async_main.py:235-238, 72-75, 139-157), without Ray: the Ray actor's class itself."""
    from transformers import AutoTokenizer
    from verl.experimental.reward_loop import migrate_legacy_reward_impl
    from verl.experimental.separation.utils import create_resource_pool_manager, create_role_worker_mapping
    from verl.trainer.ppo.utils import Role
    trainer_mod, _ = async_modules()
    cfg.actor_rollout_ref.rollout.nnodes = cfg.rollout.nnodes
    cfg.actor_rollout_ref.rollout.n_gpus_per_node = cfg.rollout.n_gpus_per_node
    cfg = migrate_legacy_reward_impl(cfg)
    mapping, wg_cls = create_role_worker_mapping(cfg)
    roles = {r: w for r, w in mapping.items() if r != Role.Rollout}
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(log))  # on the cluster: the job's runtime_env (Ray test below)
    tok = AutoTokenizer.from_pretrained(Path(cfg.actor_rollout_ref.model.path))
    trainer = trainer_mod.FullyAsyncTrainer.__ray_actor_class__(
        config=cfg, tokenizer=tok, role_worker_mapping=roles, resource_pool_manager=create_resource_pool_manager(
            cfg, roles=list(roles)), ray_worker_group_cls=wg_cls, device_name="cuda")
    return cfg, tok, trainer


@pytest.mark.filterwarnings("ignore")
def test_fully_async_trainer_and_rollouter_accept_the_k_rows(paper, toy_verl_data, tmp_path, monkeypatch):
    """Every k > 0 paper run through verl's own FullyAsyncTrainer.__init__ and FullyAsyncRollouter.__init__
    (their asserts: no hybrid engine, train_batch_size 0, gen_batch_size 1; the rollouter reads the data
    set and counts its rollout steps) and the rollouter's sample arithmetic. The data paths point at the toy
    task and the model path at the toy tokenizer (the paper's files are not on this machine); the vLLM
    servers are stood in by their count (GPU-only)."""
    import asyncio
    _, rollouter_mod = async_modules()
    rows = {r.name: (r, ov) for r, ov in paper.values() if r.row.staleness > 0}
    assert set(rows) == {"stale-k1", "stale-k2", "stale-k4", "stale-k8", "modelopt-fp8-k8"}
    local = [f"data.train_files=[{toy_verl_data['train']}]", f"data.val_files=[{toy_verl_data['heldout']}]",
             f"actor_rollout_ref.model.path={toy_verl_data['dir'] / 'tok'}"]
    for name, (r, ov) in rows.items():
        k = r.row.staleness
        cfg, tok, trainer = async_parts(verl_compose(ov + local, True), tmp_path / f"{name}.jsonl", monkeypatch)
        assert trainer.required_samples == 8 and trainer.trigger_parameter_sync_step == k
        assert trainer.resource_pool_manager.resource_pool_spec == {"trainer_pool": [4]}
        rollouter = rollouter_mod.FullyAsyncRollouter.__ray_actor_class__(config=cfg, tokenizer=tok, device_name="cuda")
        assert rollouter.total_rollout_steps == 200 * 8  # prompts, one at a time
        rollouter._init_async_objects()
        rollouter.llm_server_manager = SimpleNamespace(get_active_server_count=lambda: 4)  # the 4 vLLM replicas
        asyncio.run(rollouter.set_max_required_samples())
        # staleness_threshold 0: at most k batches per weight version; one optimizer step per batch
        assert rollouter.max_required_samples == 8 * k and rollouter.total_train_steps == 200 // k
        trainer.set_total_train_steps(rollouter.total_train_steps)
        # ... which is why a cosine schedule is refused with k > 0 (its length would be 200 / k updates)
        assert cfg.actor_rollout_ref.actor.optim.total_training_steps == 200 // k
    # the overrides as they were: the hybrid engine and a train batch size, refused at start
    r, ov = rows["stale-k2"]
    for old in (["actor_rollout_ref.hybrid_engine=True"], ["data.train_batch_size=8"]):
        cfg = verl_compose(ov + local + old, True)
        with pytest.raises(AssertionError):
            cfg, tok, trainer = async_parts(cfg, tmp_path / "old.jsonl", monkeypatch)
            rollouter_mod.FullyAsyncRollouter.__ray_actor_class__(config=cfg, tokenizer=tok, device_name="cuda")


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A Ray cluster on this machine, started the way a training job's head starts it (gpu.start_ray_head:
    `ray start --head` with the job's token settings, gpu.ray_env, its own ports and temp dir: gpu.ray_cluster,
    here outside Slurm); stopped at the end (gpu.stop_ray: that cluster's processes only). Yields (address,
    the Ray settings every process of the job gets)."""
    import socket
    from opd.backends.verl import gpu
    env = gpu.ray_env(tmp_path_factory.mktemp("ray-run"))
    cluster = gpu.ray_cluster()
    try:
        address = gpu.start_ray_head(nodes=1, head=socket.gethostbyname(socket.gethostname()), env=env,
                                     cluster=cluster, timeout_s=60)
        yield address, env
    finally:
        gpu.stop_ray(cluster)


# verl's driver as train_run starts it (its own process, the job's Ray settings and RAY_ADDRESS in its
# environment): verl's run_ppo with a task runner that does only what the trainer does with its logger
# (trainer_base.py:423, fully_async_trainer.py:128), in a Ray actor like the real one. The real TaskRunner
# builds GPU worker groups.
DRIVER = """
import json, sys
import ray
from hydra import compose, initialize_config_dir
from verl.trainer.main_ppo import run_ppo

@ray.remote(num_cpus=0)
class TaskRunnerLoggingOnly:
    def run(self, config):
        from verl.utils.tracking import Tracking
        logger = Tracking(project_name=config.trainer.project_name, experiment_name=config.trainer.experiment_name,
                          default_backend=list(config.trainer.logger))
        logger.log({"rollout_corr/kl": 0.001, "actor/distillation/ppo_kl": 0.0002}, step=1)
        logger.logger["file"].finish()

with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=json.loads(sys.argv[2]))
run_ppo(cfg, task_runner_class=TaskRunnerLoggingOnly)
"""


@pytest.mark.filterwarnings("ignore")
def test_verls_file_logger_in_a_ray_actor_writes_into_the_run_folder(paper, ray_head, tmp_path):
    """verl's own run_ppo (its ray.init with the config's runtime_env) joins the cluster through
    RAY_ADDRESS, and verl's file logger in a remote actor writes the run folder's attempt log, though no
    process we start has VERL_FILE_LOGGER_PATH in its environment."""
    import os
    import subprocess
    import sys
    address, ray_settings = ray_head
    r, _ = paper["bf16.r1-7b.s0"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ov = run_overrides(C.load(), r, run_dir=str(run_dir), log_path=str(logparse.attempt_log(run_dir)))
    env = {k: v for k, v in os.environ.items() if k != "VERL_FILE_LOGGER_PATH"}
    out = subprocess.run([sys.executable, "-c", DRIVER, str(VERL / "trainer/config"), json.dumps(ov)], cwd=run_dir,
                         env={**env, **ray_settings, "RAY_ADDRESS": address}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    log = run_dir / "verl.0.jsonl"
    assert json.loads(log.read_text()) == {"step": 1, "data": {"rollout_corr/kl": 0.001,
                                                               "actor/distillation/ppo_kl": 0.0002}}
    assert logparse.attempt_log(run_dir).name == "verl.1.jsonl"  # the next attempt gets its own file


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("test_freq", [None, -1])
def test_fully_async_trainers_own_loop_logs_every_step_and_checkpoints_what_the_evaluation_reads(
        toy_verl_data, tmp_path, monkeypatch, test_freq):
    """verl's FullyAsyncTrainer.fit() itself, k = 2, 8 steps: its loop, version counter, MetricsAggregator,
    file logger and checkpoint conditions run as on the cluster; the GPU stages are stood in (the sample
    queue hands it toy batches, the actor update reports per-step metrics, the worker group's and the
    rollouter's save and sync record what they were asked; the rollouter is a Ray actor, as there).
    logparse must then give every step exactly once with d_n = rollout_corr/kl + ppo_kl averaged the way
    verl averaged it, and verl must have saved exactly the checkpoints plan.schedule names for the held-out
    evaluation. test_freq = -1 (the earlier overrides) loses the last step's metrics."""
    import asyncio

    import ray
    from verl import DataProto
    from verl.utils.debug import marked_timer

    from opd.backends.verl.plan import schedule
    K, STEPS, P, N, R = 2, 8, 2, 2, 6
    train = {"steps": STEPS, "prompts_per_step": P, "responses_per_prompt": N, "lr": 1e-5, "temperature": 1.0,
             "max_prompt_length": 16, "max_response_length": R, "eval_every": 4, "eval_responses": 2,
             "checkpoint_every": 4}
    tok_dir = str(toy_verl_data["dir"] / "tok")
    cfg = {"experiments": {"x": {"students": {"toy": {"model": tok_dir, "teacher": tok_dir, "layers": 2}}, "train": train,
                                 "verl": {"data": {"train": str(toy_verl_data["train"]),
                                                   "heldout": [str(toy_verl_data["heldout"])]},
                                          "layout": {"gpus_per_node": 1}}}}}
    row = {"name": "k2", "staleness": K}
    log = tmp_path / "verl.0.jsonl"
    e = cfg["experiments"]["x"]
    ov = overrides(row, e["students"]["toy"], e["train"], e["verl"], student="toy", seed=0, run_dir=str(tmp_path),
                   log_path=str(log))
    ov += [f"trainer.test_freq={test_freq}"] if test_freq else []
    _, _, t = async_parts(verl_compose(ov, True), log, monkeypatch)

    ray.init(address="local", num_cpus=1, include_dashboard=False)
    try:
        @ray.remote(num_cpus=0)
        class Rollouter:  # stands in for the rollouter, whose vLLM servers need GPUs
            def get_total_produced_samples(self):
                return 0

            def get_completed_steps(self):
                return 1

            def reset_staleness(self):
                return {"fully_async/rollouter/active_time": 3.0}

            def save_checkpoint(self, folder):
                return None

        class Sync:  # the NCCL weight broadcast to the rollout replicas
            async def update_weights(self, global_steps):
                synced.append(global_steps)

        def save(local, remote, version, max_ckpt_to_keep=None):  # the FSDP workers' checkpoint
            Path(local).mkdir(parents=True)
            saved.append(Path(local).parent.name)

        synced, saved, fed = [], [], {}
        t.rollouter, t.checkpoint_manager = Rollouter.remote(), Sync()
        t.actor_rollout_wg = SimpleNamespace(save_checkpoint=save)
        t.message_queue_client = SimpleNamespace(get_queue_size_sync=lambda: 0)
        t.set_total_train_steps(STEPS // K)
        gen = torch.Generator().manual_seed(0)

        async def samples():  # the message queue: STEPS batches, then the end signal
            if len(fed) == STEPS:
                return None, None
            B = P * N
            lens = torch.randint(1, R + 1, (B,), generator=gen)
            mask = (torch.arange(R)[None] < lens[:, None]).long()
            z = torch.zeros(B, R)
            b = DataProto.from_single_dict({
                "prompts": torch.ones(B, 16, dtype=torch.long), "responses": torch.ones(B, R, dtype=torch.long),
                "attention_mask": torch.cat([torch.ones(B, 16, dtype=torch.long), mask], 1), "response_mask": mask,
                "token_level_scores": z, "token_level_rewards": z, "advantages": z, "returns": z})
            b.meta_info.update({"trajectory_param_versions": [t.current_param_version] * B,
                                "global_token_num": (16 + lens).tolist()})
            fed[len(fed) + 1] = {"tokens": int(mask.sum())}
            return 0, b

        def update_actor(batch):  # the FSDP update: what verl's actor reports for the step
            s = t.global_steps
            with marked_timer("update_actor", t.timing_raw):
                pass
            fed[s].update(kl=0.001 * s, ppo_kl=0.0001 * s * ((s - 1) % K))
            t.metrics.update({"rollout_corr/kl": fed[s]["kl"], "actor/distillation/ppo_kl": fed[s]["ppo_kl"],
                              "actor/distillation/loss": -0.01 * s, "actor/pg_loss": 0.0, "actor/grad_norm": 1.0,
                              "actor/entropy": 0.5})
            return batch

        t._get_samples_from_queue, t._fit_update_actor = samples, update_actor
        for stage in ("_fit_compute_reward", "_fit_compute_log_prob", "_fit_compute_ref_log_prob", "_fit_compute_critic",
                      "_fit_compute_advantage", "_fit_update_critic"):  # GPU worker groups
            setattr(t, stage, lambda batch: batch)
        asyncio.run(t.fit())
        t.logger.logger["file"].finish()
    finally:
        ray.shutdown()

    plan = schedule(train, K)
    # a sync per version; the final flush syncs once more (fully_async_trainer.py:529-531)
    assert synced == [1, 2, 3, 4] + ([4] if test_freq is None else []) and plan.save_freq == 2
    assert saved == [f"global_step_{plan.checkpoint(s)}" for s in plan.eval_steps if s]  # global_step_2, _4
    df = logparse.parse(log, run_id="r", config="k2", student="toy", seed=0, responses_per_step=P * N, staleness=K)
    covered = {1: [1], 3: [2, 3], 5: [4, 5], 7: [6, 7], 8: [8]}  # the sync-triggering step joins the next record
    if test_freq == -1:
        covered.pop(8)  # fit() skips its last flush when version % test_freq == 0 (fully_async_trainer.py:529)
    assert df["step"].tolist() == list(covered)
    for _, row in df.iterrows():
        steps = covered[row["step"]]
        assert row["d_n"] == pytest.approx(np.mean([fed[s]["kl"] + fed[s]["ppo_kl"] for s in steps]))
        assert row["loss"] == pytest.approx(np.mean([-0.01 * s for s in steps]))
        assert row["n_tokens"] == sum(fed[s]["tokens"] for s in steps)
        assert row["staleness"] == max((s - 1) % K for s in steps) and row["rollout_s"] == 3.0
        assert (row["weight_sync_s"] > 0) == any(s % K == 0 for s in steps)  # a step that synced is covered


def test_layout_slurm_shape_follows_verls_pool_arithmetic(paper):
    """The Slurm job launch submits (launch.train_shape, from opd.backends.verl.layout) holds exactly the
    GPU pools verl builds from the composed config, by verl's own code: the trainer pool (separation/utils.py
    create_resource_pool_manager), the teacher pool and replicas (the rollouter's and trainer_base's spec;
    the teacher manager's size check, teacher_model.py:63-72, through verl's config classes) and the rollout
    replicas (llm_server.py:434-460: world // TP, on the trainer's GPUs for k = 0)."""
    from verl.experimental.separation.utils import create_resource_pool_manager
    from verl.trainer.ppo.utils import Role
    from verl.utils.config import omega_conf_to_dataclass

    from opd import dag, launch
    e = Experiment.of(C.load(), "paper")
    slurm = e.slurm
    for run_id, (r, ov) in paper.items():
        k = r.row.staleness
        cfg = verl_compose(ov, k > 0)
        shape = launch.train_shape(dag.train_spec(e, r, {}), slurm)
        assert shape.tasks_per_node == 1 and shape.cpus_per_task == slurm.cpus_per_task == 64
        pools = create_resource_pool_manager(cfg, roles=[Role.Actor]).resource_pool_spec  # {"trainer_pool": [...]}
        roll = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
        per_replica = roll.tensor_model_parallel_size * roll.data_parallel_size * roll.pipeline_model_parallel_size
        if k:  # the standalone rollout pool (fully_async_main.py:235-236)
            pools["rollout_pool"] = [cfg.rollout.n_gpus_per_node] * cfg.rollout.nnodes
            assert sum(pools["rollout_pool"]) // per_replica == 4
        else:  # hybrid engine: the replicas share the trainer's GPUs
            assert sum(pools["trainer_pool"]) // per_replica == 4
        if cfg.distillation.enabled:
            pools["teacher_pool"] = [cfg.distillation.n_gpus_per_node] * cfg.distillation.nnodes
            (teacher,) = omega_conf_to_dataclass(cfg.distillation).teacher_models.values()
            assert teacher.num_replicas * teacher.per_replica_world_size == sum(pools["teacher_pool"])
        # every pool on whole nodes of the job; together they fill it
        assert all(g == shape.gpus_per_node for p in pools.values() for g in p), (run_id, pools)
        assert sum(len(p) for p in pools.values()) == shape.nodes, (run_id, pools, shape)
        assert shape.nodes == {(0, True): 2, (0, False): 1}.get((k, cfg.distillation.enabled), 3 if k else None)


def test_d_n_is_verls_two_logged_parts_over_the_same_tokens():
    """d_n = mean over the step's tokens of log q - log p_theta, by verl's own functions: rollout_corr/kl
    (log q - log p_old, rollout_corr_helper.compute_offpolicy_metrics) plus the policy loss's ppo_kl
    (log p_old - log p_theta, core_algos.compute_policy_loss_vanilla), averaged over micro-batches and ranks as
    verl's Metric aggregation does. Exact when the step's tokens sit in micro-batches of equal token counts
    (one micro-batch per rank, or equal lengths); otherwise the second part is weighted per micro-batch."""
    from omegaconf import OmegaConf as OC
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.trainer.ppo.rollout_corr_helper import compute_offpolicy_metrics
    from verl.utils.metric import AggregationType, Metric
    g = torch.Generator().manual_seed(0)
    B, T = 8, 12
    q, old = -torch.rand(B, T, generator=g) * 3, -torch.rand(B, T, generator=g) * 3
    cur = old + 0.1 * torch.randn(B, T, generator=g)
    cfg = OC.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0,
                     "loss_agg_mode": "token-mean", "global_batch_info": {}})

    def logged(mask, micro):  # micro: lists of row indices per (rank, micro-batch)
        kl = compute_offpolicy_metrics(old, q, mask)["kl"]
        per_rank = []
        for rank in micro:
            m = Metric(AggregationType.MEAN)
            for rows in rank:
                _, metrics = compute_policy_loss_vanilla(old[rows], cur[rows], torch.zeros(len(rows), T), mask[rows],
                                                         "token-mean", cfg)
                m.append(metrics["actor/ppo_kl"])
            per_rank.append(m)
        return kl + Metric.aggregate_dp(per_rank)

    def d_n(mask):
        return float(((q - cur) * mask).sum() / mask.sum())
    equal = torch.ones(B, T)
    ragged = (torch.arange(T)[None] < torch.randint(1, T + 1, (B,), generator=g)[:, None]).float()
    halves = [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]  # 2 ranks, one micro-batch each
    assert logged(equal, halves) == pytest.approx(d_n(equal), abs=1e-7)
    assert logged(equal, [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]) == pytest.approx(d_n(equal), abs=1e-7)
    assert logged(ragged, [[list(range(B))]]) == pytest.approx(d_n(ragged), abs=1e-7)  # one micro-batch
    assert logged(ragged, halves) != pytest.approx(d_n(ragged), abs=1e-7)  # ragged micro-batches: reweighted


def test_validation_names_what_verl_cannot_run(toy_config):
    """Rows verl 0.9.1 cannot run, and schedules it cannot checkpoint, fail validation naming experiment,
    row and field, before any job starts."""
    paper = toy_config["experiments"]["paper"]
    paper["rows"] += [{"name": "x-reinforce", "algorithm": "reinforce"},
                      {"name": "x-center", "noise_sigma": 0.1, "variant": "score_centering"},
                      {"name": "x-offset", "noise_sigma": 0.1, "variant": "advantage_offset"},
                      {"name": "x-k3", "staleness": 3},
                      {"name": "x-k2-cos", "staleness": 2, "lr": 1e-6},
                      {"name": "x-w8a8-l0", "weights": "fp8_block", "activations": "fp8_group128", "bf16_layers": [0]},
                      {"name": "x-w4a4", "weights": "nvfp4", "activations": "nvfp4"}]
    paper["train"]["lr_schedule"] = "cosine"
    paper["slurm"]["nodes"] = 2
    with pytest.raises(C.ConfigError) as e:
        C.validate(toy_config)
    m = str(e.value)
    n = len(paper["rows"]) + 1  # errors count rows from 1: the last is row n - 1
    assert f"experiment 'paper', row {n - 7} ('x-reinforce'), field 'algorithm': verl backend: verl 0.9.1 has no" in m
    assert f"row {n - 6} ('x-center'), field 'variant'" in m and f"row {n - 5} ('x-offset'), field 'variant'" in m
    assert f"row {n - 4} ('x-k3'), field 'staleness'" in m and "train.checkpoint_every (40) is not a multiple of staleness 3" in m
    assert f"row {n - 3} ('x-k2-cos'), field 'staleness'" in m and "cosine schedule would decay 2x too fast" in m
    assert (f"row {n - 2} ('x-w8a8-l0'), field 'activations': verl backend: 'fp8_group128' with weights 'fp8_block' "
            f"and layers kept BF16 has no vLLM kernel") in m
    assert f"row {n - 1} ('x-w4a4'), field 'activations': verl backend: 'nvfp4' with weights 'nvfp4' has no vLLM kernel" in m
    assert "experiment 'paper', field 'slurm.nodes': a verl run's Slurm shape follows from verl.layout" in m
    assert "experiment 'toy'" not in m  # the tiny backend runs all of these
    del paper["train"]["checkpoint_every"]  # a clear error, not a KeyError
    with pytest.raises(C.ConfigError, match="experiment 'paper', field 'train.checkpoint_every': the verl backend needs"):
        C.validate(toy_config)


def test_one_schedule_for_both_trainers():
    """Which checkpoint the held-out evaluation reads at each evaluated step: verl's `global_step_{n}` counts
    steps synchronously and parameter versions (k steps each) asynchronously (the asynchronous case is run
    through verl's own loop in test_fully_async_trainers_own_loop_...)."""
    from opd.backends.verl.plan import schedule, schedule_errors
    t = C.load()["experiments"]["paper"]["train"]
    for k in (0, 1, 2, 4, 8):
        plan = schedule(t, k)
        assert plan.eval_steps == (0, 40, 80, 120, 160, 200) and plan.save_freq * max(k, 1) == 40
        assert [plan.checkpoint(s) for s in plan.eval_steps[1:]] == [s // max(k, 1) for s in (40, 80, 120, 160, 200)]
        assert schedule_errors(t, k) == []
    with pytest.raises(ValueError, match="every 8 steps"):
        schedule(t, 8).checkpoint(50)
    assert schedule_errors({**t, "checkpoint_every": 25, "eval_every": 50}, 2)[0][0] == "staleness"


def test_the_readme_says_per_recipe_whether_verl_runs_a_real_kernel_or_an_emulation():
    """The recipe table (docs/recipes.md, generated by opd.docs) lists every registered recipe and noise with what
    plan.kernels says for a row holding it alone, and a native pair composes to verl's own `rollout.quantization`."""
    from opd.quant import RECIPES
    table = {m.group(1): m.group(2) for m in re.finditer(r"^\s*\| `([a-z_]+: [a-z0-9_]+|noise_sigma)` \| ([^|]+) \|",
                                                         (ROOT / "docs/recipes.md").read_text(), re.M)}
    fields = [(kind, name) for kind, rs in RECIPES.items() for name in rs if name != "none"] + [("noise_sigma", 0.1)]
    assert set(table) == {k if k == "noise_sigma" else f"{k}: {n}" for k, n in fields}
    for kind, name in fields:
        said = table[kind if kind == "noise_sigma" else f"{kind}: {name}"].strip()
        assert said == plan.kernels({"name": "x", kind: name})[kind], (kind, name)
    for (w, a), q in plan.NATIVE.items():
        assert plan.kernels({"name": "x", "weights": w, "activations": a}) == {"weights": "vLLM kernel",
                                                                             "activations": "vLLM kernel"}


# ---------------------------------------------------------------- the mismatch guard through the weight-sync hook

class SyncRecorder(LoadRecorder):
    """Stands in for verl's update_weights_from_ipc (vllm_rollout/utils.py:248): one weight sync, each of
    its buckets through _update_weights."""

    def update_weights_from_ipc(self, buckets):
        self.synced = {}
        for b in buckets:
            self._update_weights(b)
            self.synced.update(self.loaded)


class GuardedWorker(hook.WeightNumerics, SyncRecorder):
    pass


def verl_line(step: int, d_n: float) -> str:
    """A training record as verl's file logger writes it (the keys of tests/fixtures/verl_0.9_file_logger.jsonl)."""
    return json.dumps({"step": step, "data": {"training/global_step": step, "rollout_corr/kl": d_n - 1e-5,
                                              "actor/distillation/ppo_kl": 1e-5, "timing_s/step": 1.0,
                                              "response_length/mean": 10.0}}) + "\n"


def test_the_hook_chooses_each_syncs_numerics_from_the_logged_d_n(tmp_path):
    """The real hook class: the row's numerics until the mean d_n of 2 logged steps passes d_max, then BF16
    weights (the fallback) for the cooldown's steps, one decision per sync for all its buckets, recorded in
    GUARD_LOG and read back by logparse as steps.parquet's engine and guard_active."""
    numerics = {"weights": "none", "bf16_layers": [], "noise_sigma": 0.2, "noise_seed": 1}
    guard = {"d_max": 0.01, "window": 2, "action": "fallback", "cooldown": 2, "run_dir": str(tmp_path), "steps": 20,
             "log": str(tmp_path / "verl.0.jsonl")}
    w = GuardedWorker()
    w.rank = 0
    w.vllm_config = SimpleNamespace(additional_config={"opd_numerics": numerics, "opd_guard": guard},
                                    model_config=SimpleNamespace(hf_config=SimpleNamespace(num_hidden_layers=3)))
    before = {k: v.clone() for k, v in tiny_model().state_dict().items()}
    items = list(before.items())
    noisy = quant.engine_weights(before, weights="none", noise_sigma=0.2, noise_seed=1, bf16_layers=[], n_layers=3)
    log = tmp_path / "verl.0.jsonl"

    def sync(*d_ns):
        with open(log, "a") as f:
            for d in d_ns:
                sync.step += 1
                f.write(verl_line(sync.step, d))
        w.update_weights_from_ipc([items[:4], items[4:]])
        return "row" if all(torch.equal(w.synced[k], noisy[k]) for k in before) else (
            "bf16" if all(torch.equal(w.synced[k], before[k]) for k in before) else "mixed")
    sync.step = 0

    logged = [0.001, 0.002, 0.03, 0.03, 0.05, 0.05, 0.001, 0.05, 0.05, 0.05, 0.05, 0.05]
    seen = [sync()] + [sync(d) for d in logged]
    # a sync after logging step n serves step n + 2 (verl logs step n after the sync that follows update n).
    # Logged 3: mean(0.002, 0.03) > 0.01 -> span [5, 7); steps 4-6 are not watched; logged 8: mean(0.001, 0.05)
    # -> span [10, 14), the cooldown doubled (a re-trigger right after the return)
    assert seen == ["row"] * 3 + ["bf16"] * 2 + ["row"] * 3 + ["bf16"] * 4 + ["row"]
    recs = [json.loads(x) for x in (tmp_path / hook.GUARD_LOG).read_text().splitlines()]
    assert [r["step"] for r in recs] == list(range(2, 15))
    assert [r["step"] for r in recs if r["engine"] != "row"] == [5, 6, 10, 11, 12, 13]
    df = logparse.parse(log, run_id="r", config="c", student="s", seed=0, responses_per_step=4,
                        guard_log=tmp_path / hook.GUARD_LOG)
    assert df.loc[df["guard_active"], "step"].tolist() == [5, 6, 10, 11, 12]
    assert set(df.loc[df["guard_active"], "engine"]) == {"fallback"} and set(df.loc[~df["guard_active"], "engine"]) == {"row"}
    assert df["d_n"].tolist() == pytest.approx(logged)


def test_verl_runs_the_guard_it_can_and_names_what_it_cannot(toy_config):
    paper = toy_config["experiments"]["paper"]
    g = {"d_max": "budget", "window": 10, "cooldown": 10}
    ok = [{"name": "g-noise", "noise_sigma": 0.15, "guard": {**g, "action": "fallback"}},
          {"name": "g-nvfp4", "weights": "nvfp4", "guard": {**g, "action": "fallback_numerics"}}]
    bad = [{"name": "g-nvfp4-k8", "weights": "nvfp4", "staleness": 8, "guard": {**g, "action": "fallback_numerics"}},
           {"name": "g-k8", "weights": "nvfp4", "staleness": 8, "guard": {**g, "action": "sync"}},
           {"name": "g-k8-fb", "noise_sigma": 0.1, "staleness": 8, "guard": {**g, "action": "fallback"}},
           {"name": "g-kv", "kv_cache": "fp8_e4m3", "guard": {**g, "action": "fallback"}}]
    paper["rows"] += ok
    C.validate(toy_config)
    for r in ok:
        run = next(x for x in C.runs(toy_config, "paper") if x.name == r["name"])
        ov = run_overrides(toy_config, run, run_dir="runs/x")
        extra = next(o for o in ov if ".additional_config=" in o)
        assert "opd_guard:{d_max:0.41," in extra and "action:'" + r["guard"]["action"] + "'" in extra
        cfg = verl_compose(ov, asynchronous=run.row.staleness > 0)
        vllm = OmegaConf.to_container(cfg.actor_rollout_ref.rollout.engine_kwargs.vllm)
        assert vllm["additional_config"]["opd_guard"]["d_max"] == paper["admission"]["L"]
        assert vllm["worker_extension_cls"] == "opd.backends.verl.hook.WeightNumerics"
    paper["rows"] += bad
    with pytest.raises(C.ConfigError) as e:
        C.validate(toy_config)
    m, n = str(e.value), len(paper["rows"]) + 1  # errors count rows from 1: the last is row n - 1
    assert (f"row {n - 4} ('g-nvfp4-k8'), field 'guard': verl backend: with staleness 8 verl's fully-async trainer "
            f"logs one record per parameter version") in m
    assert f"row {n - 3} ('g-k8'), field 'guard.action': verl backend: 'sync' changes the staleness" in m
    assert f"row {n - 2} ('g-k8-fb'), field 'guard.action': verl backend: 'fallback' changes the staleness" in m
    assert f"row {n - 1} ('g-kv'), field 'guard': verl backend: the row's KV-cache dtype" in m
    assert "'g-noise'" not in m and "'g-nvfp4'" not in m


def test_a_resumed_guarded_run_decides_from_the_steps_it_keeps(tmp_path):
    """A killed attempt logged steps past its last checkpoint; the resumed attempt trains them again, so the
    guard replays only the records up to the checkpoint until the new attempt logs its own."""
    (tmp_path / "verl.0.jsonl").write_text("".join(verl_line(n, 0.001 if n <= 10 else 0.5) for n in range(1, 13)))
    guard = {"d_max": 0.01, "window": 2, "action": "fallback", "cooldown": 2, "run_dir": str(tmp_path), "steps": 20,
             "log": str(tmp_path / "verl.1.jsonl")}
    assert hook.guard_decision(guard) == (2, "row")  # no checkpoint: the new attempt starts over, none counts
    (tmp_path / hook.CHECKPOINTS).mkdir()
    (tmp_path / hook.CHECKPOINTS / "latest_checkpointed_iteration.txt").write_text("10")
    assert hook.logged_d_n(tmp_path, tmp_path / "verl.1.jsonl") == pytest.approx({n: 0.001 for n in range(1, 11)})
    assert hook.guard_decision(guard) == (12, "row")  # steps 11-12 of the killed attempt do not count
    (tmp_path / "verl.1.jsonl").write_text(verl_line(11, 0.002))
    assert hook.guard_decision(guard) == (13, "row")  # the new attempt's own step 11


def test_a_native_rows_standalone_engine_starts_as_verls_rollout_server_starts_it():
    """plan.native_engine_args against verl's own source (vllm_async_server.py's FP8 block config, the
    specification): the same keys and constant values, and router gates of every layer left BF16."""
    import ast
    src = (VERL / "workers/rollout/vllm_rollout/vllm_async_server.py").read_text()
    node = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "FP8_BLOCK_QUANT_KWARGS" for t in n.targets))
    verls = {ast.literal_eval(k): v for k, v in zip(node.value.keys, node.value.values)}
    ours = plan.native_engine_args({"name": "x", "weights": "fp8_block", "activations": "fp8_group128"}, 3)
    assert ours["quantization"] == "fp8"
    q = ours["hf_overrides"]["quantization_config"]
    assert set(q) == set(verls)
    for k, v in verls.items():
        if isinstance(v, (ast.Constant, ast.List)):
            assert q[k] == ast.literal_eval(v), k
    assert q["ignored_layers"] == [f"model.layers.{i}.mlp.gate" for i in range(3)]
    assert plan.native_engine_args({"name": "x", "weights": "fp8_tensor", "activations": "fp8_token"}, 3) == {}


def test_the_smokes_phase_times_are_what_the_cost_model_reads(tmp_path):
    """benchmarks/verl_smoke.py writes its phases as {phase: {student or "*": hours}}: the start-ups (training's
    Ray and verl start-up before its first step, the evaluation engine's start) for every student, the rest for the
    toy; `python -m opd.backends.verl cost --times` and cluster_cost.py --times read it, apply the "*" phases to the
    paper's students and say the toy's are not applied. (The seconds are given here: nothing runs.)"""
    import pandas as pd
    from opd.backends.verl import cost
    smoke = load_smoke()
    ph = smoke.Phases()
    names = [r["name"] for r in smoke.ROWS]
    ph.seconds = {f"train {names[0]} (Ray start, verl start-up, 4 steps, k = 0)": 100.0, f"release {names[0]}": 3.0,
                  f"train {names[1]} (verl start-up, 4 steps, k = 2)": 90.0, "evaluation engine start (BF16)": 30.0,
                  "held-out generation: student (step 0)": 1.0, "held-out scoring: student (step 0)": 3.0,
                  f"admission {names[0]} (candidate engine, rescoring)": 36.0}
    steps = {names[0]: pd.DataFrame({"step_s": [2.0] * 4}), names[1]: pd.DataFrame({"step_s": [5.0, 5.0]})}
    t = smoke.times(ph, steps)
    assert set(t) <= set(cost.ESTIMATES) and all(isinstance(v, float) for d in t.values() for v in d.values())
    assert t["train_restart_h"] == {"*": 92 / 3600} and t["eval_job_start_h"] == {"*": 30 / 3600}
    assert t["train_h"] == {"toy": 10 / 3600} and t["eval_step_h"] == {"toy": 4 / 3600}
    assert t["admission_h"] == {"toy": 36 / 3600}
    e = Experiment.of(C.load(), "paper")
    assert cost.gpu_hours(e, t)["held-out evaluation"] < cost.gpu_hours(e)["held-out evaluation"]  # 30 s < 5 min
    assert cost.gpu_hours(e, t)["admission"] == cost.gpu_hours(e)["admission"]  # the toy's: not applied
    note = cost.measured_note(e, t)
    assert "eval_job_start_h for *" in note and "admission_h not applied (toy: not a student of paper)" in note
    (tmp_path / "t.json").write_text(json.dumps(t))
    assert verl_cli(["cost", "--times", str(tmp_path / "t.json")]) == 0
