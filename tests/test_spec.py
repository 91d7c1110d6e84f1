"""The typed job specs (opd.spec, built by opd.dag): every spec file keeps its exact bytes, a spec survives its
file (and submitit's pickle) unchanged, a default is never written into a spec, and config validation and the
DAG's parse import no torch (opd's imports run one way: tests/test_architecture.py)."""
import dataclasses
import json
import pickle
import subprocess
import sys

import pytest

from conftest import NO_TORCH_SNAKEMAKE, ROOT
from helpers import load_script
from opd import config as C
from opd import dag
from opd.rows import Row
from opd.spec import (JOB_SPECS, AdmissionSpec, Experiment, KVAttribution, Launcher, Probes, RLCollapse, Settings,
                      SpecError, Student, TrainSpec, Verl)

TOY_JOBS = ROOT / "results" / "toy" / "_jobs"


def file_text(spec: dict) -> str:
    """A spec file's text, as opd.config.write_if_changed writes it."""
    return json.dumps(spec, sort_keys=True, indent=1) + "\n"


def legacy_specs(cfg: dict, exp: str) -> dict[str, dict]:
    """{path: spec} of every job spec the rules wrote before the typed specs, restated from those rules
    (common.smk's job_spec, train.smk's train_inputs, offline.smk's offline_inputs) with config.yaml's mappings:
    the format the typed builders must reproduce. Probed runs (mechanism.smk) and the tiny-only measurements are
    left out: the toy's committed files hold those (test_a_fresh_clones_dry_run_...)."""
    E = cfg["experiments"][exp]
    backend, out, first = E["backend"], f"results/{exp}", next(iter(E["students"]))
    rows = [Row.of(r) for r in E["rows"]]

    n_draws = E.get("base_draws", 1)

    def base(student, draw=0):
        folder = student if draw == 0 else f"{student}.d{draw}"
        return {"student": f"{out}/_models/{folder}/student.pt",
                "teacher": f"{out}/_models/{folder}/teacher.pt"} if backend == "tiny" else {}

    def student_spec(student, draw):
        st = E["students"][student]
        return st if draw == 0 else {**st, "seed": st.get("seed", 0) + draw}

    def job_spec(**extra):
        spec = {"experiment": exp, "backend": backend, "task_seed": E["train"].get("task_seed", 0), **extra}
        if backend == "verl":
            spec["verl"] = E.get("verl", {})
            spec.setdefault("settings", E["train"])
        return spec

    def offline(student, **fields):
        if backend == "verl":
            fields["student_spec"] = E["students"][student]
        b = base(student)
        return job_spec(student=student, student_path=b.get("student"), teacher_path=b.get("teacher"), **fields)

    specs = {}
    for r in rows:
        for s in r.students_or(first):
            for seed in (range(E["sequential"].get("start_seeds", 1)) if r.sequential else r.seeds or E["seeds"]):
                run_id = f"{r.name}.{s}.s{seed}"
                settings = {**E["train"], **({"lr": r.lr} if r.lr is not None else {})}
                guard = None
                if r.guard is not None:
                    g = r.guard.as_dict()
                    guard = {**g, "d_max": float(E["admission"]["L"] if g["d_max"] == "budget" else g["d_max"])}
                b = base(s, seed % n_draws)
                specs[f"{out}/_jobs/train/{run_id}.json"] = job_spec(
                    run_id=run_id, row=r.params(), student=s, seed=seed, student_spec=student_spec(s, seed % n_draws),
                    settings=settings, student_path=b.get("student"), teacher_path=b.get("teacher"),
                    **({"guard": guard} if guard else {}))
        if r.in_budget and not r.staleness:
            for s in r.students_or(first):
                specs[f"{out}/_jobs/admission/{r.name}.{s}.json"] = offline(
                    s, row=r.params(), **{k: v for k, v in E["admission"].items() if k in ("prompts", "responses", "seed")})
    recipes = sorted({r.kv_cache for r in rows if r.kv_cache != "none"})
    for s in sorted({s for r in rows if r.kv_cache != "none" for s in r.students_or(first)}):
        specs[f"{out}/_jobs/kv_attribution/{s}.json"] = offline(
            s, recipes=recipes, **{"prompts": 64, "responses": 4, **E.get("kv_attribution", {})},
            seed=E["admission"].get("seed", 0))
    return specs


def test_every_committed_toy_spec_reads_back_to_its_exact_bytes():
    files = sorted(TOY_JOBS.rglob("*.json"))
    assert len(files) > 150 and {f.parent.name for f in files} == set(JOB_SPECS) - {"heldout"}  # verl's alone
    for f in files:
        spec = JOB_SPECS[f.parent.name].from_json(json.loads(f.read_text()), where=str(f))
        assert file_text(spec.to_json()) == f.read_text(), f
        assert dag.spec_path("results/toy", spec) == str(f.relative_to(ROOT))
        assert JOB_SPECS[spec.KIND].from_json(spec.to_json()) == spec


@pytest.mark.parametrize("exp", ["toy", "paper"])
def test_the_typed_builders_write_what_the_rules_wrote(exp):
    """Every training, admission and KV-attribution spec of the experiment, built by opd.dag, is the spec the
    rules built from config.yaml's mappings (for the toy, also the committed file)."""
    cfg = C.load()
    e = Experiment.of(cfg, exp)
    models = f"results/{exp}/_models"
    built = {}
    for run in e.runs():
        built.update({dag.spec_path(f"results/{exp}", s): s for s in [
            dag.train_spec(e, run, dag.base_paths(e, models, run.student, e.draw_of(run.seed)))]})
    for r in e.rows:
        if r.in_budget and not r.staleness:
            for s in r.students_or(e.primary):
                spec = dag.admission_spec(e, r, s, dag.base_paths(e, models, s))
                built[dag.spec_path(f"results/{exp}", spec)] = spec
    recipes = sorted({r.kv_cache for r in e.rows if r.kv_cache != "none"})
    for s in sorted({s for r in e.rows if r.kv_cache != "none" for s in r.students_or(e.primary)}):
        spec = dag.kv_attribution_spec(e, s, dag.base_paths(e, models, s), recipes)
        built[dag.spec_path(f"results/{exp}", spec)] = spec
    legacy = legacy_specs(cfg, exp)
    assert set(built) == set(legacy) and len(built) > 40
    for path, spec in built.items():
        assert file_text(spec.to_json()) == file_text(legacy[path]), path
        committed = ROOT / path
        if exp == "toy" and "probes" not in json.loads(committed.read_text()):  # probed runs: mechanism.smk's
            assert committed.read_text() == file_text(spec.to_json()), path


def test_a_spec_survives_its_file_and_submitits_pickle():
    e = Experiment.of(C.load(), "paper")
    specs = [dag.train_spec(e, r, {}) for r in e.runs()]
    guarded = Experiment.of(C.load(), "toy")
    run = next(r for r in guarded.runs() if r.row.guard)
    specs.append(dag.train_spec(guarded, run, dag.base_paths(guarded, "m", run.student)))
    specs.append(dag.admission_spec(e, e.baseline, e.primary, {}))
    for spec in specs:
        back = JOB_SPECS[spec.KIND].from_json(json.loads(json.dumps(spec.to_json())))
        assert back == spec and back.sha256() == spec.sha256()
        assert pickle.loads(pickle.dumps(spec)) == spec
    assert isinstance(specs[-2].guard.d_max, float) and specs[-2].guard == guarded.guard(run.row)
    changed = dataclasses.replace(specs[0], seed=specs[0].seed + 1)
    assert changed.sha256() != specs[0].sha256()
    assert dataclasses.replace(specs[0], threads=8).to_json() == specs[0].to_json()  # threads: the rule's, not the spec's


def test_a_new_default_writes_nothing_into_any_spec():
    """Adding a setting with a default to Settings (or a student field) changes no spec file: a spec holds
    what config.yaml wrote, never a default."""
    cfg = C.load()
    e = Experiment.of(cfg, "toy")
    More = dataclasses.make_dataclass("More", [("new_knob", int, dataclasses.field(default=7))], bases=(Settings,),
                                      frozen=True)
    run = next(r for r in e.runs() if r.row.lr is not None)
    spec = dag.train_spec(e, run, {})
    more = dataclasses.replace(spec, settings=More.of(cfg["experiments"]["toy"]["train"]).for_row(run.row))
    assert more.settings.new_knob == 7 and more.to_json() == spec.to_json()
    assert spec.to_json()["settings"] == {**cfg["experiments"]["toy"]["train"], "lr": run.row.lr}
    # every settings object writes exactly what was written
    for name, s in e.students.items():
        assert s.written() == cfg["experiments"]["toy"]["students"][name]
    assert Settings.of({}).written() == {} and Settings.of({"steps": 5}).with_(lr=1.0).written() == {"steps": 5, "lr": 1.0}


def test_defaults_have_one_home():
    """The experiment's unset settings read their default from opd.spec."""
    cfg = C.load()
    e = cfg["experiments"]["toy"]
    for key in ("kv_attribution", "rl_collapse", "infra"):
        e.pop(key)
    e["slurm"] = {}
    cfg["slurm"] = {}
    x = Experiment.of(cfg, "toy")
    assert x.kv_attribution == KVAttribution() and (x.kv_attribution.prompts, x.kv_attribution.responses) == (64, 4)
    assert x.rl_collapse.thresholds() == {"accuracy_points": 5.0, "entropy_factor": 1.5, "length_factor": 1.2}
    assert RLCollapse.of({"accuracy_points": 3}).thresholds()["accuracy_points"] == 3
    assert (x.slurm.time_min, x.slurm.mem_gb, x.slurm.nodes, x.slurm.cpus_per_task) == (60, 4, 1, 1)
    assert (x.slurm.poll_s, x.slurm.dead_after_s, x.slurm.max_requeues) == (5, 120, 3)
    assert x.infra.window is None and Launcher.from_json(None).launcher == "local"
    assert Verl.of({}).layout.gpus_per_node == 4 and Verl.of({"layout": {"rollout_tp": 2}}).written() == {
        "layout": {"rollout_tp": 2}}


@pytest.mark.parametrize("every,steps,want", [(None, 100, [0, 100]), (0, 100, []), (25, 100, [0, 25, 50, 75, 100]),
                                              (40, 100, [0, 40, 80, 100])])
def test_one_evaluation_schedule_for_both_backends(every, steps, want):
    """eval_every unset: the first and the last step (a schedule verl can checkpoint and the verdicts need)."""
    from opd.backends.verl.plan import schedule
    s = Settings.of({"steps": steps, **({} if every is None else {"eval_every": every})})
    assert s.eval_steps() == want and list(schedule(s, 0).eval_steps) == want


def test_a_bad_spec_is_named_and_a_guarded_run_is_never_probed(tmp_path):
    e = Experiment.of(C.load(), "toy")
    run = next(r for r in e.runs() if r.row.guard)
    good = dag.train_spec(e, run, {}).to_json()
    with pytest.raises(SpecError, match=r"unknown field\(s\) \['stepz'\]"):
        TrainSpec.from_json({**good, "stepz": 3})
    with pytest.raises(SpecError, match=r"missing field\(s\) \['seed'\]"):
        TrainSpec.from_json({k: v for k, v in good.items() if k != "seed"})
    with pytest.raises(SpecError, match="task_seed 3 differs from settings.task_seed 0"):
        TrainSpec.from_json({**good, "task_seed": 3})
    with pytest.raises(SpecError, match="a guarded run cannot be probed"):
        TrainSpec.from_json({**good, "probes": {"prompts": 1, "responses": 1, "probe_seed": 0, "steps": [0]}})
    with pytest.raises(SpecError, match="resolved to a number"):
        TrainSpec.from_json({**good, "guard": {**good["guard"], "d_max": "budget"}})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({**good, "stepz": 3}))
    r = subprocess.run([sys.executable, "-m", "opd.cli", "train", "--spec", str(path), "--run-dir", str(tmp_path / "r")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and f"{path}: unknown field(s) ['stepz']" in r.stderr and not (tmp_path / "r").exists()


def test_the_smoke_benchmark_builds_valid_specs(tmp_path):
    smoke = load_script("benchmarks/verl_smoke.py")
    t = smoke.train_spec(tmp_path, {"name": "k2", "staleness": 2})
    a = smoke.admission_spec(tmp_path, {"name": "nvfp4", "weights": "nvfp4"})
    assert isinstance(a, AdmissionSpec) and t.settings.eval_steps() == [0, smoke.STEPS] and smoke.STEPS >= 3
    assert t.verl.data.train.endswith("train.parquet")
    assert dag.heldout_spec(t, smoke.STEPS, "r").checkpoint == f"r/verl_checkpoints/global_step_{smoke.STEPS // 2}/actor"
    assert isinstance(t.student_spec, Student) and a.settings.max_response_length == t.settings.max_response_length


def test_config_validation_imports_no_torch():
    """Every `snakemake` call validates the config (the paper's verl checks included) before any job: without
    torch, whose import costs seconds and is not needed to read a config."""
    code = ("import sys; from opd import config as C; cfg = C.load(); C.runs(cfg, 'paper'); "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_papers_dry_run_needs_no_torch_writes_nothing_and_every_spec_is_as_before(clone):
    """`snakemake -n` of the paper parses the rules and builds every job spec with torch unimportable, and writes no
    spec file; the paper's spec files, written by their rule (job_spec: `--until job_spec` runs no compute job), are
    those the rules wrote from config.yaml's mappings (legacy_specs). (The toy's fresh-clone dry run, without torch
    and writing nothing: tests/test_dag.py.)"""
    r = subprocess.run([sys.executable, "-c", NO_TORCH_SNAKEMAKE, "-n", "--config", "experiment=paper"], cwd=clone,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (clone / "results" / "paper").exists()  # a dry run writes no spec file
    r = subprocess.run([sys.executable, "-c", NO_TORCH_SNAKEMAKE, "-c", "2", "--until", "job_spec", "--config",
                        "experiment=paper"], cwd=clone, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    written = {str(p.relative_to(clone)): p.read_text() for p in (clone / "results" / "paper" / "_jobs").rglob("*.json")}
    legacy = legacy_specs(C.load(), "paper")
    heldout = {p for p in written if "/_jobs/heldout/" in p}  # verl's evaluation jobs (tests/test_verl_eval.py)
    assert set(written) - heldout == set(legacy) and heldout
    assert all(written[p] == file_text(legacy[p]) for p in legacy)


def test_probes_read_their_settings_with_defaults_in_one_home():
    p = Probes.of({"prompts": 4, "responses": 1, "probe_seed": 0, "steps": [0, 2]})
    assert p.extra_seeds == () and p.sample_prefixes == 200 and p.written() == {"prompts": 4, "responses": 1,
                                                                                 "probe_seed": 0, "steps": [0, 2]}
