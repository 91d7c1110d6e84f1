"""A Qwen2-architecture decoder in plain PyTorch (RMSNorm, RoPE, SwiGLU, q/k/v bias, grouped-query
attention), plus a Llama-like variant without the q/k/v bias. Parameter names follow Hugging Face's
Qwen2ForCausalLM / LlamaForCausalLM, so `export_hf` is a rename-free save.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    n_layers: int = 2
    n_heads: int = 2
    n_kv_heads: int = 1
    head_dim: int = 32
    d_ff: int = 128
    qkv_bias: bool = True  # Qwen2: True; Llama: False
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    max_seq_len: int = 64

    @property
    def d_model(self) -> int:
        return self.n_heads * self.head_dim


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_tables(cfg: ModelConfig, positions: torch.Tensor, dtype):
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def decode_attention(q, k, v):
    """Attention of one new position (q: (B, H, 1, hd)) over every cached one (k, v: (B, H_kv, L, hd)),
    softmax in fp32 as fused kernels do. Returns (B, H, hd)."""
    B, H, _, hd = q.shape
    q = q.view(B, k.shape[1], H // k.shape[1], hd)  # query head h reads key/value head h // (H / H_kv)
    w = (q @ k.transpose(-1, -2)).float().mul_(hd ** -0.5).softmax(-1).to(v.dtype)
    return (w @ v).view(B, H, hd)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.d_model, cfg.head_dim
        self.q_proj = nn.Linear(d, cfg.n_heads * hd, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.n_heads * hd, d, bias=False)

    def forward(self, x, cos, sin, cache=None, layer=0):
        B, T, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:  # the engine's KV cache: store (maybe quantised), read everything so far
            k, v = cache.append(layer, k, v)
        if T == 1:  # one decode step: a plain product beats the fused kernel's set-up at these sizes
            return self.o_proj(decode_attention(q, k, v).reshape(B, 1, -1))
        # grouped-query attention: each key/value head serves n_heads / n_kv_heads query heads
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=c.n_heads != c.n_kv_heads)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache=None, layer=0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.model.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.model.norm = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        self._rope: dict = {}  # dtype -> (cos, sin) for every position, computed once

    def rope(self, start: int, length: int, dtype):
        n = max(self.cfg.max_seq_len, start + length)
        if dtype not in self._rope or len(self._rope[dtype][0]) < n:
            self._rope[dtype] = rope_tables(self.cfg, torch.arange(n), dtype)
        cos, sin = self._rope[dtype]
        return cos[start:start + length], sin[start:start + length]

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, cache=None, start: int = 0) -> torch.Tensor:
        """Logits (B, T, V) for tokens idx (B, T) at positions start .. start + T - 1."""
        x = self.model.embed_tokens(idx)
        cos, sin = self.rope(start, idx.shape[1], x.dtype)
        for i, block in enumerate(self.model.layers):
            x = block(x, cos, sin, cache, i)
        return self.lm_head(self.model.norm(x))

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def save(model: Decoder, path: Path) -> None:
    """Config and fp32 weights in one file, written atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"config": asdict(model.cfg), "state": model.state_dict()}, tmp)
    tmp.replace(path)


def load(path: Path) -> Decoder:
    blob = torch.load(path, map_location="cpu", weights_only=True)
    model = Decoder(ModelConfig(**blob["config"]))
    model.load_state_dict(blob["state"])
    return model


def export_hf(model: Decoder, path: Path) -> None:
    """Write a Hugging Face checkpoint (config.json + model.safetensors + tokenizer)."""
    from safetensors.torch import save_file

    from .task import BOS_ID, EOS_ID, save_hf_tokenizer

    c = model.cfg
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    qwen = c.qkv_bias
    hf = {
        "architectures": ["Qwen2ForCausalLM" if qwen else "LlamaForCausalLM"],
        "model_type": "qwen2" if qwen else "llama",
        "vocab_size": c.vocab_size, "hidden_size": c.d_model, "intermediate_size": c.d_ff,
        "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads, "head_dim": c.head_dim, "hidden_act": "silu",
        "max_position_embeddings": c.max_seq_len, "rms_norm_eps": c.rms_eps, "rope_theta": c.rope_theta,
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_sliding_window": False,
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": EOS_ID,  # see save_hf_tokenizer
    }
    if not qwen:
        hf.update(attention_bias=False, mlp_bias=False)
    (path / "config.json").write_text(json.dumps(hf, indent=1))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
    save_hf_tokenizer(path)


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs per token: 2 x matmul parameters + attention score/value products (Kaplan-style)."""
    d, hd = cfg.d_model, cfg.head_dim
    per_layer = 2 * (d * cfg.n_heads * hd * 2 + d * cfg.n_kv_heads * hd * 2 + 3 * d * cfg.d_ff)
    attn = 2 * 2 * cfg.n_heads * hd * seq_len
    return cfg.n_layers * (per_layer + attn) + 2 * d * cfg.vocab_size
