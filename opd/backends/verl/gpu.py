"""The GPU side of the verl backend: the multi-node training job (Ray + verl), the held-out evaluation
and the offline admission check with vLLM. Needs the `cluster` extra (verl, vLLM) and GPUs; nothing here
runs on a laptop. benchmarks/verl_smoke.py runs two OPD steps of the toy model end to end on GPUs."""
from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from opd import store

from . import logparse
from .overrides import entry_point, overrides, weight_numerics

RAY_PORT = 6379


def experiment_config(spec: dict) -> dict:
    """The part of config.yaml a job's spec carries, in config.yaml's shape (for `overrides`)."""
    return {"experiments": {spec["experiment"]: {"students": {spec["student"]: spec["student_spec"]},
                                                 "train": spec["settings"], "verl": spec["verl"]}}}


def _read_parquets(paths) -> pd.DataFrame:
    paths = [paths] if isinstance(paths, (str, Path)) else paths
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)


def _rank() -> tuple[int, int, str]:
    """(node rank, node count, head host) inside a Slurm allocation, via submitit's job environment."""
    import submitit
    env = submitit.JobEnvironment()
    head = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]], capture_output=True,
                          text=True, check=True).stdout.split()[0]
    return env.global_rank, env.num_nodes, head


def _start_ray(rank: int, nodes: int, head: str) -> None:
    if rank == 0:
        subprocess.run(["ray", "start", "--head", f"--port={RAY_PORT}", "--disable-usage-stats"], check=True)
        import ray
        ray.init(address=f"{head}:{RAY_PORT}")
        deadline = time.time() + 600
        while len([n for n in ray.nodes() if n["Alive"]]) < nodes:
            if time.time() > deadline:
                raise RuntimeError(f"only {len(ray.nodes())} of {nodes} Ray nodes joined within 10 minutes")
            time.sleep(5)
        ray.shutdown()
    else:
        subprocess.run(["ray", "start", f"--address={head}:{RAY_PORT}", "--block"], check=False)


def train_run(spec: dict, run_dir: Path) -> None:
    """One run on the allocation: Ray across the nodes, verl's trainer on the head (resuming from its
    own checkpoints), then verl's JSONL log as steps.parquet and the held-out evaluation."""
    run_dir = Path(run_dir)
    rank, nodes, head = _rank() if "SLURM_JOB_ID" in os.environ else (0, 1, socket.gethostname())
    if nodes > 1:
        _start_ray(rank, nodes, head)
        if rank != 0:
            return
    row, student, seed = spec["row"], spec["student"], spec["seed"]
    args = overrides(row, experiment_config(spec), student=student, seed=seed, run_dir=str(run_dir),
                     experiment=spec["experiment"])
    log = run_dir / "verl.jsonl"
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(log)}
    if nodes > 1:
        env["RAY_ADDRESS"] = f"{head}:{RAY_PORT}"
    subprocess.run([sys.executable, "-m", entry_point(row), *args], check=True, env=env, cwd=run_dir)
    t = spec["settings"]
    logparse.write_steps(log, run_dir / "steps.parquet", run_id=spec["run_id"], config=row["name"], student=student,
                         seed=seed, responses_per_step=t["prompts_per_step"] * t["responses_per_prompt"])
    heldout_eval(spec, run_dir)
    if nodes > 1:
        subprocess.run(["ray", "stop"], check=False)


def _merged_checkpoint(run_dir: Path, step: int) -> Path:
    """verl's FSDP checkpoint of a step merged into a Hugging Face folder (verl.model_merger)."""
    src = run_dir / "verl_checkpoints" / f"global_step_{step}" / "actor"
    out = run_dir / "hf" / f"step_{step}"
    if not (out / "config.json").exists():
        subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(src),
                        "--target_dir", str(out)], check=True)
    return out


def heldout_eval(spec: dict, run_dir: Path) -> None:
    """For each evaluation step: the student (BF16 vLLM) answers every held-out problem R times; student
    and teacher score the responses with a full forward pass; K_x is the exact full-vocabulary KL per
    token, as in the tiny backend."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM, SamplingParams

    s, t = spec["student_spec"], spec["settings"]
    held = _read_parquets(spec["verl"]["data"]["heldout"])
    steps = sorted({0, *range(t["eval_every"], t["steps"], t["eval_every"]), t["steps"]})
    teacher = AutoModelForCausalLM.from_pretrained(s["teacher"], dtype=torch.bfloat16, device_map="cuda").eval()
    frames = []
    for step in steps:
        path = s["model"] if step == 0 else str(_merged_checkpoint(run_dir, step))
        tok = AutoTokenizer.from_pretrained(path)
        llm = LLM(path, dtype="bfloat16", seed=spec["seed"] * 1000 + step)
        prompts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in held["prompt"]]
        outs = llm.generate(prompts, SamplingParams(n=t["eval_responses"], temperature=1.0,
                                                    max_tokens=t["max_response_length"]))
        del llm
        student = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="cuda").eval()
        for pid, out in enumerate(outs):
            kl_sum = kls_sum = n_tok = correct = 0.0
            for c in out.outputs:
                ids = torch.tensor([list(out.prompt_token_ids) + list(c.token_ids)], device="cuda")
                P = len(out.prompt_token_ids)
                with torch.no_grad():
                    ls = student(ids).logits[0, P - 1:-1].float().log_softmax(-1)
                    lt = teacher(ids).logits[0, P - 1:-1].float().log_softmax(-1)
                y = ids[0, P:]
                kl_sum += float((ls.exp() * (ls - lt)).sum())
                kls_sum += float((ls.gather(1, y[:, None]) - lt.gather(1, y[:, None])).sum())
                n_tok += len(y)
                correct += float(_boxed(c.text) == str(held["reward_model"][pid]["ground_truth"]).strip())
            frames.append({"step": step, "prompt_id": pid, "kl": kl_sum / max(n_tok, 1),
                           "kl_sampled": kls_sum / max(n_tok, 1), "n_tokens": int(n_tok),
                           "correct": correct / len(out.outputs)})
        del student
    df = pd.DataFrame(frames).assign(run_id=spec["run_id"], config=spec["row"]["name"], student=spec["student"],
                                     seed=spec["seed"])
    store.write_table(df, run_dir / "heldout.parquet", store.HELDOUT)


def _boxed(text: str) -> str | None:
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    depth, j = 0, i + len("\\boxed{")
    for k in range(j, len(text)):
        depth += text[k] == "{"
        if text[k] == "}":
            if depth == 0:
                return text[j:k].strip()
            depth -= 1
    return None


def offline_mismatch(spec: dict) -> float:
    """D_hat: the candidate engine (the row's vLLM settings and weight numerics) generates P x R responses;
    the standard BF16 engine rescores the same tokens with the same student weights."""
    from vllm import LLM, SamplingParams

    s, row = spec["student_spec"], spec["row"]
    held = _read_parquets(spec["verl"]["data"]["train"]).sample(n=spec["prompts"], random_state=spec["seed"])
    kw = {}
    if row.get("kv_cache", "none") != "none":
        kw["kv_cache_dtype"] = row["kv_cache"]
        from opd.quant import resolve_layers
        keep = resolve_layers(row.get("bf16_layers", []), s["layers"])
        if keep:
            kw["kv_cache_dtype_skip_layers"] = [str(i) for i in sorted(keep)]
    numerics = weight_numerics(row, spec["seed"])
    engine = {"dtype": "bfloat16", "seed": spec["seed"], **spec.get("vllm", {})}  # e.g. gpu_memory_utilization
    cand = LLM(s["model"], worker_extension_cls="opd.backends.verl.hook.WeightNumerics", **engine, **kw)
    if numerics:
        cand.collective_rpc("apply_opd_numerics", args=(numerics,))
    tok = cand.get_tokenizer()
    prompts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in held["prompt"]]
    outs = cand.generate(prompts, SamplingParams(n=spec["responses"], temperature=1.0, logprobs=0,
                                                 max_tokens=spec["settings"]["max_response_length"]))
    seqs = [(list(o.prompt_token_ids), c) for o in outs for c in o.outputs]
    del cand
    gc.collect()  # release the candidate engine's cache before the reference engine reserves its own
    ref = LLM(s["model"], **engine)
    from vllm.inputs import TokensPrompt
    rescored = ref.generate([TokensPrompt(prompt_token_ids=p + list(c.token_ids)) for p, c in seqs],
                            SamplingParams(max_tokens=1, prompt_logprobs=0))
    diff, n = 0.0, 0
    for (p, c), r in zip(seqs, rescored):
        for i, (tok_id, lp) in enumerate(zip(c.token_ids, c.logprobs)):
            diff += lp[tok_id].logprob - r.prompt_logprobs[len(p) + i][tok_id].logprob
            n += 1
    return diff / n


def admission_job(spec: dict, out: Path) -> None:
    d_hat = offline_mismatch(spec)
    store.write_table(pd.DataFrame([{"config": spec["row"]["name"], "student": spec["student"], "d_hat": d_hat,
                                     "n_sequences": spec["prompts"] * spec["responses"], "seconds": np.nan}]), out)


def kv_attribution_job(spec: dict, out: Path) -> None:
    """The per-layer FP8 KV-cache attribution with vLLM: every layer FP8, one layer at a time, all but one."""
    n = spec["student_spec"]["layers"]
    rows = []
    for recipe in spec["recipes"]:
        cases = [("all", -1, [])] + [("only", i, [j for j in range(n) if j != i]) for i in range(n)] + \
                [("all_but", i, [i]) for i in range(n)]
        for mode, layer, keep in cases:
            row = {"name": f"kv-{mode}-{layer}", "kv_cache": recipe, "bf16_layers": keep}
            rows.append({"recipe": recipe, "mode": mode, "layer": layer,
                         "d_hat": offline_mismatch({**spec, "row": row})})
    store.write_table(pd.DataFrame(rows), out)
