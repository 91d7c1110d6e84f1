"""The rollout engine: batched sampling at temperature 1 with a per-layer KV cache, returning the
sampled tokens' log-probabilities under the engine's own numerics (which differ from the trainer's)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from opd.quant import (FP8_FORMATS, FP8_MAX, KV_PARTS, engine_weights, interpolate, layer_index, recipe_function,
                       resolve_layers)
from opd.recipes import recipe
from opd.rows import Row

from .model import Decoder, ModelConfig
from .task import EOS_ID, PAD_ID, RESPONSE_LEN


def engine_version(step: int, staleness: int) -> int:
    """The policy version the engine samples step `step`'s batch with, k = `staleness` updates stale."""
    return max(0, step - staleness)


def step_generator(*key: int) -> torch.Generator:
    """A torch generator seeded by a tuple of integers (seed, step, stream, ...): every random draw of a run is
    keyed so, and a resumed run repeats exactly the draws the killed one made."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1, np.uint64)[0] >> 1))


@dataclass(frozen=True)
class Numerics:
    """One row's engine numerics. The trainer computes in fp32; the standard engine in BF16."""
    dtype: torch.dtype = torch.bfloat16
    weights: str = "none"
    activations: str = "none"
    kv_cache: str = "none"
    bf16_layers: tuple = ()
    noise_sigma: float = 0.0
    noise_seed: int = 0
    noise_redraw: bool = False  # a new noise direction at every step: noise_seed_at(step) instead of noise_seed
    kv_parts: str = "kv"  # what the kv_cache recipe stores in FP8: keys and values, "k" or "v" only (opd.quant.KV_PARTS)
    # every quantization above (weights, activations, KV cache) with its error against the BF16 engine's value scaled:
    # x_bf16 + quant_alpha (Q(x) - x_bf16), in (0, 16] (opd.quant.interpolate; 1: the recipes bit for bit; below 1
    # shrunk towards BF16; above 1 the same error amplified)
    quant_alpha: float = 1.0

    @classmethod
    def of_row(cls, row: Row, seed: int = 0) -> "Numerics":
        return cls(weights=row.weights, activations=row.activations, kv_cache=row.kv_cache, bf16_layers=row.bf16_layers,
                   noise_sigma=row.noise_sigma, noise_seed=seed, noise_redraw=row.noise_redraw,
                   quant_alpha=row.quant_alpha)

    def noise_seed_at(self, step: int) -> int:
        """The seed of the noise direction the engine's weights carry at training step `step`: the run's own
        (`noise_seed`) at every step, or, with `noise_redraw`, one derived from (run seed, step), so a resumed
        run draws exactly the directions the killed one drew."""
        if not self.noise_redraw:
            return self.noise_seed
        return int(np.random.SeedSequence([self.noise_seed, step, 5]).generate_state(1, np.uint64)[0] >> 1)


class ActivationQuant:
    """The row's activation recipe on the input of every linear layer of the decoder layers not kept in
    BF16 (forward pre-hooks on the engine's own model; the lm_head and layers kept BF16 see BF16
    inputs). A calibrated recipe (static scales) first records each input's amax over a calibration
    batch, once, with the weights of its first load, and keeps those scales at every later weight sync,
    as a checkpoint's static input scales stay fixed while RL syncs new weights. With `quant_alpha` other than 1 each
    input becomes x + alpha (Q(x) - x), its quantization error scaled: below 1 a fraction of the way from its BF16
    value to its quantization, above 1 the same error amplified (opd.quant.interpolate)."""

    def __init__(self, model: Decoder, numerics: "Numerics", calibration: Callable[[], torch.Tensor] | None):
        self.recipe = recipe("activations", numerics.activations)
        self.apply = recipe_function(self.recipe)  # opd.quant's function, looked up once
        self.alpha = numerics.quant_alpha
        keep = resolve_layers(numerics.bf16_layers, model.cfg.n_layers)
        self.amax: dict[str, torch.Tensor] = {}
        self.calibration, self.calibrating = calibration, False
        if self.recipe.calibrated and calibration is None:
            raise ValueError(f"activation recipe {self.recipe.name!r} needs calibration sequences")
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.Linear) and layer_index(name) is not None and layer_index(name) not in keep:
                m.register_forward_pre_hook(self._hook(name))

    def _hook(self, name):
        def quantize_input(module, args):
            x = args[0]
            if self.calibrating:
                a = x.detach().abs().amax().float()
                self.amax[name] = torch.maximum(self.amax[name], a) if name in self.amax else a
                return None
            q = self.apply(x, self.amax[name]) if self.recipe.calibrated else self.apply(x)
            return (interpolate(x, q, self.alpha),)
        return quantize_input

    @torch.no_grad()
    def calibrate(self, model: Decoder) -> None:
        if self.recipe.calibrated and not self.amax:
            self.calibrating = True
            try:
                model(self.calibration())
            finally:
                self.calibrating = False


class KVFormats(NamedTuple):
    """Per layer, the FP8 format its keys and its values are stored in (None: the engine dtype)."""
    keys: list
    values: list


class KVCache:
    """Per-layer key/value storage. Layers with an FP8 recipe store float8 tensors (half the bytes of
    BF16), cast saturating with scale 1.0 as vLLM does without calibrated scales; others store the
    engine dtype. `numerics.kv_parts` quantizes keys and values, or only one of them (the attribution's
    keys-only and values-only cases). With `numerics.quant_alpha` other than 1 (below or above) a quantized layer
    stores, in the engine dtype, each key or value with its FP8 rounding error scaled, x + alpha (FP8(x) - x)
    (opd.quant.interpolate; above 1 the error amplified, which FP8 could not hold exactly): an emulation, with no
    FP8 storage and so no memory saved."""

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, numerics: Numerics):
        self.fmt_k, self.fmt_v = self.formats(cfg, numerics)
        self.dtype = numerics.dtype
        self.alpha = numerics.quant_alpha
        shape = (batch, cfg.n_kv_heads, max_len, cfg.head_dim)
        self.k = [torch.empty(shape, dtype=self.stored_dtype(f, numerics)) for f in self.fmt_k]
        self.v = [torch.empty(shape, dtype=self.stored_dtype(f, numerics)) for f in self.fmt_v]
        self.length = [0] * cfg.n_layers

    @staticmethod
    def stored_dtype(f, numerics: Numerics) -> torch.dtype:
        """What a layer's keys or values are stored as: their FP8 format `f` (None: the engine dtype); the engine
        dtype where quant_alpha (any value but 1) scales their error."""
        return FP8_FORMATS[f] if f and numerics.quant_alpha == 1 else numerics.dtype

    @staticmethod
    def formats(cfg: ModelConfig, numerics: Numerics) -> "KVFormats":
        """Per layer, the FP8 format its keys and its values are stored in (None: the engine dtype)."""
        if numerics.kv_parts not in KV_PARTS:
            raise ValueError(f"unknown KV-cache part {numerics.kv_parts!r}; known: {sorted(KV_PARTS)}")
        fmt = recipe("kv_cache", numerics.kv_cache).fmt
        keep = resolve_layers(numerics.bf16_layers, cfg.n_layers)
        per_layer = [None if (fmt is None or i in keep) else fmt for i in range(cfg.n_layers)]
        return KVFormats([f if "k" in numerics.kv_parts else None for f in per_layer],
                         [f if "v" in numerics.kv_parts else None for f in per_layer])

    def _store(self, f, x):
        if not f:
            return x
        q = x.clamp(-FP8_MAX[f], FP8_MAX[f]).to(FP8_FORMATS[f])
        return q if self.alpha == 1 else interpolate(x, q.to(x.dtype), self.alpha)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        t0, t1 = self.length[layer], self.length[layer] + k.shape[2]
        self.k[layer][:, :, t0:t1] = self._store(self.fmt_k[layer], k)
        self.v[layer][:, :, t0:t1] = self._store(self.fmt_v[layer], v)
        self.length[layer] = t1
        return self.k[layer][:, :, :t1].to(self.dtype), self.v[layer][:, :, :t1].to(self.dtype)

    @staticmethod
    def bytes_per_sequence(cfg: ModelConfig, max_len: int, numerics: Numerics) -> int:
        elem = [torch.finfo(KVCache.stored_dtype(f, numerics)).bits // 8
                for fmts in KVCache.formats(cfg, numerics) for f in fmts]
        return sum(cfg.n_kv_heads * cfg.head_dim * max_len * e for e in elem)


@dataclass
class Rollout:
    prompts: torch.Tensor  # (B, P)
    responses: torch.Tensor  # (B, R), PAD after <eos>
    logprobs: torch.Tensor  # (B, R) fp32 engine log q of each sampled token, 0 where masked
    mask: torch.Tensor  # (B, R) bool, True for response tokens up to and including <eos>
    version: int = 0  # policy version of the weights the engine sampled with

    @property
    def sequences(self) -> torch.Tensor:
        return torch.cat([self.prompts, self.responses], dim=1)


class Engine:
    def __init__(self, cfg: ModelConfig, numerics: Numerics = Numerics(), kv_budget_bytes: int | None = None,
                 calibration: Callable[[], torch.Tensor] | None = None):
        """`calibration`: returns the token sequences (B, T) to calibrate static activation scales on
        (called only by a calibrated activation recipe; see task.calibration_batch)."""
        self.cfg, self.numerics, self.kv_budget_bytes = cfg, numerics, kv_budget_bytes
        self.model = Decoder(cfg).to(numerics.dtype).eval()
        self.activations = (ActivationQuant(self.model, numerics, calibration)
                            if numerics.activations != "none" else None)
        self.version, self.step = None, None
        self.waves = 0  # batches split because the KV cache budget could not hold them (additive)

    def load(self, state: dict, version: int = 0, step: int = 0) -> float:
        """Weight sync: apply the row's weight numerics (the noise direction of training step `step`,
        Numerics.noise_seed_at), cast to the engine dtype. Returns seconds."""
        t = time.perf_counter()
        n = self.numerics
        w = engine_weights(state, weights=n.weights, noise_sigma=n.noise_sigma, noise_seed=n.noise_seed_at(step),
                           bf16_layers=n.bf16_layers, n_layers=self.cfg.n_layers, quant_alpha=n.quant_alpha)
        self.model.load_state_dict({k: v.to(n.dtype) for k, v in w.items()})
        if self.activations:
            self.activations.calibrate(self.model)
        self.version, self.step = version, step
        return time.perf_counter() - t

    def loaded(self, version: int, step: int) -> bool:
        """Whether the engine holds the weights step `step` samples with: version `version`, and, where the noise
        is redrawn every step, that step's direction."""
        n = self.numerics
        return self.version == version and (not (n.noise_redraw and n.noise_sigma) or self.step == step)

    def max_batch(self, max_len: int) -> int:
        if self.kv_budget_bytes is None:
            return 1 << 30
        return max(1, self.kv_budget_bytes // KVCache.bytes_per_sequence(self.cfg, max_len, self.numerics))

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, generator: torch.Generator, max_new: int = RESPONSE_LEN) -> Rollout:
        """Sample one response per prompt row at temperature 1. A batch larger than the KV-cache budget
        holds runs in waves (sequences that do not fit wait, as in a memory-bound engine). The responses
        are as wide as the longest one: every later position would be padding, which nothing reads."""
        cap = self.max_batch(prompts.shape[1] + max_new)
        parts = [self._generate(prompts[i:i + cap], generator, max_new) for i in range(0, len(prompts), cap)]
        self.waves += len(parts) - 1
        width = max(p[0].shape[1] for p in parts)

        def widen(x, fill):
            return torch.cat([x, torch.full((len(x), width - x.shape[1]), fill, dtype=x.dtype)], dim=1)
        resp, lp, mask = (torch.cat([widen(p[j], fill) for p in parts]) for j, fill in enumerate((PAD_ID, 0.0, False)))
        return Rollout(prompts, resp, lp, mask, self.version or 0)

    def _generate(self, prompts, generator, max_new):
        B, P = prompts.shape
        cache = KVCache(self.cfg, B, P + max_new, self.numerics)
        logits = self.model(prompts, cache, 0)[:, -1]
        resp = torch.full((B, max_new), PAD_ID, dtype=torch.long)
        lp = torch.zeros(B, max_new)
        alive = torch.ones(B, dtype=torch.bool)
        mask = torch.zeros(B, max_new, dtype=torch.bool)
        for t in range(max_new):
            logq = logits.float().log_softmax(-1)
            tok = torch.multinomial(logq.exp(), 1, generator=generator).squeeze(1)
            resp[:, t] = torch.where(alive, tok, PAD_ID)
            lp[:, t] = torch.where(alive, logq.gather(1, tok[:, None]).squeeze(1), 0.0)
            mask[:, t] = alive
            alive = alive & (tok != EOS_ID)
            if not alive.any() or t == max_new - 1:
                break
            logits = self.model(resp[:, t:t + 1], cache, P + t)[:, -1]
        return resp[:, :t + 1], lp[:, :t + 1], mask[:, :t + 1]


class TokenLogprobs(NamedTuple):
    sampled: torch.Tensor  # (B, R): log p of each response token
    full: torch.Tensor  # (B, R, V): log-probs of the whole vocabulary at each response position


def token_logprobs(model: Decoder, rollout: Rollout, buckets: int = 4) -> TokenLogprobs:
    """A full forward pass over prompt + response: (log p of each response token (B, R), log-probs of the
    whole vocabulary (B, R, V)).

    Responses differ in length, so the batch is sorted by length and cut into `buckets` chunks, each
    as wide as its own longest response: the positions after a response's <eos> are padding that no
    result reads, and a chunk skips most of them (about 20% of the work at the toy's lengths). Each
    row's numbers are its own forward pass's; only the float order inside the matmuls depends on the
    chunk's shape. Positions past a chunk's width (after <eos>, masked everywhere) come back as 0."""
    seq, responses = rollout.sequences, rollout.responses
    P, R = rollout.prompts.shape[1], responses.shape[1]
    lengths = rollout.mask.sum(1)
    order = torch.argsort(lengths, stable=True)
    parts = []
    for rows in torch.tensor_split(order, min(buckets, len(order))):
        w = max(1, int(lengths[rows].max()))
        logp = model(seq[rows, :P + w - 1])[:, P - 1:].float().log_softmax(-1)
        parts.append(F.pad(logp, (0, 0, 0, R - w)))
    full = torch.cat(parts)[torch.argsort(order)]
    return TokenLogprobs(full.gather(2, responses[:, :, None]).squeeze(2), full)
