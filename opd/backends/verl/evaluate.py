"""The verl backend's evaluation jobs, each its own Slurm job of one GPU and each resumable, so that no
GPU of a training allocation waits for them and a timeout or requeue keeps what was done:

- the held-out evaluation of ONE policy (heldout_step_job): the student as given (step 0, one job per
  student: the draw depends on the step alone) or a run's weights after one evaluated step (one job per
  run and step, started once the run's training job has ended). The responses are kept in a part file of
  their own once generated, so a requeued job scores them without generating again; the part is written
  atomically. gather_heldout joins a run's parts into the run's heldout.parquet (the contract, opd.store);
- the per-layer KV-cache attribution (kv_attribution_job): one part file per case, written atomically
  as each case ends; a resumed job skips every case it has.

Paths inside the installed packages are given as file:line."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from opd import stats, store
from opd.quant import kv_attribution_cases
from opd.rows import Row
from opd.spec import HeldoutSpec, KVAttributionSpec

from .site import model_path

# ---------------------------------------------------------------- held-out evaluation


def _newest_mtime_ns(folder: Path) -> int:
    return max((p.stat().st_mtime_ns for p in Path(folder).rglob("*") if p.is_file()), default=0)


def model_stamp(model: str) -> str:
    """What identifies a model's weights for the evaluation's resume: a local folder by its files' names,
    sizes and mtimes (a retrained run's merged checkpoint differs), a Hub name by itself."""
    path = Path(model)
    if not path.is_dir():
        return model
    files = sorted((str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns)
                   for p in path.rglob("*") if p.is_file())
    return hashlib.sha256(repr(files).encode()).hexdigest()


def merged_checkpoint(checkpoint: Path, merged: Path) -> Path:
    """verl's FSDP checkpoint folder of one step (`.../global_step_N/actor`) merged into a Hugging Face folder
    (verl.model_merger) at `merged`, built under a temporary name and renamed into place, so a killed merge
    leaves nothing that looks finished. Merged again when the checkpoint is newer than the merged folder (a
    retrained run); a merged folder whose checkpoint is gone (deleted to save space) is used as it is."""
    checkpoint, merged = Path(checkpoint), Path(merged)
    have = (merged / "config.json").exists()
    if not checkpoint.is_dir():
        if have:
            return merged
        raise FileNotFoundError(f"{checkpoint}: verl's checkpoint of this step is missing (the training job "
                                f"saves it: train.checkpoint_every; an earlier evaluation of the step removes it "
                                f"unless verl.keep_checkpoints), and no merged folder {merged} exists: retrain the run")
    if have and _newest_mtime_ns(merged) >= _newest_mtime_ns(checkpoint):
        return merged
    merged.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=merged.parent, prefix=f".{merged.name}."))
    try:
        subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir",
                        str(checkpoint), "--target_dir", str(tmp)], check=True)
        if merged.exists():
            shutil.rmtree(merged)
        os.replace(tmp, merged)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return merged


def policy_model(spec: HeldoutSpec) -> str:
    """The weights the spec evaluates: the student as given at step 0, else the step's merged checkpoint."""
    if spec.step == 0:
        return model_path(spec.student_spec.model)
    return str(merged_checkpoint(Path(spec.checkpoint), Path(spec.merged)))


def samples_path(out: Path) -> Path:
    """Where a held-out part's generated responses wait for their scoring (removed once the part is written)."""
    out = Path(out)
    return out.with_name(out.stem + ".samples.parquet")


def heldout_engine(spec: HeldoutSpec, model: str):
    """The evaluation's BF16 vLLM engine on `model` with the student's tokenizer (and the weight-sync hook, whose
    reload_checkpoint replaces its weights: gpu.load_weights)."""
    from vllm import LLM

    from .gpu import _engine_args
    from .overrides import HOOK
    return LLM(model, tokenizer=model_path(spec.student_spec.model), worker_extension_cls=HOOK, **_engine_args(0, spec.verl))


def generate_heldout(spec: HeldoutSpec, model: str, llm=None) -> pd.DataFrame:
    """The policy (a BF16 vLLM engine on `model`, the student's tokenizer) answers every held-out problem
    `eval_responses` times at temperature 1, seeded by the step alone: common random numbers across rows and
    seeds, as in the tiny backend. One row per response: prompt_id, prompt and response token ids, text.
    `llm`: a running heldout_engine to use instead of starting one, `model`'s weights loaded into it first
    (benchmarks/verl_smoke.py evaluates several policies with one engine); it stays open."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from .gpu import _read_parquets, close_engine, load_weights, prompt_ids

    t = spec.settings
    held = _read_parquets(spec.verl.data.heldout)
    own = llm is None
    if own:
        llm = heldout_engine(spec, model)
    else:
        load_weights(llm, model)
    tok = llm.get_tokenizer()
    prompts = [TokensPrompt(prompt_token_ids=prompt_ids(tok, p)) for p in held["prompt"]]
    outs = llm.generate(prompts, SamplingParams(n=t.eval_responses, temperature=1.0, seed=spec.step,
                                                max_tokens=t.max_response_length))
    rows = [{"prompt_id": pid, "prompt": list(out.prompt_token_ids), "response": list(c.token_ids), "text": c.text}
            for pid, out in enumerate(outs) for c in out.outputs]
    if own:
        close_engine(llm)  # the engine's memory goes back before the scorers load (gpu.close_engine)
    return pd.DataFrame(rows)


class ScoringDevices(NamedTuple):
    student: str
    teacher: str


def _scoring_devices() -> ScoringDevices:
    """Where the student and teacher scorers go: GPUs 0 and 1 when the job has two, else both on GPU 0 (the
    engine has ended by then); the CPU without GPUs."""
    import torch
    n = torch.cuda.device_count()
    if n == 0:
        return ScoringDevices("cpu", "cpu")
    return ScoringDevices("cuda:0", f"cuda:{1 % n}")


def score_heldout(spec: HeldoutSpec, model: str, samples: pd.DataFrame) -> pd.DataFrame:
    """Per held-out problem: K_x, the exact full-vocabulary KL(student || teacher) per token pooled over the
    problem's responses (student and teacher forwards in transformers, gpu._sequence_kl), the sampled-token
    log ratio per token, the token count and the accuracy."""
    import torch
    from transformers import AutoModelForCausalLM

    from .data import score
    from .gpu import _read_parquets, _sequence_kl

    held = _read_parquets(spec.verl.data.heldout)
    truth = [str(r["ground_truth"]) for r in held["reward_model"]]
    # BF16 on GPUs (the paper's models), float32 on a CPU (toy models, where it costs nothing)
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    devices = _scoring_devices()
    student = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(devices.student).eval()
    teacher = AutoModelForCausalLM.from_pretrained(model_path(spec.student_spec.teacher), dtype=dtype).to(devices.teacher).eval()
    rows = []
    for pid, group in samples.groupby("prompt_id", sort=True):
        sums = np.zeros(3)
        for p, r in zip(group["prompt"], group["response"]):
            sums += _sequence_kl(student, teacher, torch.tensor([list(p) + list(r)]), len(p))
        n_tok = max(sums[2], 1)
        rows.append({"step": spec.step, "prompt_id": int(pid), "kl": sums[0] / n_tok, "kl_sampled": sums[1] / n_tok,
                     "n_tokens": int(sums[2]), "correct": float(np.mean(
                         [score(held["data_source"][pid], text, truth[pid]) for text in group["text"]]))})
    return pd.DataFrame(rows)


PART_COLUMNS = ["step", "prompt_id", "kl", "kl_sampled", "n_tokens", "correct"]


def heldout_step_job(spec: HeldoutSpec, out: Path) -> None:
    """One policy's held-out evaluation into the part file `out` (PART_COLUMNS, one row per problem). Resumable:
    the generated responses are kept (samples_path) under a key of the spec and the weights, so a requeued
    job scores them without generating again, and a changed spec or checkpoint generates afresh."""
    out = Path(out)
    model = policy_model(spec)
    key = hashlib.sha256(f"{spec.sha256()} {model_stamp(model)}".encode()).hexdigest()
    kept = samples_path(out)
    samples = None
    if kept.exists():
        samples = store.read_table(kept)
        if samples.empty or samples["key"].iloc[0] != key:
            samples = None
    if samples is None:
        samples = generate_heldout(spec, model).assign(key=key)
        store.write_table(samples, kept)
    part = score_heldout(spec, model, samples)
    store.write_table(part[PART_COLUMNS], out)
    kept.unlink(missing_ok=True)
    if spec.step and not spec.verl.keep_checkpoints:  # retention: this step's weights are no longer needed
        release_checkpoint(spec)


def release_checkpoint(spec: HeldoutSpec) -> list[Path]:
    """Once a step's part is written: its verl model state and merged folder go (checkpoints.prune_evaluated;
    the latest checkpoint stays while its run has not finished training, i.e. has no steps.parquet yet)."""
    from .checkpoints import prune_evaluated
    actor = Path(spec.checkpoint)  # <run>/verl_checkpoints/global_step_<n>/actor
    folder = actor.parent
    n = int(folder.name.rsplit("_", 1)[1])
    finished = (folder.parent.parent / "steps.parquet").exists()
    return prune_evaluated(folder.parent, n, Path(spec.merged), finished)


def gather_heldout(parts, out: Path, *, run_id: str, config: str, student: str, seed: int) -> pd.DataFrame:
    """A run's heldout.parquet (opd.store.HELDOUT) from its evaluation parts (the student's step 0 and the run's
    steps), in step order."""
    frames = [store.read_table(p) for p in parts]
    steps = [sorted(set(f["step"])) for f in frames]
    flat = [s for ss in steps for s in ss]
    if len(flat) != len(set(flat)):
        raise ValueError(f"{out}: the held-out parts {list(map(str, parts))} repeat a step ({flat})")
    if not frames:  # train.eval_every 0: no evaluation, an empty file of the contract
        frames = [pd.DataFrame({c: pd.Series(dtype=float if c in ("kl", "kl_sampled", "correct") else "int64")
                                for c in PART_COLUMNS})]
    df = (pd.concat(frames, ignore_index=True).sort_values(["step", "prompt_id"], kind="stable")
          .assign(run_id=run_id, config=config, student=student, seed=seed).reset_index(drop=True))
    store.write_table(df, out, store.HELDOUT)
    return df


# ---------------------------------------------------------------- KV-cache attribution


class Case(NamedTuple):
    recipe: str
    mode: str
    layer: int
    keep: tuple[int, ...]
    part: str

    @property
    def name(self) -> str:
        return f"{self.recipe}.{self.mode}.{self.layer}"

    def row(self) -> Row:
        return Row.of({"name": f"kv-{self.mode}-{self.layer}", "kv_cache": self.recipe, "bf16_layers": list(self.keep)})


def attribution_cases(spec: KVAttributionSpec) -> list[Case]:
    """Every case of the attribution: each recipe x (every layer FP8, one layer at a time, all but one). vLLM's
    kv_cache_dtype stores keys and values alike, so the tiny engine's keys-only and values-only cases are
    not run here."""
    return [Case(recipe, *case) for recipe in spec.recipes
            for case in kv_attribution_cases(spec.student_spec.layers, parts=("kv",))]


def parts_dir(spec: KVAttributionSpec, out: Path) -> Path:
    """The attribution's part files: beside `out`, under the spec's hash (a changed spec starts afresh)."""
    out = Path(out)
    return out.parent / f"{out.stem}.parts" / spec.sha256()[:16]


def kv_attribution_job(spec: KVAttributionSpec, out: Path) -> None:
    """The per-layer FP8 KV-cache attribution with vLLM, one part file per case: each case's candidate
    engine samples (kept as `<case>.samples.parquet`), then one reference engine rescores every case that
    has no part yet (`<case>.parquet`, stats.sequence_frame). Both files are written atomically as each case
    ends, so a job that times out keeps its cases and its requeued attempt (launch.CheckpointableJob) skips
    them; `out` joins the parts in case order once all are there."""
    from . import gpu

    spec = KVAttributionSpec.of(spec)
    folder = parts_dir(spec, out)
    cases = attribution_cases(spec)
    final = {c: folder / f"{c.name}.parquet" for c in cases}
    kept = {c: folder / f"{c.name}.samples.parquet" for c in cases}
    todo = [c for c in cases if not final[c].exists()]
    messages = gpu.offline_messages(spec) if todo else []
    for c in todo:
        if kept[c].exists():
            continue
        t0 = time.perf_counter()
        seqs = gpu._candidate_samples(spec, c.row(), messages)
        store.write_table(pd.DataFrame({"prompt": [s[0] for s in seqs], "response": [s[1] for s in seqs],
                                        "logprob": [s[2] for s in seqs]}).assign(seconds=time.perf_counter() - t0),
                          kept[c])
        print(f"kv attribution {spec.student}: sampled {c.name} ({len(seqs)} sequences)", flush=True)
    if todo:
        ref = gpu.reference_engine(spec)
        for c in todo:
            s = store.read_table(kept[c])
            sums, tokens = gpu.rescore(ref, list(zip(s["prompt"], s["response"], s["logprob"])))
            store.write_table(stats.sequence_frame(sums, tokens, spec.responses, student=spec.student, recipe=c.recipe,
                                                   part=c.part, mode=c.mode, layer=c.layer), final[c])
            kept[c].unlink()
        gpu.close_engine(ref)
    store.write_table(pd.concat([store.read_table(final[c]) for c in cases], ignore_index=True), out)
