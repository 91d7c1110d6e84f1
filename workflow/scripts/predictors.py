"""Which offline statistic predicts training: every candidate engine's step-0 statistics (rule predictor_stats) beside
its admission estimate (D_hat, SE, the paper's decision) and its training outcome (the paper's verdict, as the
admission record judges) and Delta; then each statistic's held-out agreement with training and rank correlation with
Delta (opd.stats.predictor_record), with the paper's fixed rule and "admit every candidate" as split `fixed`; where
config.yaml freezes rules, each one's prospective test (split `prospective`, column `rule`: the candidates it was
not fitted on)."""
import numpy as np
import pandas as pd

from opd import derived, scripts, stats, store
from opd.spec import FrozenRule


def candidates(step0: pd.DataFrame, admission: pd.DataFrame, verdicts: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate engine and student: its step-0 statistics, D_hat, SE, the paper's decision (admit,
    agrees), the outcome, Delta, D and the seed-aware verdict."""
    a = admission[admission["candidate"].astype(bool)][["student", "config", "d_hat", "se", "admit", "outcome",
                                                        "agrees"]]
    v = verdicts[["student", "config", "delta", "D", "verdict_seeds"]]
    return (a.merge(step0.drop(columns=["seconds"], errors="ignore"), on=["student", "config"], how="inner")
            .merge(v, on=["student", "config"], how="left").sort_values(["student", "d_hat"], ignore_index=True))


def fixed_rules(t: pd.DataFrame) -> pd.DataFrame:
    """The rules fitted on nothing: the paper's (alpha D_hat < L, its settings) and admitting every candidate."""
    k = t[t["outcome"].isin(["pass", "fail"])]
    passed = k["outcome"] == "pass"
    rows = []
    for name, agree in (("paper_rule", k["admit"].astype(bool) == passed), ("admit_all", passed)):
        rows.append({"statistic": name, "split": "fixed", "student": "all", "n": len(k), "n_agree": int(agree.sum()),
                     "accuracy": float(agree.mean()) if len(k) else float("nan"), "spearman": float("nan"),
                     "n_pass": int(passed.sum())})
    return pd.DataFrame(rows)


def with_fitted_rule(t: pd.DataFrame, statistics) -> pd.DataFrame:
    """`t` with the second admission rule's decision per candidate (opd.stats.fitted_rule, beside the paper's):
    `fitted_admit` held out (for a candidate with a training outcome, the nested choice fitted on every other such
    candidate, opd.stats.nested_choice; for one without, the rule fitted on all, as for a new engine; NaN where the
    statistic is missing), the statistic that decided it (`fitted_statistic`) and whether it matches training
    (`fitted_agrees`, NaN without an outcome)."""
    t = t.copy()
    decided = t["outcome"].isin(["pass", "fail"]).to_numpy()
    passed = (t["outcome"] == "pass").to_numpy()
    admit, chosen = np.full(len(t), np.nan), np.full(len(t), "", dtype=object)
    d = t[decided].reset_index(drop=True)
    admit[decided], chosen[decided] = stats.nested_choice(d, statistics, passed[decided], np.arange(len(d)))
    rule = stats.fitted_rule(d, statistics, passed[decided]) if len(d) else None
    if rule is not None and (~decided).any():
        x = pd.to_numeric(t.loc[~decided, rule[0]], errors="coerce").to_numpy(dtype=float)
        admit[~decided] = np.where(np.isfinite(x), rule[1].admits(x), np.nan)
        chosen[~decided] = rule[0]
    t["fitted_admit"], t["fitted_statistic"] = admit, chosen
    t["fitted_agrees"] = np.where(decided & np.isfinite(admit), (admit == 1.0) == passed, np.nan)
    return t


def frozen_columns(rule: FrozenRule) -> tuple[str, str, str]:
    """A frozen rule's three columns in the candidates table: its decision, whether it was prospective, whether it
    agreed with training."""
    return f"frozen_admit.{rule.name}", f"prospective.{rule.name}", f"frozen_agrees.{rule.name}"


def with_frozen_rule(t: pd.DataFrame, rule: FrozenRule) -> pd.DataFrame:
    """`t` with one frozen rule's decision per candidate (config.yaml's frozen_rules; frozen_columns names them):
    `frozen_admit.<name>` (1.0 admit, 0.0 reject, NaN where its statistic is missing), `prospective.<name>` (the
    rule was not fitted on the candidate, so its decision was fixed before the candidate's runs) and
    `frozen_agrees.<name>` (NaN without an outcome)."""
    t = t.copy()
    admit_col, prospective_col, agrees_col = frozen_columns(rule)
    x = pd.to_numeric(t[rule.statistic], errors="coerce").to_numpy(dtype=float)
    admit = np.where(np.isfinite(x), stats.Threshold.of(rule).admits(x), np.nan)
    passed = (t["outcome"] == "pass").to_numpy()
    decided = t["outcome"].isin(["pass", "fail"]).to_numpy() & np.isfinite(admit)
    t[admit_col] = admit
    t[prospective_col] = [rule.prospective(s, c) for s, c in zip(t["student"], t["config"])]
    t[agrees_col] = np.where(decided, (admit == 1.0) == passed, np.nan)
    return t


def frozen_record(t: pd.DataFrame, rule: FrozenRule) -> pd.DataFrame:
    """One frozen rule's record (column `rule`: its name): split `prospective` (the candidates it was not fitted
    on, with an outcome and its statistic) for the rule, the paper's rule and admitting every candidate on the same
    candidates, and split `fitted_on` (the rule on the candidates it was fitted on)."""
    admit_col, prospective_col, _ = frozen_columns(rule)
    rows = []
    k = t[t["outcome"].isin(["pass", "fail"]) & t[admit_col].notna()]
    for split, m in (("prospective", k[prospective_col]), ("fitted_on", ~k[prospective_col].astype(bool))):
        c = k[m.astype(bool)]
        passed = c["outcome"] == "pass"
        rules = [("frozen_rule", c[admit_col] == 1.0)] + ([("paper_rule", c["admit"].astype(bool)),
                                                           ("admit_all", pd.Series(True, index=c.index))]
                                                          if split == "prospective" else [])
        for name, admit in rules:
            agree = admit == passed
            rows.append({"statistic": name, "split": split, "student": "all", "n": len(c),
                         "n_agree": int(agree.sum()), "accuracy": float(agree.mean()) if len(c) else float("nan"),
                         "spearman": float("nan"), "n_pass": int(passed.sum()),
                         **({"chosen": rule.statistic, "sign": rule.cut_at[0], "threshold": rule.cut_at[1]}
                            if name == "frozen_rule" else {}), "rule": rule.name})
    return pd.DataFrame(rows)


def main(inp, out, params):
    step0 = pd.concat([store.read_table(f) for f in inp.stats], ignore_index=True)
    statistics = list(stats.PREDICTORS)
    t = with_fitted_rule(candidates(step0, store.read_table(inp.admission), store.read_table(inp.verdicts)),
                         statistics)
    parts = [fixed_rules(t), stats.predictor_record(t, statistics)]
    for written in getattr(params, "frozen_rules", None) or ():
        rule = FrozenRule.of(written)
        t = with_frozen_rule(t, rule)
        parts.append(frozen_record(t, rule))
    record = pd.concat(parts, ignore_index=True)
    derived.write_table(t, out.table)
    derived.write_table(record, out.record)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
