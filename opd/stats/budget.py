"""The mismatch budget B_emp(tau) from a verdict table, and its edge in three units."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from opd.stats.rule import RULE_COLUMNS, rule_fails


class Budget(NamedTuple):
    """A mismatch budget B_emp(tau) = [lo, hi]: the largest D that passed and the smallest that failed."""
    lo: float
    hi: float


def budget_interval(verdicts: pd.DataFrame, tau: float, rule: str = "paper") -> Budget:
    """B_emp(tau) = [max D over passes, min D over fails], re-applying the rule at tau with the given
    rule's interval; NaN for an empty side. Configurations the rule cannot judge are left out."""
    f = rule_fails(verdicts, tau, rule)
    D = verdicts["D"].to_numpy(dtype=float)
    known = f.notna().to_numpy()
    f = f.fillna(False).to_numpy(dtype=bool)
    lo = float(D[known & ~f].max()) if (known & ~f).any() else float("nan")
    hi = float(D[f].min()) if f.any() else float("nan")
    return Budget(lo, hi)


def is_consistent(lo: float, hi: float) -> bool:
    """A budget is consistent when every pass has less mismatch than every fail (lo < hi); with an empty
    side there is nothing to contradict."""
    return bool(np.isnan(lo) or np.isnan(hi) or lo < hi)


def budget_table(verdicts: pd.DataFrame, taus) -> pd.DataFrame:
    """Per student, tau and rule (the paper's and the seed-aware one): the budget interval, whether it is
    consistent, and how many configurations pass, fail, or cannot be judged by that rule."""
    rows = []
    for student, v in verdicts.groupby("student"):
        for rule in RULE_COLUMNS:
            for tau in taus:
                lo, hi = budget_interval(v, tau, rule)
                f = rule_fails(v, tau, rule)
                rows.append({"student": student, "rule": rule, "tau": float(tau), "lo": lo, "hi": hi,
                             "consistent": is_consistent(lo, hi), "n_pass": int((f == False).sum()),  # noqa: E712
                             "n_fail": int((f == True).sum()), "n_unjudged": int(f.isna().sum())})  # noqa: E712
    return pd.DataFrame(rows)


def baseline_scales(verdicts: pd.DataFrame, heldout: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per student (index), the units an edge is also given in: `d0`, the standard engine's own D, and `kl0`, the
    student's initial held-out KL (the standard engine's runs at their first evaluation, the mean over seeds)."""
    d0 = verdicts[verdicts["config"] == baseline].set_index("student")["D"]
    h = heldout[(heldout["config"] == baseline)]
    h = h[h["step"] == h["step"].min()]
    kl0 = h.groupby(["student", "seed"])["kl"].mean().groupby("student").mean()
    return pd.DataFrame({"d0": d0, "kl0": kl0})


def budget_edge(budget: pd.DataFrame, verdicts: pd.DataFrame, heldout: pd.DataFrame, baseline: str, tau: float,
                rule: str = "seeds") -> pd.DataFrame:
    """Per student, the budget's edge at tau under `rule` in three units: D (nats/token: the largest passing D `lo`,
    the smallest failing D `hi`, and their geometric mean `edge`, where both exist), the same over the standard
    engine's own D (`d0`), and as a share of the student's initial held-out KL (`kl0`: the standard engine's runs
    at step 0, the mean over seeds)."""
    b = budget[(budget["rule"] == rule) & np.isclose(budget["tau"], tau)]
    d0, kl0 = (baseline_scales(verdicts, heldout, baseline)[k] for k in ("d0", "kl0"))
    out = []
    for r in b.itertuples():
        edge = edge_point(r.lo, r.hi)
        out.append({"student": r.student, "rule": rule, "tau": float(tau), "lo": r.lo, "hi": r.hi, "edge": edge,
                    "consistent": bool(r.consistent), "n_pass": r.n_pass, "n_fail": r.n_fail,
                    "d0": float(d0[r.student]), "kl0": float(kl0[r.student]),
                    **{f"{k}_over_d0": v / float(d0[r.student]) for k, v in (("lo", r.lo), ("hi", r.hi), ("edge", edge))},
                    **{f"{k}_over_kl0": v / float(kl0[r.student]) for k, v in (("lo", r.lo), ("hi", r.hi), ("edge", edge))}})
    return pd.DataFrame(out)


def edge_point(lo: float, hi: float) -> float:
    """A budget's edge: the geometric mean of its largest passing D `lo` and its smallest failing D `hi` (also where
    hi < lo, a fail below a pass); NaN unless both are positive."""
    return float(np.sqrt(lo * hi)) if lo > 0 and hi > 0 else float("nan")


def near_edge(D, edge: float, factor: float) -> np.ndarray:
    """Whether each D lies within `factor` of `edge`, either way."""
    D = np.asarray(D, dtype=float)
    return (D >= edge / factor) & (D <= edge * factor)


def edge_counts(verdicts: pd.DataFrame, edge: float, tau: float, rule: str = "seeds", factor: float = 10.0) -> tuple:
    """(passes, fails) under `rule` at tau among the configurations of `verdicts` whose D is within `factor` of
    `edge` (either way): what resolves an edge."""
    near = verdicts[near_edge(verdicts["D"], edge, factor)]
    f = rule_fails(near, tau, rule)
    return int((f == False).sum()), int((f == True).sum())  # noqa: E712
