"""The tiny backend: engine numerics, the Hugging Face export, training that resumes exactly."""
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

from opd import store
from opd.backends.tiny import model as M
from opd.backends.tiny.sft import train_base
from opd.backends.tiny.engine import Engine, Numerics, token_logprobs
from opd.backends.tiny.task import VOCAB, answer_of, decode, make_task, solution
from opd.backends.tiny.trainer import mismatch, step_generator, train_run
from helpers import Crash, crash_at

STUDENT = {"family": "qwen2", "layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 32, "d_ff": 64, "sft_lr": 3e-3,
           "sft_batch": 32, "student_steps": 20, "teacher_steps": 40, "seed": 0}
TIMING = ["step_s", "rollout_s", "teacher_s", "train_s", "weight_sync_s", "wait_s"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("base")
    train_base(STUDENT, task_seed=0, seed=0, out_dir=out)
    return out


def spec(base, row=None, steps=6, **settings):
    return {"run_id": "r.s.s0", "experiment": "t", "backend": "tiny", "row": row or {"name": "r"}, "student": "s",
            "seed": 0, "student_path": str(base / "student.pt"), "teacher_path": str(base / "teacher.pt"),
            "settings": {"steps": steps, "prompts_per_step": 4, "responses_per_prompt": 4, "eval_every": 3,
                         "eval_responses": 1, "checkpoint_every": 2, **settings}}


def test_task_solutions_verify_and_heldout_is_disjoint():
    train, held = make_task(0)
    assert not set(train.operands) & set(held.operands)
    assert len(held) > 300 and set(held.tiers) == {1, 2, 3, 4}
    assert answer_of(solution((3, 5, 9))) == 17
    assert decode(train.solutions([0])[0]) == solution(train.operands[0])
    assert train.rewards([0, 1], train.solutions([0, 1])).tolist() == [1.0, 1.0]
    assert train.rewards([0], train.solutions([1])).tolist() == [float(train.answers[0] == train.answers[1])]


def test_standard_engine_at_fp32_has_zero_mismatch(base):
    student = M.load(base / "student.pt")
    engine = Engine(student.cfg, Numerics(dtype=torch.float32))
    engine.load(student.state_dict())
    train, _ = make_task(0)
    roll = engine.generate(train.prompts(range(32)), step_generator(0, 0))
    with torch.no_grad():
        lp, _ = token_logprobs(student, roll)
    d_n, p90 = mismatch(roll.logprobs, lp, roll.mask)
    assert abs(d_n) < 1e-6 and p90 < 1e-5


def test_length_buckets_give_the_full_width_forward_pass_and_its_gradient(base):
    """token_logprobs cuts the batch into chunks by response length; every masked log-prob, every
    full-vocabulary row and the gradient of a masked loss are those of one forward pass at full width."""
    student = M.load(base / "student.pt")
    engine = Engine(student.cfg, Numerics())
    engine.load(student.state_dict())
    train, _ = make_task(0)
    roll = engine.generate(train.prompts(range(48)), step_generator(0, 0))
    lengths = roll.mask.sum(1)
    assert lengths.min() < lengths.max()  # the chunks really differ in width
    m = roll.mask.float()
    results = []
    for buckets in (1, 4):
        student.zero_grad()
        lp, full = token_logprobs(student, roll, buckets=buckets)
        (lp * m).sum().backward()
        results.append((lp.detach() * m, full.detach() * m[..., None], [p.grad.clone() for p in student.parameters()]))
    (lp1, full1, g1), (lp4, full4, g4) = results
    assert torch.allclose(lp1, lp4, atol=1e-5) and torch.allclose(full1, full4, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(g1, g4))


def test_bf16_engine_has_small_positive_mismatch_and_noise_more(base):
    student = M.load(base / "student.pt")
    train, _ = make_task(0)
    prompts = train.prompts(np.repeat(np.arange(64), 4))
    d = {}
    for name, num in {"bf16": Numerics(), "noise": Numerics(noise_sigma=0.3)}.items():
        engine = Engine(student.cfg, num)
        engine.load(student.state_dict())
        roll = engine.generate(prompts, step_generator(0, 1))
        with torch.no_grad():
            lp, _ = token_logprobs(student, roll)
        d[name] = mismatch(roll.logprobs, lp, roll.mask)[0]
    assert abs(d["bf16"]) < 5e-3 < d["noise"]


def test_fp8_kv_cache_stores_float8_except_layers_kept_bf16(base):
    from opd.backends.tiny.engine import KVCache
    cfg = M.load(base / "student.pt").cfg
    cache = KVCache(cfg, 2, 8, Numerics(kv_cache="fp8_e4m3", bf16_layers=(0,)))
    assert cache.k[0].dtype == torch.bfloat16 and cache.k[1].dtype == torch.float8_e4m3fn
    full = KVCache.bytes_per_sequence(cfg, 8, Numerics())
    half = KVCache.bytes_per_sequence(cfg, 8, Numerics(kv_cache="fp8_e4m3"))
    assert half * 2 == full


@pytest.mark.parametrize("part", ["k", "v"])
def test_kv_cache_quantizes_keys_only_or_values_only(base, part):
    from opd.backends.tiny.engine import KVCache
    cfg = M.load(base / "student.pt").cfg
    num = Numerics(kv_cache="fp8_e4m3", bf16_layers=(0,), kv_parts=part)
    cache = KVCache(cfg, 2, 8, num)
    fp8, wide = (cache.k, cache.v) if part == "k" else (cache.v, cache.k)
    assert fp8[0].dtype == torch.bfloat16 and fp8[1].dtype == torch.float8_e4m3fn  # layer 0 kept BF16
    assert all(t.dtype == torch.bfloat16 for t in wide)
    x = torch.full((2, cfg.n_kv_heads, 1, cfg.head_dim), 0.3)  # 0.3 is not an E4M3 value: rounding shows
    k, v = cache.append(1, x, x)
    rounded, kept = (k, v) if part == "k" else (v, k)
    assert torch.equal(rounded, x.to(torch.float8_e4m3fn).to(torch.bfloat16)) and torch.equal(kept, x.to(torch.bfloat16))
    full = KVCache.bytes_per_sequence(cfg, 8, Numerics())
    assert KVCache.bytes_per_sequence(cfg, 8, num) == full - full // (2 * cfg.n_layers) // 2  # layer 1's half in FP8
    with pytest.raises(ValueError, match="unknown KV-cache part"):
        KVCache(cfg, 2, 8, Numerics(kv_cache="fp8_e4m3", kv_parts="q"))


def test_heldout_eval_logs_the_policy_entropy(base):
    """The RL collapse rule reads the policy's held-out entropy: tokens' entropy, averaged per problem."""
    from opd.backends.tiny.task import make_task
    from opd.backends.tiny.trainer import Settings, heldout_eval
    student = M.load(base / "student.pt")
    _, held = make_task(0)
    s = Settings(steps=1, prompts_per_step=1, responses_per_prompt=1, lr=1e-4, eval_responses=2)
    out = heldout_eval(student, M.load(base / "teacher.pt"), held, s, 0, 0)
    assert out["entropy"].shape == out["kl"].shape and (out["entropy"] > 0).all()
    assert (out["entropy"] < np.log(student.cfg.vocab_size)).all()


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_hf_export_matches_transformers_logits(tmp_path, family):
    import transformers  # in the [test] extra
    from opd.backends.tiny.sft import model_config
    torch.manual_seed(0)
    model = M.Decoder(model_config({**STUDENT, "family": family}))
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    M.export_hf(model, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert type(hf).__name__ == {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}[family]
    x = torch.randint(0, len(VOCAB), (3, 30))
    with torch.no_grad():
        assert torch.allclose(hf(x).logits, model(x), atol=1e-5)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert tok("3+5=")["input_ids"] == [VOCAB.index(c) for c in "3+5="]


def test_same_seed_gives_identical_parquet(base, tmp_path):
    for d in ("a", "b"):
        train_run(spec(base, {"name": "r", "staleness": 1}), tmp_path / d)
    for f in ("steps.parquet", "heldout.parquet"):
        a, b = (store.read_table(tmp_path / d / f) for d in ("a", "b"))
        pd.testing.assert_frame_equal(a.drop(columns=TIMING, errors="ignore"), b.drop(columns=TIMING, errors="ignore"))
    st = store.read_table(tmp_path / "a" / "steps.parquet")
    assert st["step"].tolist() == list(range(6))
    assert st["engine_version"].tolist() == [0, 0, 1, 2, 3, 4] and st["staleness"].tolist() == [0, 1, 1, 1, 1, 1]
    held = store.read_table(tmp_path / "a" / "heldout.parquet")
    assert sorted(held["step"].unique()) == [0, 3, 6]
    assert (held["kl"] >= 0).all() and held["correct"].between(0, 1).all()


def test_killed_run_resumes_with_no_step_lost_or_repeated(base, tmp_path):
    s = spec(base, {"name": "r", "staleness": 2}, steps=40, checkpoint_every=4, eval_every=20)
    (tmp_path / "spec.json").write_text(json.dumps(s))
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "opd.cli", "train", "--spec", str(tmp_path / "spec.json"), "--run-dir", str(run)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (run / "checkpoint.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert (run / "checkpoint.pt").exists() and not (run / "steps.parquet").exists()
    assert json.loads((run / "run.json").read_text())["status"] == "running"
    assert not store.is_complete(run)
    subprocess.run(cmd, check=True, capture_output=True)
    assert store.is_complete(run) and not (run / "checkpoint.pt").exists()
    meta = json.loads((run / "run.json").read_text())
    assert meta["attempts"] == 2
    resumed = store.read_table(run / "steps.parquet")
    assert resumed["step"].tolist() == list(range(40))
    train_run(s, tmp_path / "straight")
    straight = store.read_table(tmp_path / "straight" / "steps.parquet")
    pd.testing.assert_frame_equal(resumed.drop(columns=TIMING), straight.drop(columns=TIMING))


def test_redrawn_noise_differs_from_fixed_noise_and_a_killed_run_resumes_bit_for_bit(base, tmp_path):
    """noise_redraw: a new direction at every step (seeded by run seed and step), the same size of noise: the
    engine's weights differ from one step to the next where the fixed direction's stay, the run differs from the
    fixed-direction run from step 1 on (step 0 draws with its own seed too), and a run crashed after its step-4
    checkpoint resumes to the straight run's numbers exactly."""
    from opd.rows import Row
    fixed, redraw = (Numerics.of_row(Row.of({"name": "r", "noise_sigma": 0.2, "noise_redraw": on}), seed=3)
                     for on in (False, True))
    student = M.load(base / "student.pt")
    e = Engine(student.cfg, redraw)
    w = {}
    for step in (0, 1, 1):
        e.load(student.state_dict(), 0, step)
        w.setdefault(step, []).append(e.model.state_dict()["lm_head.weight"].clone())
    assert e.loaded(0, 1) and not e.loaded(0, 2)  # the trainer reloads the same version at a new step
    assert not torch.equal(w[0][0], w[1][0]) and torch.equal(w[1][0], w[1][1])  # per step, deterministic
    assert fixed.noise_seed_at(0) == fixed.noise_seed_at(7) == 3 and len({redraw.noise_seed_at(n) for n in range(8)}) == 8
    noise = {"name": "r", "noise_sigma": 0.2}
    s_fixed, s_redraw = (spec(base, {**noise, **extra}, steps=8, checkpoint_every=2, eval_every=4)
                         for extra in ({}, {"noise_redraw": True}))
    train_run(s_fixed, tmp_path / "fixed")
    train_run(s_redraw, tmp_path / "straight")
    a, b = (store.read_table(tmp_path / d / "steps.parquet") for d in ("fixed", "straight"))
    assert (a["d_n"] != b["d_n"]).all() and np.isclose(a["d_n"].mean(), b["d_n"].mean(), rtol=1.0)

    with pytest.raises(Crash):
        train_run(s_redraw, tmp_path / "run", progress=crash_at(5))
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["step"] == 4
    train_run(s_redraw, tmp_path / "run")
    resumed = store.read_table(tmp_path / "run" / "steps.parquet")
    pd.testing.assert_frame_equal(resumed.drop(columns=TIMING), b.drop(columns=TIMING))
    pd.testing.assert_frame_equal(*(store.read_table(tmp_path / d / "heldout.parquet") for d in ("run", "straight")))


@pytest.mark.parametrize("algorithm,variant", [("reinforce", "none"), ("grpo", "none"), ("reinforce", "score_centering"),
                                               ("opd", "tis"), ("opd", "advantage_offset")])
def test_rl_and_update_variants_train(base, tmp_path, algorithm, variant):
    train_run(spec(base, {"name": "r", "algorithm": algorithm, "variant": variant}, steps=3, eval_every=0), tmp_path)
    st = store.read_table(tmp_path / "steps.parquet")
    assert len(st) == 3 and np.isfinite(st["loss"]).all()
    assert (st["teacher_s"] == 0).all() == (algorithm != "opd")


def test_activation_recipes_train_with_calibration_disjoint_from_the_task(base, tmp_path):
    from opd.backends.tiny.task import calibration_problems
    train, held = make_task(0)
    calib = calibration_problems(0)
    assert len(calib) == 128 and not set(calib.operands) & (set(train.operands) | set(held.operands))
    d = {}
    for act in ("none", "fp8_static", "nvfp4"):
        train_run(spec(base, {"name": "r", "activations": act}, steps=3, eval_every=0), tmp_path / act)
        d[act] = store.read_table(tmp_path / act / "steps.parquet")["d_n"].mean()
    assert d["nvfp4"] > d["fp8_static"] > d["none"] - 1e-3 and d["nvfp4"] > d["none"]  # W4A4 far from BF16


# ---------------------------------------------------------------- the mismatch guard

GUARDED = {"name": "g", "noise_sigma": 0.3}


def guard_spec(base, row, guard, steps=12, **settings):
    return {**spec(base, row, steps=steps, eval_every=0, **settings),
            "guard": {"d_max": 1e-9, "window": 2, "action": "fallback", "cooldown": 2, **guard}}


def test_guard_falls_back_and_backs_off_on_an_engine_always_past_d_max(base, tmp_path):
    """d_max below any d_n (the state machine allows it; the config asks for d_max > 0): activations
    after steps 1 and 5, with cooldowns 2 and 4 (window 2), each span on the BF16 engine, synchronous,
    with the BF16 engine's small d_n; the third would start at step 12, after the run: within the bound
    opd.guard.max_activations(12, 2) = 3."""
    from opd.guard import max_activations
    train_run(guard_spec(base, GUARDED, {"d_max": -1.0}), tmp_path)
    st = store.read_table(tmp_path / "steps.parquet")
    active = st["guard_active"].tolist()
    assert [n for n in range(12) if active[n]] == [2, 3, 6, 7, 8, 9]
    assert set(st.loc[st["guard_active"], "engine"]) == {"fallback"} and set(st.loc[~st["guard_active"], "engine"]) == {"row"}
    starts = sum(1 for n in range(12) if active[n] and (n == 0 or not active[n - 1]))
    assert starts == 2 and starts + 1 <= max_activations(12, 2)  # the third starts at step 12: after the run
    assert st.loc[st["guard_active"], "d_n"].abs().max() < 2e-3 < st.loc[~st["guard_active"], "d_n"].mean()


@pytest.mark.parametrize("action,stale_active", [("sync", 0), ("fallback_numerics", 2)])
def test_guard_actions_set_staleness_and_numerics(base, tmp_path, action, stale_active):
    """sync: the row's numerics at staleness 0; fallback_numerics: BF16 numerics at the row's staleness.
    The decision reaches the rollout k steps later (the batches in flight): first span [1 + 1 + 2, 4 + 2)."""
    train_run(guard_spec(base, {**GUARDED, "staleness": 2}, {"action": action, "d_max": -1.0}), tmp_path)
    st = store.read_table(tmp_path / "steps.parquet").set_index("step")
    on = st.index[st["guard_active"]].tolist()
    assert on[:2] == [4, 5] and set(st.loc[on, "engine"]) == {action}
    assert (st.loc[on, "staleness"] == stale_active).all()
    assert (st.loc[~st["guard_active"] & (st.index >= 2), "staleness"] == 2).all()
    if action == "sync":  # still the noisy numerics: sequences' log-ratios stay far from BF16's (~1e-3)
        assert st.loc[on, "seq_logratio_p90"].min() > 0.02


def test_a_guard_that_flushes_acts_on_the_step_after_the_crossing(base, tmp_path):
    """flush: the batches the stale engine already sampled are discarded, so sync starts at the step after the one
    that crossed (window 1: step 0 crosses, span [1, 3)), not k = 2 steps later as above; every step the row's
    engine rolls out is one that crossed (the back-off: [1, 3), [4, 8), [9, 12))."""
    train_run(guard_spec(base, {**GUARDED, "staleness": 2},
                         {"action": "sync", "d_max": -1.0, "window": 1, "flush": True}), tmp_path)
    st = store.read_table(tmp_path / "steps.parquet").set_index("step")
    assert st.index[~st["guard_active"]].tolist() == [0, 3, 8]
    assert (st.loc[st["guard_active"], "staleness"] == 0).all()
    assert st.loc[3, "staleness"] == 2 and st.loc[8, "staleness"] == 2  # the row's engine returns at its own k


def test_run_killed_while_the_guard_is_active_resumes_in_the_same_state(base, tmp_path):
    """A crash at step 9 leaves the checkpoint of step 8, inside the span [7, 11); the resumed run gives
    the straight run's steps, guard columns included."""
    s = guard_spec(base, {**GUARDED, "staleness": 1}, {"d_max": -1.0}, checkpoint_every=4)

    with pytest.raises(Crash):
        train_run(s, tmp_path / "run", progress=crash_at(9))
    ck = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert ck["step"] == 8 and any(a <= 8 < b for a, b in ck["guard"]["spans"])
    train_run(s, tmp_path / "run")
    train_run(s, tmp_path / "straight")
    resumed, straight = (store.read_table(tmp_path / d / "steps.parquet") for d in ("run", "straight"))
    assert resumed["guard_active"].any() and resumed.loc[8, "guard_active"]
    pd.testing.assert_frame_equal(resumed.drop(columns=TIMING), straight.drop(columns=TIMING))


def test_trainer_adamw_is_torch_adamw_step_by_step(base, tmp_path):
    """The trainer's AdamW (torch's functional adam, without the optimizer class) gives torch.optim.AdamW's
    numbers exactly, with a learning rate changed every step, a parameter left without a gradient, across
    a checkpoint written and read as train_run does, and from a torch.optim.AdamW checkpoint."""
    from opd.backends.tiny.trainer import AdamW
    torch.manual_seed(0)
    ours, theirs = M.load(base / "student.pt"), M.load(base / "student.pt")
    opt_t = torch.optim.AdamW(theirs.parameters(), lr=1e-3, weight_decay=0.0)
    opt_o = AdamW(ours.parameters(), lr=1e-3, weight_decay=0.0)
    for step in range(8):
        x = torch.randint(0, ours.cfg.vocab_size, (4, 9))
        if step in (3, 5):  # a checkpoint round trip through a file, as a resumed run makes it
            store.atomic_torch_save({"optimizer": opt_o.state_dict()}, tmp_path / "ck.pt")
            opt_o = AdamW(ours.parameters(), lr=0.0, weight_decay=0.0)
            source = opt_t if step == 5 else opt_o  # at step 5: torch.optim.AdamW's own state
            state = torch.load(tmp_path / "ck.pt", weights_only=False)["optimizer"] if step == 3 else source.state_dict()
            opt_o.load_state_dict(state)
        for model, opt in ((theirs, opt_t), (ours, opt_o)):
            opt.param_groups[0]["lr"] = 1e-3 * (1 + step) / 6
            opt.zero_grad()
            model(x).float().log_softmax(-1)[..., :5].mean().backward()
            if step < 2:  # no gradient for the output norm's weight in the first steps: no state for it yet
                model.model.norm.weight.grad = None
            opt.step()
        assert all(torch.equal(a, b) for a, b in zip(theirs.parameters(), ours.parameters())), step
    assert not all(torch.equal(a, b) for a, b in zip(theirs.parameters(), M.load(base / "student.pt").parameters()))


def test_the_base_model_job_refuses_weights_that_differ_from_the_ones_base_json_pins(tmp_path):
    """A base model retrained where base.json already pins its weights (an experiment that does not commit them):
    the same bits pass; other bits (as another kind of CPU can give) fail the job, naming the base model and both
    hashes, and leave base.json as it was with no weights beside it. Through the command line, as rule base_models
    runs it: exit 1, the message on stderr and in the job's log."""
    from opd import dag
    from opd.backends.tiny.offline import base_job
    from opd.spec import BaseSpec, Student
    spec = BaseSpec(experiment="t", backend="tiny", task_seed=0, student="s", student_spec=Student.of(STUDENT), draw=2)
    out = tmp_path / "results" / "t" / "_models" / spec.name
    base_job(spec, out)
    first = (out / "base.json").read_bytes()
    base_job(spec, out)  # retrained with base.json in place (rule base_models keeps it: `update`): the same bits
    assert (out / "base.json").read_bytes() == first
    meta = json.loads(first)
    pinned = "0" * 64  # weights made elsewhere
    meta["files"]["teacher.pt"]["sha256"] = pinned
    store.write_json(meta, out / "base.json")
    before = (out / "base.json").read_bytes()
    spec_file = tmp_path / "base.json"
    spec_file.write_text(json.dumps(spec.to_json()))
    r = subprocess.run([sys.executable, "-m", "opd.cli", "base", "--spec", str(spec_file), "--out", str(out)],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1, r.stderr[-2000:]
    said = [line for line in r.stderr.splitlines() if line.startswith("opd base: ")]
    assert len(said) == 1 and "Traceback" not in r.stderr
    teacher = json.loads(first)["files"]["teacher.pt"]["sha256"]
    assert "experiment 't', student 's', base-model draw 2" in said[0]
    assert f"teacher.pt: sha256 {teacher} retrained here, {pinned} pinned" in said[0]
    assert said[0] in (tmp_path / dag.spec_log_path(spec)).read_text()
    assert sorted(p.name for p in out.iterdir()) == ["base.json"] and (out / "base.json").read_bytes() == before


def test_a_job_whose_base_model_weights_are_missing_says_how_to_make_them(tmp_path):
    """A job run without the base models' weights it reads (not committed, and the job forced past the DAG's choice
    of inputs) stops before any work, naming them and the command that retrains them."""
    missing = tmp_path / "results" / "t" / "_models" / "s"
    (tmp_path / "spec.json").write_text(json.dumps(spec(missing)))
    r = subprocess.run([sys.executable, "-m", "opd.cli", "train", "--spec", "spec.json", "--run-dir", "run"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert (f"opd train: r.s.s0: the base-model weights it reads are missing ({missing}/student.pt, "
            f"{missing}/teacher.pt; not committed?)") in r.stderr
    assert f"`snakemake -c 1 {missing}/student.pt {missing}/teacher.pt --config experiment=t`" in r.stderr
    assert not (tmp_path / "run" / "run.json").exists()
