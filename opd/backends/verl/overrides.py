"""A matrix row as the Hydra overrides of verl's trainer (verl 0.9).

OPD is verl's on-policy distillation with the k1 estimator used as a policy gradient and no task
reward: A_t = log p_T - log p_theta on the rollout engine's tokens. Rollout correction runs in
decoupled mode (the trainer recomputes log p_theta), so verl logs `rollout_corr/kl`, the masked mean
of log q - log p_theta over the step's tokens: d_n.

Staleness k: verl's fully asynchronous trainer (verl.experimental.fully_async_policy) bounds
staleness instead of fixing it. We run it with `trigger_parameter_sync_step = k` (the rollout engine
receives new weights every k optimizer updates), `staleness_threshold = 0` and no partial rollouts, so
a batch is sampled with weights between 0 and k - 1 updates old (mean about (k - 1) / 2 when the
engine is never the bottleneck); the step's actual staleness is logged per step from verl's metrics.
k = 0 is verl's synchronous PPO trainer.

Weight recipes vLLM lacks (Model Optimizer-style per-tensor FP8 with layers kept BF16, NVFP4
emulation, Gaussian noise) are applied to the synced weights by opd.backends.verl.hook; the FP8 KV
cache is vLLM's own (`kv_cache_dtype`, `kv_cache_dtype_skip_layers`).
"""
from __future__ import annotations

import os

from opd import config as C
from opd.quant import resolve_layers

SYNC_ENTRY = "verl.trainer.main_ppo"
ASYNC_ENTRY = "verl.experimental.fully_async_policy.fully_async_main"
HOOK = "opd.backends.verl.hook.WeightNumerics"  # the vLLM worker extension applying weight numerics
KV_DTYPE = {"fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}


def _list(xs) -> str:
    return "[" + ",".join(str(x) for x in xs) + "]"


def hydra_value(v) -> str:
    """A Python value in Hydra's override grammar (dict keys bare, strings quoted)."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{hydra_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(v)


def entry_point(row: dict) -> str:
    return ASYNC_ENTRY if int(row.get("staleness", 0)) > 0 else SYNC_ENTRY


def vllm_kv_args(row: dict, n_layers: int) -> dict:
    """vLLM's own engine arguments for the row's KV cache: its dtype and the layers kept BF16."""
    r = {**C.ROW_DEFAULTS, **row}
    if r["kv_cache"] == "none":
        return {}
    args = {"kv_cache_dtype": KV_DTYPE[r["kv_cache"]]}
    keep = sorted(resolve_layers(r["bf16_layers"], n_layers))
    if keep:
        args["kv_cache_dtype_skip_layers"] = [str(i) for i in keep]  # vLLM takes layer names
    return args


def weight_numerics(row: dict, seed: int) -> dict | None:
    """What the weight-sync hook applies, or None when the row leaves the weights alone."""
    r = {**C.ROW_DEFAULTS, **row}
    if r["weights"] == "none" and not r["noise_sigma"]:
        return None
    return {"weights": r["weights"], "bf16_layers": list(r["bf16_layers"]), "noise_sigma": float(r["noise_sigma"]),
            "noise_seed": int(seed)}


def overrides(row: dict, cfg: dict, student: str | None = None, seed: int = 0, run_dir: str = ".",
              experiment: str = "paper") -> list[str]:
    """Hydra overrides for one run of `row` in experiment `experiment` of the validated config `cfg`."""
    e = cfg["experiments"][experiment]
    r = {**C.ROW_DEFAULTS, **row}
    student = student or next(iter(e["students"]))
    s, t, v = e["students"][student], C.run_settings(e["train"], row), e.get("verl", {})
    layout = v.get("layout", {})
    n_layers = s["layers"]
    rollout = "actor_rollout_ref.rollout"
    o = [
        # data paths absolute: relative ones mean the working directory's (the repository), verl runs in the run folder
        f"data.train_files={_list([os.path.abspath(v['data']['train'])])}",
        f"data.val_files={_list([os.path.abspath(f) for f in v['data']['heldout']])}",
        f"data.train_batch_size={t['prompts_per_step']}",
        f"data.max_prompt_length={t['max_prompt_length']}",
        f"data.max_response_length={t['max_response_length']}",
        f"data.seed={seed}",
        f"actor_rollout_ref.model.path={s['model']}",
        f"actor_rollout_ref.actor.optim.lr={t['lr']}",
        # the tiny trainer's schedules by the same names: constant, or cosine down to 0 at the last step
        f"actor_rollout_ref.actor.optim.lr_scheduler_type={t.get('lr_schedule', 'constant')}",
        "actor_rollout_ref.actor.optim.min_lr_ratio=0.0",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={t['prompts_per_step']}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        # token-budgeted micro-batches (DAPO's recipe: 2x and 3x one full sequence per GPU), so 16k-token
        # responses neither need a fixed micro-batch size nor run out of memory
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={2 * (t['max_prompt_length'] + t['max_response_length'])}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={3 * (t['max_prompt_length'] + t['max_response_length'])}",
        f"{rollout}.name=vllm",
        f"{rollout}.n={t['responses_per_prompt']}",
        f"{rollout}.temperature={t['temperature']}",
        f"{rollout}.calculate_log_probs=True",
        "algorithm.rollout_correction.bypass_mode=False",  # decoupled: the trainer recomputes log p_theta
        f"trainer.total_training_steps={t['steps']}",
        f"trainer.save_freq={t['checkpoint_every']}",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={run_dir}/verl_checkpoints",
        f"trainer.test_freq={t['eval_every']}",
        "trainer.logger=[console,file]",
        "trainer.project_name=opd-budget",
        f"trainer.experiment_name={row['name']}.{student}.s{seed}",
        f"trainer.nnodes={layout.get('nodes', 2) - layout.get('teacher_nodes', 1)}",
        f"trainer.n_gpus_per_node={layout.get('gpus_per_node', 4)}",
    ]
    if r["algorithm"] == "opd":
        o += [
            "distillation.enabled=True",
            "distillation.distillation_loss.loss_mode=k1",
            "distillation.distillation_loss.use_policy_gradient=True",
            "distillation.distillation_loss.use_task_rewards=False",
            f"distillation.teacher_models.teacher_model.model_path={s['teacher']}",
            "distillation.teacher_models.teacher_model.key=math",
            f"distillation.nnodes={layout.get('teacher_nodes', 1)}",
            f"distillation.n_gpus_per_node={layout.get('gpus_per_node', 4)}",
            f"distillation.teacher_models.teacher_model.num_replicas={layout.get('gpus_per_node', 4)}",
            "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1",
            "distillation.teacher_key=opd_teacher_key",
            "algorithm.adv_estimator=grpo",  # no task reward: the distillation term is the whole signal
        ]
    else:
        o += [f"algorithm.adv_estimator={'reinforce_plus_plus' if r['algorithm'] == 'reinforce' else 'grpo'}",
              f"algorithm.norm_adv_by_std_in_grpo={r['algorithm'] == 'grpo'}"]
    if r["variant"] == "tis":
        o += ["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=2.0"]
    o += [f"+{rollout}.engine_kwargs.vllm.{k}={hydra_value(v)}" for k, v in vllm_kv_args(row, n_layers).items()]
    numerics = weight_numerics(row, seed)
    if numerics:
        o.append(f"+{rollout}.engine_kwargs.vllm.worker_extension_cls={HOOK}")
        o.append(f"+{rollout}.engine_kwargs.vllm.additional_config={hydra_value({'opd_numerics': numerics})}")
    spec = v.get("speculative")
    if r.get("speculative") and spec and s.get("eagle3"):
        o.append(f"+{rollout}.engine_kwargs.vllm.speculative_config=" + hydra_value(
            {"method": spec["method"], "model": s["eagle3"], "num_speculative_tokens": spec["num_speculative_tokens"]}))
    k = int(r["staleness"])
    if k > 0:
        o += [f"async_training.trigger_parameter_sync_step={k}", "async_training.staleness_threshold=0",
              "async_training.partial_rollout=False", "actor_rollout_ref.actor.use_rollout_log_probs=False",
              f"rollout.total_rollout_steps={t['steps'] * t['prompts_per_step']}",
              "rollout.nnodes=1", f"rollout.n_gpus_per_node={layout.get('rollout_replicas', 4)}"]
    return o
