"""The verl backend's CPU-checkable parts: every paper run's overrides compose against verl's own Hydra
config and pass the checks verl's trainer makes before it asks Ray for GPUs (verl 0.9.1 installed with
its CPU-side dependencies; vLLM is not in this environment), the JSONL log parser, the weight-sync hook's
numerics and the data preparation. tests/test_vllm.py runs the vLLM jobs in a real engine."""
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from opd import config as C
from opd import quant
from opd.backends.verl import data, hook, logparse
from opd.backends.verl.__main__ import main as verl_cli
from opd.backends.verl.overrides import ASYNC_ENTRY, entry_point, overrides

VERL = Path(importlib.util.find_spec("verl").submodule_search_locations[0])
FIXTURES = Path(__file__).parent / "fixtures"


def verl_compose(ov: list[str], asynchronous: bool):
    GlobalHydra.instance().clear()
    d = VERL / ("experimental/fully_async_policy/config" if asynchronous else "trainer/config")
    extra = [f"hydra.searchpath=[file://{VERL / 'trainer/config'}]"] if asynchronous else []
    with initialize_config_dir(config_dir=str(d), version_base=None):
        return compose(config_name="fully_async_ppo_trainer" if asynchronous else "ppo_trainer", overrides=ov + extra)


@pytest.fixture(scope="module")
def paper():
    cfg = C.load()
    out = {}
    for r in C.runs(cfg, "paper"):
        out[r.run_id] = (r, overrides(r.row, cfg, student=r.student, seed=r.seed, run_dir=f"runs/{r.run_id}"))
    return out


def test_every_paper_run_composes_against_verls_config(paper):
    assert len(paper) >= 17 + 3 + 2
    for run_id, (r, ov) in paper.items():
        cfg = verl_compose(ov, entry_point(r.row) == ASYNC_ENTRY)
        rollout = cfg.actor_rollout_ref.rollout
        assert rollout.n == 8 and rollout.temperature == 1.0 and cfg.data.max_response_length == 16384
        assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6 and cfg.trainer.total_training_steps == 200
        assert cfg.algorithm.rollout_correction.bypass_mode is False  # decoupled: rollout_corr/kl is d_n
        # verl runs inside the run folder: config.yaml's relative data paths must reach it absolute
        assert all(Path(f).is_absolute() for f in [*cfg.data.train_files, *cfg.data.val_files])
        if r.resolved["algorithm"] == "opd":
            loss = cfg.distillation.distillation_loss
            assert cfg.distillation.enabled and loss.loss_mode == "k1" and loss.use_policy_gradient
            assert not loss.use_task_rewards
        else:
            assert not cfg.distillation.enabled
        vllm = OmegaConf.to_container(rollout.engine_kwargs.vllm)
        if r.resolved["kv_cache"] != "none":
            assert vllm["kv_cache_dtype"] == r.resolved["kv_cache"]
        if r.resolved["weights"] != "none" or r.resolved["noise_sigma"]:
            assert vllm["worker_extension_cls"] == "opd.backends.verl.hook.WeightNumerics"
            assert vllm["additional_config"]["opd_numerics"]["weights"] == r.resolved["weights"]


def verl_startup_checks(cfg) -> None:
    """What verl does with a composed config before it needs GPUs: main_ppo's validate_config (batch and
    micro-batch sizes, the actor's dataclass), every interpolation resolved, and the rollout,
    distillation and checkpoint-engine dataclasses its workers build."""
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    OmegaConf.to_container(cfg, resolve=True)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)
    omega_conf_to_dataclass(cfg.distillation)


@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_every_paper_run_passes_verls_own_startup_checks(paper):
    """Without token-budgeted micro-batches every paper run failed here ("Please set at least one of
    'actor.ppo_micro_batch_size' or ..."): caught on CPU instead of after a GPU allocation."""
    for run_id, (r, ov) in paper.items():
        verl_startup_checks(verl_compose(ov, entry_point(r.row) == ASYNC_ENTRY))
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


@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_the_gpu_smoke_scripts_overrides_compose(tmp_path):
    """benchmarks/verl_smoke.py is for whoever has a GPU: its verl command must at least compose, with a
    context that fits the toy models (prompt + response = their max_position_embeddings)."""
    spec = importlib.util.spec_from_file_location("verl_smoke", Path(__file__).parent.parent / "benchmarks" / "verl_smoke.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    from opd.backends.tiny import model as M
    context = M.load(Path(__file__).parent.parent / "results/toy/_models/qwen-s/student.pt").cfg.max_seq_len
    for row in ({"name": "kv-e4m3", "kv_cache": "fp8_e4m3"}, {"name": "nvfp4", "weights": "nvfp4"}):
        entry, ov = smoke.command(tmp_path, row, gpus=2)
        cfg = verl_compose(ov, entry == ASYNC_ENTRY)
        assert cfg.trainer.total_training_steps == 2 and cfg.distillation.enabled
        verl_startup_checks(cfg)
        assert cfg.data.max_prompt_length + cfg.data.max_response_length <= context
    # verl cannot score the toy task itself: it loads our reward function by path, as its reward loop does
    from verl.trainer.ppo.reward import get_custom_reward_fn
    fn = get_custom_reward_fn(cfg)
    assert fn(data_source="opd-toy", solution_str="3+5=8,8+9=17;17", ground_truth="17", extra_info={}) == 1.0
    assert fn(data_source="opd-toy", solution_str="3+5=8,8+9=17;16", ground_truth="17", extra_info={}) == 0.0


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
            logger.log({**train[step % len(train)], "rollout_corr/kl": step / 1000 + (attempt_steps[0] == 3) / 10},
                       step=step)
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
    """The fixture's keys are verl 0.9's logger output (trainer.logger=file): a synchronous step, a
    validation line, and a step logged again after a resume."""
    df = logparse.parse(FIXTURES / "verl_0.9_file_logger.jsonl", run_id="r", config="c", student="s", seed=0,
                        responses_per_step=64)
    assert df["step"].tolist() == [1, 2, 3]
    assert df.loc[0, "d_n"] == pytest.approx(0.00081) and df.loc[2, "d_n"] == pytest.approx(0.00079)
    assert df.loc[0, "n_tokens"] == round(5012.5 * 64)
    assert df.loc[0, "wait_s"] == df.loc[0, "rollout_s"] == pytest.approx(812.4)
    assert df.loc[1, "staleness"] == 0
    assert df["teacher_s"].isna().all()  # verl 0.9 does not time the teacher: not measured, not zero
    logparse.write_steps(FIXTURES / "verl_0.9_file_logger.jsonl", tmp_path / "steps.parquet", run_id="r", config="c",
                         student="s", seed=0, responses_per_step=64)
    from opd import store
    assert len(store.read_table(tmp_path / "steps.parquet")) == 3


def tiny_model(layers=3, seed=0):
    from opd.backends.tiny.base import model_config
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
    from opd import launch
    paper = C.load()["experiments"]["paper"]["slurm"]
    assert paper["nodes"] == 2 and paper["gpus_per_node"] == 4  # a training run: teacher node + trainer node
    shape = launch.single_job_shape(paper)
    assert shape["nodes"] == 1 and shape["gpus_per_node"] == 1 and shape["time_min"] == paper["time_min"]
    assert "gpus_per_node" not in launch.single_job_shape({"nodes": 1, "cpus_per_task": 2})  # the toy on Slurm
