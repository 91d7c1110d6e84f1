"""The DAG's guarantees, checked with real Snakemake runs in a fresh `git clone` of this tree, whose
results/ already holds the default experiment's results (config.yaml's `experiment`; the session's clones:
conftest.first_dry_run, built), and the toy's (conftest.toy_clone)."""

import re
import subprocess

import pytest

from conftest import TRAIN_RULES, default_experiment, edit_config, jobs_in, planned, planned_rules, planned_runs, snakemake
from opd import config as C
from opd import dag
from opd.spec import Experiment

DEFAULT = default_experiment()  # what `snakemake -c 2` builds, `built` built, and the tests on `built` edit
TRAINING = TRAIN_RULES | {"base_models", "base_models_converged"}
COMPUTE = TRAINING | {"admission", "kv_attribution_student", "throughput", "memory_bound"}  # the jobs that train or measure


@pytest.mark.parametrize("dry_run", ["first_dry_run", "toy_dry_run"])  # the default experiment, and the toy's
def test_a_fresh_clones_dry_run_schedules_no_compute_needs_no_torch_and_writes_nothing(dry_run, request):
    """A fresh `git clone` with the committed results: its first `snakemake -n` (conftest.first_dry_run, with torch
    unimportable: parsing the rules and building every job spec must not need it) plans no training and no
    measurement, and writes nothing under results/ or figures/ (the committed spec files keep their exact
    bytes). (The KV attribution's summary, kv_attribution, reruns as the analysis does: it reads the jobs'
    sequences.)"""
    clone, r = request.getfixturevalue(dry_run)
    assert r.returncode == 0, r.stderr[-3000:]
    if dry_run == "toy_dry_run":  # the toy's base-model weights are not committed (.gitignore): base.json pins them
        models = clone / "results" / "toy" / "_models"
        assert list(models.glob("*/base.json")) and not list(models.glob("*/*.pt"))
        assert "opd: base models" not in r.stderr  # not damaged: pinned (opd.store.Found)
    assert not planned_rules(jobs_in(r)) & COMPUTE
    # --no-optional-locks: git status would refresh the shared clone's index while other workers copy the clone
    status = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=all", "results",
                             "figures"], cwd=clone, capture_output=True, text=True)
    assert status.returncode == 0 and status.stdout == ""


def test_a_job_that_must_run_retrains_the_uncommitted_base_models_it_reads_and_nothing_else(toy_clone):
    """In a clone without the toy's base-model weights, a job that must run gets them as inputs, so rule base_models
    retrains exactly the base models it reads (checked against base.json when it runs: opd.store.check_pinned); every
    job that need not run reads only base.json, so it is not rerun after them (common.smk's base_inputs)."""
    toy = toy_clone / "results" / "toy"
    (toy / "runs" / "fp8w.qwen-m.s1" / "run.json").unlink()  # seed 1: base-model draw 1
    (toy / "admission" / "bf16.llama-s.parquet").unlink()  # a measurement: draw 0
    r = snakemake(toy_clone, "-n")
    assert {j for j in jobs_in(r) if j[0] in COMPUTE} == {
        ("base_models", "base=qwen-m.d1"), ("train", "run_id=fp8w.qwen-m.s1"),
        ("base_models", "base=llama-s"), ("admission", "row=bf16, student=llama-s")}


def test_adding_a_row_schedules_only_that_row(built_clone):
    edit_config(built_clone, lambda c: c["experiments"][DEFAULT]["rows"].append(
        {"name": "noise-04", "noise_sigma": 0.04}))
    jobs = planned(built_clone)
    assert planned_runs(jobs) == {"noise-04.qwen-s.s0", "noise-04.qwen-s.s1", "noise-04.qwen-s.s2"}  # default seeds
    assert {w for r, w in jobs if r == "admission"} == {"row=noise-04, student=qwen-s"}
    assert "base_models" not in planned_rules(jobs)
    assert {"analysis", "figure_budget", "table_runs"} <= planned_rules(jobs)
    # outputs that do not read the runs are left alone
    assert not planned_rules(jobs) & {"kv_attribution_student", "kv_attribution", "throughput", "memory_bound",
                                      "figure_kv_attribution"}


def test_changing_one_field_reruns_only_that_row(built_clone):
    def change(c):
        row = next(r for r in c["experiments"][DEFAULT]["rows"] if r["name"] == "fp8w")  # on every student
        row["weights"] = "fp8_block"
    edit_config(built_clone, change)
    jobs = planned(built_clone)
    assert planned_runs(jobs) == {f"fp8w.{s}.s{i}" for s in ("qwen-s", "qwen-m", "llama-s") for i in range(3)}
    assert "base_models" not in planned_rules(jobs)


def test_adding_a_seed_runs_only_that_seed(built_clone):
    def add_seed(c):
        row = next(r for r in c["experiments"][DEFAULT]["rows"] if r["name"] == "nvfp4")  # the primary student's
        row["seeds"] = [0, 1, 2, 3]
    edit_config(built_clone, add_seed)
    jobs = planned(built_clone)
    assert planned_runs(jobs) == {"nvfp4.qwen-s.s3"}
    assert not planned_rules(jobs) & {"base_models", "admission"}
    assert {"analysis", "figure_noise", "figure_budget", "table_runs"} <= planned_rules(jobs)


def test_changing_the_probe_settings_reruns_only_the_probed_runs(built_clone):
    """The probes run inside their runs' training jobs (rule train_probed): new probe settings retrain those
    runs (opd.dag.probe_runs: the primary student's first seed of the baseline, noise and staleness rows), with
    their probes, and no other run."""
    smk = built_clone / "opd/dag.py"  # opd.dag.probes: where the probe settings are set
    text = smk.read_text()
    assert '"prompts": 128,' in text
    smk.write_text(text.replace('"prompts": 128,', '"prompts": 64,'))
    jobs = planned(built_clone)
    probed = {w.split("=", 1)[1] for r, w in jobs if r == "train_probed"}
    e = Experiment.of(C.load(built_clone / "config.yaml"))
    expected = set(dag.probe_runs(e))
    assert planned_runs(jobs) == probed == expected and f"{e.baseline.name}.{e.primary}.s0" in probed
    assert {"probes", "figure_mechanism", "findings"} <= planned_rules(jobs)


def test_placement_edits_rerun_nothing(built_clone):
    def describe(c):
        c["experiments"][DEFAULT]["rows"][1]["description"] = "a new note"
    edit_config(built_clone, describe)
    assert not planned_rules(planned(built_clone)) & TRAINING


def test_editing_library_code_schedules_no_training(built_clone):
    for f in ("opd/stats/bootstrap.py", "opd/backends/tiny/trainer.py", "opd/quant.py"):
        with open(built_clone / f, "a") as fh:
            fh.write("\n# an edit\n")
    assert not planned_rules(planned(built_clone)) & TRAINING


def test_editing_one_figure_script_rebuilds_only_that_figure(built_clone):
    with open(built_clone / "workflow/scripts/figure_budget.py", "a") as fh:
        fh.write("\n# an edit\n")
    assert planned_rules(planned(built_clone)) == {"figure_budget", "all"}


def test_bad_config_stops_before_any_job(toy_clone):
    clone = toy_clone  # the toy's fourth row, nvfp4
    edit_config(clone, lambda c: c["experiments"]["toy"]["rows"][3].update(staleness=-2))
    r = snakemake(clone, "-n", check=False)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    m = re.search(r"experiment 'toy', row 4 \('nvfp4', config.yaml line (\d+)\), field 'staleness'", out)
    assert m, out  # counted from 1, and the line of the clone's edited config.yaml that row starts on
    assert "name: nvfp4" in (clone / "config.yaml").read_text().splitlines()[int(m.group(1)) - 1]
    assert "Job stats" not in out and "Traceback" not in out and 'File "' not in out  # the message, no traceback


def test_retraining_a_student_reruns_every_run_of_that_student_only(built_clone):
    def change(c):
        c["experiments"][DEFAULT]["students"]["qwen-m"]["teacher_steps"] += 10  # its base models' spec
    edit_config(built_clone, change)
    jobs = planned(built_clone)
    # its base models on every draw (the folder: the student for draw 0, <student>.d<draw> after)
    assert {w for r, w in jobs if r.startswith("base_models")} == {"base=qwen-m", "base=qwen-m.d1", "base=qwen-m.d2"}
    runs = planned_runs(jobs)
    assert runs and all(".qwen-m." in r for r in runs)
    assert {"bf16.qwen-m.s0", "fp8w.qwen-m.s0"} <= runs
