"""The bisected edges (opd.plan), from the analysis's tables alone: every value each edge tried on each student, in
order, with its seeds, its seed-aware verdict and D, the bracket after it, and beside them the same student's
budget at tau from the experiment's own grid on the same axis (the baseline and its budget rows whose engine is the
edge's but for the edge's field, opd.plan.axis_rows: for a noise_sigma edge the fixed-direction noise rows), under the
same seed-aware rule, so that the bisected edge can be read against the grid's."""
import numpy as np
import pandas as pd

from opd import derived, scripts, stats, store
from opd import plan as P
from opd.spec import Experiment


def grid_budget(verdicts: pd.DataFrame, e: Experiment, edge) -> pd.DataFrame:
    """Per student, the seed-aware budget [grid_lo, grid_hi] at tau over the grid on `edge`'s axis (opd.plan.axis_rows:
    the baseline and the budget rows no edge made on the same axis), with their numbers of rows, runs and fails."""
    grid = [r.name for r in P.axis_rows(e, edge)]
    out = []
    for student, v in verdicts[verdicts["config"].isin(grid)].groupby("student"):
        lo, hi = stats.budget_interval(v, e.tau, "seeds")
        f = stats.rule_fails(v, e.tau, "seeds")
        out.append({"student": student, "grid_lo": lo, "grid_hi": hi, "grid_rows": len(v),
                    "grid_runs": int(v["n_runs"].sum()), "grid_fails": int((f == True).sum())})  # noqa: E712
    return pd.DataFrame(out, columns=["student", "grid_lo", "grid_hi", "grid_rows", "grid_runs", "grid_fails"])


def main(inp, out, params):
    e = Experiment.of({"experiment": params.name, "experiments": {params.name: params.experiment}})
    results = P.Given.of_frames(store.read_table(inp.heldout), store.read_table(inp.steps))
    edges = P.edges_frame(P.planned(e, results))
    verdicts = store.read_table(inp.verdicts)
    grids = pd.concat([grid_budget(verdicts, e, x).assign(edge=x.name) for x in e.edges], ignore_index=True)
    table = edges.merge(grids, on=["edge", "student"], how="left")
    table["grid_edge"] = np.sqrt(table["grid_lo"] * table["grid_hi"])  # NaN where the grid has no pass or no fail
    derived.write_table(table, out[0])


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
