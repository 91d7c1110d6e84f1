"""The workflow's shape, checked with real Snakemake runs in a `git clone` of this tree (whose results/ holds
the toy's results; the session's clones of tests/conftest.py, with the toy experiment selected: it has every compute
rule, the KV attribution's included): every rule logs and the compute jobs' logs are where their rules say, `snakemake figures`
never trains, `snakemake --lint` raises nothing that workflow/lint.yaml does not justify."""
import re

import yaml

from conftest import ROOT, TOY, TRAIN_RULES, edit_config, jobs_in, own_base_models, planned, planned_rules, snakemake
from opd import dag

COMPUTE = TRAIN_RULES | {"base_models", "admission", "kv_attribution_student", "throughput", "memory_bound"}
TARGETS = {"all", "figures"}  # rules that only name inputs (Snakemake runs nothing for them)


def dry_run_jobs(r) -> list[dict]:
    """Each job a dry run lists: its rule and its `log:` and `wildcards:` lines."""
    jobs = []
    for line in (r.stdout + r.stderr).splitlines():
        s = line.strip()
        m = re.match(r"^(?:local)?rule (\S+):$", s)
        if m:
            jobs.append({"rule": m.group(1)})
        elif jobs and re.match(r"^(log|wildcards): ", s):
            key, value = s.split(": ", 1)
            jobs[-1][key] = value
    return jobs


def test_every_job_has_a_log_and_each_compute_job_the_one_its_cli_writes(toy_clone):
    jobs = dry_run_jobs(snakemake(toy_clone, "-n", "--forceall"))  # every job, whatever is up to date
    rules = {j["rule"] for j in jobs}
    assert COMPUTE - {"base_models"} <= rules  # (the toy's base models are in the DAG only when a run needs them)
    for j in jobs:
        if j["rule"] in TARGETS:
            continue
        assert "log" in j, f"rule {j['rule']} has no log:"
    # the CLI's own log path (opd.dag.log_path, from the spec) is the rule's log:, so the command never names it
    spec_kinds = {"train": "train", "train_probed": "train", "admission": "admission",
                  "kv_attribution_student": "kv_attribution", "throughput": "throughput", "memory_bound": "memory_bound"}
    for j in jobs:
        if j["rule"] in spec_kinds:
            name = log_name = j["log"].rsplit("/", 1)[1].removesuffix(".log")
            w = dict(kv.split("=", 1) for kv in j.get("wildcards", "").split(", ") if kv)
            if "run_id" in w:
                assert log_name == w["run_id"]
            elif "row" in w:
                assert log_name == f"{w['row']}.{w['student']}"
            assert j["log"] == dag.log_path(TOY, spec_kinds[j["rule"]], name)


def test_a_compute_job_writes_its_log(toy_clone):
    # (that a fresh clone plans no compute job: tests/test_dag.py, on the session's fresh clone)
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    # qwen-s on base models of its own (the toy's pinned ones retrain bit for bit only on the CPU kind that made them)
    edit_config(clone, lambda c: own_base_models(c["experiments"][TOY], ["qwen-s"]))
    target = "results/toy/admission/fp8w.qwen-s.parquet"
    r = snakemake(clone, "-c", "1", target, "--forcerun", "admission")
    # the forced job reads base models that are not there: their spec written and they trained first (their log too)
    assert planned_rules(jobs_in(r)) == {"admission", "base_models", "job_spec"}
    assert "base qwen-s: done: wrote" in (clone / "logs/toy/base/qwen-s.log").read_text()
    log = (clone / "logs/toy/admission/fp8w.qwen-s.log").read_text()
    assert "admission fp8w.qwen-s: done: wrote" in log and "D̂ =" in log and "admit" in log


def test_figures_never_trains_and_names_what_it_leaves_out(toy_clone):
    clone = toy_clone  # the toy experiment selected: its rows and results/toy

    def change(c):
        rows = c["experiments"]["toy"]["rows"]
        rows.append({"name": "noise-04", "noise_sigma": 0.04})  # a new row: 3 runs and an admission check
        next(r for r in rows if r["name"] == "noise-234-center")["seeds"] = [0, 1, 2, 3]  # a new seed of a row
    edit_config(clone, change)
    everything = planned(clone)
    assert {"noise-04.qwen-s.s1", "noise-234-center.qwen-s.s3"} <= {w.split("=", 1)[1] for r, w in everything if r in TRAIN_RULES}
    r = snakemake(clone, "-n", "figures")
    jobs = jobs_in(r)
    assert not planned_rules(jobs) & COMPUTE
    assert {"analysis", "figure_budget", "table_runs", "figures"} <= planned_rules(jobs)
    out = r.stdout + r.stderr
    warned = [ln for ln in out.splitlines() if ln.startswith("figures: ")]
    new_row = next(ln for ln in warned if "'noise-04'" in ln)
    assert "left out" in new_row
    assert all(f"results/toy/runs/noise-04.qwen-s.s{i}/run.json" in new_row for i in range(3))
    assert any("'noise-234-center'" in ln and "results/toy/runs/noise-234-center.qwen-s.s3/run.json" in ln for ln in warned)
    # the new noise row is a probed one: the mechanism's outputs wait for it
    assert any("mechanism" in ln and "noise-04.qwen-s.s0" in ln for ln in warned)
    assert "figure_mechanism" not in planned_rules(jobs)
    # the analysis is built from the runs that exist: the new row's are not its inputs
    analysis = out[out.index("rule analysis:"):]
    assert "noise-04" not in analysis.split("output:", 1)[0] and "nvfp4.qwen-s.s2" in analysis.split("output:", 1)[0]


def lints(text: str) -> set[tuple[str, str]]:
    """(rule or snakefile, lint title) of every warning `snakemake --lint` prints."""
    found, where = set(), None
    for line in text.splitlines():
        m = re.match(r"^Lints for (?:rule (\S+) \(|snakefile (\S+):)", line)
        if m:
            where = m.group(1) or m.group(2)
        elif where and (m := re.match(r"^    \* (.+?):?$", line)):
            found.add((where, m.group(1).rstrip(":")))
    return found


def test_lint_is_clean_but_for_the_justified_warnings(toy_clone):
    """On the toy and on the paper experiment (the verl backend's rules): each lint is one workflow/lint.yaml
    justifies, and each rule it lists fires its lint in one of them at least."""
    justified = yaml.safe_load((ROOT / "workflow/lint.yaml").read_text())
    assert all(entry["why"].strip() for entry in justified)
    seen = set()
    for experiment in ("toy", "paper"):
        r = snakemake(toy_clone, "--lint", "--config", f"experiment={experiment}", check=False)
        found = lints(r.stdout + r.stderr)
        assert found, "no lint parsed: has `snakemake --lint`'s output changed?"
        rules = {w for w, _ in found}
        assert not any(w.endswith((".smk", "Snakefile")) for w in rules), found  # no lint of a whole file
        allowed = {(rule, e["lint"]) for e in justified for rule in (rules if e["rules"] == "every" else e["rules"])}
        assert found - allowed == set(), f"unjustified lints (fix them, or justify them in workflow/lint.yaml): " \
                                         f"{sorted(found - allowed)}"
        seen |= found
    listed = {(rule, e["lint"]) for e in justified if e["rules"] != "every" for rule in e["rules"]}
    assert listed - seen == set(), f"workflow/lint.yaml justifies lints that no longer fire: {sorted(listed - seen)}"
