"""Nothing computed is ever lost, and nothing stale is shown as current (issue 39), on real Snakemake runs: a dry
run changes nothing; a run whose spec the config stops asking for is set aside under that spec and restored, not
retrained, when the config asks for it again; a missing analysis file or a damaged measurement is made again; a
damaged run file is found before anything reads it; `verdict` and `compare` refuse what they cannot answer."""
import json
import shutil
import subprocess
import sys

import pytest

from conftest import (TRAIN_RULES, copy_clone, edit_config, jobs_in, planned, planned_rules, planned_runs, small_toy,
                      snakemake)
from opd import config as C
from opd import store
from test_faults import tree_state


def set_noise(sigma):
    def edit(c):
        small_toy(c)
        next(r for r in c["experiments"]["toy"]["rows"] if r["name"] == "noise-15")["noise_sigma"] = sigma
    return edit


def test_an_edit_then_a_revert_restores_the_run_without_training_and_a_dry_run_moves_nothing(small_toy_built,
                                                                                             tmp_path):
    clone = copy_clone(small_toy_built, tmp_path / "clone")
    run = clone / "results" / "toy" / "runs" / "noise-15.qwen-s.s0"
    original = {p.name: p.read_bytes() for p in run.iterdir()}
    edit_config(clone, set_noise(0.30))
    before = tree_state(clone)
    r = snakemake(clone, "-n", "-c", "2", "analysis")
    assert planned_runs(jobs_in(r)) == {"noise-15.qwen-s.s0"}
    assert "1 run(s) or base models were computed from another spec" in r.stderr
    assert tree_state(clone) == before  # the dry run moved, deleted and wrote nothing under results/ or figures/
    out = clone / "results" / "toy"
    earlier = store.set_aside_entries(out)  # small_toy_built set the committed runs aside (stale under small_toy)
    snakemake(clone, "-c", "2", "analysis")  # trains sigma 0.30; the sigma 0.15 run is kept, not deleted
    kept = [e for e in store.set_aside_entries(out) if e not in earlier]
    assert [(e["folder"], e["kind"]) for e in kept] == [("noise-15.qwen-s.s0", "run")]
    assert json.loads(original["run.json"])["spec_sha256"] == kept[0]["sha"]

    edit_config(clone, set_noise(0.15))  # the revert
    r = snakemake(clone, "-n", "-c", "2", "analysis")
    assert "1 of them are kept in results/toy/_set_aside/ for the spec asked for now" in r.stderr
    snakemake(clone, "-c", "2", "analysis")
    log = (clone / "logs" / "toy" / "train" / "noise-15.qwen-s.s0.log").read_text()
    assert "restored from results/toy/_set_aside/noise-15.qwen-s.s0/" in log and "step" not in log.split("restored")[1]
    assert {p.name: p.read_bytes() for p in run.iterdir()} == original  # the same run, byte for byte
    assert planned(clone, "analysis") == []  # and current by Snakemake's file times too
    # the sigma 0.30 run is kept in its turn; the command lists it and prunes what the config does not ask for
    listed = subprocess.run([sys.executable, "-m", "opd.cli", "set-aside", "--prune"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout
    assert "run noise-15.qwen-s.s0" in listed and "not asked for now" in listed
    assert f"pruned {len(earlier) + 1} folder(s)" in listed and store.set_aside_entries(out) == []


def test_a_dry_run_of_an_edit_then_a_revert_reruns_nothing(small_toy_built, tmp_path):
    """The dry run of the edit leaves its rerun markers newer than the spec files; once the config is reverted they
    must rerun nothing (a job_spec that ran would have Snakemake delete the current run before its job)."""
    clone = copy_clone(small_toy_built, tmp_path / "clone")
    edit_config(clone, set_noise(0.30))
    assert planned_runs(planned(clone, "analysis")) == {"noise-15.qwen-s.s0"}
    edit_config(clone, set_noise(0.15))
    assert planned(clone, "analysis") == []


def test_a_profile_dry_run_of_the_paper_from_the_repository_root_writes_nothing(built_clone):
    before = tree_state(built_clone)  # a copy of the session's built clone: a dry run writes Snakemake's caches
    r = snakemake(built_clone, "--profile", "slurm", "-n")
    assert "train" in planned_rules(jobs_in(r)) and "Job stats" in r.stdout + r.stderr
    assert tree_state(built_clone) == before and not (built_clone / "results" / "paper").exists()


def test_a_missing_analysis_file_and_a_damaged_measurement_are_made_again(small_toy_built, tmp_path):
    clone = copy_clone(small_toy_built, tmp_path / "clone")
    analysis = clone / "results" / "toy" / "analysis"
    # an analysis job killed midway: Snakemake removes what it wrote, and the figures are older than nothing
    (analysis / "verdicts.parquet").unlink()
    jobs = planned(clone)
    assert "analysis" in planned_rules(jobs) and "table_runs" in planned_rules(jobs)
    assert not planned_rules(jobs) & TRAIN_RULES
    # an admission check's file cut short (a copy stopped by a quota): measured again, nothing else. (A measurement
    # records no hash: a value overwritten in place that still reads is not found; a run's files are hashed.)
    clone2 = copy_clone(small_toy_built, tmp_path / "clone2")
    p = clone2 / "results" / "toy" / "admission" / "noise-15.qwen-s.parquet"
    with open(p, "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    r = snakemake(clone2, "-n", "-c", "2")
    assert ("admission", "row=noise-15, student=qwen-s") in jobs_in(r)
    assert f"opd: {p.relative_to(clone2)}: not a complete Parquet file" in r.stderr
    assert not planned_rules(jobs_in(r)) & TRAIN_RULES


def test_same_size_damage_to_a_file_the_plan_reads_is_named_and_retrained_not_a_crash(toy_clone):
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    p = clone / "results" / "toy" / "runs" / "bf16.llama-s.s3" / "heldout.parquet"
    b = bytearray(p.read_bytes())
    b[len(b) // 2: len(b) // 2 + 64] = bytes(b ^ 0xFF for b in b[len(b) // 2: len(b) // 2 + 64])
    p.write_bytes(bytes(b))
    before = tree_state(clone)
    r = snakemake(clone, "-n", "-c", "2")
    assert "opd: run bf16.llama-s.s3 is damaged" in r.stderr and "content changed" in r.stderr
    assert "bf16.llama-s.s3" in planned_runs(jobs_in(r))
    assert tree_state(clone) == before


def test_verdict_refuses_a_stale_analysis_and_compare_refuses_what_is_no_verdict_table(toy_clone):
    clone = toy_clone  # the toy experiment selected: its rows and results/toy

    def verdict():
        return subprocess.run([sys.executable, "-m", "opd.cli", "verdict", "noise-15"], cwd=clone, capture_output=True,
                              text=True)
    assert verdict().returncode == 0  # the committed analysis is current in a fresh clone
    original = (clone / "config.yaml").read_text()
    for edit, said in ((lambda e: e.update(tau=0.0001, taus=[0.0001]), "they are at tau 0.2, the config asks for 0.0001"),
                       (lambda e: e["train"].update(steps=101), "computed from another spec than the config asks for"),
                       (lambda e: e["students"]["qwen-s"].update(d_ff=200), "computed from another spec")):
        edit_config(clone, lambda c: edit(c["experiments"]["toy"]))
        r = verdict()
        assert r.returncode == 2 and said in r.stderr and "snakemake -c 2" in r.stderr, r.stderr
        assert r.stdout == ""  # no old verdict printed as if current
        (clone / "config.yaml").write_text(original)
    verdicts = clone / "results" / "toy" / "analysis" / "verdicts.parquet"
    assert set(store.read_table(verdicts)["tau"]) == {0.2} and store.read_inputs(verdicts)["tau"] == 0.2
    r = subprocess.run([sys.executable, "-m", "opd.cli", "compare", "results/toy/analysis/rl.parquet",
                        "results/toy/analysis/budget.parquet"], cwd=clone, capture_output=True, text=True)
    assert r.returncode == 2 and "not a verdict table" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("exp", ["lean", "toy"])
def test_every_committed_analysis_file_names_the_record_verdicts_holds(exp):
    """verdicts.parquet carries what the analysis was computed from (every run's and admission check's sha256); each
    other file the analysis job wrote carries that record's sha256, so a table is traced to the runs it read."""
    from opd import dag
    folder = C.ROOT / "results" / exp / "analysis"
    full = store.read_inputs(folder / "verdicts.parquet")
    assert full["runs"] and full["measurements"] and full["sha256"]
    others = {f.name: store.read_inputs(f) for f in sorted(folder.glob("*.parquet")) if f.name != "verdicts.parquet"}
    named = {n for n, rec in others.items() if rec is not None}
    assert len(named) >= 12, sorted(others)
    assert all(others[n] == dag.record_reference(full) for n in named), {n: others[n] for n in named}


def test_a_second_prepare_of_a_folder_moves_nothing_twice(tmp_path):
    """Two callers preparing one run (two snakemake calls started together; Snakemake's lock lets one run jobs):
    the second finds the run already set aside and moves nothing."""
    src = C.ROOT / "results" / "toy" / "runs" / "bf16.qwen-s.s1"
    out = tmp_path / "results" / "toy"
    shutil.copytree(src, out / "runs" / "bf16.qwen-s.s1")

    class Other:
        def sha256(self):
            return "0" * 64
    first, dest = store.prepare(out / "runs" / "bf16.qwen-s.s1", Other(), out, log=lambda m: None)
    second, again = store.prepare(out / "runs" / "bf16.qwen-s.s1", Other(), out, log=lambda m: None)
    assert first.state == "stale" and dest is not None and second.state == "missing" and again is None
    assert len(store.set_aside_entries(out)) == 1


@pytest.mark.parametrize("edit,field,said", [
    (lambda e: e["students"].update({float("nan"): e["students"]["qwen-s"]}), "field 'students'", "is not a name"),
    (lambda e: e["rows"][1].update(students=["qwen-s", "qwen-s"]), "row 2 ('fp8w'), field 'students'",
     "non-unique"),
    (lambda e: e["rows"][1].update(seeds=[2 ** 63]), "row 2 ('fp8w'), field 'seeds'", "greater than the maximum"),
    (lambda e: e.update(tau=0.25, taus=[0.2]), "field 'taus'", "does not hold tau (0.25)"),
])
def test_the_smaller_holes_are_refused_before_any_job_naming_row_and_field(toy_config, edit, field, said):
    edit(toy_config["experiments"]["toy"])
    with pytest.raises(C.ConfigError) as e:
        C.validate(toy_config)
    assert field in str(e.value) and said in str(e.value)
