"""The weight-sync hook: the rollout engine's weight numerics that vLLM lacks, applied to the weights
vLLM loads, through a vLLM worker extension (no change to vLLM's or verl's source).

verl passes `worker_extension_cls=opd.backends.verl.hook.WeightNumerics` (engine_kwargs override verl's
own extension class, which WeightNumerics extends) and the row's numerics in
`additional_config={"opd_numerics": {...}}` (see overrides.py). Every bucket of weights the trainer
syncs (verl's `_update_weights`) passes through `transform_weights` before vLLM loads it, so the engine
never samples with clean weights. A standalone engine (the admission check, the held-out evaluation)
calls `reload_checkpoint` through `collective_rpc`: it loads a checkpoint folder (the engine's own, or a
later training step's) through vLLM's own `reload_weights`, with the numerics applied if any, so one
engine serves every step of an evaluation.

The mismatch guard (a row's `guard`, opd.guard): overrides.py adds `opd_guard` to `additional_config`
(the resolved guard, the run folder, the steps). At each weight sync (`update_weights_from_ipc`, verl's
entry for one sync, whose buckets reach `_update_weights`) the hook reads the d_n verl has logged so far
(the run folder's verl.<attempt>.jsonl, logparse.d_n_by_step), replays opd.guard.GuardState over them,
and loads the synced weights with the row's numerics, or as the trainer sent them (BF16: the fallback)
while the guard is active; rank 0 of each engine appends its decision to GUARD_LOG, which logparse turns
into steps.parquet's `engine` and `guard_active`. `verl.trainer.main_ppo` runs verl's v1 trainer
(trainer.use_v1: true, main_ppo.py:183-184; trainer_mode sync), which syncs the weights of update n in
on_step_end (trainer/ppo/v1/trainer_sync.py:35-38, called at trainer_base.py:487) before it logs step n
(trainer_base.py:514), so a sync sees d_n up to n - 1 and its weights first roll out step n + 1: the decision
lags one step (GUARD_LAG). Only the numerics the hook applies can switch:
the staleness (fixed when verl's trainer starts) and vLLM's own KV-cache dtype and quantization (engine
arguments) cannot; plan.errors refuses such guards.

Both work on checkpoint-format (Hugging Face) names and tensors, before vLLM fuses q/k/v and gate/up
and repacks for its kernels; changing a loaded parameter in place would miss kernels that repack (the
CPU backend does). The numbers are opd.quant's, the same functions the tiny engine uses: per-tensor FP8
(Model Optimizer style) or NVFP4 on the projection weights of decoder layers not kept BF16, and
fixed-direction Gaussian noise on every tensor.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

import torch

from opd.guard import ROW_ENGINE, GuardState
from opd.quant import engine_weights
from opd.rows import Guard

from .plan import CHECKPOINTS

GUARD_LOG = "guard.jsonl"  # in the run folder: one line per weight sync of a guarded run, {step, engine}
GUARD_LAG = 1  # steps between the last d_n a sync sees and the first step its weights roll out, minus one


def transform_weights(weights: Iterable[tuple[str, torch.Tensor]], numerics: dict,
                      n_layers: int) -> Iterator[tuple[str, torch.Tensor]]:
    """Apply a row's numerics to a stream of (name, tensor), as a weight sync hands them to vLLM."""
    for name, w in weights:
        out = engine_weights({name: w}, weights=numerics.get("weights", "none"),
                             noise_sigma=numerics.get("noise_sigma", 0.0), noise_seed=numerics.get("noise_seed", 0),
                             bf16_layers=numerics.get("bf16_layers", ()), n_layers=n_layers)
        yield name, out[name]


def checkpointed_step(run_dir: Path) -> int:
    """The step of the run's latest verl checkpoint (verl's tracker file, trainer/ppo/v1/trainer_base.py:1022-1026),
    0 if none."""
    tracker = Path(run_dir) / CHECKPOINTS / "latest_checkpointed_iteration.txt"
    return int(tracker.read_text().strip()) if tracker.exists() else 0


def logged_d_n(run_dir: Path, current_log: Path) -> dict[int, float]:
    """{step: d_n} as the current attempt continues the run: an earlier attempt's records count up to the
    latest checkpoint (those after it were trained by weights the resumed run discarded, and are trained
    again), the current attempt's records all count."""
    from .logparse import attempt_logs, d_n_by_step
    earlier = [p for p in attempt_logs(run_dir) if p != Path(current_log)]
    resumed = checkpointed_step(run_dir)
    d = {s: v for s, v in d_n_by_step(earlier).items() if s <= resumed}
    if Path(current_log).exists():
        d.update(d_n_by_step([Path(current_log)]))
    return d


class GuardDecision(NamedTuple):
    step: int  # the step a weight sync's weights first roll out
    engine: str  # the engine for it: opd.guard.ROW_ENGINE or the guard's action


def guard_decision(guard: dict) -> GuardDecision:
    """The guard's decision for a weight sync, from the d_n the run's verl logs hold now (logged_d_n).
    `guard`: additional_config's opd_guard as overrides.py writes it (the resolved guard's fields, the run
    folder, the run's steps and this attempt's log): it crosses into vLLM's worker as plain config."""
    d = logged_d_n(Path(guard["run_dir"]), Path(guard["log"]))
    rule = Guard.of({f.name: guard[f.name] for f in dataclasses.fields(Guard) if f.name in guard})
    g = GuardState.of(rule, lag=GUARD_LAG, steps=int(guard["steps"]))
    for step in sorted(d):
        g.observe(step, d[step])
    upcoming = (max(d) if d else 0) + 1 + GUARD_LAG
    return GuardDecision(upcoming, g.engine(upcoming))


def local_checkpoint(model: str, revision: str | None = None, cache_dir: str | None = None) -> Path:
    """The local folder of a model vLLM was started from: the path itself, or for a Hugging Face Hub name
    (vLLM keeps it as given in model_config.model) the snapshot in the Hub cache vLLM downloaded it to (its
    load_config.download_dir, else the default cache). Never downloads."""
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(model, revision=revision, cache_dir=cache_dir, local_files_only=True,
                                      allow_patterns=["*.safetensors", "*.json"]))
    except Exception as e:  # huggingface_hub's errors for a name it has no local copy of
        raise FileNotFoundError(f"{model}: neither a folder nor a model in the local Hugging Face cache ({e})") from e


def checkpoint_weights(model_dir, device="cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of a local Hugging Face checkpoint's safetensors files, loaded onto `device`. A standalone
    engine loads them onto its worker's GPU before the numerics apply: the fixed noise direction is drawn on the
    tensor's device (opd.quant.gaussian_noise), and a training run's engine draws it on the GPU, where verl's
    weight sync delivers every bucket (workers/rollout/vllm_rollout/utils.py:286-290, BucketedWeightReceiver on
    self.device), so the admission check perturbs the weights exactly as training does."""
    from safetensors import safe_open
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors (the admission check needs a local checkpoint)")
    for f in files:
        with safe_open(str(f), framework="pt", device=str(device)) as st:
            for name in st.keys():
                yield name, st.get_tensor(name)


def _verl_extension():
    """verl's vLLM worker extension where verl and vLLM are both installed (the cluster: a failing import
    there is an error, not a fallback), else `object` (a standalone vLLM engine, or a machine without vLLM)."""
    if importlib.util.find_spec("verl") and importlib.util.find_spec("vllm"):
        from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
        return vLLMColocateWorkerExtension
    return object


class WeightNumerics(_verl_extension()):
    """vLLM worker extension applying the row's weight numerics to every weight load."""

    def _opd_numerics(self) -> dict | None:
        return (getattr(self.vllm_config, "additional_config", None) or {}).get("opd_numerics")

    def _opd_layers(self) -> int:
        return self.vllm_config.model_config.hf_config.num_hidden_layers

    def _opd_guard(self) -> dict | None:
        return (getattr(self.vllm_config, "additional_config", None) or {}).get("opd_guard")

    def _opd_sync_numerics(self) -> dict | None:
        """The numerics of this weight sync: the row's, or none while its guard is active."""
        numerics, guard = self._opd_numerics(), self._opd_guard()
        if not guard:
            return numerics
        step, engine = guard_decision(guard)
        if getattr(self, "rank", 0) == 0:
            with open(Path(guard["run_dir"]) / GUARD_LOG, "a") as f:
                f.write(json.dumps({"step": step, "engine": engine}) + "\n")
        return numerics if engine == ROW_ENGINE else None

    def update_weights_from_ipc(self, *args, **kwargs):  # verl: one weight sync (its buckets: _update_weights)
        self._opd_sync = self._opd_sync_numerics()  # one decision for every bucket of the sync
        try:
            return super().update_weights_from_ipc(*args, **kwargs)
        finally:
            del self._opd_sync

    def _update_weights(self, weights, *args, **kwargs):  # verl: one bucket of a weight sync
        numerics = self._opd_sync if hasattr(self, "_opd_sync") else self._opd_sync_numerics()
        if numerics:
            weights = list(transform_weights(weights, numerics, self._opd_layers()))
        return super()._update_weights(weights, *args, **kwargs)

    def reload_checkpoint(self, model_dir: str | None = None, numerics: dict | None = None) -> None:
        """Load a Hugging Face checkpoint folder's weights into the running engine (default: the folder it
        was started from), with `numerics` applied (default: the engine's own `opd_numerics`, if any).
        Called as `llm.collective_rpc("reload_checkpoint", args=(model_dir, numerics))`."""
        numerics = numerics if numerics is not None else self._opd_numerics()
        mc, lc = self.vllm_config.model_config, getattr(self.vllm_config, "load_config", None)
        weights = checkpoint_weights(model_dir or local_checkpoint(mc.model, getattr(mc, "revision", None),
                                                                   getattr(lc, "download_dir", None)),
                                     self._opd_device())
        if numerics:
            weights = transform_weights(weights, numerics, self._opd_layers())
        self.model_runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)

    def sync_checkpoint(self, model_dir: str | None = None, numerics: dict | None = None) -> None:
        """Load a BF16 checkpoint folder's weights the way verl's rollout gets the trainer's: as one weight sync
        through verl's `_update_weights`, which for an FP8 engine quantizes every tensor as it loads it
        (workers/rollout/vllm_rollout/utils.py:390-393 -> utils/vllm/vllm_quant_utils.py:439-482: block FP8
        values and their scales). A native FP8 row's standalone engine starts on `load_format: dummy`, as verl's
        rollout does (rollout/rollout.yaml:100), and gets its weights here: loading the BF16 checkpoint itself
        with quantization set would cast the values into FP8 parameters and leave the block scales at their
        initial values (vLLM's Fp8 method assumes an FP8 checkpoint: quantization/fp8.py:119-124, 161-162).
        `numerics` as in reload_checkpoint. Called as `llm.collective_rpc("sync_checkpoint", args=(...))`."""
        if not hasattr(super(), "_update_weights"):
            raise RuntimeError("sync_checkpoint needs verl's vLLM worker extension: verl and vLLM in this Python "
                               "(the cluster extra)")
        numerics = numerics if numerics is not None else self._opd_numerics()
        mc, lc = self.vllm_config.model_config, getattr(self.vllm_config, "load_config", None)
        folder = model_dir or local_checkpoint(mc.model, getattr(mc, "revision", None), getattr(lc, "download_dir", None))
        weights = checkpoint_weights(folder, self._opd_device())
        if numerics:
            weights = transform_weights(weights, numerics, self._opd_layers())
        self._opd_verl_reload(list(weights))

    def _opd_device(self):
        """Where this worker's weights live (vLLM's Worker.device: its GPU), the CPU without one."""
        return getattr(self, "device", None) or "cpu"

    def _opd_verl_reload(self, weights: list) -> None:
        """One weight load through verl's `_update_weights`, with the steps verl's weight sync wraps around every
        load (update_weights_from_ipc, workers/rollout/vllm_rollout/utils.py:248-353), which a load that bypasses
        it must take itself: before the first bucket, an FP8 engine's parameters are put back into the
        checkpoint layout their loaders expect (prepare_quanted_weights_for_loading, utils/vllm/
        vllm_quant_utils.py:410-425: kernels such as DeepGEMM's repack the block scales, vllm_fp8_utils.py:170-
        272), and after the last the kernel layout is derived again (process_quanted_weights_after_loading,
        vllm_quant_utils.py:428-436); a BF16 engine gets vLLM's process_weights_after_loading once
        (utils.py:343-353) and, before loading, verl's MoE weight-loader patch (utils.py:242-246). QAT and LoRA
        engines, which verl also serves there, are not this project's."""
        from verl.utils.vllm.patch import patch_vllm_moe_model_weight_loader
        from verl.utils.vllm.vllm_quant_utils import (
            is_quantized_model,
            prepare_quanted_weights_for_loading,
            process_quanted_weights_after_loading,
        )
        quantized = is_quantized_model(self.model_runner.vllm_config)
        states = []
        for model in self._iter_all_models():
            if quantized:
                states.append((model, prepare_quanted_weights_for_loading(model)))
            else:
                patch_vllm_moe_model_weight_loader(model)
        super()._update_weights(weights, peft_config=None, base_sync_done=False)
        if quantized:
            for model, state in states:
                process_quanted_weights_after_loading(model, state)
        else:
            from vllm.model_executor.model_loader.utils import process_weights_after_loading
            for model, model_config in self._iter_all_models_with_config():
                process_weights_after_loading(model, model_config, self.device)
