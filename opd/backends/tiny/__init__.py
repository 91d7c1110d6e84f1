"""The embedded CPU backend: real on-policy distillation with small Qwen2-like models in plain PyTorch."""
