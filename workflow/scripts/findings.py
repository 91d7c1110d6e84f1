"""Writes findings.md: the toy paper's findings as sentences, every number computed from the analysis files
(opd.findings; the claims scorecard that opens it, opd.scorecard)."""
import json

from opd import report, scripts, store
from opd.findings import findings


def main(inp, out, params):
    tables = {k: store.read_table(getattr(inp, k)) for k in ("verdicts", "budget", "noise", "null_deltas",
                                                            "staleness_lr", "heldout", "rl")}
    rows = report.rows_frame(inp.rows)
    admission = json.loads(open(inp.admission_summary).read()) | {"alpha": params.alpha, "L": params.L}
    probes = (store.read_table(inp.probes), store.read_table(inp.probes_prefix)) if hasattr(inp, "probes") else None
    text = findings(tables["verdicts"], tables["budget"], tables["noise"], tables["null_deltas"],
                    tables["staleness_lr"], tables["heldout"], rows, admission, tables["rl"], params.tau,
                    params.baseline, params.primary,
                    store.read_table(inp.kv_attribution) if hasattr(inp, "kv_attribution") else None,
                    probes=probes, guard=store.read_table(inp.guard) if hasattr(inp, "guard") else None,
                    rl_thresholds=getattr(params, "rl_collapse", {}),
                    edge=store.read_table(inp.edge) if hasattr(inp, "edge") else None,
                    decides=store.read_table(inp.decides) if hasattr(inp, "decides") else None,
                    predictors=store.read_table(inp.predictors) if hasattr(inp, "predictors") else None,
                    predictor_stats=store.read_table(inp.predictor_stats) if hasattr(inp, "predictor_stats") else None,
                    draws=store.read_table(inp.draws) if hasattr(inp, "draws") else None,
                    student_specs=getattr(params, "students", None),
                    edges=store.read_table(inp.edges) if hasattr(inp, "edges") else None,
                    edge_ratios=store.read_table(inp.edge_ratios) if hasattr(inp, "edge_ratios") else None,
                    steps=store.read_table(inp.steps) if hasattr(inp, "steps") else None)
    store.atomic_write(out.md, lambda tmp: open(tmp, "w").write(text))
    report.input_sidecar(out.md, list(inp))


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
