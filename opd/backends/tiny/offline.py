"""Jobs of the tiny backend other than training: base models, the offline admission estimate, the
per-layer KV-cache attribution and the two throughput measurements. Each writes one file atomically."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from opd import progress, provenance, stats, store
from opd.quant import kv_attribution_cases
from opd.rows import Row
from opd.spec import (AdmissionSpec, BaseSpec, KVAttributionSpec, MemoryBoundSpec, PredictorSpec, ThroughputSpec,
                      TrainSpec)

from . import model as M
from .sft import train_base, train_converged
from .engine import Engine, KVCache, Numerics, step_generator
from .task import RESPONSE_LEN, make_task
from .trainer import offline_logratios, set_threads, train_run


def base_job(spec: BaseSpec, out: Path) -> None:
    spec = BaseSpec.of(spec)
    t0 = time.perf_counter()
    set_threads(spec)
    s = spec.student_spec
    names = store.BASE_FILES
    # a base.json of this spec already here pins the weights' sha256 (weights not committed, retrained on demand):
    # the retrained ones must be those, or the job fails (store.check_pinned)
    pinned = store.pinned_weights(out, spec)
    if s.converge is None:
        losses = train_base(s, spec.task_seed, s.seed, out, label=f"base {spec.name}")
        store.check_pinned(out, spec, pinned)
    else:
        if spec.eval_responses is None:
            raise ValueError(f"base {spec.name}: the converged recipe needs the spec's eval_responses (opd.dag.base_spec)")
        losses, curves = train_converged(s, spec.task_seed, s.seed, out, spec.eval_responses, label=f"base {spec.name}")
        store.check_pinned(out, spec, pinned)
        store.write_table(curves, Path(out) / store.BASE_CURVES)
        names = (*names, store.BASE_CURVES)
    # the files' sizes and sha256 and the spec's: the cache check (store.inspect_all) compares them as each DAG is built
    files = {n: {"size": (Path(out) / n).stat().st_size, "sha256": provenance.sha256_file(Path(out) / n)}
             for n in names}
    store.write_json({"student": spec.student, "spec": s.written(), "spec_sha256": spec.sha256(), "files": files,
                      **losses}, Path(out) / "base.json")
    progress.done(f"base {spec.name}", [Path(out) / f for f in (*names, "base.json")], t0, **losses)


def _admission_prompts(n_prompts: int, n_responses: int, task_seed: int, seed: int) -> torch.Tensor:
    train, _ = make_task(task_seed)
    idx = np.random.default_rng([seed, 5]).choice(len(train), n_prompts, replace=False)
    return train.prompts(np.repeat(idx, n_responses))


def admission_job(spec: AdmissionSpec, out: Path) -> None:
    """The offline estimate for one row on one student: its engine generates P x R responses, the standard
    engine rescores them with the same (initial) student weights. One row per sequence (its summed
    log-ratio and token count), and the job's seconds on every row."""
    spec = AdmissionSpec.of(spec)
    set_threads(spec)
    student = M.load(spec.student_path)
    prompts = _admission_prompts(spec.prompts, spec.responses, spec.task_seed, spec.seed)
    t = time.perf_counter()
    sums, tokens = offline_logratios(student, Numerics.of_row(spec.row, spec.seed), prompts, spec.seed,
                                     spec.task_seed)
    seqs = stats.sequence_frame(sums, tokens, spec.responses, config=spec.row.name, student=spec.student)
    store.write_table(seqs.assign(seconds=time.perf_counter() - t), out)
    progress.done(f"admission {spec.row.name}.{spec.student}", [out], t)


def predictors_job(spec: PredictorSpec, out: Path) -> None:
    """The step-0 statistics of one row's engine on one student (probes.step0_statistics), one row, with the job's
    seconds."""
    from .probes import step0_statistics
    spec = PredictorSpec.of(spec)
    set_threads(spec)
    t = time.perf_counter()
    values = step0_statistics(Numerics.of_row(spec.row, spec.seed), M.load(spec.student_path),
                              M.load(spec.teacher_path), spec.probes, spec.task_seed, spec.horizon)
    row = {"config": spec.row.name, "student": spec.student, **values, "seconds": time.perf_counter() - t}
    store.write_table(pd.DataFrame([row]), out)
    progress.done(f"predictors {spec.name}", [out], t)


def kv_attribution_job(spec: KVAttributionSpec, out: Path) -> None:
    """Offline mismatch of an FP8 KV cache with every layer quantized, with one layer at a time, and
    with all layers but one (that one kept BF16); the first two also with keys only and values only in
    FP8. The same prompts and sampling seed for every case; one row per case and sequence."""
    spec = KVAttributionSpec.of(spec)
    t0 = time.perf_counter()
    set_threads(spec)
    student = M.load(spec.student_path)
    n = student.cfg.n_layers
    prompts = _admission_prompts(spec.prompts, spec.responses, spec.task_seed, spec.seed)
    frames = []
    cases = list(kv_attribution_cases(n))
    bar = progress.Progress(f"kv-attribution {spec.student}", len(spec.recipes) * len(cases), "case")
    for recipe in spec.recipes:
        for mode, layer, keep, part in cases:
            num = Numerics(kv_cache=recipe, bf16_layers=keep, kv_parts=part)
            sums, tokens = offline_logratios(student, num, prompts, spec.seed)
            frames.append(stats.sequence_frame(sums, tokens, spec.responses, student=spec.student, recipe=recipe,
                                               part=part, mode=mode, layer=layer))
            bar.update(recipe=recipe, mode=mode, layer=layer, part=part)
    store.write_table(pd.concat(frames, ignore_index=True), out)
    progress.done(f"kv-attribution {spec.student}", [out], t0)


def throughput_job(spec: ThroughputSpec, out: Path) -> None:
    """Short OPD runs at each staleness k with no evaluation, timing the trainer's steps (measured, on
    this machine's cores: rollout and training overlap in two threads when k > 0)."""
    spec = ThroughputSpec.of(spec)
    t0 = time.perf_counter()
    set_threads(spec)
    frames = []
    for k in spec.ks:
        with tempfile.TemporaryDirectory() as d:
            run = TrainSpec(experiment=spec.experiment, backend=spec.backend, run_id=f"throughput.k{k}",
                            row=Row.of({"name": f"k{k}", "staleness": k}), student=spec.student, seed=spec.seed,
                            settings=spec.settings.with_(steps=spec.steps, eval_every=0),
                            student_path=spec.student_path, teacher_path=spec.teacher_path, threads=spec.threads)
            train_run(run, Path(d), progress=progress.steps_callback(f"throughput k={k}"))
            frames.append(store.read_table(Path(d) / "steps.parquet").assign(k=k))
    store.write_table(pd.concat(frames, ignore_index=True), out)
    progress.done("throughput", [out], t0, ks=",".join(map(str, spec.ks)), steps_per_k=spec.steps)


@torch.no_grad()
def memory_bound_job(spec: MemoryBoundSpec, out: Path) -> None:
    """Engine generation rate when the KV cache budget holds `kv_budget_sequences` BF16 sequences and a
    step asks for more: an FP8 cache holds twice the sequences per wave."""
    spec = MemoryBoundSpec.of(spec)
    t0 = time.perf_counter()
    set_threads(spec)
    student = M.load(spec.student_path)
    train, _ = make_task(spec.task_seed)
    P = train.prompts([0]).shape[1]
    budget = spec.kv_budget_sequences * KVCache.bytes_per_sequence(student.cfg, P + RESPONSE_LEN, Numerics())
    rows = []
    caches = [("none", ()), ("fp8_e4m3", ()), ("fp8_e4m3", (0,))]
    bar = progress.Progress("memory-bound", len(caches) * len(spec.batches), "case")
    for recipe, keep in caches:
        engine = Engine(student.cfg, Numerics(kv_cache=recipe, bf16_layers=keep), kv_budget_bytes=budget)
        engine.load(student.state_dict())
        for batch in spec.batches:
            prompts = train.prompts(np.arange(batch) % len(train))
            engine.generate(prompts[:8], step_generator(0, 0))  # warm-up
            best = None
            for rep in range(spec.repeats):
                w0 = engine.waves
                t = time.perf_counter()
                roll = engine.generate(prompts, step_generator(rep, batch))
                dt = time.perf_counter() - t
                if best is None or dt < best[0]:
                    best = (dt, int(roll.mask.sum()), engine.waves - w0 + 1)
            rows.append({"kv_cache": recipe if not keep else f"{recipe}-l0", "batch": batch, "seconds": best[0],
                         "tokens": best[1], "waves": best[2], "tokens_per_s": best[1] / best[0],
                         "concurrent": min(batch, engine.max_batch(P + RESPONSE_LEN))})
            bar.update(kv_cache=rows[-1]["kv_cache"], batch=batch, tokens_per_s=rows[-1]["tokens_per_s"])
    store.write_table(pd.DataFrame(rows), out)
    progress.done("memory-bound", [out], t0)
