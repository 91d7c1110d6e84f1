"""Every figure and table renders from a small Parquet fixture, through the same scripts Snakemake runs."""
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from opd import outputs as O
from opd import findings, provenance, report, scorecard, stats, store
from opd.rows import Row
from helpers import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "workflow" / "scripts"
ROWS = [{"name": "bf16", "baseline": True}, {"name": "fp8w", "weights": "fp8_tensor"},
        {"name": "kv", "kv_cache": "fp8_e4m3"}, {"name": "k2", "staleness": 2}, {"name": "n1", "noise_sigma": 0.1},
        {"name": "n3", "noise_sigma": 0.3}, {"name": "n3-tis", "noise_sigma": 0.3, "variant": "tis"},
        {"name": "rl-bf16", "algorithm": "reinforce"}, {"name": "rl-n1", "algorithm": "reinforce", "noise_sigma": 0.1},
        {"name": "k0-lo", "lr": 3e-5}, {"name": "k2-lo", "lr": 3e-5, "staleness": 2, "reference": "k0-lo"},
        {"name": "n1-guard", "noise_sigma": 0.1, "guard": {"d_max": 0.01, "window": 3, "action": "fallback",
                                                           "cooldown": 5}}]
D = {"bf16": 1e-4, "fp8w": 2e-3, "kv": 5e-3, "k2": 1e-3, "n1": 0.05, "n3": 0.6, "n3-tis": 0.6, "rl-bf16": 1e-4,
     "rl-n1": 0.05, "k0-lo": 1e-4, "k2-lo": 1e-3, "n1-guard": 0.02}
SCALE = {"n3": 1.6, "n3-tis": 1.7, "rl-n1": 1.4, "k0-lo": 1.3, "k2-lo": 1.3 * 1.05}
SEEDS = {"bf16": 4, "n1": 3, "n3": 3, "k0-lo": 2, "k2-lo": 2, "n1-guard": 3}  # one seed elsewhere
GUARD_SPAN = np.arange(20) % 10 >= 4  # a guarded row's steps on the fallback (two activations)


class Files(list):
    """What Snakemake hands a script as snakemake.input / snakemake.output: a list with names."""

    def __init__(self, items=(), **named):
        super().__init__(list(items) + [v for vs in named.values() for v in (vs if isinstance(vs, list) else [vs])])
        self.__dict__.update(named)


load = load_script  # a script of workflow/scripts/ by its name (helpers.load_script)


def make_runs(d: Path, rows=ROWS):
    rng = np.random.default_rng(0)
    n = 60
    base_kl = rng.gamma(2.0, 0.1, n)
    steps_files, held_files, adm_files = [], [], []
    for r, seed in ((r, s) for r in rows for s in range(SEEDS.get(r["name"], 1))):
        name, rid = r["name"], f"{r['name']}.m.s{seed}"
        run_scale = rng.lognormal(0, 0.02)  # run-to-run noise
        st = pd.DataFrame({"run_id": rid, "config": name, "student": "m", "seed": seed, "step": np.arange(20),
                           "d_n": D[name] * rng.lognormal(0, 0.1, 20), "seq_logratio_p90": 0.01,
                           "n_tokens": 500, "trained_tokens": 500, "step_s": 0.1, "rollout_s": 0.05, "teacher_s": 0.01,
                           "train_s": 0.04, "weight_sync_s": 0.001, "wait_s": 0.05 if not r.get("staleness") else 0.01,
                           "staleness": r.get("staleness", 0), "policy_version": np.arange(20),
                           "engine_version": np.maximum(0, np.arange(20) - r.get("staleness", 0)), "loss": 0.1,
                           "grad_norm": 1.0, "entropy": np.linspace(0.5, 0.4, 20), "response_len_mean": 20.0,
                           "reward_mean": 0.5, "engine": "row", "guard_active": False,
                           "rejected_d_n": np.nan})
        if "guard" in r:
            st = st.assign(guard_active=GUARD_SPAN, engine=np.where(GUARD_SPAN, r["guard"]["action"], "row"),
                           step_s=np.where(GUARD_SPAN, 0.12, 0.1))
        frames = []
        for step, f in ((0, 2.0), (10, 1.4), (20, 1.0)):
            kl = base_kl * f * (SCALE.get(name, 1.0) * run_scale if step else 1.0) * rng.lognormal(0, 0.03, n)
            frames.append(pd.DataFrame({"run_id": rid, "config": name, "student": "m", "seed": seed, "step": step,
                                        "prompt_id": np.arange(n), "kl": kl, "kl_sampled": kl, "n_tokens": 40,
                                        "correct": 0.5 - (0.2 if name == "rl-n1" and step else 0),
                                        "entropy": 0.5}))
        store.write_table(st, d / f"{rid}.steps.parquet", store.STEPS)
        store.write_table(pd.concat(frames), d / f"{rid}.heldout.parquet", store.HELDOUT)
        steps_files.append(str(d / f"{rid}.steps.parquet"))
        held_files.append(str(d / f"{rid}.heldout.parquet"))
        if seed == 0 and Row.of(r).in_budget and not Row.of(r).staleness:
            p = d / f"adm.{name}.parquet"
            tokens = rng.integers(15, 25, 16)  # 8 prompts x 2 responses
            sums = tokens * D[name] / 1.3 * rng.lognormal(0, 0.2, 16)
            store.write_table(stats.sequence_frame(sums, tokens, 2, config=name, student="m"), p)
            adm_files.append(str(p))
    return steps_files, held_files, adm_files


STUDENTS = {"m": {"family": "qwen2", "layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 32, "d_ff": 64}}
INFRA = {"window": [2, 20], "peak_flops": 1e11}


def build_analysis(d: Path, rows=ROWS) -> Path:
    """Synthetic runs of `rows` through the analysis script, plus the measurements the offline rules make."""
    steps, held, adm = make_runs(d, rows)
    a = d / "analysis"
    out = Files(**{O.analysis_key(n): str(a / O.analysis_file(n)) for n in O.ANALYSIS_TABLES})
    params = SimpleNamespace(rows=[Row.of(r).resolved() for r in rows], baseline="bf16", tau=0.2,
                             taus=[0.1, 0.2, 0.3], bootstrap={"resamples": 1000, "level": 0.95, "seed": 0},
                             admission={"alpha": 1.5, "L": 0.41}, primary="m", train_lr=1e-4, infra=INFRA,
                             students=STUDENTS, backend="tiny", rl_collapse={"accuracy_points": 5},
                             one_seed_ratio=1.0,  # no sequential rule: a one-seed row as noisy as the baseline
                             base_draws=1, settings={"tau": 0.2})  # what the record of its inputs hashes
    load("analysis").main(Files(steps=steps, heldout=held, admission=adm), out, params)
    rng = np.random.default_rng(1)
    cases = [(m, layer, part, v * share) for m, layer, v in [("all", -1, 0.01), ("only", 0, 0.009), ("only", 1, 0.001)]
             for part, share in (("kv", 1.0), ("k", 0.8), ("v", 0.2))] + [("all_but", 0, "kv", 0.001),
                                                                          ("all_but", 1, "kv", 0.009)]
    seqs = pd.concat([stats.sequence_frame(20 * v * rng.lognormal(0, 0.3, 32), np.full(32, 20), 4, student="m",
                                           recipe="fp8_e4m3", part=part, mode=m, layer=layer)
                      for m, layer, part, v in cases])
    store.write_table(load("kv_attribution").attribution(seqs, 500, 0), a / "kv_attribution.parquet")
    if any("guard" in r for r in rows):
        load("guard_analysis").main(Files(steps=out.steps, verdicts=out.verdicts), Files([str(a / "guard.parquet")]),
                                    SimpleNamespace(rows=params.rows, baseline="bf16", guard_line=0.41))
    thr = pd.concat([store.read_table(steps[0]).assign(k=k, step_s=0.1 / (1 + 0.2 * (k > 0))) for k in (0, 1, 2)])
    store.write_table(thr, a / "async_throughput.parquet")
    store.write_table(pd.DataFrame([{"kv_cache": kv, "batch": b, "seconds": 1.0, "tokens": b * 30,
                                     "waves": 1 + b // (64 * f), "tokens_per_s": b * 30 / (1 + b // (64 * f)),
                                     "concurrent": min(b, 64 * f)} for kv, f in (("none", 1), ("fp8_e4m3", 2))
                                    for b in (32, 64, 128, 256)]), a / "memory_bound.parquet")
    # every candidate's step-0 statistics as rule predictor_stats writes them (each a multiple of its D), judged by the
    # predictors script
    v = store.read_table(out.verdicts).set_index("config")["D"]
    cands = store.read_table(out.admission).query("candidate")["config"]
    pred = []
    for c in cands:
        pred.append(str(a / f"pred.{c}.parquet"))
        store.write_table(pd.DataFrame([{"config": c, "student": "m", "seconds": 1.0,
                                         **{k: v[c] * (1 + i) for i, k in enumerate(stats.PREDICTORS) if k != "d_hat"}}]),
                          pred[-1])
    # two frozen rules, the later fitted on more candidates (every figure, table and findings line reads both)
    stat, c = list(stats.PREDICTORS)[1], list(cands)
    frozen = [{"name": "first", "statistic": stat, "at_most": float(v[c[0]]) * 2.5, "fitted_on": {"m": c[:len(c) // 2]}},
              {"name": "later", "statistic": stat, "at_most": float(v[c[0]]) * 3, "fitted_on": {"m": c[:-1]}}]
    load("predictors").main(Files(stats=pred, admission=out.admission, verdicts=out.verdicts),
                            Files(table=str(a / "predictor_stats.parquet"), record=str(a / "predictors.parquet")),
                            SimpleNamespace(frozen_rules=frozen))
    # a bisected edge as rule bisection writes it (opd.plan.edges_frame and the grid's budget): 0.02 passes, 0.2 fails,
    # their midpoint 0.063 passes, then 0.11 fails; the bracket after each value
    D = {0.02: 4e-4, 0.2: 0.07, 0.06325: 0.004, 0.1125: 0.015}
    verdict = {0.02: "pass", 0.2: "fail", 0.06325: "pass", 0.1125: "fail"}
    after = [(4e-4, np.nan), (4e-4, 0.07), (0.004, 0.07), (0.004, 0.015)]
    store.write_table(pd.DataFrame([
        {"edge": "edge", "student": "m", "order": i, "value": v, "row": f"edge-{v}", "n_seeds": 1 + i % 3,
         "verdict": verdict[v], "delta": 0.0, "ci_lo": 0.0, "ci_hi": 0.0, "D": D[v], "lo_after": np.nan,
         "hi_after": np.nan, "D_lo_after": lo, "D_hi_after": hi, "stopped": "max_rows", "grid_lo": 0.003,
         "grid_hi": 0.02, "grid_rows": 3, "grid_runs": 9, "grid_fails": 1, "grid_edge": np.sqrt(0.003 * 0.02)}
        for i, (v, (lo, hi)) in enumerate(zip(D, after))]), a / "bisection.parquet")
    return a


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    return build_analysis(tmp_path_factory.mktemp("fixture"))


def test_analysis_outputs(analysis):
    v = store.read_table(analysis / "verdicts.parquet").set_index("config")
    assert v.loc["n3", "verdict"] == "fail" and v.loc["n1", "verdict"] == "pass"
    assert "rl-bf16" not in v.index  # RL runs are judged by the RL table, not the OPD rule
    budget = store.read_table(analysis / "budget.parquet")
    b = budget[budget["rule"] == "paper"].set_index("tau")
    assert b.loc[0.2, "lo"] == pytest.approx(v.loc["n1", "D"]) and b.loc[0.2, "hi"] == pytest.approx(v.loc["n3", "D"])
    assert set(budget["rule"]) == {"paper", "seeds"}
    # rows with their own lr or reference are not budget engines; k2-lo is measured against k0-lo
    assert b.loc[0.2, "n_pass"] + b.loc[0.2, "n_fail"] == 6
    assert v.loc["k2-lo", "reference"] == "k0-lo" and v.loc["n3", "reference"] == "bf16"
    assert v.loc["k2-lo", "delta"] == pytest.approx(0.05, abs=0.05)
    assert v.loc["n3", "verdict_seeds"] == "fail" and v.loc["n3", "ci_lo_seeds"] < v.loc["n3", "ci_lo"]
    noise = store.read_table(analysis / "noise.parquet").set_index("student")
    assert noise.loc["m", "n_seeds"] == 4 and len(store.read_table(analysis / "null_deltas.parquet")) == 12
    sl = store.read_table(analysis / "staleness_lr.parquet")
    assert sorted(zip(sl["lr"], sl["k"])) == [(3e-5, 0), (3e-5, 2), (1e-4, 0), (1e-4, 2)]
    rl = store.read_table(analysis / "rl.parquet").set_index("config")
    assert rl.loc["rl-n1", "collapsed"] and not rl.loc["rl-bf16", "collapsed"]
    assert rl.loc["rl-n1", "collapse_criteria"] == "accuracy" and rl.loc["rl-n1", "entropy_ratio"] == pytest.approx(1)
    adm = store.read_table(analysis / "admission.parquet").set_index("config")
    assert not adm.loc["bf16", "candidate"] and adm["candidate"].sum() == len(adm) - 1
    assert (adm["se"] > 0).all() and (adm["n_prompts"] == 8).all()
    summary = json.loads((analysis / "admission_summary.json").read_text())
    assert summary["n_decisions"] == adm["candidate"].sum() and summary["n_baseline"] == 1
    kv = store.read_table(analysis / "kv_attribution.parquet").set_index(["mode", "layer", "part"])
    assert kv.loc[("only", 0, "k"), "share"] == pytest.approx(0.8, abs=0.15) and kv.loc[("only", 0, "kv"), "share"] == 1
    assert rl.loc["rl-n1", "opd_config"] == "n1" and rl.loc["rl-n1", "opd_verdict"] == "pass"


PARAMS = SimpleNamespace(experiment="t", tau=0.2, baseline="bf16", primary="m", backend="tiny", infra=INFRA,
                         students=STUDENTS)


def inputs(analysis, names):
    """By name and in order, as common.smk's output_inputs hands them to a script."""
    return Files(**{O.analysis_key(n): str(analysis / O.analysis_file(n)) for n in names})


def render(analysis, out_dir: Path, o: O.Output, optional: bool = True) -> Files:
    """One output through its script, as its rule runs it (opd/outputs.py's table), with its optional inputs (a tiny
    experiment's) or without them (a verl experiment's)."""
    out = Files(**{ext: str(out_dir / f"{o.name}.{ext}") for ext in o.extensions})
    load(o.rule).main(inputs(analysis, o.inputs + (o.optional if optional else ())), out, PARAMS)
    return out


@pytest.mark.parametrize("o", [o for o in O.OUTPUTS if o.kind == "figure"], ids=lambda o: o.name)
def test_figure_renders_pdf_and_png_with_input_hashes(analysis, tmp_path, o):
    out = render(analysis, tmp_path, o)
    assert Path(out.pdf).read_bytes()[:4] == b"%PDF"
    assert Path(out.png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    side = json.loads((tmp_path / f"{o.name}.inputs.json").read_text())
    assert side["inputs"] == {p: provenance.sha256_file(p) for p in inputs(analysis, o.inputs + o.optional)}
    from PIL import Image
    png = Image.open(out.png)  # opaque, at the stated resolution, and carrying the same hashes as the sidecar
    assert png.mode == "RGB" and round(png.info["dpi"][0]) == report.PNG_DPI
    assert json.loads(png.text["Description"]) == side["inputs"]


@pytest.mark.parametrize("o", [o for o in O.OUTPUTS if o.kind == "table"], ids=lambda o: o.name)
def test_table_renders_markdown_and_latex(analysis, tmp_path, o):
    out = render(analysis, tmp_path, o)
    md, tex = Path(out.md).read_text(), Path(out.tex).read_text()
    assert md.startswith("**") and "|" in md
    assert r"\begin{tabular}" in tex and r"\bottomrule" in tex
    page = Path(out.html).read_text()  # what `snakemake --report` shows: the same rows
    assert page.count("<tr>") - 1 == sum(ln.startswith("|") for ln in md.splitlines()) - 2


def test_the_admission_record_shows_the_fitted_rule_beside_the_papers_where_its_statistics_exist(analysis, tmp_path):
    """tiny: the admission table gives each candidate's held-out decision by the fitted rule, and its notes the rule
    and both agreements; without the step-0 statistics (verl) the table and figure are the paper's alone."""
    rule = stats.fitted_rule_of(store.read_table(analysis / "predictors.parquet"))
    step0 = store.read_table(analysis / "predictor_stats.parquet")
    assert rule is not None and rule.n_agree_held_out == int((step0["fitted_agrees"] == 1.0).sum())
    table, figure = (next(o for o in O.OUTPUTS if o.rule == r) for r in ("table_admission", "figure_admission"))
    for kind, optional in (("tiny", True), ("verl", False)):
        (tmp_path / kind).mkdir()
        md = Path(render(analysis, tmp_path / kind, table, optional).md).read_text()
        render(analysis, tmp_path / kind, figure, optional)
        assert ("admit (fitted, held out)" in md) == optional and "admit (paper)" in md
        assert (f"admit iff {rule.label}" in md and f"on {rule.n_agree_held_out} of {rule.n_held_out}" in md) == optional


def test_each_frozen_rule_is_scored_only_on_candidates_it_was_not_fitted_on():
    """predictors.py: a frozen rule decides every candidate, a candidate outside its fitted_on counts toward its
    prospective record beside the paper's rule and admitting all on the same candidates, one without an outcome
    is decided but not scored; a later rule fitted on more candidates keeps its own record beside the first's, and
    both read back in order (stats.prospective_tests_of)."""
    from opd.spec import FrozenRule
    mod = load("predictors")
    t = pd.DataFrame({"student": ["a"] * 6, "config": ["r1", "r2", "r3", "n1", "n2", "n3"],
                      "stat": [0.5, 2.0, 0.9, 0.4, 3.0, 0.8], "admit": [True, True, True, True, True, False],
                      "outcome": ["pass", "fail", "fail", "pass", "pass", None]})
    first = FrozenRule.of({"name": "first", "statistic": "stat", "at_most": 1.0, "fitted_on": {"a": ["r1", "r2", "r3"]}})
    later = FrozenRule.of({"name": "later", "statistic": "stat", "at_most": 0.6,
                           "fitted_on": {"a": ["r1", "r2", "r3", "n1", "n2"]}})
    t = mod.with_frozen_rule(mod.with_frozen_rule(t, first), later)
    assert t["frozen_admit.first"].tolist()[:5] == [1.0, 0.0, 1.0, 1.0, 0.0] and t["frozen_admit.first"].iloc[5] == 1.0
    assert t["prospective.first"].tolist() == [False, False, False, True, True, True]
    assert t["prospective.later"].tolist() == [False] * 5 + [True]
    tests = stats.prospective_tests_of(pd.concat([mod.frozen_record(t, first), mod.frozen_record(t, later)]))
    assert [x.name for x in tests] == ["first", "later"]
    test = tests[0]
    assert (test.n, test.n_agree, test.n_agree_paper, test.n_agree_all) == (2, 1, 2, 2)  # n3 has no outcome
    assert (test.n_fitted_on, test.n_agree_fitted_on) == (3, 2) and test.label == "stat ≤ 1"
    assert (tests[1].n, tests[1].n_fitted_on, tests[1].n_agree_fitted_on) == (0, 5, 4)
    assert stats.prospective_tests_of(mod.fixed_rules(t)) == ()


def test_findings_name_the_candidates_the_fitted_rule_still_gets_wrong():
    """findings.py names each candidate the rule fitted on every candidate disagrees with, by its outcome (a pass
    above the cut here), and says so when there is none."""
    mod = findings
    t = pd.DataFrame({"student": ["a"] * 6, "config": [f"r{i}" for i in range(6)],
                      "stat": [0.1, 0.2, 0.3, 5.0, 0.9, 1.0], "delta": [0.01, 0.02, 0.03, 0.05, 0.4, 0.5],
                      "outcome": ["pass", "pass", "pass", "pass", "fail", "fail"]})
    line = mod.fitted_misses_sentence(stats.predictor_record(t, ["stat"]), t)
    assert "disagrees with training on 1 of 6; passes it rejects" in line and line.endswith(": a r3.")
    clean = t[t["config"] != "r3"]
    assert "agrees with training on every candidate" in mod.fitted_misses_sentence(
        stats.predictor_record(clean, ["stat"]), clean)


def test_every_script_is_in_the_output_table():
    """Adding a figure is its script plus one line in opd/outputs.py: no script is left out of the table."""
    scripts = {p.stem for p in SCRIPTS.glob("figure_*.py")} | {p.stem for p in SCRIPTS.glob("table_*.py")}
    assert {o.rule for o in O.OUTPUTS} == scripts - {"figure_mechanism", "table_mechanism", "table_mechanism_runs"}


SMALL = {  # experiments a new user would try: each output renders or is absent, never a traceback
    "baseline and one row": [ROWS[0], ROWS[4]],
    "no KV rows": [r for r in ROWS if "kv_cache" not in r],
    "no RL rows": [r for r in ROWS if "algorithm" not in r],
    "staleness and noise only": [ROWS[0], ROWS[3], ROWS[4]],
}


@pytest.mark.parametrize("name", SMALL)
def test_outputs_follow_the_matrix(tmp_path, name):
    rows = SMALL[name]
    a = build_analysis(tmp_path, rows)
    chosen = O.selected({"rows": rows, "seeds": [0], "backend": "tiny"})
    for o in chosen:
        render(a, tmp_path, o)
    names = {o.rule for o in chosen}
    assert ("figure_kv_attribution" in names) == any("kv_cache" in r for r in rows)
    assert ("figure_rl_vs_opd" in names) == ("table_rl" in names) == any("algorithm" in r for r in rows)
    assert "figure_heldout_kl" in names and "table_runs" in names
    mod = load("findings")  # the findings sentences too
    mod.main(Files(**{n: str(a / f"{n}.parquet") for n in ("verdicts", "budget", "noise", "null_deltas",
                                                             "staleness_lr", "heldout", "rl", "rows")},
                   admission_summary=str(a / "admission_summary.json")),
             Files(md=str(tmp_path / "findings.md")), SimpleNamespace(tau=0.2, baseline="bf16", primary="m",
                                                                      alpha=1.5, L=0.41))


def test_verl_async_throughput_comes_from_the_staleness_runs(analysis, tmp_path):
    steps = store.read_table(analysis / "steps.parquet")
    paths = []
    for cfg in ("bf16", "k2"):
        p = tmp_path / f"{cfg}.parquet"
        store.write_table(steps[steps["config"] == cfg], p, store.STEPS)
        paths.append(str(p))
    out = tmp_path / "async.parquet"
    load("throughput_from_runs").main(Files(paths), Files([str(out)]), SimpleNamespace(staleness={"bf16": 0, "k2": 2}))
    df = store.read_table(out)
    assert df.groupby("config")["k"].first().to_dict() == {"bf16": 0, "k2": 2}
    fig = Files(pdf=str(tmp_path / "a.pdf"), png=str(tmp_path / "a.png"))
    load("figure_async_throughput").main(Files([str(out)]), fig, SimpleNamespace(backend="verl"))
    assert Path(fig.png).exists()


def test_findings_are_computed_from_the_analysis(analysis, tmp_path):
    names = ["verdicts", "budget", "noise", "null_deltas", "staleness_lr", "heldout", "rl", "rows"]
    inp = Files(**{n: str(analysis / f"{n}.parquet") for n in names},
                admission_summary=str(analysis / "admission_summary.json"))
    out = Files(md=str(tmp_path / "findings.md"))
    params = SimpleNamespace(tau=0.2, baseline="bf16", primary="m", alpha=1.5, L=0.41)
    mod = load("findings")
    mod.main(inp, out, params)
    text = Path(out.md).read_text()
    noise = store.read_table(analysis / "noise.parquet").iloc[0]
    assert f"the SD of Δ is {scorecard.pct(noise['sd_single'])} on m" in text
    v, rows = store.read_table(analysis / "verdicts.parquet"), report.rows_frame(analysis / "rows.parquet")
    n_fail = int(((v["verdict_seeds"] == "fail") & v["config"].isin(rows.loc[rows["in_budget"], "name"])).sum())
    assert "- **B_emp** (" in text and f"{n_fail} configurations fail the seed-aware rule" in text
    # a changed input changes the sentence: the noise sentence follows the noise table
    tables = {n: store.read_table(analysis / f"{n}.parquet") for n in names}
    tables["rows"] = report.rows_frame(analysis / "rows.parquet")
    tables["noise"]["sd_single"] = 0.123
    again = mod.findings(tables["verdicts"], tables["budget"], tables["noise"], tables["null_deltas"],
                         tables["staleness_lr"], tables["heldout"], tables["rows"], None, tables["rl"], 0.2,
                         "bf16", "m")
    assert "the SD of Δ is 12% on m" in again and f"SD of Δ is {scorecard.pct(noise['sd_single'])} on m" not in again
    # the mechanism group: only with the probes' tables (tiny backend), and it follows them
    assert "Mechanism" not in text
    probes, prefix = probe_tables()
    store.write_table(probes, tmp_path / "probes.parquet")
    store.write_table(prefix, tmp_path / "probes_prefix.parquet")
    mod.main(Files(**{n: str(analysis / f"{n}.parquet") for n in names},
                   admission_summary=str(analysis / "admission_summary.json"),
                   probes=str(tmp_path / "probes.parquet"), probes_prefix=str(tmp_path / "probes_prefix.parquet")),
             out, params)
    text = Path(out.md).read_text()
    worst = probes["opd_bias_bound_max_l1"].max()
    n_big = probes["noise_sigma"].between(0.15, 0.325)
    n_gt = int((probes.loc[n_big, "T_logit"] > probes.loc[n_big, "S_logit"]).sum())
    assert f"holds on all {probes['n_prefixes_q'].sum() + probes['n_prefixes_fixed'].sum():,} prefixes" in text
    assert f"is {worst:.2f} for OPD" in text and f"logit space: T > S at {n_gt} of {n_big.sum()} points" in text
    assert f"Probing the 4 runs took {probes.groupby('config')['probe_cpu_s'].first().sum():.0f} CPU s" in text
    probes["opd_bias_bound_max_l1"] = 0.5
    probes.loc[3, "opd_bias_bound_max_l1"] = 0.91
    probes["T_logit"] = probes["S_logit"] * 2
    again = mod.findings(tables["verdicts"], tables["budget"], tables["noise"], tables["null_deltas"],
                         tables["staleness_lr"], tables["heldout"], tables["rows"], None, tables["rl"], 0.2,
                         "bf16", "m", probes=(probes, prefix))
    assert "is 0.91 for OPD" in again and f"is {worst:.2f} for OPD" not in again
    assert f"logit space: T > S at {n_big.sum()} of {n_big.sum()} points" in again


def probe_tables(seed=0):
    """A small probes.parquet and probes_prefix.parquet (opd/backends/tiny/probes.py's columns): a baseline, two
    noise rows at the paper's levels and a staleness row, probe seed 0 at three steps and seed 1 at the ends."""
    rng = np.random.default_rng(seed)
    measured = [f"{q}_{sp}" for q in ("T", "S", "U", "err_fixed", "upd_fixed") for sp in ("logit", "param")]
    measured += ["opd_bias_mean", "rl_bias_mean", "opd_bias_bound_max_l1", "rl_bias_bound_max_l1", "delta_l1", "kl_pt"]
    rows = [{"config": config, "student": "m", "seed": 0, "noise_sigma": sigma, "staleness": k, "step": step,
             "probe_seed": ps, "main": ps == 0, "n_prefixes_q": 100 + ps, "n_prefixes_p": 100, "n_prefixes_fixed": 90,
             "probe_cpu_s": 10.0 + 2 * i, "probe_s": 11.0 + 2 * i,
             **dict(zip(measured, rng.uniform(0.05, 0.95, len(measured))))}
            for i, (config, sigma, k) in enumerate((("bf16", 0.0, 0), ("n-lo", 0.15, 0), ("n-hi", 0.325, 0),
                                                    ("k8", 0.0, 8)))
            for ps in (0, 1) for step in ((0, 50, 100) if ps == 0 else (0, 100))]
    prefix = pd.DataFrame({c: rng.uniform(0.01, 0.5, 40) for c in ("opd_bias", "rl_bias")}).assign(
        opd_bound=1.0, rl_bound=1.0)
    return pd.DataFrame(rows), prefix


def test_findings_count_candidates_name_the_rl_criterion_and_the_kv_shares(analysis, tmp_path):
    mod = load("findings")
    names = ("verdicts", "budget", "noise", "null_deltas", "staleness_lr", "heldout", "rl", "rows", "kv_attribution")
    mod.main(Files(**{n: str(analysis / f"{n}.parquet") for n in names},
                   admission_summary=str(analysis / "admission_summary.json")),
             Files(md=str(tmp_path / "findings.md")), SimpleNamespace(tau=0.2, baseline="bf16", primary="m",
                                                                      alpha=1.5, L=0.41))
    text = (tmp_path / "findings.md").read_text()
    s = json.loads((analysis / "admission_summary.json").read_text())
    assert f"{s['n_agree']} of {s['n_decisions']} candidate engines" in text
    assert f"admitting every candidate would agree on {s['n_admit_all_agree']} of {s['n_decisions']}" in text
    assert ("REINFORCE collapses on 1 of 1 engine, 1 of which OPD passes; accuracy -20.0 points at worst"
            in text)
    kv = store.read_table(analysis / "kv_attribution.parquet")
    k = kv.set_index(["mode", "layer", "part"])
    share = k.loc[("only", 0, "kv"), "d_hat"] / k.loc[("all", -1, "kv"), "d_hat"]
    assert f"layer 0 alone {scorecard.pct(share)} of every layer's D̂" in scorecard.claim_kv(kv).toy


def test_the_guard_figure_draws_rejected_batches_and_a_run_that_never_trained_its_engine(analysis, tmp_path):
    """A guard that rejects: the figure marks the discarded batches' d_n, and a guarded run with no step trained on its
    own engine (cheap_over_fallback NaN: every batch of it rejected) renders without the unguarded row's open marker."""
    a = tmp_path / "analysis"
    shutil.copytree(analysis, a)
    g = store.read_table(a / "guard.parquet")
    store.write_table(g.assign(cheap_over_fallback=np.nan, reject=True), a / "guard.parquet")
    st = store.read_table(a / "steps.parquet")
    starts = (st["config"] == "n1-guard") & st["step"].isin([4, 14])
    store.write_table(st.assign(rejected_d_n=np.where(starts, 0.3, np.nan)), a / "steps.parquet", store.STEPS)
    out = render(a, tmp_path, next(o for o in O.OUTPUTS if o.kind == "figure" and o.name == "guard"))
    assert Path(out.png).stat().st_size > 0


def test_rl_spread_counts_the_factors_in_seed_sds():
    """The RL thresholds' sentence: the standard engine's seed spread (SD/mean) at the final held-out evaluation
    and each factor in such SDs; entropy said to be unmeasured where the runs lack it."""
    mod = findings
    h = pd.DataFrame([{"config": "bf16", "student": "s", "seed": sd, "step": st, "prompt_id": p,
                       "n_tokens": 10 + sd, "entropy": 0.5 * (1 + 0.1 * sd)}
                      for sd in range(3) for st in (0, 10) for p in range(4)])
    text = mod.rl_spread(h, "bf16", "s", {"entropy_factor": 1.5, "length_factor": 1.2})
    cv_len = np.std([10, 11, 12], ddof=1) / 11
    assert f"varies by {cv_len:.2%}" in text and f"length factor 1.2x is {0.2 / cv_len:.0f} such SDs" in text
    cv_ent = np.std([0.5, 0.55, 0.6], ddof=1) / 0.55
    assert f"held-out entropy varies by {cv_ent:.1%}, so the entropy factor 1.5x is {0.5 / cv_ent:.0f}" in text
    assert "not measured here" in mod.rl_spread(h.drop(columns="entropy"), "bf16", "s",
                                                {"entropy_factor": 1.5, "length_factor": 1.2})


def test_guard_record(analysis):
    """analysis/guard.parquet from the fixture's guarded row (steps 4-9 and 14-19 of each run on the fallback,
    1.2x slower there): its unguarded twin, the cheap engine's share, two activations per run, the in-run
    speed ratio, no false alarm of its guard over the standard engine's runs."""
    g = store.read_table(analysis / "guard.parquet").set_index("config").loc["n1-guard"]
    v = store.read_table(analysis / "verdicts.parquet").set_index("config")
    assert g["unguarded"] == "n1" and g["action"] == "fallback" and g["d_max"] == 0.01 and g["n_runs"] == 3
    assert g["cheap_share"] == pytest.approx(0.4) and g["activations"] == 2 and g["activations_max"] == 2
    assert g["cheap_over_fallback"] == pytest.approx(1.2) and g["cross_job_ratio"] == pytest.approx(500 / 0.112 / (500 / 0.1))
    assert g["run_over_fallback"] == pytest.approx((10000 / 2.24) / (6000 / 1.44)) and g["fallback_is_standard"]
    assert g["baseline_alarms"] == 0 and g["baseline_runs"] == 4 and g["baseline_max_window_d"] < 0.01
    assert g["delta"] == v.loc["n1-guard", "delta"] and g["unguarded_delta"] == v.loc["n1", "delta"]
    assert g["unguarded_verdict_seeds"] == v.loc["n1", "verdict_seeds"]
    text = "\n".join(findings.guard_sentences(store.read_table(analysis / "guard.parquet")))
    assert f"{int(g['verdict_seeds'] == 'pass')} of 1 guarded row pass" in text and "fire 0 times" in text
    assert "40% of steps trained on the cheap engine's batches, 2 activations per run" in text
    assert f"their D at {scorecard.g(g['D_over_d_max'])}x d_max" in text


def test_the_claims_scorecard_comes_first_and_follows_the_analysis(analysis, tmp_path):
    """findings.md opens with plain sentences on each claim of the paper, then the scorecard as a table (claim |
    paper | toy | verdict) from the analysis tables, by the stated criteria; a changed table changes the verdict."""
    names = ["verdicts", "budget", "noise", "null_deltas", "staleness_lr", "heldout", "rl", "rows", "edge", "decides",
             "kv_attribution", "edges", "edge_ratios"]
    t = {n: store.read_table(analysis / f"{n}.parquet") for n in names}
    t["rows"] = report.rows_frame(analysis / "rows.parquet")
    mod = load("findings")
    adm = json.loads((analysis / "admission_summary.json").read_text()) | {"alpha": 1.5, "L": 0.41}

    def card(**changed):
        tt = {**t, **changed}
        text = mod.findings(tt["verdicts"], tt["budget"], tt["noise"], tt["null_deltas"], tt["staleness_lr"],
                            tt["heldout"], tt["rows"], adm, tt["rl"], 0.2, "bf16", "m", kv=tt["kv_attribution"],
                            edge=tt["edge"], decides=tt["decides"], edges=tt["edges"], edge_ratios=tt["edge_ratios"])
        head, _, rest = text.partition("## Findings")
        table = head[head.index("## Claims scorecard"):]
        return {ln.split(" | ")[0].lstrip("| "): ln for ln in table.splitlines() if ln.startswith("| ")}, rest, head

    lines, rest, head = card()
    assert head.index("nats/token") < head.index("## Claims scorecard")  # the opening speaks before the table
    assert "- **B_emp**" in rest  # the findings follow the scorecard
    budget = lines["One mismatch budget in D"]
    assert "[0.184, 0.39] nats/token" in budget
    # each mechanism's Delta = tau edge in D, over D(0) and as a share of the initial KL (the fixture's staleness rows
    # all pass: above every row)
    fixed = t["edges"].query("rule == 'seeds' and mechanism == 'noise_fixed'").iloc[0]
    assert f"fixed-noise at D {scorecard.g(fixed.D_edge)} ({scorecard.g(fixed.edge_over_d0)}x D(0)" in budget
    assert "staleness above every row (D > " in budget
    assert f"| {scorecard.g(fixed.D_edge)} [{scorecard.g(fixed.D_lo)}, {scorecard.g(fixed.D_hi)}] |" in head
    # the ratios coincide, but too few rows near the B_emp edge: unresolved; with them, agrees
    assert t["edge_ratios"]["coincide"].all() and "**unresolved**" in budget
    near = t["edge"].assign(n_fail_near=2, n_pass_near=3)
    assert "**agrees**" in card(edge=near)[0]["One mismatch budget in D"]
    assert "**unresolved**" in card(edge=near, edge_ratios=t["edge_ratios"].iloc[:0])[0]["One mismatch budget in D"]
    # two mechanisms' edges that differ beyond their joint interval: no single edge in D, and not one decider
    differ = card(edge_ratios=t["edge_ratios"].assign(coincide=False, ratio_lo=2.0, ratio_hi=np.inf))[0]
    assert "**disagrees**" in differ["One mismatch budget in D"]
    assert "**disagrees**" in differ["Total mismatch decides, not bits or versions"]
    assert "largest / smallest edge: m " in lines["Total mismatch decides, not bits or versions"]
    # TIS ran only on n3, which fails: outside budget, nothing judged; on an engine within budget it is judged
    variants = lines["TIS, score centering and an advantage offset do not help OPD"]
    assert "**unresolved**" in variants and "outside budget only (plain fails on n3): TIS" in variants
    v = t["verdicts"].copy()
    n3 = v.index[v["config"] == "n3"][0]
    v.loc[n3, ["verdict_seeds", "ci_lo_seeds"]] = ["pass", 0.1]
    v.loc[v["config"] == "n3-tis", ["delta", "ci_lo_seeds", "ci_hi_seeds"]] = [0.01, -0.05, 0.05]
    assert "**disagrees**" in card(verdicts=v)[0]["TIS, score centering and an advantage offset do not help OPD"]
    assert "**untestable at toy scale**" in lines["The first layer carries the FP8 KV cache's mismatch"]
    admission = lines["The admission check predicts training"]
    assert f"{adm['n_agree']} of {adm['n_decisions']} decisions match" in admission
    assert "fitted rule" not in admission  # no predictors stage: the paper's only
    rule = stats.fitted_rule_of(store.read_table(analysis / "predictors.parquet"))
    text = mod.findings(t["verdicts"], t["budget"], t["noise"], t["null_deltas"], t["staleness_lr"], t["heldout"],
                        t["rows"], adm, t["rl"], 0.2, "bf16", "m", edge=t["edge"], decides=t["decides"],
                        edges=t["edges"], edge_ratios=t["edge_ratios"],
                        predictors=store.read_table(analysis / "predictors.parquet"))
    line = next(ln for ln in text.splitlines() if ln.startswith("| The admission check predicts training |"))
    assert f"the fitted rule (beyond the paper): {rule.n_agree_held_out} of {rule.n_held_out} held out" in line
    # a budget whose fail lies below its pass is counted, never printed as an inverted interval
    text = card(edge=t["edge"].assign(lo=0.6, hi=0.05, lo_over_d0=6000.0, hi_over_d0=500.0, consistent=False))[2]
    assert "B_emp inconsistent (a fail below a pass) on 1 of 1 students" in text and "[0.6, 0.05]" not in text


def test_tis_sentence_checks_its_prediction_against_the_verdict(analysis):
    """The TIS hypothesis line: an engine whose step-0 error is mostly T is predicted to pass under TIS, and the line
    counts the prediction against the TIS row's seed-aware verdict; where S dominates it predicts nothing."""
    mod = findings
    v = store.read_table(analysis / "verdicts.parquet")
    rows = report.rows_frame(analysis / "rows.parquet")
    tis = v.set_index("config").loc["n3-tis", "verdict_seeds"]
    # a second TIS row after the first: the first is what the hypothesis was formed on, only the second tests it
    rows = pd.concat([rows, report.rows_frame(analysis / "rows.parquet").query("name == 'n3-tis'").assign(
        name="n1-tis", noise_sigma=0.1)], ignore_index=True)
    v = pd.concat([v, v[v["config"] == "n3-tis"].assign(config="n1-tis")], ignore_index=True)
    t_heavy = pd.DataFrame([{"student": "m", "config": c, "T_U_param": 5.0, "S_U_param": 1.0} for c in ("n3", "n1")])
    line = mod.tis_sentence(v, rows, t_heavy)
    assert "formed on m n3 (T/U 5, S/U 1)" in line and "; m n1 (T/U 5" in line and "predicted pass" in line
    assert f"{int(tis == 'pass')} of 1 predictions made before their runs held" in line
    s_heavy = t_heavy.assign(T_U_param=0.5)
    assert mod.tis_sentence(v, rows, s_heavy) is None  # no prediction made, nothing to count
