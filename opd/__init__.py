"""opd-budget: how much training-inference mismatch on-policy distillation tolerates, figure by figure."""
__version__ = "0.1.0"
