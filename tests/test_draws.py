"""Base-model draws (`base_draws`): each student trained several times (SFT seeds), run seed s on draw
s % base_draws, every comparison paired on the draws. What a user relies on: adding draws keeps every run on
draw 0 (its spec, so its cached result), a later draw's runs train from that draw's own base models, a row
that cannot be compared on its draws is refused before any job, and the instrument's seed noise is measured
on one base model at a time."""
import copy

import numpy as np
import pandas as pd
import pytest

from opd import config as C
from opd import dag, findings, stats
from opd.spec import Experiment

MODELS = "results/toy/_models"


def with_draws(cfg, n):
    """The toy with n base-model draws (n = 1: the field left out, one base model per student)."""
    cfg = copy.deepcopy(cfg)
    cfg["experiments"]["toy"]["base_draws"] = n
    if n == 1:
        del cfg["experiments"]["toy"]["base_draws"]
    seq = cfg["experiments"]["toy"].get("sequential")
    if seq is not None:
        seq["start_seeds"] = max(seq.get("start_seeds", 1), n)
        seq["max_seeds"] = max(seq["max_seeds"], n)
    return cfg


def err(cfg) -> str:
    with pytest.raises(C.ConfigError) as e:
        C.validate(cfg)
    return str(e.value)


def test_adding_draws_keeps_every_draw_0_spec_and_moves_later_seeds_to_their_own_base_models(toy_config):
    C.validate(with_draws(toy_config, 1))
    one = Experiment.of(with_draws(toy_config, 1))
    C.validate(with_draws(toy_config, 3))
    three = Experiment.of(with_draws(toy_config, 3))
    before, after = dag.train_specs(one, MODELS), dag.train_specs(three, MODELS)
    assert set(before) == set(after)
    for run_id, spec in after.items():
        seed = spec.seed
        if seed % 3 == 0:  # draw 0: the same job file, so the cache keeps the committed run
            assert spec.to_json() == before[run_id].to_json(), run_id
        else:
            assert spec.student_path == f"{MODELS}/{spec.student}.d{seed % 3}/student.pt"
            assert spec.teacher_path == f"{MODELS}/{spec.student}.d{seed % 3}/teacher.pt"
            assert spec.student_spec.seed == one.students[spec.student].seed + seed % 3
            assert spec.sha256() != before[run_id].sha256()
    bases = dag.base_specs(three)
    assert sorted(bases) == sorted(f"{s}{'' if d == 0 else f'.d{d}'}" for s in one.students for d in range(3))
    for s in one.students:  # draw 0's base job is the one-draw experiment's, byte for byte
        assert bases[s].to_json() == dag.base_spec(one, s).to_json()
        assert bases[f"{s}.d2"].student_spec.seed == one.students[s].seed + 2


def test_the_dag_trains_a_later_draws_base_models_once_for_its_runs(toy_config, tmp_path):
    """The base rule's wildcard takes a draw's folder, and its spec file is the draw's."""
    e = Experiment.of(with_draws(toy_config, 2))
    spec = dag.base_specs(e)["qwen-s.d1"]
    assert dag.spec_path("results/toy", spec) == "results/toy/_jobs/base/qwen-s.d1.json"
    assert spec.to_json()["draw"] == 1 and spec.to_json()["student_spec"]["seed"] == 1


def test_draws_are_refused_where_a_comparison_would_miss_a_draw(toy_config):
    cfg = with_draws(toy_config, 3)
    base = next(r for r in cfg["experiments"]["toy"]["rows"] if r.get("baseline"))
    base["seeds"] = [0, 1, 3, 4]  # draws 0 and 1 only
    m = err(cfg)
    assert "('lr3e-5-k0'), field 'seeds'" in m and "base-model draw(s) [2]" in m and "'bf16' has no run" in m


def test_draws_are_refused_on_verl_and_a_sequential_start_must_reach_every_draw(toy_config):
    cfg = copy.deepcopy(toy_config)
    cfg["experiments"]["paper"]["base_draws"] = 2
    assert "experiment 'paper', field 'base_draws': the verl backend" in err(cfg)
    cfg = with_draws(toy_config, 3)
    cfg["experiments"]["toy"]["sequential"]["start_seeds"] = 2
    assert "must give every one of the 3 base-model draws a run" in err(cfg)


def test_seed_noise_pairs_seeds_on_one_draw_and_measures_the_draws_apart():
    """Three draws whose base models differ by a factor 1.5 in KL: seed-vs-seed Delta stays within one draw, so
    its SD is the seeds' (a few percent), and sd_draw reports the base models' spread apart from it."""
    rng = np.random.default_rng(0)
    n, seeds = 200, np.arange(8)
    base = rng.lognormal(-3, 1, n)
    scale = np.array([1.0, 1.5, 0.7])
    rows = [{"student": "s", "config": "bf16", "run_id": f"bf16.s.s{s}", "seed": s, "step": 100, "prompt_id": i,
             "kl": base[i] * scale[s % 3] * np.exp(0.02 * rng.standard_normal())} for s in seeds for i in range(n)]
    held = pd.DataFrame(rows)
    pairs, summary = stats.seed_noise(held, "bf16", n_draws=3, n_boot=200)
    assert ((pairs["seed_a"] % 3) == (pairs["seed_b"] % 3)).all() and len(pairs) == 3 * 2 + 3 * 2 + 2 * 1
    assert summary["sd_single"].iloc[0] < 0.05 and summary["sd_draw"].iloc[0] > 0.2
    _, one = stats.seed_noise(held, "bf16", n_draws=1, n_boot=200)  # pooled over the draws: the spread is theirs
    assert one["sd_single"].iloc[0] > 0.2 and np.isnan(one["sd_draw"].iloc[0])


def test_findings_count_the_comparisons_whose_verdict_depends_on_the_base_model():
    f = findings
    rows = [("s", "a", d, 0.05 * d, "pass") for d in range(3)] + \
           [("s", "b", d, 0.3, "fail" if d else "pass") for d in range(3)] + [("s", "c", 0, 0.5, "fail")]
    draws = pd.DataFrame(rows, columns=["student", "config", "draw", "delta", "verdict_seeds"])
    noise = pd.DataFrame({"sd_draw": [0.12], "sd_run": [0.03], "sd_draw_config": [0.05]})
    line = f.draws_sentence(draws, noise)
    # c ran on one draw only: not judged across draws; b's verdict depends on its draw (named in draws.parquet)
    assert "1 of 2 comparisons" in line and "1 changes with it (analysis/draws.parquet names it)" in line
    assert "SD of 0.12 (log)" in line and "with the draw by an SD of 0.050." in line and f.draws_sentence(draws[draws["draw"] == 0].assign(draw=0), noise) is None
    assert "floored" not in line
    # a pooled interaction estimate at its floor says so rather than stand as a measured zero
    line = f.draws_sentence(draws, noise.assign(sd_draw_config=0.0))
    assert "SD of 0.0 (" in line and "floored at 0 on 1 student: no more spread than the seeds explain" in line
    # one seed per draw (the lean default): no verdict on a draw alone, said so rather than "0 of 0 comparisons"
    line = f.draws_sentence(draws.assign(verdict_seeds=None), noise)
    assert "0 of 0" not in line and "No comparison has the two seeds per draw" in line


def test_a_control_student_nearer_its_teacher_is_found_by_its_spec_alone():
    f = findings
    base = {"family": "qwen2", "layers": 2, "student_steps": 300, "teacher_steps": 600, "seed": 0}
    specs = {"s": base, "s-near": {**base, "student_steps": 450}, "other": {**base, "layers": 3}}
    assert f.nearer_pairs(specs) == [("s-near", "s")]
