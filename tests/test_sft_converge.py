"""The converged base-model recipe (opd.backends.tiny.sft.train_converged; issue 43, item 0): the teacher stops at the
measured plateau, the student is the first checkpoint under its held-out-KL target, the curves are written beside the
models and recorded in base.json; a student with `converge:` is validated with errors naming it and the field; the
acceptance table (opd.base_check) judges the band. Real training, on a 1-layer model for ~100 steps (seconds)."""
import copy
import json
import math

import pandas as pd
import pytest
import torch

from opd import base_check, dag, store
from opd import config as C
from opd.backends.tiny import sft
from opd.backends.tiny.offline import base_job
from opd.spec import BaseAcceptance, BaseSpec, Experiment, Student

TINY = {"layers": 1, "family": "qwen2", "heads": 1, "kv_heads": 1, "head_dim": 16, "d_ff": 32, "sft_lr": 3e-3,
        "sft_batch": 16, "teacher_steps": 60, "seed": 0,
        "converge": {"student_kl": 0.05, "eval_every": 20, "save_every": 5, "window": 2, "tol": 0.1, "max_steps": 200}}


@pytest.fixture(scope="module")
def converged(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("base")
    spec = BaseSpec(experiment="t", backend="tiny", task_seed=0, student="tiny", student_spec=Student.of(TINY),
                    eval_responses=1)
    base_job(spec, out)
    return spec, out, json.loads((out / "base.json").read_text()), store.read_table(out / store.BASE_CURVES)


def test_the_teacher_stops_at_the_first_plateau_from_teacher_steps_on(converged):
    spec, out, meta, curves = converged
    c = spec.student_spec.converge
    ce = curves.dropna(subset=["heldout_ce"])
    assert list(ce["step"]) == list(range(c.eval_every, meta["teacher_step"] + 1, c.eval_every))
    assert len(curves) == meta["teacher_step"] and list(curves["step"]) == list(range(1, meta["teacher_step"] + 1))

    def flat(values):  # the best of the last `window` not below (1 - tol) x the best before them
        return len(values) > c.window and min(values[-c.window:]) > (1 - c.tol) * min(values[:-c.window])
    stops = [s for i, s in enumerate(ce["step"]) if s >= spec.student_spec.teacher_steps
             and flat(list(ce["heldout_ce"])[:i + 1])]
    assert meta["plateau"] and stops == [meta["teacher_step"]] and meta["teacher_step"] < c.max_steps
    # the teacher on disk is the model of that step: its held-out cross-entropy is the curve's last
    _, heldout = sft.make_task(0)
    assert sft.heldout_ce(sft.M.load(out / "teacher.pt"), heldout) == pytest.approx(meta["teacher_ce"], abs=1e-6)
    assert meta["teacher_ce"] == pytest.approx(ce["heldout_ce"].iloc[-1])


def test_the_student_is_the_first_checkpoint_under_its_target(converged):
    spec, out, meta, curves = converged
    c = spec.student_spec.converge
    kl = curves.dropna(subset=["heldout_kl"]).set_index("step")["heldout_kl"]
    chosen = meta["student_step"]
    crossing = next(s for s in range(c.eval_every, meta["teacher_step"] + 1, c.eval_every) if kl[s] < c.student_kl)
    assert crossing - c.eval_every < chosen <= crossing and chosen % c.save_every == 0
    assert kl[chosen] < c.student_kl and kl[chosen] == meta["student_kl"]
    # every measured point before it is at or above the target, and the scan saw one (the test is not vacuous)
    before = kl[kl.index < chosen]
    assert len(before) and (before >= c.student_kl).all()
    assert all(s in kl.index for s in range(crossing - c.eval_every + c.save_every, chosen + 1, c.save_every))
    # measured again from the saved models: the KL an OPD run on them reports at step 0
    kl0, ce = sft.measure_base(out, 0, spec.eval_responses)
    assert kl0 == meta["student_kl"] and ce == pytest.approx(meta["teacher_ce"], abs=1e-6)


def test_the_curves_are_recorded_beside_the_models_and_checked_like_them(converged):
    spec, out, meta, _ = converged
    assert set(meta["files"]) == {"student.pt", "teacher.pt", "curves.parquet"}
    assert store.inspect(out, {}, spec, meta_name="base.json", files=store.BASE_FILES).state == "current"
    (out / "curves.parquet").write_bytes((out / "curves.parquet").read_bytes()[:-8] + b"\0" * 8)
    assert store.inspect(out, {}, spec, meta_name="base.json", files=store.BASE_FILES).state == "damaged"


def test_no_student_when_only_the_teacher_is_under_target(tmp_path):
    torch.set_num_threads(1)
    s = copy.deepcopy(TINY)
    s["converge"] = {**s["converge"], "student_kl": 1e-12, "max_steps": 80}
    with pytest.raises(sft.NoStudent, match="no checkpoint before the teacher"):
        sft.train_converged(Student.of(s), 0, 0, tmp_path, 1)


def test_a_fixed_recipe_spec_is_written_as_before(toy_config):
    """The converged recipe's fields are unwritten where unset: every toy base model keeps its spec (and its hash)."""
    b = dag.base_specs(Experiment.of(toy_config))
    assert all("eval_responses" not in x.to_json() and "converge" not in x.to_json()["student_spec"] for x in b.values())
    toy = toy_config["experiments"]["toy"]["students"]["qwen-s"]
    assert b["qwen-s"].to_json()["student_spec"] == toy


def plateau_config(toy_config):
    cfg = copy.deepcopy(toy_config)
    st = cfg["experiments"]["toy"]["students"]["qwen-s"]
    del st["student_steps"]
    st["converge"] = {**TINY["converge"], "eval_every": 50, "save_every": 10, "max_steps": 2500}
    return cfg


def err(cfg) -> str:
    with pytest.raises(C.ConfigError) as e:
        C.validate(cfg)
    return str(e.value)


def test_converge_is_validated_naming_the_student_and_the_field(toy_config):
    cfg = plateau_config(toy_config)
    C.validate(cfg)
    s = Experiment.of(cfg).students["qwen-s"]
    assert s.converge.student_kl == 0.05 and dag.base_spec(Experiment.of(cfg), "qwen-s", 1).eval_responses == 2
    bad = copy.deepcopy(cfg)
    bad["experiments"]["toy"]["students"]["qwen-s"]["student_steps"] = 300
    assert "experiment 'toy', field 'students.qwen-s.student_steps': the converged recipe" in err(bad)
    bad = copy.deepcopy(cfg)
    del bad["experiments"]["toy"]["students"]["qwen-s"]["converge"]["tol"]
    assert "field 'students.qwen-s.converge'" in err(bad) and "'tol' is a required property" in err(bad)
    bad = copy.deepcopy(cfg)
    bad["experiments"]["toy"]["students"]["qwen-s"]["converge"]["max_steps"] = 2520
    assert "field 'students.qwen-s.converge.max_steps': 2520 is not a multiple of eval_every (50)" in err(bad)
    bad = copy.deepcopy(cfg)
    bad["experiments"]["toy"]["students"]["qwen-s"]["converge"]["save_every"] = 30
    assert "field 'students.qwen-s.converge.save_every'" in err(bad)
    bad = copy.deepcopy(cfg)
    bad["experiments"]["toy"]["students"]["qwen-s"]["converge"]["max_steps"] = 500
    assert "field 'students.qwen-s.converge.max_steps': 500 is below teacher_steps (600)" in err(bad)
    bad = copy.deepcopy(cfg)
    bad["experiments"]["toy"]["students"]["qwen-s"]["converge"]["student_kl"] = 0
    assert "students.qwen-s.converge.student_kl" in err(bad)
    bad = copy.deepcopy(toy_config)
    del bad["experiments"]["toy"]["students"]["qwen-m"]["student_steps"]
    assert "field 'students.qwen-m.student_steps': the tiny backend needs it" in err(bad)


def test_the_shipped_pre_registration_is_a_valid_experiment_over_config_yaml():
    cfg = base_check.merged([C.ROOT / "config.yaml", C.ROOT / "experiments" / "sft-plateau.yaml"])
    e = Experiment.of(cfg)
    assert e.name == "sft-plateau" and e.base_draws == 3 and e.base_acceptance == BaseAcceptance(0.25, 2.0)
    assert {s: e.students[s].converge.student_kl for s in e.students} == {
        "qwen-s": 0.1, "qwen-m": 0.1, "llama-s": 0.1, "qwen-s-near": 0.01}


def test_the_acceptance_table_judges_the_band():
    draws = pd.DataFrame({"student": ["a"] * 3 + ["b"] * 3, "draw": [0, 1, 2] * 2,
                          "initial_kl": [0.1, 0.11, 0.09, 0.1, 0.1, 0.2], "teacher_ce": [1e-3, 1.9e-3, 1.5e-3, 1e-3, 1e-3, 3e-3]})
    t = base_check.table(draws, BaseAcceptance(0.25, 2.0)).set_index("student")
    assert t.loc["a", "kl_max_dev"] == pytest.approx(0.1) and t.loc["a", "ce_ratio"] == pytest.approx(1.9)
    assert t.loc["a", "accepted"] and not t.loc["b", "accepted"]
    assert t.loc["b", "kl_max_dev"] == pytest.approx(0.2 / (0.4 / 3) - 1) and not t.loc["b", "kl_pass"]
    assert not t.loc["b", "loss_pass"] and not math.isnan(t.loc["b", "ce_ratio"])
    assert "| b | 0.1 / 0.1 / 0.2 |" in base_check.markdown(t.reset_index(), BaseAcceptance(0.25, 2.0), "x")
