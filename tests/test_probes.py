"""The mechanism's gradient probes (opd/backends/tiny/probes.py): exact per-prefix terms, the bias bound on
every prefix, the engine's distribution on a prefix, the parameter-space pull-back, the weights a probed run
keeps (also across a resume), its probes, and the stage with its figure and tables."""
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from opd import store
from opd.backends.tiny import model as M
from opd.backends.tiny import probes as P
from opd.backends.tiny import trainer
from opd.backends.tiny.engine import Engine, Numerics
from opd.backends.tiny.task import VOCAB, calibration_batch, make_task
from helpers import load_script

V = len(VOCAB)


def random_logits(n, seed, scale=4.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(n, V, generator=g, dtype=torch.float64)).log_softmax(-1)


# ---------------------------------------------------------------- exact terms and the bound

def test_opd_terms_are_the_exact_expected_updates():
    logp, logq, logt = random_logits(50, 0), random_logits(50, 1), random_logits(50, 2)
    t = P.opd_terms(logp, logq, logt)
    a = logt - logp
    # u = sum_v p_v A_v d log p_v / dz: the logit Jacobian of log_softmax, weighted by p_v A_v, token by token
    z = logp.clone().requires_grad_(True)
    jac = torch.stack([torch.autograd.functional.jacobian(lambda x: x.log_softmax(-1), z[i]) for i in range(50)])
    u = torch.einsum("nv,nvw->nw", logp.exp() * a, jac)
    u_q = torch.einsum("nv,nvw->nw", logq.exp() * a, jac)
    assert torch.allclose(t["u"], u, atol=1e-12) and torch.allclose(t["u_q"], u_q, atol=1e-12)
    assert torch.allclose(t["g"], t["u_q"] - t["u"], atol=1e-12)
    assert torch.allclose(t["u"].sum(-1), torch.zeros(50, dtype=torch.float64), atol=1e-12)


def test_bias_bound_holds_on_every_prefix_and_its_constant_is_tight():
    # random and peaked distributions, and near-deterministic students as the toy's are
    cases = [(random_logits(2000, s, scale), random_logits(2000, s + 100, scale), random_logits(2000, s + 200, scale))
             for s, scale in ((0, 1.0), (1, 4.0), (2, 12.0))]
    for logp, logq, logt in cases:
        t = P.opd_terms(logp, logq, logt)
        assert bool((t["g"].norm(dim=-1) <= t["g"].abs().sum(-1) + 1e-15).all())
        assert bool((t["g"].abs().sum(-1) <= t["bound"] * (1 + 1e-12)).all())
        P.check_bound(t)
    # the worst case: q moves mass between two tokens whose A have opposite signs while p sits on a third:
    # ||g||_1 reaches the bound, so its constant 2 cannot be lowered
    eps, a = 1e-4, 5.0
    p = torch.full((V,), 1e-9, dtype=torch.float64)
    p[0] = p[1] = eps
    p[2] = 1 - p.sum() + p[2]
    q = p.clone()
    q[0], q[1] = 1.5 * eps, 0.5 * eps
    pt = p * torch.tensor([np.exp(a), np.exp(-a)] + [1.0] * (V - 2), dtype=torch.float64)
    t = P.opd_terms(p.log()[None], q.log()[None], (pt / pt.sum()).log()[None])
    ratio = float(t["g"].abs().sum() / t["bound"])
    assert 0.95 < ratio <= 1.0
    P.check_bound(t)
    # a violated bound raises
    with pytest.raises(AssertionError, match="bound"):
        P.check_bound({"g": t["g"], "bound": t["bound"] / 10})


def test_opd_bias_vanishes_at_the_teacher_reinforce_bias_does_not():
    logp, logq = random_logits(100, 3), random_logits(100, 4)
    t = P.opd_terms(logp, logq, logp)  # the student is the teacher: A = 0
    assert float(t["g"].abs().max()) == 0.0 and float(t["u"].abs().max()) == 0.0
    r = torch.ones(100, dtype=torch.float64)
    rl = P.reinforce_terms(logp, logq, r)
    assert torch.allclose(rl["g"], logq.exp() - logp.exp())  # R delta, whatever the teacher
    assert float(rl["g"].norm(dim=-1).min()) > 0
    assert bool((rl["g"].abs().sum(-1) <= rl["bound"] * (1 + 1e-12)).all())


# ---------------------------------------------------------------- on the toy's models

@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    student = M.Decoder(M.ModelConfig(vocab_size=V, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=32,
                                      max_seq_len=64))
    teacher = M.Decoder(student.cfg)
    # a teacher close to the student, as after SFT: the student's weights, slightly moved
    teacher.load_state_dict({k: v + 0.02 * torch.randn_like(v) for k, v in student.state_dict().items()})
    return student, teacher.eval()


def probe_for(student, numerics, n_prompts=8, responses=2, seed=0):
    train, _ = make_task(0)
    idx = np.repeat(np.random.default_rng([seed, 15]).choice(len(train), n_prompts, replace=False), responses)
    return P.Probe(numerics=numerics, probe_seed=seed, prompts=train.prompts(idx), idx=idx, sample_prefixes=20), train


@pytest.mark.parametrize("numerics", [Numerics(), Numerics(noise_sigma=0.3), Numerics(kv_cache="fp8_e5m2"),
                                      Numerics(weights="nvfp4", kv_cache="fp8_e4m3", bf16_layers=(0,)),
                                      Numerics(activations="fp8_static")])
def test_engine_distribution_on_a_prefix_is_the_engines_own(models, numerics):
    """q on the engine's own prefixes, computed as it decodes, gives every sampled token exactly the
    log-probability the engine reported when it sampled it (also through an FP8 cache)."""
    student, _ = models
    probe, _ = probe_for(student, numerics)
    engine = Engine(student.cfg, numerics, calibration=lambda: calibration_batch(0))
    engine.load(student.state_dict())
    roll = P.sample(engine, probe.prompts, 0)
    logq = P.engine_logq(engine, roll)
    got = logq.gather(2, roll.responses[:, :, None]).squeeze(2)[roll.mask]
    want = roll.logprobs[roll.mask]
    assert torch.equal(got, want)
    assert torch.allclose(logq.exp().sum(-1), torch.ones(logq.shape[:2]), atol=1e-5)


def test_pullback_is_the_trainers_gradient(models):
    """The parameter-space image of the sampled per-prefix update A_y (e_y - p) is minus the gradient of the
    trainer's OPD loss on the same rollout."""
    student, teacher = models
    probe, _ = probe_for(student, Numerics())
    roll = P.sample(P.trainer_engine(student.cfg, student.state_dict()), probe.prompts, 0)
    pb = P.Pullback(student, roll)
    tok = roll.responses[roll.mask]
    logt = P.teacher_logp(teacher, roll)
    a = (logt - pb.logp).gather(1, tok[:, None]).squeeze(1)
    mine = pb(P.sampled_update(pb.logp, tok, a))
    lp, full = trainer.token_logprobs(student, roll)
    lp_t, _ = trainer.token_logprobs(teacher, roll)
    adv, weight = trainer.advantages("opd", "none", lp, lp_t, roll.logprobs, roll.mask, None, 2, trainer.Settings())
    loss = -(adv * weight * lp).sum() / roll.mask.sum()
    grads = torch.autograd.grad(loss, list(student.parameters()), allow_unused=True)
    theirs = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                        for g, p in zip(grads, student.parameters())]).double()
    assert torch.allclose(mine, -theirs, rtol=1e-4, atol=1e-7)


def test_probe_point_exact_engine_has_no_error_and_a_noisy_one_has(models):
    student, teacher = models
    train, _ = make_task(0)
    state = student.state_dict()
    same, _ = probe_for(student, Numerics(dtype=torch.float32))  # the trainer's own numerics: q = p
    fixed = P.fixed_prefixes(student, same.prompts, 0)
    out, pre, _ = P.probe_point(same, state, state, student.cfg, teacher, train, fixed)
    # (q and p differ only by float order: the engine decodes token by token, the trainer in one pass)
    assert out["T_logit"] < 1e-7 and out["T_param"] < 1e-5 and out["opd_bias_mean"] < 1e-7
    # common random numbers: the engine and the trainer visit the very same prefixes, so no prefix shift
    assert out["S_logit"] < 1e-7 and out["S_param"] < 1e-5 and out["U_logit"] > 1e-4
    noisy, _ = probe_for(student, Numerics(noise_sigma=0.3))
    out, pre, _ = P.probe_point(noisy, state, state, student.cfg, teacher, train, fixed)
    assert out["T_logit"] > 1e-4 and out["S_logit"] > 0 and out["d"] > 1e-3
    assert 0 < out["opd_bias_bound_max_l1"] <= 1 and out["opd_bias_bound_max_l2"] <= out["opd_bias_bound_max_l1"]
    assert len(pre) == 20 and bool((pre["opd_bias"] <= pre["opd_bound"]).all())
    # an engine with calibrated activation scales is built as the trainer builds it (its calibration problems)
    static, _ = probe_for(student, Numerics(activations="fp8_static"))
    out_static, _, _ = P.probe_point(static, state, state, student.cfg, teacher, train, fixed)
    assert out_static["T_logit"] > 0 and out_static["d_engine"] == pytest.approx(out_static["d"])
    # at step 0 the fixed prefixes are the trainer's own: the fixed-prefix update is the ideal update U
    assert out["upd_fixed_logit"] == pytest.approx(out["U_logit"]) and out["U_param"] == pytest.approx(out["upd_fixed_param"])


def test_step0_statistics_are_zero_for_the_trainers_own_engine_and_see_a_redrawn_directions_persistence(models):
    """The offline statistics a candidate engine gets at the step-0 student (the predictors stage): none of error
    for the trainer's own numerics; for a noisy engine positive, with the persistent error equal to the per-token
    error when the direction is fixed and smaller when it is redrawn every step (its directions partly cancel)."""
    from opd.spec import Probes
    student, teacher = models
    probe = Probes.of({"prompts": 8, "responses": 2, "probe_seed": 0, "steps": [0]})
    same = P.step0_statistics(Numerics(dtype=torch.float32), student, teacher, probe, 0, 100)
    assert same["tv"] < 1e-6 and same["T_U_param"] < 1e-4 and same["kl_qp_rel"] < 1e-6
    fixed = P.step0_statistics(Numerics(noise_sigma=0.3, noise_seed=1), student, teacher, probe, 0, 100)
    assert fixed["tv"] > 1e-3 and fixed["T_U_param"] > 1e-2 and 0 < fixed["coherence"] <= 1
    assert fixed["T_persist_U_param"] == fixed["T_U_param"]
    assert fixed["E_U_param"] <= fixed["T_U_param"] + fixed["S_U_param"] + 1e-9  # the triangle inequality
    assert -1 <= fixed["cos_TU_param"] <= 1
    redrawn = P.step0_statistics(Numerics(noise_sigma=0.3, noise_seed=1, noise_redraw=True), student, teacher, probe, 0, 100)
    assert redrawn["T_persist_U_param"] < 0.9 * redrawn["T_U_param"]
    assert fixed["T_run_U_param"] == fixed["T_U_param"] and redrawn["T_run_U_param"] < 0.9 * redrawn["T_U_param"]


def test_run_horizon_norm_estimates_the_norm_of_a_long_average_from_a_few_draws():
    """The run-horizon error: a fixed vector gives its norm at any horizon; for T_i = mu + e_i its square estimates
    ||mu||^2 + tr(Sigma) / N (over many simulated sets of 16 draws: unbiased with a persistent part, biased up by the
    floor at 0 without one, yet far below one draw's error), so a redrawn direction keeps only its persistent part."""
    v = torch.tensor([3.0, -4.0, 0.0])
    assert P.run_horizon_norm(v.repeat(5, 1), 100) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="at least 2 draws"):
        P.run_horizon_norm(v[None], 100)
    rng = np.random.default_rng(0)
    dim, m, N, sd = 50, 16, 100, 1.0
    for mu_norm in (0.0, 2.0):
        mu = np.zeros(dim)
        mu[0] = mu_norm
        target = mu_norm ** 2 + dim * sd ** 2 / N
        sq = [P.run_horizon_norm(torch.tensor(mu + sd * rng.standard_normal((m, dim))), N) ** 2 for _ in range(2000)]
        one_draw = mu_norm ** 2 + dim * sd ** 2
        if mu_norm > 0:  # unbiased where the floor at 0 is never reached
            assert np.mean(sq) == pytest.approx(target, rel=0.05)
        else:  # the floor biases it up (by ~0.4 of ||mu||^2's estimation SD), still far below one draw's error
            assert target < np.mean(sq) < 0.05 * one_draw


# ---------------------------------------------------------------- a probed run and the stage

def tiny_run(tmp_path, student, teacher, name, row, steps=4, probe=None, job=trainer.train_job, guard=None, **kw):
    M.save(student, tmp_path / "student.pt")
    M.save(teacher, tmp_path / "teacher.pt")
    spec = {"experiment": "t", "backend": "tiny", "run_id": f"{name}.m.s0", "row": row, "seed": 0, "student": "m",
            "student_path": str(tmp_path / "student.pt"), "teacher_path": str(tmp_path / "teacher.pt"),
            "settings": {"steps": steps, "prompts_per_step": 2, "responses_per_prompt": 2, "lr": 1e-3,
                         "eval_every": 2, "eval_responses": 1, "checkpoint_every": 2, "task_seed": 0},
            **({"probes": probe} if probe else {}), **({"guard": guard} if guard else {})}
    run_dir = tmp_path / name
    return spec, run_dir, job(spec, run_dir, **kw)


PROBE = {"prompts": 4, "responses": 1, "probe_seed": 0, "extra_seeds": [1], "sample_prefixes": 5, "steps": [0, 2, 4]}


def test_a_run_keeps_the_weights_its_probes_read_also_across_a_resume(tmp_path, models):
    student, teacher = models
    assert P.versions(PROBE, 1) == {0, 1, 2, 3, 4} and P.versions(PROBE, 0) == {0, 2, 4}
    row = {"name": "stale", "staleness": 1}
    _, straight_dir, kept = tiny_run(tmp_path, student, teacher, "stale", row, job=trainer.train_run, keep={0, 3, 4})
    assert sorted(kept) == [0, 3, 4]
    assert all(torch.equal(kept[0][k], v) for k, v in student.state_dict().items())
    assert not all(torch.equal(kept[4][k], v) for k, v in student.state_dict().items())

    class Killed(Exception):
        pass

    def kill_at_step_3(step, steps, out):  # after the checkpoint of step 2
        if step == 3:
            raise Killed

    with pytest.raises(Killed):
        tiny_run(tmp_path, student, teacher, "resumed", row, job=trainer.train_run, keep={0, 3, 4},
                 progress=kill_at_step_3)
    assert (tmp_path / "resumed" / "checkpoint.pt").exists()
    _, resumed_dir, again = tiny_run(tmp_path, student, teacher, "resumed", row, job=trainer.train_run, keep={0, 3, 4})
    assert sorted(again) == [0, 3, 4]
    assert all(torch.equal(again[v][k], t) for v in kept for k, t in kept[v].items())
    # a checkpoint that kept nothing (another job's, or older code's) cannot give version 0 back: it says so
    with pytest.raises(Killed):
        tiny_run(tmp_path, student, teacher, "other", row, job=trainer.train_run, progress=kill_at_step_3, keep={4})
    with pytest.raises(ValueError, match=r"lacks the kept policy versions \[0\]"):
        tiny_run(tmp_path, student, teacher, "other", row, job=trainer.train_run, keep={0, 4})
    with pytest.raises(ValueError, match="a guarded run cannot be probed"):
        tiny_run(tmp_path, student, teacher, "g", {"name": "g", "noise_sigma": 0.1}, probe=PROBE,
                 guard={"d_max": 0.1, "window": 2, "action": "fallback", "cooldown": 2})
    # keeping weights changes nothing in training
    _, plain_dir, _ = tiny_run(tmp_path, student, teacher, "plain", row, job=trainer.train_run)
    a, b = (store.read_table(d / "steps.parquet") for d in (straight_dir, plain_dir))
    assert a["d_n"].tolist() == b["d_n"].tolist() and a["loss"].tolist() == b["loss"].tolist()


def test_a_probed_runs_job_writes_its_probes_and_an_unprobed_one_none(tmp_path, models):
    student, teacher = models
    _, plain, _ = tiny_run(tmp_path, student, teacher, "plain", {"name": "plain", "noise_sigma": 0.1})
    assert not (plain / "probes.parquet").exists()
    spec, run_dir, _ = tiny_run(tmp_path, student, teacher, "probed", {"name": "probed", "noise_sigma": 0.1},
                                probe=PROBE)
    t = store.read_table(run_dir / "probes.parquet")
    assert sorted(map(tuple, t[["probe_seed", "step"]].values.tolist())) == [(0, 0), (0, 2), (0, 4), (1, 0), (1, 4)]
    assert (t["probe_cpu_s"] > 0).all() and t["probe_cpu_s"].nunique() == 1
    assert len(store.read_table(run_dir / store.PROBE_FILES["prefix"])) == 3 * 5  # probe seed: 3 steps x 5
    assert (run_dir / "checkpoint.pt").exists()  # kept: opd.training removes it once the final run.json is in place
    # the same run without probes trains the very same steps
    same = [store.read_table(d / "steps.parquet")[["d_n", "loss"]] for d in (plain, run_dir)]
    assert same[0].equals(same[1])
    # the probes read exactly the run's kept weights: probing them again gives the same numbers
    kept = trainer.train_run(spec, tmp_path / "again", keep=P.versions(PROBE, 0))
    rows, _ = P.probe_states(PROBE, spec, kept)
    keys = ["T_logit", "S_logit", "U_param", "err_fixed_param", "rl_bias_mean"]
    assert [[r[k] for k in keys] for r in rows] == t[keys].values.tolist()
    with pytest.raises(ValueError, match=r"need policy versions \[2\]"):
        P.probe_states(PROBE, spec, {v: kept[v] for v in (0, 4)})


class Files(list):
    def __init__(self, items=(), **named):
        super().__init__(list(items) + list(named.values()))
        self.__dict__.update(named)


def test_stage_collects_the_probed_runs_and_renders_figure_and_tables(tmp_path, models):
    student, teacher = models
    runs = []
    for name, row in (("bf16", {"name": "bf16", "baseline": True}), ("noise-1", {"name": "noise-1", "noise_sigma": 0.1}),
                      ("noise-3", {"name": "noise-3", "noise_sigma": 0.3}), ("stale-k2", {"name": "stale-k2", "staleness": 2})):
        _, run_dir, _ = tiny_run(tmp_path, student, teacher, name, row,
                                 probe={**PROBE, "prompts": 6, "responses": 2, "sample_prefixes": 30})
        runs.append(run_dir)
    out, out_prefix = tmp_path / "analysis" / "probes.parquet", tmp_path / "analysis" / "probes_prefix.parquet"
    out.parent.mkdir()
    load_script("probes").main(Files(**{k: [str(r / f) for r in runs] for k, f in store.PROBE_FILES.items()}),
                               Files(probes=str(out), prefix=str(out_prefix)), None)
    everything = store.read_table(out)
    # the probe seed at every step, the extra seed at the first and the last
    assert sorted(everything.groupby("probe_seed")["step"].unique().map(sorted).map(tuple)) == [(0, 2, 4), (0, 4)]
    assert (everything["main"] == (everything["probe_seed"] == 0)).all()
    t = everything[everything["main"]]
    assert len(t) == 12 and set(t["step"]) == {0, 2, 4}
    assert t["config"].unique().tolist() == ["bf16", "noise-1", "noise-3", "stale-k2"]  # in the runs' order
    k2 = t[t["config"] == "stale-k2"].set_index("step")
    assert k2["engine_version"].to_dict() == {0: 0, 2: 0, 4: 2}
    assert (t["opd_bias_bound_max_l1"] <= 1).all() and (t["rl_bias_bound_max_l1"] <= 1).all()
    n3 = t[(t["config"] == "noise-3") & (t["step"] == 0)].iloc[0]
    b = t[(t["config"] == "bf16") & (t["step"] == 0)].iloc[0]
    assert n3["T_logit"] > b["T_logit"] and n3["d"] > b["d"]
    pre = store.read_table(out_prefix)
    assert len(pre) == 12 * 30
    params = SimpleNamespace(experiment="t", baseline="bf16", primary="m")
    fig = Files(pdf=str(tmp_path / "mechanism.pdf"), png=str(tmp_path / "mechanism.png"))
    load_script("figure_mechanism").main(Files([str(out), str(out_prefix)]), fig, params)
    assert Path(fig.pdf).read_bytes()[:4] == b"%PDF" and Path(fig.png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("mechanism", "mechanism_runs"):
        tab = Files(md=str(tmp_path / f"{name}.md"), tex=str(tmp_path / f"{name}.tex"))
        load_script(f"table_{name}").main(Files([str(out)]), tab, params)
        md = Path(tab.md).read_text()
        assert md.startswith("**") and "|" in md and r"\begin{tabular}" in Path(tab.tex).read_text()
        side = json.loads((tmp_path / f"{name}.inputs.json").read_text())
        assert list(side["inputs"]) == [str(out)]
