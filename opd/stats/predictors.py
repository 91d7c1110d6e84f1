"""Offline predictors of training's outcome: one-statistic threshold rules, fitted and held out, and the
records of the fitted and the frozen admission rules."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from opd import spec
from opd.stats.rank import spearman_rows


# The offline statistics judged as predictors (columns of the predictor table, workflow/scripts/predictors.py), with
# their labels: the admission check's D_hat, then the step-0 statistics (opd.backends.tiny.probes.step0_statistics).
PREDICTORS: dict[str, str] = {
    "d_hat": "D̂ (the admission check's)", "d": "D̂ (probe prefixes)", "kl_qp": "KL(q‖p) exact",
    "tv": "total variation", "kl_qp_rel": "KL(q‖p) / KL(p‖teacher)", "coherence": "bias coherence",
    "T_U_logit": "T / U (logit)", "T_U_param": "T / U (param)", "S_U_param": "S / U (param)",
    "E_U_logit": "(T+S) / U (logit)", "E_U_param": "(T+S) / U (param)", "cos_TU_param": "cos(T, U) (param)",
    "T_persist_U_param": "persistent T / U (param)", "T_run_U_param": "run-horizon T / U (param)",
}


class Threshold(NamedTuple):
    """A one-statistic rule: admit (predict pass) iff sign * x <= t."""
    sign: int
    t: float

    def admits(self, x) -> np.ndarray:
        return self.sign * np.asarray(x, dtype=float) <= self.t

    @classmethod
    def of(cls, rule: spec.FrozenRule) -> "Threshold":
        """A frozen rule's cut (one of config.yaml's frozen_rules) as a Threshold."""
        return cls(*rule.cut_at)

    @property
    def cut(self) -> str:
        """The admitted side of the cut: "≤ 1.41"."""
        return f"{'≤' if self.sign > 0 else '≥'} {self.sign * self.t:.3g}"


def fit_threshold(x, passed) -> Threshold:
    """The threshold rule that agrees with the most of `passed` (bool) on x: both directions and every cut between
    two values of x (and beyond either end) tried; ties go to sign +1 (more of the statistic is worse), then to the
    middle one of the best cuts in x's order."""
    x, y = np.asarray(x, dtype=float), np.asarray(passed, dtype=bool)
    best = None
    for sign in (1, -1):
        v = np.unique(sign * x)
        cuts = np.concatenate([[v[0] - 1.0], (v[:-1] + v[1:]) / 2, [v[-1] + 1.0]])
        acc = ((sign * x[None, :] <= cuts[:, None]) == y[None, :]).sum(1)
        top = np.flatnonzero(acc == acc.max())
        cand = (int(acc.max()), sign, float(cuts[top[len(top) // 2]]))
        if best is None or cand[0] > best[0]:
            best = cand
    return Threshold(best[1], best[2])


def held_out_admits(x, passed, folds) -> np.ndarray:
    """Each candidate's prediction by the threshold fitted on every other fold (`folds`: one label per candidate:
    its own index for leave-one-out, its student for leave-one-student-out). NaN-free inputs."""
    x, y, f = np.asarray(x, dtype=float), np.asarray(passed, dtype=bool), np.asarray(folds)
    out = np.zeros(len(x), dtype=bool)
    for g in np.unique(f):
        out[f == g] = fit_threshold(x[f != g], y[f != g]).admits(x[f == g])
    return out


def predictor_record(table: pd.DataFrame, statistics, *, outcome: str = "outcome", delta: str = "delta") -> pd.DataFrame:
    """How well each offline statistic (columns of `table`, one row per candidate engine and student with its
    training `outcome` "pass"/"fail" and its Delta) predicts training: for split `row` (leave one candidate out)
    and `student` (leave one student out) the share of candidates whose held-out threshold rule (fit_threshold on
    the other candidates, pooled over students) agrees with training, and Spearman's rho of the statistic with
    Delta (pooled for `row`, on the held-out student for each `student` fold), with n. `selected` is the nested
    choice: in each fold the statistic with the best training-fold agreement, then its threshold, so its accuracy
    is not flattered by picking the best statistic on the same candidates; its `chosen` says which statistics the
    folds chose, with counts. Rows per split over all students (`student` = "all") and, for split `student`, per
    held-out student. Split `all` holds one row, the fitted rule (fitted_rule: `chosen`, `sign`, `threshold`) scored
    in sample on every candidate it could be fitted on."""
    t = table[table[outcome].isin(["pass", "fail"])].reset_index(drop=True)
    y, students = (t[outcome] == "pass").to_numpy(), t["student"].to_numpy()
    folds = {"row": np.arange(len(t)), "student": students}
    preds, rows = {}, []
    for stat in statistics:
        x = pd.to_numeric(t[stat], errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(x)
        for split, f in folds.items():
            p = np.full(len(t), np.nan)
            if ok.sum() >= 2 and len(np.unique(f[ok])) >= 2:
                p[ok] = held_out_admits(x[ok], y[ok], f[ok])
            preds[stat, split] = p
    chosen = {}
    for split, f in folds.items():  # nested: the statistic is chosen inside each fold
        preds["selected", split], chosen[split] = nested_choice(t, statistics, y, f)
    d = pd.to_numeric(t[delta], errors="coerce").to_numpy(dtype=float)
    for (stat, split), p in preds.items():
        x = pd.to_numeric(t[stat], errors="coerce").to_numpy(dtype=float) if stat != "selected" else None
        groups = [("all", np.ones(len(t), bool))] + ([(s, students == s) for s in np.unique(students)]
                                                     if split == "student" else [])
        for who, m in groups:
            k = m & np.isfinite(p)
            rho = float("nan")
            if x is not None:
                r = k & np.isfinite(d)
                rho = (float(np.nanmean([spearman_rows(x[r & (students == s)], d[r & (students == s)])
                                         for s in np.unique(students[r])])) if split == "student" and who == "all"
                       else float(spearman_rows(x[r], d[r]))) if r.sum() >= 3 else float("nan")
            rows.append({"statistic": stat, "split": split, "student": who, "n": int(k.sum()),
                         "n_agree": int((p[k].astype(bool) == y[k]).sum()),
                         "accuracy": float((p[k].astype(bool) == y[k]).mean()) if k.any() else float("nan"),
                         "spearman": rho, "n_pass": int(y[k].sum()),
                         "chosen": _choices(chosen[split][m & np.isfinite(p)]) if stat == "selected" else stat})
    rule = fitted_rule(t, statistics, y)  # split `all`: the rule fitted on every candidate, scored on them (in sample)
    if rule is not None:
        stat, th, agree = rule
        rows.append({"statistic": "selected", "split": "all", "student": "all", "n": len(agree),
                     "n_agree": int(agree.sum()), "accuracy": float(agree.mean()), "spearman": float("nan"),
                     "n_pass": int(y[np.isfinite(pd.to_numeric(t[stat], errors="coerce").to_numpy(dtype=float))].sum()),
                     "chosen": stat, "sign": th.sign, "threshold": th.t})
    return pd.DataFrame(rows)


def nested_choice(t: pd.DataFrame, statistics, passed, folds) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's held-out decision (1.0 admit, 0.0 reject, NaN where its statistic is missing) by the nested
    choice: in every fold (`folds`, one label per candidate) the statistic with the best agreement on the other
    folds' candidates (ties to the earlier in `statistics`), then its threshold fitted there (fit_threshold). Returns
    the decisions and the statistic each candidate's fold chose ("" where none could be fitted)."""
    y, f = np.asarray(passed, dtype=bool), np.asarray(folds)
    p, chosen = np.full(len(t), np.nan), np.full(len(t), "", dtype=object)
    for g in np.unique(f):
        tr, te = f != g, f == g
        if not tr.any():
            continue
        best = max(statistics, key=lambda s: (_fold_accuracy(t[s], y, tr), -list(statistics).index(s)))
        x = pd.to_numeric(t[best], errors="coerce").to_numpy(dtype=float)
        fit = tr & np.isfinite(x)
        if fit.sum() < 2:
            continue
        p[te] = np.where(np.isfinite(x[te]), fit_threshold(x[fit], y[fit]).admits(x[te]), np.nan)
        chosen[te] = best
    return p, chosen


def fitted_rule(t: pd.DataFrame, statistics, passed):
    """The second admission rule, as a user would apply it to a new engine: the statistic whose threshold agrees
    best with training over every candidate (ties to the earlier in `statistics`) and that threshold. Returns
    (statistic, Threshold, agreement per candidate with the statistic), or None with fewer than two such
    candidates. Its agreement is in sample; nested_choice's leave-one-out decisions are the honest estimate."""
    y = np.asarray(passed, dtype=bool)
    every = np.ones(len(t), dtype=bool)
    best = max(statistics, key=lambda s: (_fold_accuracy(t[s], y, every), -list(statistics).index(s)))
    x = pd.to_numeric(t[best], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(x)
    if ok.sum() < 2:
        return None
    th = fit_threshold(x[ok], y[ok])
    return best, th, th.admits(x[ok]) == y[ok]


class FittedRule(NamedTuple):
    """The second admission rule's record (analysis/predictors.parquet, read by fitted_rule_of): admit iff
    sign * statistic <= threshold, fitted on `n` candidates and agreeing with training on `n_agree` of them (in
    sample); held out (nested_choice, leaving one candidate out) it agrees on `n_agree_held_out` of `n_held_out`."""
    statistic: str
    sign: int
    threshold: float
    n: int
    n_agree: int
    n_held_out: int
    n_agree_held_out: int

    @property
    def cut(self) -> str:
        """The admitted side of the cut: "≤ 1.41"."""
        return Threshold(self.sign, self.threshold).cut

    @property
    def label(self) -> str:
        """The rule in words: "persistent T / U (param) ≤ 1.41"."""
        return rule_label(self.statistic, Threshold(self.sign, self.threshold))


def rule_label(statistic: str, threshold: Threshold) -> str:
    """A one-statistic admission rule in words: "persistent T / U (param) ≤ 1.41"."""
    return f"{PREDICTORS.get(statistic, statistic)} {threshold.cut}"


class ProspectiveTest(NamedTuple):
    """A frozen admission rule's record (analysis/predictors.parquet, split `prospective` and `fitted_on`, column
    `rule` = `name`; read by prospective_tests_of): on the `n` candidates it was not fitted on, decided before their
    runs, it agrees with training on `n_agree`, the paper's rule on `n_agree_paper` and admitting every candidate on
    `n_agree_all`; on the `n_fitted_on` candidates it was fitted on it agrees on `n_agree_fitted_on`."""
    name: str
    statistic: str
    threshold: Threshold
    n: int
    n_agree: int
    n_agree_paper: int
    n_agree_all: int
    n_fitted_on: int
    n_agree_fitted_on: int

    @property
    def label(self) -> str:
        return rule_label(self.statistic, self.threshold)


def prospective_tests_of(record: pd.DataFrame) -> tuple[ProspectiveTest, ...]:
    """Each frozen rule's prospective test in a predictor record, in config.yaml's order (none where the experiment
    froze no rule)."""
    if "rule" not in record:
        return ()
    r = record[record["split"].isin(["prospective", "fitted_on"]) & (record["student"] == "all")
               & record["rule"].notna()]
    tests = []
    for name in dict.fromkeys(r["rule"]):
        q = r[r["rule"] == name].set_index(["split", "statistic"])
        own, fit = q.loc[("prospective", "frozen_rule")], q.loc[("fitted_on", "frozen_rule")]
        tests.append(ProspectiveTest(str(name), str(own["chosen"]), Threshold(int(own["sign"]), float(own["threshold"])),
                                     int(own["n"]), int(own["n_agree"]), int(q.loc[("prospective", "paper_rule"), "n_agree"]),
                                     int(q.loc[("prospective", "admit_all"), "n_agree"]), int(fit["n"]),
                                     int(fit["n_agree"])))
    return tuple(tests)


def fitted_rule_of(record: pd.DataFrame) -> FittedRule | None:
    """The fitted rule in a predictor record (predictor_record's split `all` and its `row` nested choice), or None
    where it has none."""
    r = record[(record["statistic"] == "selected") & (record["student"] == "all")].set_index("split")
    if "all" not in r.index or "row" not in r.index:
        return None
    a, h = r.loc["all"], r.loc["row"]
    if not int(h["n"]):  # fitted, but no candidate could be decided without itself (two candidates)
        return None
    return FittedRule(str(a["chosen"]), int(a["sign"]), float(a["threshold"]), int(a["n"]), int(a["n_agree"]),
                      int(h["n"]), int(h["n_agree"]))


def _choices(chosen) -> str:
    """The statistics a nested choice's folds chose, most often first, with counts: "kl_qp (50), tv (4)"."""
    names, counts = np.unique([c for c in chosen if c], return_counts=True)
    return ", ".join(f"{n} ({c})" for c, n in sorted(zip(counts, names), key=lambda z: (-z[0], z[1])))


def _fold_accuracy(col, y, train) -> float:
    """Training-fold agreement of the best threshold on one statistic, over every training candidate: one without
    the statistic counts as a disagreement, so a statistic measured on few candidates cannot win on its share."""
    x = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
    m = train & np.isfinite(x)
    if m.sum() < 2:
        return -1.0
    return float((fit_threshold(x[m], y[m]).admits(x[m]) == y[m]).sum() / train.sum())
