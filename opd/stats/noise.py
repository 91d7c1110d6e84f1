"""The instrument's null distribution: seed-vs-seed Delta of one configuration."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from opd.stats.bootstrap import problem_resamples
from opd.stats.rule import final_heldout
from opd.stats.seeds import draw_of


class NoiseTables(NamedTuple):
    """seed_noise's tables: every seed-vs-seed Delta, and a summary per student."""
    pairs: pd.DataFrame
    summary: pd.DataFrame


def seed_noise(heldout: pd.DataFrame, config: str, *, n_boot: int = 2000, seed: int = 0,
               n_draws: int = 1) -> NoiseTables:
    """The instrument's null distribution from several seeds of one configuration (the baseline), per
    student: every ordered pair of its seeds on the same base-model draw (run seed s on draw s % n_draws)
    gives a seed-vs-seed Delta (same engine, same base model, so the true Delta is 0). Returns (pairs:
    student, seed_a, seed_b, delta; summary per student: n_seeds, sd_single (SD of one seed-vs-seed Delta),
    sd_run (SD of a run's log sum_x K_x within a draw, pooled over draws), se_problem (the problem-only
    bootstrap SE of one seed-vs-seed Delta, averaged over consecutive pairs on one draw), n_draws and
    sd_draw: the SD over draws of a draw's seed-mean log sum_x K_x (how far the base model alone moves the
    configuration's held-out KL; NaN with one draw))."""
    fin = final_heldout(heldout[heldout["config"] == config])
    pairs, summary = [], []
    for student, fs in fin.groupby("student"):
        k = fs.pivot_table(index="seed", columns="prompt_id", values="kl").dropna(axis=1)
        seeds, K = np.asarray(k.index), k.to_numpy()
        draw = draw_of(seeds, n_draws)
        logt = np.log(K.sum(1))
        on = [np.flatnonzero(draw == d) for d in np.unique(draw)]
        on = [i for i in on if len(i) >= 2]
        if not on:
            continue
        tot = K.sum(1)
        d = [(student, int(seeds[i]), int(seeds[j]), tot[i] / tot[j] - 1)
             for idx in on for i in idx for j in idx if i != j]
        pairs += d
        ss = sum(((logt[i] - logt[i].mean()) ** 2).sum() for i in on)
        se = [np.std(problem_resamples(K[a][:, None], K[b], n_boot, seed)[:, 0], ddof=1)
              for idx in on for a, b in zip(idx[:-1], idx[1:])]
        means = [logt[draw == x].mean() for x in np.unique(draw)]
        summary.append({"student": student, "config": config, "n_seeds": len(seeds),
                        "sd_single": float(np.std([x[3] for x in d], ddof=1)),
                        "sd_run": float(np.sqrt(ss / sum(len(i) - 1 for i in on))), "se_problem": float(np.mean(se)),
                        "n_draws": len(means), "sd_draw": float(np.std(means, ddof=1)) if len(means) > 1 else np.nan})
    return NoiseTables(pd.DataFrame(pairs, columns=["student", "seed_a", "seed_b", "delta"]),
                       pd.DataFrame(summary, columns=["student", "config", "n_seeds", "sd_single", "sd_run",
                                                      "se_problem", "n_draws", "sd_draw"]))
