"""One OPD update of the toy student by verl 0.9.1's own FSDP2 training engine on a CPU (tests/test_verl_cpu.py runs it
in a process of its own: verl picks its platform once per process). File:line are under the installed `verl` package.

What runs is verl's: its ActorRolloutRefWorker (workers/engine_workers.py) in the actor role builds its FSDP engine
(workers/engine/fsdp/transformer_impl.py) from the Hydra config that this project's overrides
(opd.backends.verl.overrides, row bf16) compose against verl's ppo_trainer.yaml, computes log p_old with
`compute_log_prob` and takes one optimizer step with `update_actor` and verl's distillation loss
(trainer/distillation/losses.py: k1 as a policy gradient, no task reward, token-mean). The batch is laid out as
verl's trainer lays it out (trainer/ppo/ray_trainer.py:1289-1370: left_right_2_no_padding, then the non-tensor
fields), with the responses the trainer would get from its rollout and teacher servers computed here instead: the
toy student samples them with the tiny backend's engine (BF16, temperature 1) and the toy teacher scores them in the
layout verl's teacher manager gives vLLM's prompt log-probs (experimental/teacher_loop/teacher_manager.py:59-76,
workers/rollout/vllm_rollout/utils.py:540-573: position i holds log p(x_{i+1} | x_<=i), 0 at the last position and
on padding). GRPO advantages (core_algos.compute_grpo_outcome_advantage) from the project's reward, and verl's
rollout-correction metrics (rollout_corr_helper.compute_rollout_correction_and_rejection_mask) for d_n.

What differs from a GPU run, and why (docs/testing.md lists it):
- VERL_PLATFORM=opd-cpu: the project's test-only CPU platform (opd.backends.verl.cpu_platform, a verl.plugins entry
  point); VERL_ENGINE_DEVICE=cuda selects verl's FSDP engine, registered for cuda and npu only
  (transformer_impl.py:1143, engine/base.py:405-406);
- actor strategy fsdp2 (verl's default, fsdp, is FSDP1, whose sync_module_states=True (transformer_impl.py:444)
  refuses CPU parameters: "The module has CPU parameters or buffers when `sync_module_states=True`, which requires
  them to be on GPU");
- the process group is initialised here (gloo, one rank) before verl's worker starts: verl would ask torch for
  "cpu:gloo,<device>:<backend>" (utils/distributed.py:89-97), which on the CPU platform names the cpu device twice
  and torch refuses ("Duplicate device type cpu"); verl skips its own initialisation when one exists (:90);
- no Ray: the worker is built in this process, as one rank of a single-controller worker group would be;
- actor.optim.total_training_steps is set here, as verl's trainer sets it before it builds the workers
  (trainer/ppo/v1/trainer_base.py:768-782).

Usage: python tests/verl_cpu/one_update.py OUT_DIR   (writes OUT_DIR/result.json)
"""
import os
import socket
import sys

# before torch and verl are imported: verl reads its platform once per process, and the CPU platform refuses to
# start where CUDA is visible
os.environ.update(VERL_PLATFORM="opd-cpu", VERL_ENGINE_DEVICE="cuda", CUDA_VISIBLE_DEVICES="",
                  RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
with socket.socket() as _s:
    _s.bind(("127.0.0.1", 0))
    os.environ["MASTER_PORT"] = str(_s.getsockname()[1])

import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "results" / "lean" / "_models" / "qwen-s"  # committed (the toy's weights are not); the toy's shape
PROMPTS, RESPONSES, STEPS = 4, 4, 2  # one update of 16 responses (the toy's own: 16 prompts x 8 responses)


def compose(overrides: list[str]):
    """verl's synchronous trainer config with `overrides`, as `python -m verl.trainer.main_ppo` composes it."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def full_state(module) -> dict[str, torch.Tensor]:
    """The FSDP2 module's parameters, each gathered whole (DTensor.full_tensor) and copied."""
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().float().clone()
            for k, v in module.state_dict().items()}


def main(out: Path) -> None:
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    from omegaconf import open_dict
    from tensordict import TensorDict

    from opd.backends.tiny import model as M
    from opd.backends.tiny.engine import Engine
    from opd.backends.tiny.task import EOS_ID, PROMPT_LEN, RESPONSE_LEN, Problems
    from opd.backends.verl.data import toy_task
    from opd.backends.verl.overrides import overrides

    models = {w: M.load(BASE / f"{w}.pt").eval() for w in ("student", "teacher")}
    for w, m in models.items():
        M.export_hf(m, out / w)  # Hugging Face Qwen2 checkpoints, as verl loads them
    data = toy_task(out, n_train=PROMPTS, n_heldout=PROMPTS)
    toy = yaml.safe_load((ROOT / "config.yaml").read_text())["experiments"]["toy"]
    settings = {**toy["train"], "steps": STEPS, "prompts_per_step": PROMPTS, "responses_per_prompt": RESPONSES,
                "checkpoint_every": STEPS, "eval_every": STEPS, "temperature": 1.0,
                "max_prompt_length": PROMPT_LEN, "max_response_length": RESPONSE_LEN - 1}
    row = {"name": "bf16"}
    ov = overrides(row, {"model": str(out / "student"), "teacher": str(out / "teacher"), "layers": 2}, settings,
                   {"data": {"train": str(data["train"]), "heldout": [str(data["heldout"])]}},
                   student="qwen-s", run_dir=str(out / "run"))
    cpu = ["actor_rollout_ref.actor.strategy=fsdp2", "trainer.device=cpu"]
    cfg = compose(ov + cpu)
    with open_dict(cfg):
        cfg.actor_rollout_ref.actor.optim.total_training_steps = STEPS

    import torch.distributed as dist
    import verl  # noqa: F401  (loads the verl.plugins entry points: the CPU platform registers itself)
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask
    from verl.utils import tensordict_utils as tu
    from verl.utils.device import get_device_name, get_nccl_backend
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    dist.init_process_group("gloo", rank=0, world_size=1)
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor", distillation_config=cfg.distillation)
    worker.init_model()
    engine = worker.actor.engine
    t_init = time.perf_counter()

    # the rollout: the toy student samples RESPONSES responses to each prompt of verl's training file
    ops = [tuple(int(x) for x in p[0]["content"].rstrip("=").split("+")) for p in pd.read_parquet(data["train"])["prompt"]]
    problems = Problems(tuple(ops))
    idx = np.repeat(np.arange(len(ops)), RESPONSES)
    prompts = problems.prompts(idx)
    sampler = Engine(models["student"].cfg)
    sampler.load(models["student"].state_dict())
    ro = sampler.generate(prompts, torch.Generator().manual_seed(0), max_new=settings["max_response_length"])
    B, P = prompts.shape
    mask = ro.mask
    responses = torch.where(mask, ro.responses, torch.full_like(ro.responses, EOS_ID))  # verl pads with pad_token_id
    R = responses.shape[1]
    input_ids = torch.cat([prompts, responses], 1)
    attention = torch.cat([torch.ones(B, P, dtype=torch.long), mask.long()], 1)  # the toy's prompt pads are tokens
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    following = torch.cat([input_ids[:, 1:], torch.zeros(B, 1, dtype=torch.long)], 1)
    with torch.no_grad():
        teacher = models["teacher"](input_ids).float().log_softmax(-1).gather(2, following[:, :, None])
        student_fp32 = models["student"](input_ids).float().log_softmax(-1).gather(2, following[:, :, None])[:, :, 0]
    teacher[:, -1] = 0.0
    teacher = teacher * attention[:, :, None]
    rewards = torch.tensor(problems.rewards(idx, ro.responses), dtype=torch.float32)
    token_rewards = torch.zeros(B, R)
    token_rewards[torch.arange(B), mask.sum(1) - 1] = rewards
    batch = TensorDict({"prompts": prompts, "responses": responses, "response_mask": mask.long(),
                        "input_ids": input_ids, "attention_mask": attention, "position_ids": positions,
                        "rollout_log_probs": ro.logprobs, "teacher_logprobs": teacher,
                        "teacher_ids": following[:, :, None].int()}, batch_size=B)
    temperature = cfg.actor_rollout_ref.rollout.temperature

    # log p_old: the trainer recomputes it with the actor (decoupled rollout correction)
    td = left_right_2_no_padding(batch.clone())
    tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False, temperature=temperature)
    old = no_padding_2_padding(tu.get(worker.compute_log_prob(td), "log_probs"), td).float()
    batch["old_log_probs"] = old
    batch["advantages"], _ = compute_grpo_outcome_advantage(token_rewards, mask.long(), idx)
    _, _, corr = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old, rollout_log_prob=ro.logprobs, response_mask=mask.long())

    before = full_state(engine.module)
    td = left_right_2_no_padding(batch.clone())
    mini = cfg.actor_rollout_ref.actor.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n
    loss_cfg = cfg.distillation.distillation_loss
    tu.assign_non_tensor(td, calculate_entropy=False, distillation_use_topk=False,
                         distillation_only=False, global_batch_size=mini, mini_batch_size=mini,
                         epochs=cfg.actor_rollout_ref.actor.ppo_epochs, seed=cfg.actor_rollout_ref.actor.data_loader_seed,
                         dataloader_kwargs={"shuffle": cfg.actor_rollout_ref.actor.shuffle}, compute_loss=True,
                         temperature=temperature)
    metrics = tu.get(worker.update_actor(td), "metrics")
    after = full_state(engine.module)
    t_update = time.perf_counter()

    def scalar(v):  # a metric verl keeps per micro-batch is a list; its trainer logs the mean (reduce_metrics)
        return float(np.mean(v))

    mk = mask.bool()
    response = slice(P - 1, P - 1 + R)  # logits at position i score token i + 1
    result = {
        "platform": get_device_name(), "backend": get_nccl_backend(), "dist_backend": dist.get_backend(),
        "engine": f"{type(engine).__module__}.{type(engine).__name__}", "strategy": engine.engine_config.strategy,
        "loss_mode": loss_cfg.loss_mode, "use_policy_gradient": bool(loss_cfg.use_policy_gradient),
        "use_task_rewards": bool(loss_cfg.use_task_rewards), "loss_agg_mode": cfg.actor_rollout_ref.actor.loss_agg_mode,
        "lr": float(cfg.actor_rollout_ref.actor.optim.lr), "weight_decay": float(cfg.actor_rollout_ref.actor.optim.weight_decay),
        "sequences": B, "response_tokens": int(mk.sum()), "rewards_mean": float(rewards.mean()),
        "metrics": {k: scalar(v) for k, v in metrics.items()},
        "rollout_corr_kl": float(corr["rollout_corr/kl"]),
        # independent of verl: the k1 token mean from the trainer's log p_old and the teacher's log-probs, and the
        # tiny backend's fp32 student on the same tokens
        "k1_token_mean": float((old - teacher[:, response, 0])[mk].mean()),
        "old_vs_fp32_max": float((old - student_fp32[:, response])[mk].abs().max()),
        "old_vs_engine_max": float((old - ro.logprobs)[mk].abs().max()),
        "changed": {k: float((after[k] - before[k]).abs().max()) for k in before},
        "finite_after": all(bool(torch.isfinite(v).all()) for v in after.values()),
        "seconds": {"init": t_init - t0, "update": t_update - t_init, "total": time.perf_counter() - t0},
    }
    (out / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("metrics", "k1_token_mean", "seconds")}, indent=1))
    dist.destroy_process_group()
    assert math.isfinite(result["metrics"]["loss"])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
