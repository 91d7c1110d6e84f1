"""A matrix row as the Hydra overrides of verl's trainer (verl 0.9.1; file:line below are under the
installed `verl` package).

OPD is verl's on-policy distillation with the k1 estimator used as a policy gradient and no task
reward: A_t = log p_T - log p_theta on the rollout engine's tokens. Rollout correction runs in
decoupled mode (the trainer recomputes log p_old), so verl logs `rollout_corr/kl`, the token mean of
log q - log p_old over the step's tokens (trainer/ppo/rollout_corr_helper.py:959), and the policy loss
logs `ppo_kl`, the mean of log p_old - log p_theta (trainer/ppo/core_algos.py:1336-1340); logparse adds
them into d_n = mean of log q - log p_theta (see logparse for what verl's micro-batch averaging does to
the second term).

Staleness k: verl's fully asynchronous trainer (verl.experimental.fully_async_policy) bounds staleness
instead of fixing it. We run it with `trigger_parameter_sync_step = k` (the rollout engine receives new
weights every k optimizer updates), `staleness_threshold = 0` and no partial rollouts: the rollouter
generates at most k batches per weight version and then waits (fully_async_rollouter.py:1142-1162,
598-604), so the i-th update after a sync trains on tokens sampled by weights i - 1 updates old
(0, ..., k - 1; mean (k - 1) / 2). That trainer recomputes log p_old with the weights the engine had
(fully_async_trainer.py:654-674), so for k > 0 `rollout_corr/kl` holds only the numerics and `ppo_kl` the
staleness. k = 0 is verl's synchronous PPO trainer.

Engine numerics, real kernel or emulation (plan.NATIVE and plan.kernels; the README's recipe table):
- block FP8 W8A8 (weights `fp8_block`, activations `fp8_group128`, no layer kept BF16) is vLLM's own FP8
  kernel through verl's `rollout.quantization=fp8`: verl asks vLLM for 128x128 weight tiles and dynamic
  activation scales (workers/rollout/vllm_rollout/vllm_async_server.py:1238-1262) and quantizes each
  synced BF16 bucket in the worker (utils/vllm/vllm_quant_utils.py:439-453, from utils.py:393);
- the FP8 KV cache is vLLM's own (`kv_cache_dtype`, `kv_cache_dtype_skip_layers`);
- weight recipes vLLM has no on-the-fly path for (Model Optimizer-style per-tensor FP8, block FP8 with
  layers kept BF16 or without activations, NVFP4) and Gaussian noise are emulated: opd.backends.verl.hook
  applies opd.quant's functions to the synced weights, and vLLM computes with the dequantized values;
- other activation recipes are refused (plan.errors): vLLM quantizes activations only inside its own
  quantized kernels, and verl 0.9.1 offers only the FP8 one for a BF16 checkpoint (NVFP4 needs a
  Model Optimizer or compressed-tensors checkpoint from quantization-aware training, verl's `qat`).
"""
from __future__ import annotations

import os
import re

from opd.recipes import recipe, resolve_layers
from opd.rows import Guard, Row
from opd.spec import Experiment, Run, Settings, Student, Verl

from .layout import Layout
from .layout import layout as layout_of
from .plan import CHECKPOINTS, native_quantization, schedule
from .site import data_path, model_path

SYNC_ENTRY = "verl.trainer.main_ppo"
ASYNC_ENTRY = "verl.experimental.fully_async_policy.fully_async_main"
HOOK = "opd.backends.verl.hook.WeightNumerics"  # the vLLM worker extension applying weight numerics
ESI_MARGIN_S = 60  # seconds beyond verl's own 60 s for a checkpoint save, before the Slurm signal
PROJECT = "opd-budget"  # trainer.project_name: verl's file logger names its folder after it (shared_log)
REWARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reward.py")  # verl loads it by path


def hydra_value(v) -> str:
    """A Python value in Hydra's override grammar, which Hydra and OmegaConf read back as exactly `v`: every
    override value taken from the config or the filesystem (paths, model names, row names) passes through
    here. Strings are single-quoted, so a comma, space, bracket, brace, quote, '=', ':' or '$' is text, not a
    sweep, a list or a second key. Inside Hydra's quotes (hydra/grammar/OverrideLexer.g4, QUOTED_VALUE) a
    quote is written \\' and backslashes are doubled only right before a quote or the closing one. '${' is
    refused: OmegaConf reads it as an interpolation, and although '\\${' would compose as text, verl calls
    OmegaConf.resolve on its config (main_ppo.py:145, fully_async_main.py:54), which unescapes it, so verl's
    next read of the value would look up an interpolation. Dict keys are bare (they are verl's and vLLM's
    names, never data)."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{hydra_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        if "${" in v:
            raise ValueError(f"{v!r} contains '${{', which verl's config (OmegaConf, resolved by verl at start) would "
                             f"read as an interpolation; rename the path or model")
        return "'" + re.sub(r"(\\*)('|$)", lambda m: 2 * m.group(1) + ("\\'" if m.group(2) else ""), v) + "'"
    if isinstance(v, (int, float)):
        return repr(v)
    raise TypeError(f"no Hydra override form for {type(v).__name__} {v!r}")


def teacher_context(settings: Settings) -> int:
    """The teacher engine's max_model_len: the student's prompt and response and the one token vLLM generates."""
    t = Settings.of(settings)
    return t.max_prompt_length + t.max_response_length + 1


def optimizer_overrides() -> list[str]:
    """verl's AdamW set to the tiny trainer's (opd.backends.tiny.trainer: weight_decay 0, no clipping)."""
    return ["actor_rollout_ref.actor.optim.weight_decay=0.0", "actor_rollout_ref.actor.optim.clip_grad=inf"]


# Where verl's fully-async trainer (k > 0) syncs weights: its NCCL checkpoint engine
# (experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml:83), whose module imports cupy at import time
# (checkpoint_engine/nccl_checkpoint_engine.py:23); without cupy verl only says "nccl not registered"
# (checkpoint_engine/base.py:93-98). The synchronous trainer's colocated engine (`naive`) needs nothing more.
ATTENTION_MODULES = {"sdpa": (), "flash_attention_2": ("flash_attn",)}
ASYNC_SYNC_MODULES = ("cupy",)


def runtime_modules(row: Row | dict, verl: Verl | dict) -> dict[str, str]:
    """The modules verl imports only when a run's settings select them, each with the setting that does and how
    to install it: a run checks them before it starts Ray (gpu.train_run), tests/test_cluster_install.py checks
    the cluster install brings them."""
    v, k = Verl.of(verl), Row.of(row).staleness
    out = {m: f"verl.attention is {v.attention!r}: transformers needs the flash-attn package (no wheel on PyPI: "
              f"docs/cluster.md, \"Install\"), or set verl.attention: sdpa" for m in ATTENTION_MODULES[v.attention]}
    if k > 0:
        out.update({m: f"staleness {k}: verl's fully-async trainer syncs weights with its NCCL checkpoint engine, "
                       f"which imports {m} (the cluster extra's cupy-cuda13x: pip install -e '.[cluster]')"
                    for m in ASYNC_SYNC_MODULES})
    return out


def entry_point(row: dict) -> str:
    return ASYNC_ENTRY if Row.of(row).staleness > 0 else SYNC_ENTRY


def vllm_kv_args(row: dict, n_layers: int) -> dict:
    """vLLM's own engine arguments for the row's KV cache: its dtype and the layers kept BF16."""
    r = Row.of(row)
    if r.kv_cache == "none":
        return {}
    args = dict(recipe("kv_cache", r.kv_cache).vllm)
    keep = sorted(resolve_layers(r.bf16_layers, n_layers))
    if keep:
        args["kv_cache_dtype_skip_layers"] = [str(i) for i in keep]  # vLLM takes layer names
    return args


def weight_numerics(row: dict, seed: int) -> dict | None:
    """What the weight-sync hook applies, or None when the row leaves the weights alone."""
    r = Row.of(row)
    weights = "none" if native_quantization(r) else r.weights  # vLLM quantizes those weights itself
    if weights == "none" and not r.noise_sigma:
        return None
    return {"weights": weights, "bf16_layers": list(r.bf16_layers), "noise_sigma": r.noise_sigma,
            "noise_seed": int(seed)}


def run_overrides(cfg: dict, run: Run, run_dir: str = ".", **kw) -> list[str]:
    """`overrides` for one run of the validated config `cfg` (the command line's and the tests' entry)."""
    e = Experiment.of(cfg, run.experiment)
    return overrides(run.row, e.students[run.student], e.settings(run.row), e.verl or Verl(), student=run.student,
                     seed=run.seed, run_dir=run_dir, guard=e.guard(run.row), **kw)


def overrides(row: Row | dict, student_spec: Student | dict, settings: Settings | dict, verl: Verl | dict, *,
              student: str, seed: int = 0, run_dir: str = ".", log_path: str | None = None,
              pools: Layout | None = None, guard: Guard | dict | None = None, env: dict | None = None,
              log_root: str | None = None) -> list[str]:
    """Hydra overrides for one run of `row` by `student` (its spec, opd.spec.Student) with the run's
    training settings (opd.spec.Experiment.settings) and the experiment's verl settings, exactly what a
    training job's spec holds (config.yaml's mappings of them are read as those types). verl's file logger
    writes to `log_path` (default: the run folder's next attempt log); `pools` replaces the layout
    `verl.layout` gives (benchmarks/verl_smoke.py: one node); `guard`: the row's resolved guard
    (opd.spec.Experiment.guard: d_max a number), which the weight-sync hook applies; `env`: variables of verl's,
    NCCL's or Gloo's own for every Ray process of the run (gpu.train_run: verl.network, verl's deadline), through
    the runtime_env verl's ray.init passes to every worker (main_ppo.py:62-74). `log_root` instead of `log_path`:
    verl's file logger writes to shared_log(log_root, ...), a path that follows from the run's experiment_name, so
    runs that differ only there have the same runtime_env and can share one Ray session (benchmarks/verl_smoke.py:
    verl's run_ppo starts Ray only when none is running, main_ppo.py:57)."""
    from .logparse import attempt_log
    r, s, t, v = Row.of(row), Student.of(student_spec), Settings.of(settings), Verl.of(verl)
    guard = Guard.of(guard) if guard else None
    n_layers = s.layers
    k = r.staleness
    plan = schedule(t, k, v.resume_every)
    rollout = "actor_rollout_ref.rollout"
    log_path = os.path.abspath(log_path or attempt_log(run_dir)) if not log_root else shared_log(
        log_root, r.name, student, seed)
    log_env = ("VERL_FILE_LOGGER_ROOT", os.path.abspath(log_root)) if log_root else ("VERL_FILE_LOGGER_PATH", log_path)
    o = [
        # paths absolute (a relative one is the repository's: opd.backends.verl.site), since verl runs in the run folder
        f"data.train_files={hydra_value([data_path(v.data.train)])}",
        f"data.val_files={hydra_value([data_path(f) for f in v.data.heldout])}",
        f"data.max_prompt_length={hydra_value(t.max_prompt_length)}",
        f"data.max_response_length={hydra_value(t.max_response_length)}",
        f"data.seed={hydra_value(seed)}",
        f"actor_rollout_ref.model.path={hydra_value(model_path(s.model))}",
        f"actor_rollout_ref.actor.optim.lr={hydra_value(t.lr)}",
        # the tiny trainer's schedules by the same names: constant, or cosine down to 0 at the last step
        f"actor_rollout_ref.actor.optim.lr_scheduler_type={hydra_value(t.lr_schedule)}",
        "actor_rollout_ref.actor.optim.min_lr_ratio=0.0",
        # the tiny trainer's AdamW: no weight decay, no gradient clipping (verl's defaults are 0.01 and a norm of
        # 1.0: trainer/config/_generated_ppo_trainer.yaml:15, 20; clipping would cap exactly the gradient spikes of
        # high-mismatch rows the experiment measures). clip_grad=inf: torch's clip_grad_norm_ with max_norm inf
        # scales by min(1, inf / norm) = 1 and still returns the norm verl logs as actor/grad_norm
        *optimizer_overrides(),
        # one mini-batch per step: one optimizer update per batch of prompts_per_step prompts (for k > 0 also
        # the fully-async trainer's batch, required_samples = ppo_mini_batch_size: fully_async_trainer.py:159)
        f"actor_rollout_ref.actor.ppo_mini_batch_size={hydra_value(t.prompts_per_step)}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        # token-budgeted micro-batches (DAPO's recipe: 2x and 3x one full sequence per GPU), so 16k-token
        # responses neither need a fixed micro-batch size nor run out of memory
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={2 * (t.max_prompt_length + t.max_response_length)}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={3 * (t.max_prompt_length + t.max_response_length)}",
        f"{rollout}.name=vllm",
        f"{rollout}.n={hydra_value(t.responses_per_prompt)}",
        f"{rollout}.temperature={hydra_value(t.temperature)}",
        f"{rollout}.calculate_log_probs=True",
        # the actor's attention in transformers (verl asks for flash_attention_2 unless told: workers/config/
        # model.py:185, and transformers raises ImportError without the flash-attn package): `verl.attention`
        f"+actor_rollout_ref.model.override_config.attn_implementation={hydra_value(v.attention)}",
        # the project's scorer for every data source: 1 for a right answer, 0 otherwise (verl's math_dapo scorer
        # gives +-1, which made reward_mean 2 x accuracy - 1); GRPO's per-group standardisation is unchanged by it
        f"reward.custom_reward_function.path={hydra_value(REWARD)}", "reward.custom_reward_function.name=compute_score",
        "algorithm.rollout_correction.bypass_mode=False",  # decoupled: the trainer recomputes log p_old
        f"trainer.save_freq={plan.save_freq}",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={hydra_value(os.path.join(os.path.abspath(run_dir), CHECKPOINTS))}",
        # verl's own validation is off: the held-out evaluation (opd.backends.verl.evaluate) is the measurement
        "trainer.val_before_train=False",
        f"trainer.logger={hydra_value(loggers(v))}",
        # the file logger lives in a Ray actor (trainer_base.py:423, fully_async_trainer.py:128 -> tracking.py:534),
        # possibly on another node: verl's ray.init passes this runtime_env to every worker of the job
        # (main_ppo.py:62-74), which is how VERL_FILE_LOGGER_PATH reaches it
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{log_env[0]}={hydra_value(log_env[1])}",
        *(f"+ray_kwargs.ray_init.runtime_env.env_vars.{k_}={hydra_value(str(v_))}" for k_, v_ in (env or {}).items()),
        f"trainer.project_name={PROJECT}",
        f"trainer.experiment_name={hydra_value(experiment_name(r.name, student, seed))}",
        *(pools or layout_of(v, r)).overrides(),
    ]
    if k == 0:
        o += [f"data.train_batch_size={hydra_value(t.prompts_per_step)}",
              f"trainer.total_training_steps={hydra_value(t.steps)}",
              "trainer.test_freq=-1"]
    else:
        o += [
            # the fully-async trainer and rollouter refuse the hybrid engine and a train batch size
            # (fully_async_trainer.py:75-76, fully_async_rollouter.py:348-351); the rollouter reads one
            # prompt at a time (gen_batch_size 1, :352) until total_rollout_steps prompts
            "actor_rollout_ref.hybrid_engine=False", "data.train_batch_size=0",
            f"rollout.total_rollout_steps={hydra_value(t.steps * t.prompts_per_step)}",
            f"async_training.trigger_parameter_sync_step={hydra_value(k)}", "async_training.staleness_threshold=0",
            "async_training.partial_rollout=False", "actor_rollout_ref.actor.use_rollout_log_probs=False",
            # at the end fit() logs the last update's metrics only if version % test_freq != 0
            # (fully_async_trainer.py:529-533); one more than the last version also never validates (:817-821)
            f"trainer.test_freq={hydra_value(t.steps // k + 1)}",
            # the deadline save (gpu.deadline_env) leaves this margin beyond verl's 60 s for the save itself
            f"trainer.esi_redundant_time={ESI_MARGIN_S}",
        ]
    if r.algorithm == "opd":
        o += [
            "distillation.enabled=True",
            "distillation.distillation_loss.loss_mode=k1",
            "distillation.distillation_loss.use_policy_gradient=True",
            "distillation.distillation_loss.use_task_rewards=False",
            f"distillation.teacher_models.teacher_model.model_path={hydra_value(model_path(s.teacher))}",
            # the teacher scores prompt + response and must have room for the one token vLLM generates
            # (vllm_async_server.py:593-599); left unset it is the model's max_position_embeddings
            # (:1104-1105), and verl's own check of the room is skipped (workers/config/distillation.py:178)
            f"distillation.teacher_models.teacher_model.inference.max_model_len={teacher_context(t)}",
            "distillation.teacher_models.teacher_model.key=math",
            "distillation.teacher_key=opd_teacher_key",
            "algorithm.adv_estimator=grpo",  # no task reward: the distillation term is the whole signal
        ]
    else:  # config validation admits only grpo here (verl has no A_t = R estimator)
        o += ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=True"]
    if r.variant == "tis":
        o += ["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=2.0"]
    if native_quantization(r):
        o.append(f"{rollout}.quantization={native_quantization(r)}")
    o += [f"+{rollout}.engine_kwargs.vllm.{k_}={hydra_value(v_)}" for k_, v_ in vllm_kv_args(r, n_layers).items()]
    numerics = weight_numerics(r, seed)
    if numerics:
        o.append(f"+{rollout}.engine_kwargs.vllm.worker_extension_cls={HOOK}")
        extra = {"opd_numerics": numerics}
        if guard:  # the hook reads the run's verl logs for d_n (hook.guard_decision)
            extra["opd_guard"] = {**guard.as_dict(), "run_dir": os.path.abspath(run_dir), "steps": t.steps,
                                  "log": log_path}
        o.append(f"+{rollout}.engine_kwargs.vllm.additional_config={hydra_value(extra)}")
    spec = v.speculative
    if r.speculative:  # config validation refuses a speculative row without verl.speculative or a draft (plan.errors)
        if not (spec and s.eagle3):
            raise ValueError(f"row {r.name!r}: speculative, but no verl.speculative or no eagle3 draft for {student!r}")
        o.append(f"+{rollout}.engine_kwargs.vllm.speculative_config=" + hydra_value(
            {"method": spec.method, "model": model_path(s.eagle3), "num_speculative_tokens": spec.num_speculative_tokens}))
    return o + extra_overrides(o, v)


def experiment_name(row: str, student: str, seed: int) -> str:
    """trainer.experiment_name of a run: its run id."""
    return f"{row}.{student}.s{seed}"


def shared_log(log_root: str, row: str, student: str, seed: int) -> str:
    """Where verl's file logger writes when VERL_FILE_LOGGER_ROOT is set and VERL_FILE_LOGGER_PATH is not:
    <root>/<trainer.project_name>/<trainer.experiment_name>.jsonl (utils/tracking.py:534-539)."""
    return os.path.join(os.path.abspath(log_root), PROJECT, f"{experiment_name(row, student, seed)}.jsonl")


# verl 0.9.1's tracking backends (utils/tracking.py:49-60) a run may log to; `file` always, since logparse reads
# the run's d_n, loss and timings from verl's file logger
LOGGERS = ("console", "file", "wandb", "tensorboard", "mlflow", "swanlab", "clearml", "trackio")


def loggers(verl: Verl) -> list[str]:
    """trainer.logger: the experiment's `verl.logger` (default console and file: opd.spec.Verl)."""
    return list(verl.logger)


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def extra_overrides(project: list[str], verl: Verl) -> list[str]:
    """The experiment's `verl.extra_overrides`, each `key=value` with the value read as YAML (a number, a bool, a
    list, a string) and written by hydra_value, quoted like every other value; a `+` before the key adds a key
    verl's config lacks, as in Hydra. Refused with ValueError naming the override: not `key=value`, `${` (see
    hydra_value), and a key the project sets itself in `project` (this run's overrides), or one inside or above
    such a key: those come from config.yaml's rows and settings."""
    import yaml
    ours = {_override_key(x) for x in project}
    out = []
    for text in verl.extra_overrides:
        key, eq, value = text.partition("=")
        name = key.lstrip("+")
        if not eq or not re.fullmatch(r"\+{0,2}[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*", key):
            raise ValueError(f"{text!r} is not key=value (a dotted verl config key, `+` in front to add one)")
        if "${" in text:
            raise ValueError(f"{text!r} contains '${{', which verl's config (OmegaConf) would read as an interpolation")
        clash = sorted(k for k in ours if k == name or k.startswith(name + ".") or name.startswith(k + "."))
        if clash:
            raise ValueError(f"{text!r} overlaps {', '.join(clash)}, which the project sets itself from config.yaml "
                             f"(rows, train, verl); change it there" + (" (verl.logger for trainer.logger)"
                                                                        if "trainer.logger" in clash else ""))
        parsed = yaml.safe_load(value) if value.strip() else ""
        out.append(f"{key}={'null' if parsed is None else hydra_value(parsed)}")
    return out


def extra_override_errors(cfg: dict, experiment: str) -> list[str]:
    """Config validation of `verl.logger` and `verl.extra_overrides` against every run's own overrides:
    '<field>: <why>' messages (opd.config names the experiment)."""
    e = Experiment.of(cfg, experiment)
    v = e.verl or Verl()
    errors = []
    if "file" not in loggers(v):
        errors.append("verl.logger: must include 'file' (the run's steps.parquet is parsed from verl's file logger)")
    if not v.extra_overrides:
        return errors
    for run in e.runs():
        try:
            run_overrides(cfg, run)
        except ValueError as e:
            errors.append(f"verl.extra_overrides: {e}")
            break
    return errors
