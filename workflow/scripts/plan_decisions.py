"""An adaptive plan's decisions (opd.plan.decisions_path), from the runs in scope: the record a fresh clone's DAG
reads back instead of recomputing each decision (keyed on the runs' content and the rule, as the DAG's own memo)."""
from pathlib import Path

from opd import derived, scripts, store
from opd import plan as P
from opd.spec import Experiment


def main(inp, out, params):
    e = Experiment.of({"experiment": params.name, "experiments": {params.name: params.experiment}})
    runs = {Path(p).parent.name for p in inp.steps}  # the runs the DAG found current, as the analysis reads them
    results = P.Results(params.out, usable=runs.__contains__)
    P.planned(e, results)
    store.write_json(derived.rounded_json({k: v for k, v in results.memo.items() if k in results.used}), out[0])


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
