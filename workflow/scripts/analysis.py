"""Verdicts, budget, admission record and the RL contrast, from the runs' Parquet files alone."""
import pandas as pd

from opd import stats, store
from opd.report import engine_key


def rl_table(rows: pd.DataFrame, steps: pd.DataFrame, heldout: pd.DataFrame, verdicts: pd.DataFrame) -> pd.DataFrame:
    """Each RL run against the same algorithm on the standard engine, next to OPD under that engine.
    Collapse (fixed in advance, as in the paper): held-out accuracy at least 5 points below the
    standard-engine run of the same algorithm."""
    rows = rows.assign(key=[engine_key(r) for r in rows.to_dict("records")])
    standard = engine_key({"weights": "none", "kv_cache": "none", "bf16_layers": [], "staleness": 0, "noise_sigma": 0.0})
    acc = heldout.groupby(["student", "config", "step"])["correct"].mean().reset_index()
    final = stats.final_heldout(heldout).groupby(["student", "config"])["correct"].mean()
    ent = steps.groupby(["student", "config"])["entropy"].agg(["first", "last"])
    D = stats.run_mismatch(steps).set_index(["student", "config"])["D"]
    out = []
    for r in rows[rows["algorithm"] != "opd"].to_dict("records"):
        for student in sorted(heldout.loc[heldout["config"] == r["name"], "student"].unique()):
            has_student = rows["name"].isin(heldout.loc[heldout["student"] == student, "config"])
            ref = rows[has_student & (rows["algorithm"] == r["algorithm"]) & (rows["variant"] == "none")
                       & (rows["key"] == standard)]
            opd = rows[has_student & (rows["algorithm"] == "opd") & (rows["variant"] == "none") & (rows["key"] == r["key"])]
            ref_name = ref["name"].iloc[0] if len(ref) else None
            opd_name = opd["name"].iloc[0] if len(opd) else None
            v = verdicts.set_index(["student", "config"])
            a0 = acc[(acc["config"] == r["name"]) & (acc["student"] == student)].sort_values("step")["correct"].iloc[0]
            change = 100 * (final[(student, r["name"])] - final[(student, ref_name)]) if ref_name else float("nan")
            out.append({
                "student": student, "config": r["name"], "algorithm": r["algorithm"], "variant": r["variant"],
                "reference": ref_name, "opd_config": opd_name, "D": D[(student, r["name"])],
                "accuracy_initial": 100 * a0, "accuracy_final": 100 * final[(student, r["name"])],
                "accuracy_change": change,
                "entropy_ratio": ent.loc[(student, r["name"]), "last"] / ent.loc[(student, r["name"]), "first"],
                "collapsed": bool(change <= -5) if ref_name and ref_name != r["name"] else False,
                "opd_delta": v["delta"].get((student, opd_name), float("nan")) if opd_name else float("nan"),
                "opd_verdict": v["verdict"].get((student, opd_name), None) if opd_name else None,
            })
    return pd.DataFrame(out)


def main(inp, out, params):
    steps = pd.concat([store.read_table(p) for p in inp.steps], ignore_index=True)
    heldout = pd.concat([store.read_table(p) for p in inp.heldout], ignore_index=True)
    store.write_table(steps, out.steps, store.STEPS)
    store.write_table(heldout, out.heldout, store.HELDOUT)
    rows = pd.DataFrame(params.rows)
    rows["bf16_layers"] = rows["bf16_layers"].map(list)
    store.write_table(rows, out.rows)

    b = params.bootstrap
    opd = rows.loc[rows["algorithm"] == "opd", "name"]
    v = stats.verdicts(heldout[heldout["config"].isin(opd)], steps[steps["config"].isin(opd)], params.baseline,
                       tau=params.tau, n_boot=b["resamples"], ci=b["level"], seed=b["seed"])
    store.write_table(v, out.verdicts)
    engines = rows.loc[(rows["algorithm"] == "opd") & (rows["variant"] == "none"), "name"]
    store.write_table(stats.budget_table(v[v["config"].isin(engines)], params.taus), out.budget)

    a = params.admission
    adm = pd.concat([store.read_table(p) for p in inp.admission], ignore_index=True)
    record = stats.admission_record(adm, v, a["alpha"], a["L"])
    store.write_table(record, out.admission)
    store.write_json(stats.admission_summary(record, a.get("ratio_floor", 0.01)), out.admission_summary)
    store.write_table(rl_table(rows, steps, heldout, v), out.rl)


if "snakemake" in globals():
    main(snakemake.input, snakemake.output, snakemake.params)  # noqa: F821
