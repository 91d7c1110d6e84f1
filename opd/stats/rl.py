"""The paper's RL collapse rule and time to a held-out KL target."""
from __future__ import annotations

import numpy as np
import pandas as pd


COLLAPSE_CRITERIA = ("accuracy", "entropy", "length")
RL_COLLAPSE_DEFAULTS = {"accuracy_points": 5.0, "entropy_factor": 1.5, "length_factor": 1.2}  # config: rl_collapse


def rl_collapse(table: pd.DataFrame, accuracy_points: float, entropy_factor: float, length_factor: float) -> pd.DataFrame:
    """The paper's RL collapse rule, thresholds fixed in advance, each criterion on held-out against the same
    algorithm on the standard engine at the final evaluation: accuracy at least `accuracy_points` below
    (`accuracy_change`, points), or the mean per-token entropy of the policy on its held-out responses
    (`entropy_ratio`) or the mean held-out response length (`length_ratio`) off by at least the factor
    either way (a collapsed policy degenerates into a few tokens or into noise). A ratio that is
    missing (not measured) does not fire. Adds one boolean column per criterion (collapse_<name>),
    `collapsed` (any) and `collapse_criteria` (the names that fired, joined by '+'; '' when none)."""
    t = table.copy()

    def off(ratio, factor):
        r = pd.to_numeric(ratio, errors="coerce").to_numpy(dtype=float)
        return np.isfinite(r) & ((r <= 1 / factor) | (r >= factor))
    fired = {"accuracy": (pd.to_numeric(t["accuracy_change"]).to_numpy(dtype=float) <= -accuracy_points),
             "entropy": off(t["entropy_ratio"], entropy_factor), "length": off(t["length_ratio"], length_factor)}
    for name in COLLAPSE_CRITERIA:
        t[f"collapse_{name}"] = fired[name].astype(bool)
    t["collapsed"] = np.logical_or.reduce([fired[n] for n in COLLAPSE_CRITERIA])
    t["collapse_criteria"] = ["+".join(n for n in COLLAPSE_CRITERIA if fired[n][i]) for i in range(len(t))]
    return t


def time_to_target(curve: pd.DataFrame, target: float) -> float:
    """First x at which a held-out KL curve (columns x, kl, sorted by x) is at or below target, linearly
    interpolated between evaluations; NaN if never reached."""
    x, y = curve["x"].to_numpy(float), curve["kl"].to_numpy(float)
    hit = np.nonzero(y <= target)[0]
    if not len(hit):
        return float("nan")
    i = hit[0]
    if i == 0:
        return float(x[0])
    return float(x[i - 1] + (target - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1]))
