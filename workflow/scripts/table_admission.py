"""Paper Table 7: the admission record: offline decision (D_hat ± its bootstrap SE over prompts) against
training outcome; the standard engine is listed but is not a decision. Where the step-0 statistics exist (tiny
backend: rule predictors), a second rule beside the paper's: the fitted rule's held-out decision per candidate."""
import json

import pandas as pd

from opd import report, scripts, stats, store


def with_fitted(rec: pd.DataFrame, step0: pd.DataFrame) -> pd.DataFrame:
    """The admission record with the fitted rule's held-out decision and its agreement per candidate (predictors
    stage: workflow/scripts/predictors.py); the standard engine gets none."""
    f = step0[["student", "config", "fitted_admit", "fitted_agrees"]]
    return rec.merge(f, on=["student", "config"], how="left").assign(
        fitted_admit=lambda t: t["fitted_admit"].map({1.0: True, 0.0: False}),
        fitted_agrees=lambda t: t["fitted_agrees"].map({1.0: True, 0.0: False}))


def with_frozen(rec: pd.DataFrame, step0: pd.DataFrame, name: str) -> pd.DataFrame:
    """The admission record with one frozen rule's decision per candidate, column `frozen.<name>`: "admit"/"reject",
    marked "(prospective)" where the rule was fixed before the candidate's runs."""
    admit, prospective = f"frozen_admit.{name}", f"prospective.{name}"
    t = rec.merge(step0[["student", "config", admit, prospective]], on=["student", "config"], how="left")
    word = t[admit].map({1.0: "admit", 0.0: "reject"})
    return t.assign(**{f"frozen.{name}": word.where(word.isna() | ~t[prospective].fillna(False).astype(bool),
                                                    word + " (prospective)")}).drop(columns=[admit, prospective])


def fitted_note(rule: stats.FittedRule) -> str:
    return (f" Fitted rule (beyond the paper; tiny backend): admit iff {rule.label}, the statistic and its cut "
            f"chosen for the most agreement over every candidate with an outcome ({rule.n_agree} of {rule.n} in "
            f"sample). Its column is each candidate's held-out decision: the statistic chosen and cut fitted without "
            f"that candidate, which agrees with training on {rule.n_agree_held_out} of {rule.n_held_out} "
            f"({rule.n_agree_held_out / rule.n_held_out:.0%}); a candidate without a training outcome gets the rule "
            f"fitted on all, and one without the statistic none.")


def main(inp, out, params):
    rec = store.read_table(inp.admission)
    s = json.loads(open(inp.admission_summary).read())
    rule = stats.fitted_rule_of(store.read_table(inp.predictors)) if hasattr(inp, "predictors") else None
    t = rec.assign(engine=rec["candidate"].map({True: "candidate", False: "standard (not a decision)"}))
    cols = ["student", "config", "engine", "d_hat", "se", "n_prompts", "n_sequences", "admit", "D", "ratio", "outcome",
            "agrees"]
    tests = stats.prospective_tests_of(store.read_table(inp.predictors)) if hasattr(inp, "predictors") else ()
    if rule is not None:
        t, cols = with_fitted(t, store.read_table(inp.predictor_stats)), cols + ["fitted_admit", "fitted_agrees"]
    for test in tests:
        t, cols = with_frozen(t, store.read_table(inp.predictor_stats), test.name), cols + [f"frozen.{test.name}"]
    t = t[cols].rename(columns={"d_hat": "offline D̂", "se": "SE of D̂", "n_prompts": "prompts",
                                "n_sequences": "sequences", "D": "in-training D", "ratio": "D / D̂",
                                "admit": "admit (paper)", "agrees": "agrees (paper)",
                                "fitted_admit": "admit (fitted, held out)", "fitted_agrees": "agrees (fitted)",
                                **{f"frozen.{x.name}": f"frozen rule {x.name}" for x in tests}})
    a, L = rec["alpha"].iloc[0], rec["L"].iloc[0]
    n = s["n_decisions"]
    notes = (f"Paper's rule: admit iff {a:g} × D̂ < {L:g}. {s['n_agree']} of {n} candidate decisions match the "
             f"training outcome ({s['n_agree'] / n:.0%}); admitting every candidate would match "
             f"{s['n_admit_all_agree']} of {n} ({s['n_admit_all_agree'] / n:.0%}). The standard engine "
             f"({s['n_baseline']} rows) is not a decision. SE: bootstrap over prompts; among candidates with "
             f"D̂ ≥ {s['ratio_floor']:g} it is {s['se_relative_min']:.0%}-{s['se_relative_max']:.0%} of D̂. Implied α "
             f"(largest D/D̂ with D̂ ≥ {s['ratio_floor']:g}): {s['alpha_implied']:.3g}; retrospective L (largest "
             f"passing D): {s['L_retrospective']:.3g}.") if n else "No candidate engine has a training outcome."
    if n and rule is not None:
        notes += fitted_note(rule)
    for test in tests if n else ():
        notes += (f" Frozen rule {test.name} (config.yaml; beyond the paper): admit iff {test.label}, fixed after "
                  f"fitting on {test.n_fitted_on} candidates; a candidate marked prospective was decided before its "
                  f"runs, and {test.n_agree} of {test.n} such decisions match training.")
    report.save_table(t, out.md, out.tex, inp, caption="Admission record", digits=4, notes=notes)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
