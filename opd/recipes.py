"""The engine numerics recipes a row can name: the one registry of their names, what each means, the FP8
format a KV-cache recipe stores and the vLLM engine arguments that run a recipe natively on the verl
backend. Torch-free, so config validation (every `snakemake` call) reads it without importing torch; the
numbers themselves (quantise, then dequantise) are opd.quant's functions, which each recipe names.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Recipe:
    """One engine numerics recipe a row can name. `function` names the opd.quant function that maps a tensor
    to the values the engine computes with (opd.quant.recipe_function returns it; weights; activations, the input of every linear
    layer of the quantized layers, where a `calibrated` recipe takes the amax calibrated once as a second
    argument); `fmt` is the FP8 format a KV cache stores; `vllm` holds the vLLM engine arguments that run the
    recipe natively on the verl backend (empty: verl's weight-sync hook, opd.backends.verl.hook, applies
    that function to the synced weights instead, which it can for weights only). The tiny engine runs every recipe."""
    name: str
    kind: str  # a row field: "weights", "activations" or "kv_cache"
    about: str
    function: str | None = None  # a function of opd.quant; None: the values as they are
    fmt: str | None = None
    vllm: dict = field(default_factory=dict)
    calibrated: bool = False


RECIPES: dict[str, dict[str, Recipe]] = {"weights": {}, "activations": {}, "kv_cache": {}}

for _r in (
    Recipe("none", "weights", "the trained weights, cast to the engine dtype"),
    Recipe("fp8_tensor", "weights", "FP8 E4M3, one scale per tensor (NVIDIA Model Optimizer)", function="fp8_per_tensor"),
    Recipe("fp8_block", "weights", "FP8 E4M3, one scale per 128x128 tile (DeepSeek-V3)", function="fp8_block"),
    Recipe("nvfp4", "weights", "NVFP4: E2M1 in 16-element blocks with E4M3 block scales", function="nvfp4"),
    Recipe("none", "activations", "linear-layer inputs in the engine dtype"),
    Recipe("fp8_static", "activations", "FP8 E4M3, one static scale per tensor calibrated once (Model Optimizer W8A8)",
           function="fp8_static", calibrated=True),
    Recipe("fp8_token", "activations", "FP8 E4M3, one dynamic scale per token (vLLM's dynamic FP8)",
           function="fp8_per_token"),
    Recipe("fp8_group128", "activations", "FP8 E4M3, one dynamic scale per token and 128 elements (vLLM's block FP8)",
           function="fp8_per_token_group"),
    Recipe("nvfp4", "activations", "NVFP4: E2M1 in 16-element blocks, dynamic E4M3 block scales (W4A4)",
           function="nvfp4"),
    Recipe("none", "kv_cache", "keys and values stored in the engine dtype"),
    Recipe("fp8_e4m3", "kv_cache", "keys and values stored as FP8 E4M3, scale 1.0", fmt="e4m3",
           vllm={"kv_cache_dtype": "fp8_e4m3"}),
    Recipe("fp8_e5m2", "kv_cache", "keys and values stored as FP8 E5M2, scale 1.0", fmt="e5m2",
           vllm={"kv_cache_dtype": "fp8_e5m2"}),
):
    RECIPES[_r.kind][_r.name] = _r


def recipe(kind: str, name: str) -> Recipe:
    try:
        return RECIPES[kind][name]
    except KeyError:
        raise ValueError(f"unknown {kind} recipe {name!r}; known: {sorted(RECIPES.get(kind, {}))}") from None


def resolve_layers(layers, n_layers: int) -> set[int]:
    """Layer list as written in a row (negative = from the end) to absolute indices."""
    out = set()
    for i in layers or ():
        j = i + n_layers if i < 0 else i
        if not 0 <= j < n_layers:
            raise ValueError(f"layer {i} out of range for a {n_layers}-layer model")
        out.add(j)
    return out
