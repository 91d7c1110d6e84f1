"""Which offline statistic predicts training: every candidate engine's step-0 statistics (rule predictor_stats) beside
its admission estimate (D_hat, SE, the paper's decision) and its training outcome (the paper's verdict, as the
admission record judges) and Delta; then each statistic's held-out agreement with training and rank correlation with
Delta (opd.stats.predictor_record), with the paper's fixed rule and "admit every candidate" as split `fixed`."""
import pandas as pd

from opd import derived, scripts, stats, store


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


def main(inp, out, params):
    step0 = pd.concat([store.read_table(f) for f in inp.stats], ignore_index=True)
    t = candidates(step0, store.read_table(inp.admission), store.read_table(inp.verdicts))
    record = pd.concat([fixed_rules(t), stats.predictor_record(t, list(stats.PREDICTORS))], ignore_index=True)
    derived.write_table(t, out.table)
    derived.write_table(record, out.record)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
