"""What decides: the rank agreement of D with Delta over a student's sources."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from opd.stats.bootstrap import BOOT_CHUNK


class RankAgreement(NamedTuple):
    """How well D orders Delta over a student's sources: Spearman's rho with its bootstrap interval (resampling
    the sources), the pairs compared and the inversions among them (a larger D with a smaller Delta)."""
    n: int
    rho: float
    ci_lo: float
    ci_hi: float
    n_pairs: int
    n_inversions: int


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho (average ranks for ties) of each row of x against the same row of y; NaN where a row is
    constant."""
    from scipy.stats import rankdata
    rx, ry = rankdata(x, axis=-1), rankdata(y, axis=-1)
    rx, ry = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    den = np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(-1) / np.where(den > 0, den, 1), np.nan)


def rank_agreement(D, delta, *, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0) -> RankAgreement:
    """Spearman's rho of D with Delta over sources (one value each), its percentile interval from resampling
    the sources with replacement (resamples where either side is constant are dropped), and the inversions:
    pairs whose larger D has the smaller Delta, out of the pairs with different D."""
    D, delta = np.asarray(D, dtype=float), np.asarray(delta, dtype=float)
    n = len(D)
    if n < 3:
        return RankAgreement(n, float("nan"), float("nan"), float("nan"), 0, 0)
    rho = float(spearman_rows(D[None], delta[None])[0])
    rng = np.random.default_rng(seed)
    boot = np.concatenate([spearman_rows(D[i], delta[i]) for i in
                           (rng.integers(0, n, (min(BOOT_CHUNK, n_boot - s), n)) for s in range(0, n_boot, BOOT_CHUNK))])
    boot = boot[~np.isnan(boot)]
    lo, hi = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2]) if len(boot) else (np.nan, np.nan)
    i, j = np.triu_indices(n, 1)
    differ = D[i] != D[j]
    larger_d_smaller_delta = np.sign(D[i] - D[j]) * np.sign(delta[i] - delta[j]) < 0
    return RankAgreement(n, rho, float(lo), float(hi), int(differ.sum()), int((differ & larger_d_smaller_delta).sum()))


def significant_inversions(v: pd.DataFrame) -> list[tuple[str, str]]:
    """Pairs (smaller-D configuration, larger-D configuration) whose seed-aware intervals of Delta do not overlap and
    put the smaller D's Delta above the larger one's: inversions the seeds run cannot explain."""
    v = v[v["ci_lo_seeds"].notna()].sort_values("D")
    r = list(v.itertuples())
    return [(a.config, b.config) for i, a in enumerate(r) for b in r[i + 1:]
            if a.D < b.D and a.ci_lo_seeds > b.ci_hi_seeds]


def rank_table(verdicts: pd.DataFrame, sources, *, n_boot: int = 10_000, ci: float = 0.95,
               seed: int = 0) -> pd.DataFrame:
    """Per student: rank_agreement of D with Delta over its `sources` (configuration names: the OPD sources,
    the baseline left out), the significant inversions among them (significant_inversions: their count, and the
    pairs as "smaller-D > larger-D"), and the sources' names."""
    out = []
    for student, v in verdicts[verdicts["config"].isin(list(sources))].groupby("student"):
        v = v.sort_values("D")
        r = rank_agreement(v["D"], v["delta"], n_boot=n_boot, ci=ci, seed=seed)
        sig = significant_inversions(v)
        out.append({"student": student, **r._asdict(), "n_significant": len(sig),
                    "significant": "; ".join(f"{a} > {b}" for a, b in sig), "configs": ", ".join(v["config"])})
    return pd.DataFrame(out, columns=["student", *RankAgreement._fields, "n_significant", "significant", "configs"])
