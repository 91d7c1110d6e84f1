"""The offline admission check: D_hat with its bootstrap standard error over prompts, the paper's admit rule,
and its record against training."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from opd.stats.bootstrap import problem_resamples


class Estimate(NamedTuple):
    """An estimate and its bootstrap standard error."""
    estimate: float
    se: float


def ratio_se(num, den, *, n_boot: int = 2000, seed: int = 0) -> Estimate:
    """A ratio of sums over units, sum(num) / sum(den), and its bootstrap standard error from resampling
    the units with replacement (the SD of the resampled ratios; NaN with fewer than two units). For the
    offline estimate D_hat the units are prompts: num = each prompt's summed log-ratio over its
    responses' tokens, den = its token count."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    est = float(num.sum() / den.sum())
    if len(num) < 2:
        return Estimate(est, float("nan"))
    boot = problem_resamples(num[:, None], den, n_boot, seed)[:, 0] + 1.0
    return Estimate(est, float(np.std(boot, ddof=1)))


def sequence_frame(sums, tokens, n_responses: int, **keys) -> pd.DataFrame:
    """The sequences of an offline estimate as both backends write them: one row per sequence, prompts in
    order with n_responses consecutive sequences each; columns: the keys, prompt, response, logratio_sum
    (sum over the response's tokens of log q - log p), n_tokens."""
    i = np.arange(len(sums))
    return pd.DataFrame({**keys, "prompt": i // n_responses, "response": i % n_responses,
                         "logratio_sum": np.asarray(sums, dtype=float), "n_tokens": np.asarray(tokens, dtype=np.int64)})


def share_se(num_a, den_a, num_b, den_b, *, n_boot: int = 2000, seed: int = 0) -> Estimate:
    """The share (sum(num_a) / sum(den_a)) / (sum(num_b) / sum(den_b)) of two ratio estimates on the same
    units (a part of an effect against the whole, e.g. keys-only D_hat over keys-and-values D_hat on the
    same prompts), and its paired bootstrap SE: each resample draws the same units for both."""
    cols = np.column_stack([np.asarray(x, dtype=float) for x in (num_a, den_a, num_b)])
    den_b = np.asarray(den_b, dtype=float)
    est = float((cols[:, 0].sum() / cols[:, 1].sum()) / (cols[:, 2].sum() / den_b.sum()))
    if len(den_b) < 2:
        return Estimate(est, float("nan"))
    r = problem_resamples(cols, den_b, n_boot, seed) + 1.0  # each column's sum over den_b's
    return Estimate(est, float(np.std(r[:, 0] / r[:, 1] / r[:, 2], ddof=1)))


def offline_estimates(seqs: pd.DataFrame, keys: list[str], *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """D_hat with its bootstrap standard error over prompts, per group of `keys`. `seqs` holds one row per
    sampled sequence: the keys, `prompt`, `logratio_sum` (sum over the response's tokens of log q - log p)
    and `n_tokens`. D_hat = sum of log-ratios / sum of tokens (the d_n formula); the bootstrap resamples
    prompts, each with all its responses. Returns keys, d_hat, se, n_prompts, n_sequences, n_tokens."""
    out = []
    for key, g in seqs.groupby(keys, sort=False):
        per = g.groupby("prompt")[["logratio_sum", "n_tokens"]].sum()
        d, se = ratio_se(per["logratio_sum"], per["n_tokens"], n_boot=n_boot, seed=seed)
        out.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))), "d_hat": d, "se": se,
                    "n_prompts": len(per), "n_sequences": len(g), "n_tokens": int(g["n_tokens"].sum())})
    return pd.DataFrame(out, columns=[*keys, "d_hat", "se", "n_prompts", "n_sequences", "n_tokens"])


def prompts_for_relative_se(num, den, ns, target: float = 1 / 3, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The standard error of D_hat from the first n prompts, for each n in `ns` (num, den per prompt as in
    ratio_se), against `target` x the D_hat of all prompts: columns n, d_hat (first n), se, relative
    (se / D_hat of all prompts), meets (relative <= target)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    full = num.sum() / den.sum()
    rows = []
    for n in ns:
        d, se = ratio_se(num[:n], den[:n], n_boot=n_boot, seed=seed)
        rows.append({"n": int(n), "d_hat": d, "se": se, "relative": se / full, "meets": bool(se <= target * full)})
    return pd.DataFrame(rows)


def prompts_needed(se, n_prompts, d_hat, ratio: float = 3.0):
    """The prompts that would bring D_hat's standard error to d_hat / ratio, from an SE measured on
    n_prompts (the SE of a mean of prompts shrinks as 1 / sqrt(n)): ceil(n (ratio SE / D_hat)^2)."""
    se, n, d = (np.asarray(x, dtype=float) for x in (se, n_prompts, d_hat))
    return np.ceil(n * (ratio * se / d) ** 2)


def admit(d_hat: float, *, alpha: float, L: float) -> bool:
    """Admit a candidate engine iff alpha * D_hat < L (alpha and L: the experiment's admission settings)."""
    return bool(alpha * d_hat < L)


def admission_record(admission: pd.DataFrame, verdicts: pd.DataFrame, alpha: float, L: float,
                     baselines=()) -> pd.DataFrame:
    """Each engine's offline decision against its training outcome: D_hat and its standard error (from
    `offline_estimates`), admit, D (in training), the in-training / offline ratio, the verdict, whether
    the decision agreed with it, and whether the engine is a `candidate` (not one of `baselines`, the
    standard engine every other is compared with: its decision is not a decision)."""
    rec = admission.merge(verdicts[["student", "config", "D", "verdict"]], on=["student", "config"], how="left")
    rec["alpha"], rec["L"] = float(alpha), float(L)
    rec["admit"] = alpha * rec["d_hat"] < L
    rec["ratio"] = np.where(rec["d_hat"] > 0, rec["D"] / rec["d_hat"].where(rec["d_hat"] > 0), np.nan)
    rec["outcome"] = rec["verdict"]
    rec["agrees"] = np.where(rec["outcome"].isna(), np.nan, rec["admit"] == (rec["outcome"] == "pass"))
    rec["candidate"] = ~rec["config"].isin(list(baselines))
    cols = ["student", "config", "candidate", "d_hat", "se", "n_prompts", "n_sequences", "alpha", "L", "admit", "D",
            "ratio", "outcome", "agrees"]
    return rec[cols].sort_values(["student", "d_hat"], ignore_index=True)


RATIO_FLOOR = 0.01  # D_hat below which the in-training / offline ratio is sampling noise (admission_summary)


def admission_summary(record: pd.DataFrame, *, ratio_floor: float = RATIO_FLOOR) -> dict:
    """What the record implies, over candidate engines only (a baseline is not a decision): how many
    decisions have a training outcome and how many agree with it, how many "admit everything" would get
    right (the candidates that passed), the alpha a pilot would set (the largest in-training/offline
    ratio among candidates whose offline estimate is at least ratio_floor, below which the ratio is
    sampling noise), the retrospective L (the largest D that passed), and the range of D_hat's standard
    error relative to D_hat among candidates with D_hat >= ratio_floor, and the most prompts any of them
    needs for an SE of at most a third of D_hat (prompts_needed)."""
    c = record[record["candidate"].astype(bool)]
    known = c[c["agrees"].notna()]
    r = c[(c["d_hat"] >= ratio_floor) & c["ratio"].notna()]
    passed = c[c["outcome"] == "pass"]
    big = c[c["d_hat"] >= ratio_floor]
    rel = big["se"] / big["d_hat"]
    need = prompts_needed(big["se"], big["n_prompts"], big["d_hat"])
    return {"alpha_implied": float(r["ratio"].max()) if len(r) else float("nan"),
            "L_retrospective": float(passed["D"].max()) if len(passed) else float("nan"),
            "n_decisions": int(len(known)), "n_agree": int(known["agrees"].astype(bool).sum()),
            "n_admit_all_agree": int((known["outcome"] == "pass").sum()),
            "n_baseline": int((~record["candidate"].astype(bool)).sum()),
            "se_relative_min": float(rel.min()) if len(rel) else float("nan"),
            "se_relative_max": float(rel.max()) if len(rel) else float("nan"),
            "prompts_for_se_third": float(need.max()) if len(need) else float("nan"),
            "n_prompts": int(c["n_prompts"].max()) if len(c) else 0,
            "ratio_floor": float(ratio_floor)}
