"""The paper's problem bootstrap: resampled sums of per-problem values (the resamples' counts drawn once
per process and kept) and the paired-bootstrap interval of Delta, vectorised over resamples."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


BOOT_CHUNK = 1000  # resamples drawn at a time


class Interval(NamedTuple):
    """An estimate of Delta with its confidence interval: floats for one comparison, arrays for several."""
    delta: float
    ci_lo: float
    ci_hi: float


def resampled_sums(cols, n_boot: int, seed: int) -> np.ndarray:
    """Column sums of `cols` (n, M) over n_boot resamples of its n rows (problems) drawn with replacement,
    the same rows for every column: (n_boot, M)."""
    cols = np.asarray(cols, dtype=float)
    sums = np.empty((n_boot, cols.shape[1]))
    for start, counts in resample_counts(len(cols), n_boot, seed):
        sums[start:start + len(counts)] = counts @ cols  # one matrix product gives every column's sum
    return sums


# The resamples' counts depend on (n, n_boot, seed) alone, and every interval of an experiment resamples its n
# problems with the same seed: the DAG's plan (opd.plan) computes dozens on each parse, the analysis more. Drawn
# once per process and kept (as float64, what the product computes with: the same sums to the last bit) while they
# fit COUNTS_CACHE_ELEMENTS in all (28 MB for the toy's 359 problems); larger draws are not kept.
COUNTS_CACHE_ELEMENTS = 2**23
_COUNTS: dict[tuple[int, int, int], list[tuple[int, np.ndarray]]] = {}


def resample_counts(n: int, n_boot: int, seed) -> list[tuple[int, np.ndarray]]:
    """(first resample, counts (m, n)) per chunk of BOOT_CHUNK resamples: how often each of n problems is drawn in
    each resample, from numpy's default_rng(seed) (cached for an integer seed, see COUNTS_CACHE_ELEMENTS)."""
    key = (n, n_boot, int(seed)) if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) else None
    if key in _COUNTS:
        _COUNTS[key] = _COUNTS.pop(key)  # most recently used last
        return _COUNTS[key]
    rng = np.random.default_rng(seed)
    chunks = []
    offsets = (np.arange(BOOT_CHUNK, dtype=np.int64) * n)[:, None]
    for start in range(0, n_boot, BOOT_CHUNK):  # chunks keep the per-resample counts in cache
        m = min(BOOT_CHUNK, n_boot - start)
        draws = rng.integers(0, n, size=(m, n)) + offsets[:m]  # problem indices, offset per resample
        counts = np.bincount(draws.ravel(), minlength=m * n).reshape(m, n).astype(float)
        counts.setflags(write=False)
        chunks.append((start, counts))
    if key is not None and n * n_boot <= COUNTS_CACHE_ELEMENTS:
        while _COUNTS and sum(k[0] * k[1] for k in _COUNTS) + n * n_boot > COUNTS_CACHE_ELEMENTS:
            del _COUNTS[next(iter(_COUNTS))]  # the least recently used
        _COUNTS[key] = chunks
    return chunks


def problem_resamples(k_cand, k_base, n_boot: int, seed: int) -> np.ndarray:
    """Resampled Delta (n_boot, C): each resample draws n problems with replacement, the same problems
    for every candidate column of k_cand (n, C) and for the baseline k_base (n,)."""
    sums = resampled_sums(np.column_stack([k_cand, k_base]), n_boot, seed)
    return sums[:, :-1] / sums[:, -1:] - 1.0


def paired_resamples(k_cand, k_ref, n_boot: int, seed: int) -> np.ndarray:
    """Resampled Delta (n_boot, C) of C comparisons, each against its own reference: column c of k_cand (n, C) over
    column c of k_ref (n, C), every column resampled with the same problems in each resample (problem_resamples
    with one reference per candidate)."""
    kc, kr = (np.asarray(k, dtype=float).reshape(len(k), -1) for k in (k_cand, k_ref))
    if kc.shape != kr.shape:
        raise ValueError(f"one reference column per candidate column: {kc.shape} vs {kr.shape}")
    sums = resampled_sums(np.column_stack([kc, kr]), n_boot, seed)
    return sums[:, :kc.shape[1]] / sums[:, kc.shape[1]:] - 1.0


def paired_bootstrap(k_cand, k_base, *, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0) -> Interval:
    """Delta = sum(k_cand) / sum(k_base) - 1 with a percentile interval from resampling problems.

    k_cand: (n,) or (n, C) per-problem held-out KL of the candidate(s); k_base: (n,) of the baseline.
    Each resample draws the same problems for candidate and baseline (and for every configuration).
    Returns Interval(delta, ci_lo, ci_hi): scalars for (n,) input, arrays of shape (C,) for (n, C)."""
    kc = np.asarray(k_cand, dtype=float)
    kb = np.asarray(k_base, dtype=float)
    scalar = kc.ndim == 1
    kc = kc.reshape(len(kc), -1)
    if kb.ndim != 1 or len(kb) != len(kc):
        raise ValueError(f"k_base must have shape ({len(kc)},), got {kb.shape}")
    boot = problem_resamples(kc, kb, n_boot, seed)
    delta = kc.sum(0) / kb.sum() - 1.0
    lo, hi = np.percentile(boot, [50 * (1 - ci), 50 * (1 + ci)], axis=0)
    if scalar:
        return Interval(float(delta[0]), float(lo[0]), float(hi[0]))
    return Interval(delta, lo, hi)
