"""`python -m opd.cli verdict ROW`, the admission check's decision line, the verdict lines at the end of a
`snakemake` run, and the budget figure's row labels, on the toy experiment's committed results (nothing is trained;
the toy named wherever the default experiment would be read)."""
import json
import re
import subprocess
import sys

import matplotlib
import pandas as pd
import pytest
import yaml

from conftest import ROOT, TOY, planned, planned_runs
from opd import cli, config as C, scorecard, stats, verdict as V

matplotlib.use("Agg")
ANALYSIS = ROOT / "results/toy/analysis"


def verdict_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "opd.cli", "verdict", "--experiment", TOY, *args], cwd=cwd,
                          capture_output=True, text=True)


def toy_cfg() -> dict:
    """config.yaml with the toy experiment selected."""
    return {**C.load(), "experiment": TOY}


def pct(x):
    return f"{100 * x:+.1f}%"


@pytest.mark.parametrize("row", ["nvfp4", "fp8w"])
def test_verdict_on_the_committed_results(row):
    """Every number printed is the analysis files' own: D, Delta and both intervals (verdicts.parquet), where the row
    lies against each mechanism's edge (edges.parquet) and D_hat +- SE with the decision (admission.parquet)."""
    r = verdict_cli(row)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    v = pd.read_parquet(ANALYSIS / "verdicts.parquet")
    e = pd.read_parquet(ANALYSIS / "edges.parquet")
    a = pd.read_parquet(ANALYSIS / "admission.parquet")
    cfg = toy_cfg()
    students = next(x for x in C.rows(cfg) if x.name == row).students_or(next(iter(cfg["experiments"]["toy"]["students"])))
    blocks = out.split("\n\n")
    assert len(blocks) == len(students)
    for s, block in zip(students, blocks):
        assert block.startswith(f"{row} on {s} ")
        rec = v[(v.student == s) & (v.config == row)].iloc[0]
        assert f"D = {rec.D:.3g} nats/token, Δ = {pct(rec.delta)} against {rec.reference}" in block
        assert re.search(rf"paper's rule .*\[{re.escape(pct(rec.ci_lo))}, {re.escape(pct(rec.ci_hi))}\]: {rec.verdict}", block)
        assert re.search(rf"seed-aware rule .*\[{re.escape(pct(rec.ci_lo_seeds))}, {re.escape(pct(rec.ci_hi_seeds))}\]: "
                         rf"{rec.verdict_seeds}", block)
        assert f"  edges of {s} at τ = 20%, one per mechanism (seed-aware rule):" in block
        mine = e[(e.student == s) & (e.tau == 0.2) & (e.rule == "seeds")]
        assert len(mine) >= 2 and all(f"    {scorecard.edge_place(rec.D, x)}\n" in block for x in mine.itertuples())
        assert "budget of" not in block and "budget: none" not in block
        adm = a[(a.student == s) & (a.config == row)].iloc[0]
        assert f"D̂ = {adm.d_hat:.3g} ± {adm.se:.3g} (16 prompts)" in block
        assert (": admit " if adm.admit else ": reject ") in block
        step0 = pd.read_parquet(ANALYSIS / "predictor_stats.parquet").set_index(["student", "config"]).loc[(s, row)]
        rule = stats.fitted_rule_of(pd.read_parquet(ANALYSIS / "predictors.parquet"))
        line = next(ln for ln in block.splitlines() if ln.startswith("  fitted rule (beyond the paper): "))
        assert f"= {step0[rule.statistic]:.3g}, admitted iff {rule.cut}: " in line
        assert f"fitted without this candidate: {'admit' if step0.fitted_admit == 1 else 'reject'}" in line
        for frozen in V.experiment_of(cfg).frozen_rules:  # config.yaml's: fitted on some candidates, not others
            line = next(ln for ln in block.splitlines()
                        if ln.startswith(f"  frozen rule {frozen.name} (config.yaml; beyond the paper): "))
            assert (f"= {step0[frozen.statistic]:.3g}, admitted iff {stats.Threshold.of(frozen).cut}: "
                    f"{'admit' if step0[f'frozen_admit.{frozen.name}'] == 1 else 'reject'} "
                    f"({'prospective' if frozen.prospective(s, row) else 'fitted on this candidate'}") in line
        assert "missing: nothing" in block


def test_verdict_says_in_words_where_a_row_lies_against_each_edge():
    """nvfp4 on qwen-s: its D below the fixed-noise edge's interval (within), above the staleness edge's (beyond);
    a row's D inside an edge's interval is undecided; without edges the student's B_emp is said instead."""
    out = verdict_cli("nvfp4", "--student", "qwen-s").stdout
    e = pd.read_parquet(ANALYSIS / "edges.parquet").query("student == 'qwen-s' and rule == 'seeds'").set_index("mechanism")
    D = pd.read_parquet(ANALYSIS / "verdicts.parquet").query("student == 'qwen-s' and config == 'nvfp4'").D.iloc[0]
    fixed, stale = e.loc["noise_fixed"], e.loc["staleness"]
    assert D < fixed.D_lo and D > stale.D_hi  # what the committed results say, read from them
    assert (f"within the fixed-noise edge (D {scorecard.g(D)} < edge {scorecard.g(fixed.D_edge)} "
            f"[{scorecard.g(fixed.D_lo)}, {scorecard.g(fixed.D_hi)}])") in out
    assert f"beyond the staleness edge (D {scorecard.g(D)} > edge {scorecard.g(stale.D_edge)} [" in out
    noisy = verdict_cli("noise-15", "--student", "qwen-s").stdout  # its D inside the fixed-noise edge's interval
    assert "inside the fixed-noise edge's interval: undecided (D " in noisy
    exp = V.experiment_of(toy_cfg())
    sv = V.row_verdicts(toy_cfg(), "nvfp4", "qwen-s")[0]
    without = V.render(exp, V.StudentVerdict(**{**sv.__dict__, "edges": ()}))
    assert "edges of" not in without and "budget of qwen-s at τ = 20% (both rules): none (a fail at D" in without


def test_a_reference_rows_verdict_is_labelled_as_a_reference_rows():
    """lr3e-5-k0 trains at its own learning rate: its "fail" against the baseline is the learning rate's, and every
    verdict line says it is a reference row's."""
    r = verdict_cli("lr3e-5-k0")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "95% interval" in ln]
    assert len(lines) == 2 and all(ln.endswith("(a reference row: its own learning rate (3e-05))") for ln in lines)
    assert "reference row" not in verdict_cli("nvfp4").stdout


def test_verdict_of_a_row_without_results_names_what_is_missing(toy_clone, tmp_path):
    """A row just added: no runs, no admission check, no analysis of it; each with the target that makes it
    (the training target is a real one: a dry run in a fresh clone plans exactly that row's runs)."""
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    cfg = {**yaml.safe_load((ROOT / "config.yaml").read_text()), "experiment": TOY}  # the clone's too
    cfg["experiments"]["toy"]["rows"].append({"name": "nvfp4-kv-l0", "weights": "nvfp4", "kv_cache": "fp8_e4m3",
                                              "bf16_layers": [0]})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    r = verdict_cli("nvfp4-kv-l0", "--config", str(path))
    assert r.returncode == 0, r.stderr
    targets = re.findall(r"`snakemake -c 2 (\S+)`", r.stdout)
    assert "training not run yet (3 of 3 runs: nvfp4-kv-l0.qwen-s.s0, nvfp4-kv-l0.qwen-s.s1, " in r.stdout
    assert targets == ["results/toy/analysis/verdicts.parquet", "results/toy/admission/nvfp4-kv-l0.qwen-s.parquet",
                       "results/toy/predictors/nvfp4-kv-l0.qwen-s.parquet"]
    assert "admission check not run" in r.stdout and "D =" not in r.stdout
    (clone / "config.yaml").write_text(path.read_text())
    assert planned_runs(planned(clone, "-c", "2", targets[0])) == {f"nvfp4-kv-l0.qwen-s.s{i}" for i in range(3)}
    # with its spec file's writer (rule job_spec), and the student's base models first: the toy commits their
    # base.json, not their weights, so a measurement that must run has them retrained (and checked against the pin)
    jobs = planned(clone, "-c", "2", targets[1])
    assert sorted(jobs) == [("admission", "row=nvfp4-kv-l0, student=qwen-s"), ("base_models", "base=qwen-s"),
                            ("job_spec", "kind=admission, name=nvfp4-kv-l0.qwen-s")]
    assert sorted(planned(clone, "-c", "2", targets[2])) == [("base_models", "base=qwen-s"),
                                                             ("job_spec", "kind=predictors, name=nvfp4-kv-l0.qwen-s"),
                                                             ("predictor_stats", "row=nvfp4-kv-l0, student=qwen-s")]


def test_verdict_refuses_unknown_rows_and_students():
    r = verdict_cli("nvfp")
    assert r.returncode == 2 and "has no row 'nvfp'; did you mean 'nvfp4'" in r.stderr and "Traceback" not in r.stderr
    r = verdict_cli("kv-e5m2-l0-last", "--student", "llama-s")
    assert r.returncode == 2 and "does not run student 'llama-s'; it runs qwen-m" in r.stderr


def test_a_changed_and_a_new_verdict_each_get_one_line(tmp_path, monkeypatch):
    """`announce` at the end of a run: one line per row whose verdict is new or changed since the record (an
    unchanged row says nothing), and the record is written for the next run."""
    monkeypatch.chdir(ROOT)
    cfg = toy_cfg()
    now = V.seen(cfg, "toy")
    assert now["noise-15"]["qwen-s"]["paper"] == "fail"
    old = json.loads(json.dumps(now))
    old["noise-15"]["qwen-s"]["paper"] = "pass"  # the last run saw it pass
    del old["fp8w"]  # and had no fp8w yet
    monkeypatch.setattr(V, "state_path", lambda experiment: tmp_path / f"verdicts-{experiment}.json")
    lines = V.announce(cfg, "toy", old, stream=sys.stdout)
    assert len(lines) == 2
    changed = next(x for x in lines if x.startswith("verdict of noise-15:"))
    assert "qwen-s: changed: pass (paper's rule)" in changed and "-> fail (paper's rule)" in changed
    new = next(x for x in lines if x.startswith("verdict of fp8w:"))
    assert all(f"{s}: new: D = " in new for s in ("qwen-s", "qwen-m", "llama-s"))
    assert json.loads((tmp_path / "verdicts-toy.json").read_text()) == json.loads(json.dumps(now))
    assert V.changes(now, now) == []  # nothing new: silent
    assert V.before(cfg, "toy") == json.loads(json.dumps(now))  # the next run compares with this record


def test_admission_summary_line_is_the_analysis_decision(capsys, monkeypatch, tmp_path):
    """The admission job's decision line computes D_hat +- SE as the analysis does, from the check's own file, against
    the line the DAG writes for the experiment (opd.dag.admission_line_path); without that file it prints nothing."""
    from opd import dag
    from opd.spec import AdmissionSpec, Experiment
    cfg = toy_cfg()
    line_file = tmp_path / "admission-line-toy.json"
    monkeypatch.setattr(dag, "admission_line_path", lambda experiment: str(line_file))
    spec = AdmissionSpec.from_json(json.loads((ROOT / "results/toy/_jobs/admission/nvfp4.qwen-s.json").read_text()))
    out = ROOT / "results/toy/admission/nvfp4.qwen-s.parquet"
    cli.admission_summary(spec, out)
    assert capsys.readouterr().err == ""  # no line file: nothing to decide against
    line_file.write_text(json.dumps(dag.admission_line(Experiment.of(cfg, "toy"))))
    cli.admission_summary(spec, out)
    err = capsys.readouterr().err
    adm = pd.read_parquet(ANALYSIS / "admission.parquet").query("config == 'nvfp4' and student == 'qwen-s'").iloc[0]
    assert err.startswith(f"admission nvfp4.qwen-s: D̂ = {adm.d_hat:.3g} ± {adm.se:.3g} (16 prompts) against the line")
    assert ": admit (" in err if adm.admit else ": reject (" in err


def test_highlight_is_validated():
    cfg = toy_cfg()  # a highlight names a row of the selected experiment
    cfg["highlight"] = "nvfp"
    with pytest.raises(C.ConfigError, match="field 'highlight': experiment 'toy' has no row 'nvfp'; did you mean 'nvfp4'"):
        C.validate(cfg)
    cfg["highlight"] = ["nvfp4", "fp8w"]
    C.validate(cfg)
    assert C.highlighted(cfg) == ("nvfp4", "fp8w")


def test_budget_figure_names_the_edge_rows_and_the_highlighted_ones():
    sys.path.insert(0, str(ROOT / "workflow/scripts"))
    import figure_budget as F
    from opd import report
    from opd.store import read_table
    v = read_table(ANALYSIS / "verdicts.parquet")
    b = read_table(ANALYSIS / "budget.parquet")
    rows = report.rows_frame(ANALYSIS / "rows.parquet")
    v = v.merge(rows[rows["in_budget"]][["name", "family"]], left_on="config", right_on="name")
    q = v[v.student == "qwen-s"]
    bt = b[(b.student == "qwen-s") & (b.rule == "seeds") & (b.tau == 0.2)].iloc[0]
    # the toy's qwen-s has no budget (a fail below a pass): every row from the smallest fail to the largest pass
    assert bt.hi < bt.lo
    expected = set(q.loc[(q.D >= bt.hi) & (q.D <= bt.lo), "config"])
    assert set(F.edge_rows(q, "verdict_seeds", bt.lo, bt.hi)) == expected and len(expected) >= 2
    fig, ax = report.figure()
    F.panel(ax, q, b, 0.2, "qwen-s", None, highlight=("fp8w",))
    texts = {t.get_text(): t for t in ax.texts}
    assert set(texts) == expected | {"fp8w"}
    assert texts["fp8w"].get_fontweight() == "bold"
    # a consistent budget (llama-s's fixed-direction noise rows alone: its redrawn noise and its 4-bit
    # weights-and-activations engine pass above their fails): the largest pass and the smallest fail only
    ll = v[(v.student == "llama-s") & v.config.str.match(r"(noise|edge)-") & ~v.config.str.endswith("-redraw")]
    bl = stats.budget_interval(ll, 0.2, "seeds")
    assert bl.lo < bl.hi
    assert set(F.edge_rows(ll, "verdict_seeds", bl.lo, bl.hi)) == set(ll.loc[ll.D.isin([bl.lo, bl.hi]), "config"])
    assert len(F.edge_rows(ll, "verdict_seeds", bl.lo, bl.hi)) == 2


def test_a_changed_row_is_named_and_its_old_verdict_not_given(tmp_path):
    cfg = {**yaml.safe_load((ROOT / "config.yaml").read_text()), "experiment": TOY}
    next(r for r in cfg["experiments"]["toy"]["rows"] if r["name"] == "fp8w")["weights"] = "fp8_block"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    r = verdict_cli("fp8w", "--student", "qwen-s", "--config", str(path))
    assert r.returncode == 2 and r.stdout == ""  # the old row's verdict is not given as this row's
    assert "the row changed since the analysis (weights)" in r.stderr
    assert "3 run(s) computed from another spec than the config asks for now (fp8w.qwen-s.s0" in r.stderr
    assert "`snakemake -c 2 results/toy/analysis/verdicts.parquet`" in r.stderr


def test_snakemake_ends_with_the_changed_verdicts_line(toy_clone, monkeypatch):
    """The Snakefile's onsuccess, in a real run that trains nothing (a fresh clone reruns its analysis): against
    a record in which noise-15 passed on qwen-s, the run's last lines name that row's changed verdict, and only it."""
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    state = clone / ".snakemake/opd/verdicts-toy.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(clone)  # the record is of the clone's analysis files, read as Snakemake reads them
    record = V.seen(C.load(clone / "config.yaml"), "toy")
    record["noise-15"]["qwen-s"]["paper"] = "pass"
    state.write_text(json.dumps(record))
    r = subprocess.run([sys.executable, "-m", "snakemake", "-c", "2", "results/toy/analysis/verdicts.parquet"],
                       cwd=clone, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.startswith("verdict of ")]
    assert len(lines) == 1 and lines[0].startswith("verdict of noise-15: qwen-s: changed: pass (paper's rule)")
    assert json.loads(state.read_text())["noise-15"]["qwen-s"]["paper"] == "fail"  # recorded for the next run


def test_compare_names_a_regeneration_that_left_a_row_outside_its_interval(tmp_path):
    """`opd.cli compare` of the committed verdicts with themselves (as a git revision's file and as a results
    directory) agrees on every row and exits 0; a regeneration whose Delta left one row's interval is named with
    both Deltas and exits 1; a side that is none of the three kinds exits 2 naming it."""
    def compare(*args):
        return subprocess.run([sys.executable, "-m", "opd.cli", "compare", *args], cwd=ROOT, capture_output=True,
                              text=True)
    v = pd.read_parquet(ANALYSIS / "verdicts.parquet")
    own = v[v["config"] != v["reference"]]
    r = compare("HEAD:results/toy/analysis/verdicts.parquet", "results/toy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith(f"{len(own)} rows in both: {len(own)} same verdict; ")
    row = own[own["ci_hi_seeds"].notna()].iloc[0]
    moved = v.copy()
    moved.loc[row.name, "delta"] = row["ci_hi_seeds"] + 0.5
    moved.to_parquet(tmp_path / "verdicts.parquet")
    r = compare("results/toy", str(tmp_path / "verdicts.parquet"))
    assert r.returncode == 1
    assert f"  {row['student']} {row['config']}: " in r.stdout and "outside the first's interval" in r.stdout
    assert pct(row["ci_hi_seeds"] + 0.5) in r.stdout
    r = compare("results/toy", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "nothing: no such file or results directory" in r.stderr
