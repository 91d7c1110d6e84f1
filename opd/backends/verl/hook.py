"""The weight-sync hook: the rollout engine's weight numerics that vLLM lacks, applied to the weights
it holds after every sync, through a vLLM worker extension (no change to vLLM's source).

verl passes `worker_extension_cls=opd.backends.verl.hook.WeightNumerics` (engine_kwargs override verl's
own extension class, which WeightNumerics extends) and the row's numerics in
`additional_config={"opd_numerics": {...}}` (see overrides.py). Every weight sync from the trainer
(`update_weights_from_ipc`) is followed by the numerics, so the engine never samples with clean weights. The numbers are opd.quant's, the same functions the
tiny backend's engine uses: per-tensor FP8 (Model Optimizer style) or NVFP4 on the projection weights of
decoder layers not kept BF16, and fixed-direction Gaussian noise on every tensor.

vLLM fuses q/k/v and gate/up projections into one tensor (qkv_proj, gate_up_proj); the per-tensor
recipes then use one scale for the fused tensor, as vLLM's own FP8 loading does.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import torch

from opd.quant import engine_weights, layer_index


def n_decoder_layers(names: Iterable[str]) -> int:
    idx = [layer_index(n) for n in names]
    idx = [i for i in idx if i is not None]
    if not idx:
        raise ValueError("no decoder layers found among the weight names")
    return max(idx) + 1


def transform_weights(weights: Iterable[tuple[str, torch.Tensor]], numerics: dict,
                      n_layers: int) -> Iterator[tuple[str, torch.Tensor]]:
    """Apply a row's numerics to a stream of (name, tensor), as a weight sync hands them to vLLM."""
    for name, w in weights:
        out = engine_weights({name: w}, weights=numerics.get("weights", "none"),
                             noise_sigma=numerics.get("noise_sigma", 0.0), noise_seed=numerics.get("noise_seed", 0),
                             bf16_layers=numerics.get("bf16_layers", ()), n_layers=n_layers)
        yield name, out[name]


@torch.no_grad()
def apply_in_place(model: torch.nn.Module, numerics: dict) -> int:
    """Rewrite a loaded model's parameters with the row's numerics; returns how many tensors changed."""
    params = dict(model.named_parameters())
    n_layers = n_decoder_layers(params)
    changed = 0
    for name, new in transform_weights(((n, p.data) for n, p in params.items()), numerics, n_layers):
        if new is not params[name].data:
            params[name].data.copy_(new.to(params[name].dtype))
            changed += 1
    return changed


def _verl_extension():
    try:  # on the cluster: extend verl's own vLLM worker extension
        from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
        return vLLMColocateWorkerExtension
    except ImportError:  # without verl (laptops, CI): the numerics alone
        return object


class WeightNumerics(_verl_extension()):
    """vLLM worker extension: verl's weight sync, then the row's numerics on the synced weights."""

    def update_weights_from_ipc(self, *args, **kwargs):
        out = super().update_weights_from_ipc(*args, **kwargs)
        self.apply_opd_numerics()
        return out

    def apply_opd_numerics(self, numerics: dict | None = None) -> int:
        if numerics is None:
            extra = getattr(self.vllm_config, "additional_config", None) or {}
            numerics = extra.get("opd_numerics")
        if not numerics:
            return 0
        return apply_in_place(self.model_runner.model, numerics)
