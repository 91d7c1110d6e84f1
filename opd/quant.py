"""Rollout-engine numerics shared by both backends.

Every function takes a float tensor and returns a float tensor of the same shape and dtype holding
the values the engine would compute with (quantise, then dequantise). The verl backend's vLLM
weight-sync hook applies the same functions to the weights it loads, so a recipe means the same
numbers on a laptop and on a GPU cluster. Which function each recipe name means is opd.recipes' registry.
"""
from __future__ import annotations

import hashlib
from typing import Callable

import torch

from opd.recipes import RECIPES, Recipe, recipe, resolve_layers  # noqa: F401  (torch-free: opd/recipes.py)

FP8_FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_MAX = 6.0
NVFP4_BLOCK = 16

def cast_fp8(x: torch.Tensor, fmt: str = "e4m3") -> torch.Tensor:
    """Saturating round-to-nearest-even cast to FP8 and back (torch's own float8 cast after clamping)."""
    m = FP8_MAX[fmt]
    return x.clamp(-m, m).to(FP8_FORMATS[fmt]).to(x.dtype)


def fp8_per_tensor(w: torch.Tensor, fmt: str = "e4m3") -> torch.Tensor:
    """Model Optimizer-style FP8: one FP32 scale per tensor, scale = amax / fp8_max."""
    scale = (w.abs().amax().float() / FP8_MAX[fmt]).clamp_min(1e-12)
    return (cast_fp8(w.float() / scale, fmt) * scale).to(w.dtype)


def fp8_block(w: torch.Tensor, block: int = 128, fmt: str = "e4m3") -> torch.Tensor:
    """FP8 with one scale per block x block tile of a 2-D weight (DeepSeek-V3 style)."""
    rows, cols = w.shape
    pr, pc = (-rows) % block, (-cols) % block
    x = torch.nn.functional.pad(w.float(), (0, pc, 0, pr))
    tiles = x.reshape(x.shape[0] // block, block, x.shape[1] // block, block)
    scale = (tiles.abs().amax(dim=(1, 3), keepdim=True) / FP8_MAX[fmt]).clamp_min(1e-12)
    q = cast_fp8(tiles / scale, fmt) * scale
    return q.reshape(x.shape)[:rows, :cols].to(w.dtype)


def round_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest FP4 E2M1 value (ties to the even mantissa), saturating at +-6."""
    grid = E2M1_GRID.to(x.device, torch.float32)
    a = x.float().abs().clamp(max=E2M1_MAX)
    mids = (grid[1:] + grid[:-1]) / 2
    idx = torch.bucketize(a, mids)  # nearest grid index; an exact tie lands on the lower one...
    tie = (idx < len(mids)) & (a == mids[idx.clamp(max=len(mids) - 1)])
    idx = torch.where(tie & (idx % 2 == 1), idx + 1, idx)  # ...and moves up when that one's mantissa is odd
    return torch.sign(x.float()) * grid[idx]


def nvfp4(w: torch.Tensor) -> torch.Tensor:
    """NVFP4 emulated in higher precision: E2M1 values in 16-element blocks along the last dimension,
    each block with an E4M3 scale, and one FP32 global scale so the block scales fit E4M3."""
    shape = w.shape
    x = w.float().reshape(-1, shape[-1])
    pad = (-shape[-1]) % NVFP4_BLOCK
    x = torch.nn.functional.pad(x, (0, pad)).reshape(x.shape[0], -1, NVFP4_BLOCK)
    global_scale = (x.abs().amax() / (FP8_MAX["e4m3"] * E2M1_MAX)).clamp_min(1e-12)
    block_amax = x.abs().amax(dim=-1, keepdim=True)
    block_scale = cast_fp8(block_amax / E2M1_MAX / global_scale, "e4m3") * global_scale
    safe = torch.where(block_scale > 0, block_scale, torch.ones_like(block_scale))
    q = round_e2m1(x / safe) * block_scale
    return q.reshape(x.shape[0], -1)[:, : shape[-1]].reshape(shape).to(w.dtype)


def fp8_static(x: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    """FP8 E4M3 with one static scale per tensor, scale = amax / 448, where amax was calibrated once
    (Model Optimizer's W8A8 recipe): values beyond the calibrated range saturate."""
    scale = (amax.float() / FP8_MAX["e4m3"]).clamp_min(1e-12)
    return (cast_fp8(x.float() / scale) * scale).to(x.dtype)


def fp8_per_token(x: torch.Tensor) -> torch.Tensor:
    """FP8 E4M3 with one dynamic scale per token (per row of the last dimension), scale = amax / 448
    (vLLM's dynamic per-token activation quantization)."""
    scale = (x.float().abs().amax(-1, keepdim=True) / FP8_MAX["e4m3"]).clamp_min(1e-12)
    return (cast_fp8(x.float() / scale) * scale).to(x.dtype)


def fp8_per_token_group(x: torch.Tensor, group: int = 128) -> torch.Tensor:
    """FP8 E4M3 with one dynamic scale per token and `group` consecutive elements of the last dimension,
    scale = group amax / 448: the activation side of vLLM's block-FP8 linear layers (128x128 weight tiles,
    1x128 activation groups), which verl's `rollout.quantization=fp8` runs. A last dimension of at most
    `group` elements is one group: per-token scales."""
    shape = x.shape
    pad = (-shape[-1]) % group
    g = torch.nn.functional.pad(x.float(), (0, pad)).reshape(*shape[:-1], -1, group)
    scale = (g.abs().amax(-1, keepdim=True) / FP8_MAX["e4m3"]).clamp_min(1e-12)
    q = (cast_fp8(g / scale) * scale).reshape(*shape[:-1], -1)[..., : shape[-1]]
    return q.to(x.dtype)


def recipe_function(r: Recipe) -> Callable | None:
    """The function of this module that a recipe names (opd.recipes.Recipe.function), or None for a recipe that
    changes nothing. (Read here, so that the torch-free registry imports no opd.quant.)"""
    return globals()[r.function] if r.function else None


def quantize_weight(w: torch.Tensor, name: str) -> torch.Tensor:
    fn = recipe_function(recipe("weights", name))
    return fn(w) if fn else w


def _seed_for(name: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & (2**63 - 1)


def gaussian_noise(w: torch.Tensor, sigma: float, name: str, seed: int = 0) -> torch.Tensor:
    """W + sigma * rms(W) * eps with a fixed direction eps ~ N(0, I) seeded by (seed, tensor name):
    the same perturbation direction at every weight sync of a run. Drawn on the tensor's own device (a
    GPU's generator gives other numbers than the CPU's, from the same seed: same distribution, and a
    7B model's direction is drawn in milliseconds instead of tens of seconds per sync)."""
    if sigma == 0:
        return w
    g = torch.Generator(device=w.device).manual_seed(_seed_for(name, seed))
    eps = torch.randn(w.shape, generator=g, dtype=torch.float32, device=w.device)
    rms = w.float().pow(2).mean().sqrt()
    return (w.float() + sigma * rms * eps).to(w.dtype)


def layer_index(name: str) -> int | None:
    """Decoder-layer index of a parameter named like Hugging Face checkpoints ('model.layers.3.mlp...')
    or like the tiny model ('layers.3.mlp...'); None for embeddings, final norm and head."""
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p == "layers" and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return None


KV_PARTS = {"kv": "keys and values", "k": "keys only", "v": "values only"}  # what a quantized KV-cache layer stores in FP8


def kv_attribution_cases(n_layers: int, parts=tuple(KV_PARTS)) -> list[tuple[str, int, tuple[int, ...], str]]:
    """(mode, layer, layers kept BF16, part) of the per-layer KV-cache attribution: every layer quantized
    ("all", layer -1), one layer at a time ("only"), all layers but one ("all_but"). `part` says what the
    quantized layers store in FP8 (KV_PARTS): "all" and "only" run once per part in `parts` (keys-only and
    values-only split a layer's effect between key and value rounding); "all_but" with keys and values."""
    for p in parts:
        if p not in KV_PARTS:
            raise ValueError(f"unknown KV-cache part {p!r}; known: {sorted(KV_PARTS)}")
    return [("all", -1, (), p) for p in parts] + \
        [("only", i, tuple(j for j in range(n_layers) if j != i), p) for i in range(n_layers) for p in parts] + \
        [("all_but", i, (i,), "kv") for i in range(n_layers)]


def interpolate(x: torch.Tensor, q: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """x + alpha (q - x) in x's dtype: the quantization error q - x of `x` scaled by alpha (a row's `quant_alpha`,
    in (0, 16]): below 1 a fraction of the way from x to q, above 1 the same error (the same entries and signs)
    amplified alpha times, past q. alpha = 1 returns `q` itself (the recipe bit for bit); otherwise the step is
    computed in FP32 and cast to x's dtype once, so alpha -> 0 returns x cast to its own dtype (the unquantized
    engine's value)."""
    if alpha == 1:
        return q
    xf = x.float()
    return (xf + alpha * (q.float() - xf)).to(x.dtype)


def engine_weights(state: dict, *, weights: str = "none", noise_sigma: float = 0.0, noise_seed: int = 0,
                   bf16_layers=(), n_layers: int, quant_alpha: float = 1.0) -> dict:
    """Apply a row's weight numerics to a state dict: fixed-direction noise on every tensor, then the
    weight recipe on the 2-D projection weights of decoder layers not kept in BF16, its error against the (noised)
    weights scaled by `quant_alpha` (interpolate; 1: the recipe as it is, below 1 shrunk, above 1 amplified)."""
    keep = resolve_layers(bf16_layers, n_layers)
    out = {}
    for name, w in state.items():
        x = gaussian_noise(w, noise_sigma, name, noise_seed) if noise_sigma else w
        li = layer_index(name)
        if weights != "none" and x.dim() == 2 and li is not None and li not in keep:
            x = interpolate(x, quantize_weight(x, weights), quant_alpha)
        out[name] = x
    return out
