"""What verl 0.9.1 can run of a row, and when a run checkpoints: the verl backend's checks that need
neither torch nor verl (config validation runs them for every verl experiment before any job starts).
File:line are under the installed `verl` package."""
from __future__ import annotations

from dataclasses import dataclass

from opd.recipes import recipe
from opd.rows import Row
from opd.spec import Settings, Verl

from .layout import layout as layout_of


@dataclass(frozen=True)
class Schedule:
    """When a run checkpoints and which checkpoints the held-out evaluation reads, for either trainer.

    verl's synchronous trainer counts optimizer steps: it saves `global_step_{n}` when n % save_freq == 0
    and at the last step (trainer/ppo/v1/trainer_base.py:468,481-482). The fully-async trainer counts
    parameter versions, one per k steps: it saves `global_step_{version}` when version % save_freq == 0 and
    at the end (fully_async_trainer.py:889-892, 924-927, 534), and a resumed run restarts at step
    version * k + 1 (fully_async_trainer.py:1010-1011)."""
    k: int  # optimizer steps per verl counter unit: 1 synchronous, trigger_parameter_sync_step asynchronous
    save_freq: int  # trainer.save_freq, in verl's counter
    eval_steps: tuple[int, ...]  # training steps the held-out evaluation scores (step 0: the student as given)

    def checkpoint(self, step: int) -> int:
        """The n of verl's `global_step_{n}` folder holding the weights after `step` optimizer steps."""
        if step % self.k:
            raise ValueError(f"step {step}: verl's asynchronous trainer saves only every {self.k} steps")
        return step // self.k


def schedule(settings: Settings | dict, staleness: int, resume_every: int | None = None) -> Schedule:
    """The run's Schedule from its training settings (steps, checkpoint_every, eval_every), staleness k and, for
    k = 0, verl.resume_every (the synchronous trainer saves that often, so a requeue loses fewer steps; the
    asynchronous one saves before the time limit instead); `schedule_errors` says which settings it cannot honour."""
    s, k = Settings.of(settings), max(1, int(staleness))
    every = resume_every if (resume_every and int(staleness) == 0) else s.checkpoint_every
    return Schedule(k=k, save_freq=every // k, eval_steps=tuple(s.eval_steps()))


def schedule_errors(settings: Settings | dict, staleness: int) -> list[tuple[str, str]]:
    """(field, reason) for each reason verl could not checkpoint the steps the held-out evaluation reads."""
    s, k, out = Settings.of(settings), int(staleness), []
    if "checkpoint_every" not in s.given:  # not the tiny backend's default: verl's checkpoints are the evaluation's
        return [("train.checkpoint_every", "the verl backend needs it: verl resumes a requeued run from its last "
                                           "checkpoint and the held-out evaluation reads the checkpoints")]
    steps, every, ev = s.steps, s.checkpoint_every, s.eval_every
    if ev and every and ev % every:
        out.append(("train.eval_every", f"{ev} is not a multiple of train.checkpoint_every ({every}): the held-out "
                                        f"evaluation reads verl's checkpoints of the evaluated steps"))
    if steps % every:
        out.append(("train.steps", f"{steps} is not a multiple of train.checkpoint_every ({every}): the last "
                                   f"step's checkpoint would not be the one a resumed run counts from"))
    if k > 0:
        for field, v in (("train.checkpoint_every", every), ("train.steps", steps)):
            if v % k:
                out.append(("staleness", f"{field} ({v}) is not a multiple of staleness {k}: verl's asynchronous "
                                         f"trainer checkpoints once per {k} steps (one parameter version)"))
    return out


CHECKPOINTS = "verl_checkpoints"  # verl's trainer.default_local_dir, in the run folder

# (weights, activations) -> verl's `rollout.quantization`: the pairs vLLM runs with its own kernels
NATIVE = {("fp8_block", "fp8_group128"): "fp8"}


def native_quantization(row: dict | Row) -> str | None:
    """verl's `rollout.quantization` when vLLM runs the row's weights and activations with its own kernels
    (verl's FP8 config keeps no decoder layer BF16: it ignores only MoE gates), else None."""
    r = Row.of(row)
    return NATIVE.get((r.weights, r.activations)) if not r.bf16_layers else None


def native_engine_args(row: dict | Row, n_layers: int) -> dict:
    """The vLLM engine arguments a native row's engine starts with, as verl 0.9.1's rollout server builds them
    for `rollout.quantization=fp8` (workers/rollout/vllm_rollout/vllm_async_server.py:1244-1262: block FP8
    with dynamic activation scales, MoE router gates left BF16): what a standalone engine (the admission
    check) needs to compute the numbers the training run's engine does. Empty for other rows."""
    q = native_quantization(row)
    if q is None:
        return {}
    if q != "fp8":
        raise ValueError(f"no engine arguments known for rollout.quantization={q!r}")
    # load_format dummy: the weights come through verl's weight sync, which quantizes them (hook.sync_checkpoint)
    return {"quantization": q, "load_format": "dummy", "hf_overrides": {"quantization_config": {
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128],
        "ignored_layers": [f"model.layers.{i}.mlp.gate" for i in range(n_layers)]}}}


def kernels(row: dict | Row) -> dict:
    """Per numerics field of the row: how the verl backend's engine computes it ("vLLM kernel",
    "emulated by the weight-sync hook", or "not available" where plan.errors refuses the row)."""
    r = Row.of(row)
    native = native_quantization(r) is not None
    out = {}
    if r.weights != "none":
        out["weights"] = "vLLM kernel" if native else "emulated by the weight-sync hook"
    if r.activations != "none":
        out["activations"] = "vLLM kernel" if native else "not available"
    if r.kv_cache != "none":
        out["kv_cache"] = "vLLM kernel" if recipe("kv_cache", r.kv_cache).vllm else "not available"
    if r.noise_sigma:
        out["noise_sigma"] = "emulated by the weight-sync hook"
    if r.quant_alpha != 1:
        out["quant_alpha"] = "not available"
    return out


def errors(row: dict, experiment: dict) -> list[str]:
    """What verl 0.9.1 cannot run of `row` in an experiment (config.yaml's shape), as `field: reason`
    (config.py prefixes experiment and row)."""
    r = Row.of(row)
    t = Settings.of(experiment["train"]).for_row(r)
    out = []
    if r.algorithm == "reinforce":
        out.append("algorithm: verl 0.9.1 has no advantage estimator with A_t = R (reinforce_plus_plus whitens the "
                   "returns over the batch, trainer/ppo/core_algos.py:728, masked_whiten, which is score centering and scaling); "
                   "use the tiny backend for REINFORCE")
    if r.variant in ("score_centering", "advantage_offset"):
        out.append(f"variant: {r.variant} is not available in verl 0.9.1: the OPD advantage is fixed to minus "
                   f"the k1 loss (trainer/distillation/losses.py:268-286) and its policy loss must be 'vanilla' "
                   f"(workers/config/distillation.py:106-110), so there is no place for a score baseline or offset")
    if r.activations != "none" and not native_quantization(r):
        pairs = ", ".join(f"weights {w!r} with activations {a!r}" for w, a in NATIVE)
        out.append(f"activations: {r.activations!r} with weights {r.weights!r}"
                   f"{' and layers kept BF16' if r.bf16_layers else ''} has no vLLM kernel in verl 0.9.1: vLLM "
                   f"quantizes activations only inside its own quantized kernels, verl offers them for a BF16 "
                   f"checkpoint as `rollout.quantization` ({pairs}, no layer kept BF16), and the weight-sync hook "
                   f"changes weights only; use that pair, or the tiny backend for this recipe")
    if r.kv_cache != "none" and not recipe("kv_cache", r.kv_cache).vllm:
        out.append(f"kv_cache: vLLM has no native form of {r.kv_cache!r} (opd.recipes.RECIPES gives it no vllm "
                   f"arguments), and the weight-sync hook changes weights only")
    if r.quant_alpha != 1:
        where = ("between the BF16 one and the row's quantized one" if r.quant_alpha < 1 else
                 f"beyond the row's quantized one (its quantization error amplified {r.quant_alpha:g} times)")
        out.append(f"quant_alpha: {r.quant_alpha:g} asks for an engine {where}, and verl's engine has none: vLLM runs "
                   f"its quantized kernels and FP8 KV cache as they are, and the weight-sync hook applies the recipe "
                   f"itself (opd.quant.engine_weights at quant_alpha 1); an engine with the recipes' error scaled "
                   f"(opd.quant.interpolate) is built for the tiny backend only: use it, or quant_alpha 1")
    if r.noise_redraw:
        out.append("noise_redraw: the weight-sync hook draws the noise direction from the run's seed alone, once per "
                   "run (opd.backends.verl.hook); a direction per step is built for the tiny backend only")
    g = r.guard
    if g is not None and not g.keeps_staleness and (g.keeps_numerics or r.staleness > 0):
        out.append(f"guard.action: {g.action!r} changes the staleness mid-run, and verl 0.9.1 fixes it when the trainer "
                   f"starts (the synchronous trainer, or the fully-async one with async_training."
                   f"trigger_parameter_sync_step; they are different entry points): there is no point to switch it; "
                   f"use 'fallback_numerics' (BF16 weights at the row's staleness), or the tiny backend")
    if g is not None and r.staleness > 0 and g.keeps_staleness:
        out.append(f"guard: with staleness {r.staleness} verl's fully-async trainer logs one record per parameter "
                   f"version ({r.staleness} steps), so the weight-sync hook would count the guard's window and lag in "
                   f"versions, not steps; not built for verl: use the tiny backend, or a guard on a k = 0 row")
    if g is not None and g.reject:
        out.append("guard.reject: verl's trainer updates on a batch before its d_n is logged, and the weight-sync hook "
                   "reads d_n from that log (one step late, hook.GUARD_LAG): it cannot discard the batch that crosses "
                   "(its guard acts from the steps after it, as without reject); drop reject, or use the tiny backend")
    if g is not None and (r.kv_cache != "none" or native_quantization(r) or r.activations != "none"):
        out.append("guard: the row's KV-cache dtype and vLLM quantization are engine arguments fixed when vLLM starts; "
                   "the weight-sync hook can switch only the numerics it applies itself (emulated weights, noise)")
    if r.speculative:
        spec = (experiment.get("verl") or {}).get("speculative")
        students = experiment.get("students", {})
        first = next(iter(students), None)
        no_draft = [s for s in r.students_or(first) if not (students.get(s) or {}).get("eagle3")]
        if not spec:
            out.append("speculative: the experiment has no verl.speculative (method, num_speculative_tokens); without "
                       "it the rollout would run without speculative decoding")
        elif no_draft:
            out.append(f"speculative: student(s) {no_draft} name no draft model (students.<name>.eagle3): the rollout "
                       f"would run without speculative decoding; name a {spec['method']} draft for each, or drop "
                       f"speculative from the row")
    k = r.staleness
    if k > 0 and t.lr_schedule != "constant":
        out.append(f"staleness: with k > 0 verl's asynchronous trainer sets the scheduler's length to the number "
                   f"of parameter versions, {t.steps} / {k} (fully_async_rollouter.py:498-501, "
                   f"fully_async_trainer.py:356-365), so a {t.lr_schedule} schedule would decay {k}x too fast")
    if k > 0:  # the experiment's own settings are checked once, by experiment_errors
        out += [f"{f}: {e}" for f, e in schedule_errors(t, k) if (f, e) not in schedule_errors(t, 0)]
    out += [f"layout: {e}" for e in layout_of(Verl.of(experiment.get("verl")), r).errors()]
    return out


# The one-GPU jobs of a verl experiment, each with Slurm sizes of its own (slurm.jobs): without them a job would
# ask for a training job's CPUs, memory and time, and hold a node's other GPUs idle behind them
ONE_GPU_JOBS = ("heldout", "admission", "kv_attribution")


def experiment_errors(experiment: dict, site_slurm: dict | None = None) -> list[str]:
    """What verl cannot do with a verl experiment's own settings, as `field: reason`. `site_slurm`: the config's
    top-level `slurm:` (the experiment's is merged over it, opd.spec.Experiment)."""
    from .site import student_errors
    out = [f"{f}: {e}" for f, e in schedule_errors(experiment["train"], 0)]
    for key in ("nodes", "gpus_per_node"):
        if key in experiment.get("slurm", {}):
            out.append(f"slurm.{key}: a verl run's Slurm shape follows from verl.layout (opd.backends.verl.layout); "
                       f"set the layout instead")
    every = (experiment.get("verl") or {}).get("resume_every")
    if every and experiment["train"].get("checkpoint_every", 0) % every:
        out.append(f"verl.resume_every: {every} does not divide train.checkpoint_every "
                   f"({experiment['train'].get('checkpoint_every')}): the evaluated steps' checkpoints must be saved")
    slurm = {**(site_slurm or {}), **experiment.get("slurm", {})}
    jobs = slurm.get("jobs") or {}
    missing = [k for k in ONE_GPU_JOBS if k not in jobs]
    if missing:
        out.append(f"slurm.jobs: the verl backend's one-GPU jobs need sizes of their own (cpus_per_task, mem_gb, "
                   f"time_min), not the training job's; missing {missing}")
    for kind, sizes in jobs.items():
        gaps = [k for k in ("cpus_per_task", "mem_gb", "time_min") if k not in sizes and k not in slurm]
        if kind in ONE_GPU_JOBS and gaps:
            out.append(f"slurm.jobs.{kind}: give {gaps} (the experiment's own are the training job's)")
        elif kind in ONE_GPU_JOBS:
            for k in ("cpus_per_task", "mem_gb", "time_min"):
                if k in slurm and k in sizes and sizes[k] > slurm[k]:
                    out.append(f"slurm.jobs.{kind}.{k}: {sizes[k]} is more than a whole training job's ({slurm[k]}) "
                               f"for a job of one GPU")
    out += [f"{f}: {why}" for f, why in student_errors(experiment.get("students", {}))]
    return out




def attention_mask_gib(settings: Settings | dict, attention: str) -> dict[str, float]:
    """GiB of the dense attention mask one micro-batch builds with `sdpa`: verl packs a micro-batch's sequences
    into one row of up to its token budget N (use_dynamic_bsz: 2 (P + R) tokens for the update, 3 (P + R) for the
    log-prob recompute, overrides.py) with position ids restarting per sequence, and transformers turns packed
    sequences into an N x N block-causal boolean mask for sdpa (transformers 5.10 masking_utils.py:757-783
    find_packed_sequence_indices, :178-184 its mask function, :396 sdpa_mask), which PyTorch's
    memory-efficient kernel reads as an additive mask in the compute dtype (2 bytes, BF16). flash_attention_2 takes
    the sequence boundaries instead (varlen) and builds no mask: 0."""
    t = Settings.of(settings)
    if attention == "flash_attention_2":
        return {"update": 0.0, "log_prob": 0.0}
    n = t.max_prompt_length + t.max_response_length
    return {"update": (2 * n) ** 2 * 2 / 2 ** 30, "log_prob": (3 * n) ** 2 * 2 / 2 ** 30}
