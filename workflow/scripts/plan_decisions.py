"""An adaptive plan's decisions (opd.plan.decisions_path), each computed afresh from the runs the DAG's own plan
reads (every sound, current run on disk, opd.plan.checked_plan): the record a fresh clone's DAG reads back instead
of recomputing them (keyed on the runs' content and the rule, as the DAG's own memo)."""
from opd import derived, scripts, store
from opd import plan as P
from opd.spec import Experiment, results_dir


def main(inp, out, params):
    e = Experiment.of({"experiment": params.name, "experiments": {params.name: params.experiment}})
    plan = P.checked_plan(e, results_dir(e.name), memo=False)  # the results the DAG's plan reads
    store.write_json(derived.rounded_json(plan.decisions), out[0])


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
