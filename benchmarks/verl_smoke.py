"""A site's first command: is this GPU node ready for the verl backend? One process, no downloads, designed to
finish in at most 6 minutes on one H100 (BUDGET_S; not yet run on a GPU: the times below are estimates).

    python benchmarks/verl_smoke.py --out /tmp/opd-smoke --gpus 1

The default experiment's qwen-s student and teacher (results/lean/_models/qwen-s, committed; exported as Hugging Face Qwen2 checkpoints)
and the synthetic addition task as verl parquet; then, in order:

1. checks before any GPU work: the NVIDIA driver (site.check_driver), the modules the rows need (cupy for k > 0),
   every row's command composed against verl's own Hydra config (opd.backends.verl.compose, as verl's entry point
   composes it) and verl's start-up checks on it (validate_config, main_ppo.py:177-181);
2. training, one Ray start for both rows: this process calls verl's own entry points, verl.trainer.main_ppo.main
   (k = 0) and verl.experimental.fully_async_policy.fully_async_main.main (k = 2), with the composed configs
   (Hydra's main takes a config in place of its command line: hydra/main.py:81-83, `cfg_passthrough`). Each runs
   its own start-up steps (validate_config, main_ppo.py:173-184; the rollout pool copy and reward migration,
   fully_async_main.py:233-238) and verl's run_ppo, which starts Ray only when this process has none
   (main_ppo.py:57-74): the first row starts it, the second joins the same session. The rows' Ray settings are
   therefore the same by construction (check_commands refuses otherwise): verl's file logger finds each row's log
   by the run's experiment_name under one VERL_FILE_LOGGER_ROOT (utils/tracking.py:534-539;
   overrides.shared_log), not by a per-row VERL_FILE_LOGGER_PATH. Between the rows (wait_for_release) the process
   waits until the first row's named actors are gone (run_ppo drops its task runner when it returns,
   main_ppo.py:92-93, and the actors it owns end with it; the next row's vLLM servers take the same Ray names,
   vllm_server_0_0 and vllm_server_teacher_0_0: vllm_async_server.py:1365-1383), then removes the row's placement
   groups: verl creates them without a lifetime (single_controller/ray/base.py:153-156) and never removes them,
   and Ray 2.60 keeps such a group while the driver's job lives, though its creator actor is dead (measured on a
   CPU: tests/test_verl.py), so they would hold the GPU slots and the second row would wait forever. verl's public
   entry points give no other way to run two rows in one Ray session; that removal is the smoke's one addition;
3. steps.parquet of each row from verl's log: d_n, the loss, the staleness column and verl's per-step times;
4. Ray shut down, then one BF16 vLLM engine for the whole held-out evaluation (the student's step 0, then each
   row's last step, its verl checkpoint merged by verl.model_merger in the background while the next phase runs,
   loaded into the same engine: gpu.load_weights), then the admission check of the first row: its candidate
   engine (FP8 KV cache, NVFP4 weights through the hook) samples, and the evaluation engine, the student's
   weights reloaded, rescores (gpu.offline_mismatch's reference); the held-out scoring in transformers last;
5. each phase's time, the times as `{phase: {student or "*": hours}}` (`<out>/smoke-times.json`, what
   `python -m opd.backends.verl cost --times` and benchmarks/cluster_cost.py --times read), and one line: the
   verdict on the site, what worked and what to fix.

Engine starts: 6 (each row's rollout replica and teacher server, which verl starts per run; one evaluation engine;
the admission's candidate), where the earlier smoke started 9 and Ray twice.

One GPU (`--gpus 1`): verl gives the trainer and the teacher each a Ray pool of whole GPUs (opd.backends.verl.layout).
The smoke's Ray session declares 2 GPU slots that are both this process's GPU (`ray_init.num_gpus=2`, that GPU's id
as CUDA_VISIBLE_DEVICES in every worker's runtime_env: Ray gives the worker of slot i the i-th id its workers
started with, a slot beyond them all of them, ray/_private/worker.py:1150-1163); the trainer's slot also holds its
rollout replica (verl's hybrid engine; for k = 2 the fully-async trainer's hybrid replicas,
async_training.use_dynamic_resource_scheduling with rollout.nnodes=0, fully_async_main.py:159-179), the other slot
the teacher server; each vLLM engine reserves a fifth of the GPU, and none captures CUDA graphs. More GPUs: the toy
models have 2 attention heads and 1 KV head, so every engine runs at TP 1 and a pool of n GPUs holds n replicas
(plan); 2 GPUs run the synchronous row only (the k = 2 row needs a rollout pool: it is skipped, saying why).

The fp8 row (verl's rollout.quantization=fp8, vLLM's block-FP8 kernel) does not run on the toy models: vLLM 0.24
refuses 128 x 128 weight blocks for a merged projection whose parts are not multiples of 128
(vllm/model_executor/layers/quantization/utils/fp8_utils.py:1228-1240, from fp8.py:343), and the toy's fused qkv is
64 + 32 + 32 (fp8_refusal). On a model where it fits it would cost a third verl run in the same Ray session
(start-up and 4 steps, about 95 s by the estimates below) and a weight reload in the evaluation engine: about 6.9
minutes in all, beyond the 6-minute budget.

Phase plan, ESTIMATES (seconds on one H100; nothing here has run on a GPU; ESTIMATE_S):
  checks (imports, export, compose, verl's checks)          20
  row 1, k = 0: Ray start, verl start-up (FSDP worker, hybrid vLLM replica, teacher server), 4 steps   100
  release of row 1's actors                                   5
  row 2, k = 2: verl start-up (trainer, rollouter with hybrid replica, teacher), 4 steps                95
  release, Ray shut down                                      8
  checkpoint merges (in the background; what remains)         5
  evaluation engine start (BF16, eager)                      30
  held-out generation, 3 policies (weights reloaded)          5
  admission: candidate engine start, sampling, rescoring     35
  held-out scoring (transformers, 3 policies)                10
  total                                                     313  (budget 360)
Sources: verl's start-up order in main_ppo.py:133-155 and fully_async_main.py:46-115 (each run starts its worker
group, one vLLM engine per replica and the teacher's); vLLM's engine start without CUDA graphs and the import of
verl/vLLM/torch in each new process (about 10 s each); the toy's steps are 64 responses of at most 39 tokens.

Run:  python benchmarks/verl_smoke.py --out /tmp/opd-smoke --gpus 1 [--rows '[{"name": "bf16"}]']
Needs the `cluster` extra (verl, vLLM, cupy) and a GPU. tests/test_verl.py composes its commands on a CPU, passes
them through verl's own start-up checks and runs its training phase's Ray orchestration with stand-in task runners.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opd.backends.tiny.task import (  # noqa: E402  the toy models' context is exactly their sum
    PROMPT_LEN,
    RESPONSE_LEN,
)
from opd.backends.verl import compose, logparse  # noqa: E402
from opd.backends.verl.layout import Layout, Pool  # noqa: E402
from opd.backends.verl.overrides import ASYNC_ENTRY, entry_point, hydra_value, overrides, runtime_modules, \
    shared_log  # noqa: E402
from opd.spec import AdmissionSpec, TrainSpec  # noqa: E402

ROWS = [{"name": "nvfp4-kv-l0", "weights": "nvfp4", "kv_cache": "fp8_e4m3", "bf16_layers": [0]},
        {"name": "stale-k2", "staleness": 2}]
FP8_ROW = {"name": "fp8", "weights": "fp8_block", "activations": "fp8_group128"}  # verl's rollout.quantization=fp8
TOY_TP = 1  # 2 attention heads, 1 KV head
STUDENT = "toy"
BUDGET_S = 360
ESTIMATE_S = {"checks": 20, "train 1": 100, "release 1": 5, "train 2": 95, "release 2 + Ray shut down": 8,
              "merges (what remains)": 5, "evaluation engine start": 30, "held-out generation": 5,
              "admission": 35, "held-out scoring": 10}

SHARED_SLOTS = 2  # one GPU: Ray's GPU slots, both the one GPU (trainer + its rollout; teacher)
SHARED_MEMORY = 0.2  # one GPU: each vLLM engine's share of its memory (hybrid rollout, teacher, evaluation)


def plan(gpus: int, staleness: int) -> Layout | None:
    """The row's pools on one node of `gpus` GPUs, or None when verl 0.9.1 needs more (see the docstring). On one
    GPU the pools are Ray's SHARED_SLOTS slots of it, the rollout on the trainer's (no rollout pool)."""
    if gpus == 1:
        return Layout(Pool(1, 1), teacher=Pool(1, 1), rollout=None, rollout_tp=TOY_TP, teacher_tp=TOY_TP)
    trainer = 1
    while trainer * 2 <= gpus // 2:
        trainer *= 2
    rest = gpus - trainer
    if staleness == 0:
        return Layout(Pool(1, trainer), teacher=Pool(1, rest), rollout=None, rollout_tp=TOY_TP,
                      teacher_tp=TOY_TP) if rest >= 1 else None
    if rest < 2:
        return None
    return Layout(Pool(1, trainer), teacher=Pool(1, rest - rest // 2), rollout=Pool(1, rest // 2), rollout_tp=TOY_TP,
                  teacher_tp=TOY_TP)


def one_gpu_overrides(staleness: int) -> list[str]:
    """What puts a row's pools on one GPU (the docstring): a fresh local Ray cluster of SHARED_SLOTS GPU slots
    that are all this process's first visible GPU (CUDA_VISIBLE_DEVICES's first entry, else GPU 0), a fifth of
    the GPU per engine, eager vLLM; for k > 0 the fully-async trainer's hybrid rollout replicas and no
    standalone rollout pool (the hybrid replica's share: `command`)."""
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    o = ["+ray_kwargs.ray_init.address=local", f"+ray_kwargs.ray_init.num_gpus={SHARED_SLOTS}",
         f"+ray_kwargs.ray_init.runtime_env.env_vars.CUDA_VISIBLE_DEVICES={hydra_value(gpu)}",
         "actor_rollout_ref.rollout.enforce_eager=True",
         f"distillation.teacher_models.teacher_model.inference.gpu_memory_utilization={SHARED_MEMORY}"]
    if staleness:
        o += ["async_training.use_dynamic_resource_scheduling=True", "rollout.nnodes=0", "rollout.n_gpus_per_node=1"]
    return o


STEPS = 4  # >= 3, and a multiple of the k = 2 row's staleness (its trainer checkpoints once per 2 steps)


def experiment(out: Path, steps: int = STEPS, gpus: int = 2) -> dict:
    """The smoke run's experiment, in config.yaml's shape: `steps` steps, a checkpoint and an evaluation at
    the last and at step 0. Responses stop one token short of the toy models' 51 positions (11 + 40): the
    teacher engine's context is prompt + response + 1 (the token vLLM must generate; the longest toy solution
    is 36 tokens)."""
    return {
        "students": {STUDENT: {"model": str(out / "student"), "teacher": str(out / "teacher"), "layers": 2}},
        "train": {"steps": steps, "prompts_per_step": 8, "responses_per_prompt": 8, "lr": 1e-5, "temperature": 1.0,
                  "max_prompt_length": PROMPT_LEN, "max_response_length": RESPONSE_LEN - 1, "eval_every": steps,
                  "eval_responses": 4, "checkpoint_every": steps},
        "verl": {"data": {"train": str(out / "train.parquet"), "heldout": [str(out / "heldout.parquet")]},
                 "engine": {"gpu_memory_utilization": SHARED_MEMORY if gpus == 1 else 0.3, "enforce_eager": True}}}


def run_dir(out: Path, row: dict) -> Path:
    return Path(out) / row["name"]


def command(out: Path, row: dict, gpus: int) -> tuple[str, list[str]]:
    """verl's entry point and Hydra overrides for the smoke run of `row` in `out/<row>`; ValueError when the row
    does not fit on `gpus` GPUs. Every row logs under one VERL_FILE_LOGGER_ROOT (`out`), so the rows' Ray settings
    are the same and they share one Ray session (the docstring)."""
    k = int(row.get("staleness", 0))
    pools = plan(gpus, k)
    if pools is None:
        raise ValueError(f"row {row['name']!r}: verl 0.9.1 needs {3 if k else 2} GPUs for "
                         f"{'an asynchronous' if k else 'a synchronous'} OPD run (trainer, "
                         f"{'rollout, ' if k else ''}teacher: one pool each), or one GPU they share; this node has {gpus}")
    e = experiment(out, gpus=gpus)
    args = overrides(row, e["students"][STUDENT], e["train"], e["verl"], student=STUDENT, seed=0,
                     run_dir=str(run_dir(out, row)), pools=pools, log_root=str(out))
    args += [f"actor_rollout_ref.rollout.gpu_memory_utilization={SHARED_MEMORY if gpus == 1 else 0.3}",
             "actor_rollout_ref.model.trust_remote_code=False"]
    if gpus == 1:
        args += one_gpu_overrides(k)
    return entry_point(row), args


def ray_settings(cfg) -> dict:
    """What verl's run_ppo starts Ray with (main_ppo.py:62-74: config.ray_kwargs.ray_init, its runtime_env merged
    onto verl's defaults): only the first row's reach Ray, so every row's must be the same."""
    from omegaconf import OmegaConf
    return OmegaConf.to_container(cfg.ray_kwargs, resolve=True)


def check_commands(out: Path, rows: list[dict], gpus: int) -> dict[str, tuple[dict, object]]:
    """Every row's command composed against verl's config as its entry point composes it, verl's synchronous
    start-up checks on the k = 0 rows (the k > 0 rows' entry point has none of its own before Ray: tests/test_verl.py
    runs their trainer's and rollouter's constructors), and the rows' Ray settings equal: {name: (row, config)}."""
    cfgs = {}
    for row in rows:
        entry, ov = command(out, row, gpus)
        cfg = compose.compose(ov, entry == ASYNC_ENTRY)
        if entry != ASYNC_ENTRY:
            compose.startup_checks(cfg)
        cfgs[row["name"]] = (row, cfg)
    settings = {name: ray_settings(cfg) for name, (_, cfg) in cfgs.items()}
    first = next(iter(settings.values()), None)
    differ = [name for name, s in settings.items() if s != first]
    if differ:
        raise ValueError(f"rows {differ} start Ray differently from {next(iter(settings))}: they cannot share one "
                         f"Ray session (verl's run_ppo starts Ray once, main_ppo.py:57)")
    return cfgs


def fp8_refusal(model_dir: Path) -> str | None:
    """Why vLLM 0.24 cannot run the student at `model_dir` with verl's block FP8 (128 x 128 weight blocks), or None:
    a merged projection's parts but the last must be multiples of 128 (fp8_utils.py:1228-1240)."""
    c = json.loads((Path(model_dir) / "config.json").read_text())
    head = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    qkv = [c["num_attention_heads"] * head, c["num_key_value_heads"] * head, c["num_key_value_heads"] * head]
    gate_up = [c["intermediate_size"]] * 2
    bad = [f"{name} {parts}" for name, parts in (("qkv", qkv), ("gate_up", gate_up)) if any(p % 128 for p in parts[:-1])]
    return (f"vLLM's block FP8 needs the merged projections' parts (but the last) in multiples of 128; this model's "
            f"{', '.join(bad)} are not (vllm fp8_utils.py:1228-1240)") if bad else None


def train_spec(out: Path, row: dict, gpus: int = 2) -> TrainSpec:
    """The smoke run of `row` as a training job's spec (what its held-out evaluation reads)."""
    e = experiment(out, gpus=gpus)
    return TrainSpec.from_json({"experiment": "smoke", "backend": "verl", "run_id": f"{row['name']}.{STUDENT}.s0",
                                "row": row, "student": STUDENT, "seed": 0, "student_spec": e["students"][STUDENT],
                                "settings": e["train"], "verl": e["verl"], "student_path": None, "teacher_path": None})


def admission_spec(out: Path, row: dict, gpus: int = 2) -> AdmissionSpec:
    """The offline admission check of `row` on the toy student: 16 prompts x 2 responses."""
    e = experiment(out, gpus=gpus)
    return AdmissionSpec.from_json({"experiment": "smoke", "backend": "verl", "task_seed": 0, "student": STUDENT,
                                    "student_path": None, "teacher_path": None, "row": row, "prompts": 16,
                                    "responses": 2, "seed": 0, "student_spec": e["students"][STUDENT],
                                    "verl": e["verl"], "settings": e["train"]})


# ---------------------------------------------------------------- phases, failures, verdict

# what to fix, by what the first failure says (the first match)
FIXES = [
    (r"NVIDIA driver|nvidia-smi|CPU build", "the driver or torch build: docs/cluster.md, site checklist 1"),
    (r"No module named|lacks", "the environment: pip install -e '.[cluster]' (docs/cluster.md, \"Set up\")"),
    (r"out of memory|Free memory|gpu_memory_utilization|CUDA error", "GPU memory: another process holds this GPU "
     "(nvidia-smi), or the engines' share (SHARED_MEMORY) is too large for it"),
    (r"NCCL|Gloo|gloo|socket", "the network: verl.network.interface (NCCL_SOCKET_IFNAME; site checklist 6)"),
    (r"[Rr]ay|placement group|actor", "Ray: its logs are in /tmp/ray/session_latest/logs (ports, /tmp space, "
     "other Ray clusters of yours on this node)"),
    (r"max_model_len|max_position_embeddings", "the context: the teacher's max_model_len (docs/cluster.md, "
     "\"Known to differ\")"),
]


def fix_for(error: str) -> str:
    return next((fix for pattern, fix in FIXES if re.search(pattern, error)),
                "read the traceback above (and Ray's logs, /tmp/ray/session_latest/logs)")


class Phases:
    """Each phase's wall time and the first line of each failed phase's error; a failed phase is printed with its
    traceback and the run goes on with what does not depend on it."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.failed: dict[str, str] = {}
        self.t0 = time.perf_counter()

    def __call__(self, name: str, fn, *args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        except BaseException as e:  # SystemExit from verl's Hydra main too
            if isinstance(e, KeyboardInterrupt):
                raise
            traceback.print_exc()
            self.failed[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
            return None
        finally:
            self.seconds[name] = time.perf_counter() - t
            print(f"[smoke] {name}: {self.seconds[name]:.1f} s{' FAILED' if name in self.failed else ''}", flush=True)

    def ok(self, name: str) -> bool:
        return name in self.seconds and name not in self.failed

    def total(self) -> float:
        return time.perf_counter() - self.t0


def verdict(phases: Phases, worked: list[str], skipped: list[str]) -> str:
    """One line: what worked, what to fix (the first failure's fix), the total against the budget."""
    total = phases.total()
    over = f"; {total:.0f} s is over the {BUDGET_S} s budget" if total > BUDGET_S else ""
    skip = f" (not run: {'; '.join(skipped)})" if skipped else ""
    if not phases.failed:
        return (f"site OK in {total:.0f} s{over}: {', '.join(worked)}{skip}. Next: python -m opd.backends.verl cost "
                f"--times <out>/smoke-times.json")
    name, error = next(iter(phases.failed.items()))
    return (f"site NOT ready: {name} failed ({error}); fix: {fix_for(error)}. Worked: {', '.join(worked) or 'nothing'}"
            f"{skip}{over}")


# ---------------------------------------------------------------- training, one Ray session


def verl_main(asynchronous: bool):
    """verl's own entry point (its Hydra main, which takes a composed config: hydra/main.py:81-83)."""
    if asynchronous:
        from verl.experimental.fully_async_policy import fully_async_main
        return fully_async_main.main
    from verl.trainer import main_ppo
    return main_ppo.main


def wait_for_release(timeout_s: float = 180, poll_s: float = 1.0) -> list[str]:
    """Until the finished row is gone from the Ray session: its named actors (the next row's vLLM servers take the
    same names, vllm_async_server.py:1365-1383), which Ray ends once run_ppo has dropped its task runner
    (main_ppo.py:92-93; the runner owns them), then its placement groups, removed here: verl creates them without a
    lifetime (single_controller/ray/base.py:153-156) and never removes them, and Ray keeps such a group until its
    creator actor AND its job are dead (a measured fact of Ray 2.60: tests/test_verl.py, one Ray session), so in one
    driver they would hold the GPU slots forever. Then until every GPU slot is free. The groups removed."""
    import ray
    from ray.util.placement_group import PlacementGroup, placement_group_table, remove_placement_group
    deadline = time.monotonic() + timeout_s

    def wait(what, done):
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray still holds the last row's {what} after {timeout_s:.0f} s (named actors: "
                                   f"{ray.util.list_named_actors()}, GPU slots free: "
                                   f"{ray.available_resources().get('GPU', 0)})")
            time.sleep(poll_s)

    wait("named actors", lambda: not ray.util.list_named_actors())
    removed = []
    for pg_id, entry in placement_group_table().items():
        if entry.get("state") != "REMOVED":
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
            removed.append(entry.get("name") or pg_id)
    wait("GPU slots", lambda: ray.available_resources().get("GPU", 0) >= ray.cluster_resources().get("GPU", 0))
    return removed


def train_rows(cfgs: dict, phases: Phases, after_row=None) -> list[str]:
    """verl's trainer for each row, in this process and one Ray session (the docstring): the first row's run_ppo
    starts Ray, the later ones find it running (main_ppo.py:57). `after_row(name)` runs once a row has trained
    (its log read, its merge started), before the wait for its actors to go. The names of the rows that trained."""
    import ray
    trained = []
    # One GPU: Ray is told of SHARED_SLOTS GPU slots and refuses more than the ids this process's CUDA_VISIBLE_DEVICES
    # lists (ray/_private/resource_and_label_spec.py:362-370), which Slurm sets to the one GPU it gave the job; the
    # workers get that id from the runtime_env (one_gpu_overrides), so Ray starts without it here
    declared = any(cfg.ray_kwargs.ray_init.get("num_gpus") for _, cfg in cfgs.values())
    hidden = os.environ.pop("CUDA_VISIBLE_DEVICES", None) if declared and not ray.is_initialized() else None
    try:
        return _train_rows(cfgs, phases, after_row, trained)
    finally:
        if hidden is not None:  # for this process's own engines (the evaluation)
            os.environ["CUDA_VISIBLE_DEVICES"] = hidden


def _train_rows(cfgs: dict, phases: Phases, after_row, trained: list) -> list[str]:
    import ray
    for i, (name, (row, cfg)) in enumerate(cfgs.items()):
        k = int(row.get("staleness", 0))
        label = f"train {name} ({'Ray start, ' if not ray.is_initialized() else ''}verl start-up, {STEPS} steps, k = {k})"
        phases(label, verl_main(k > 0), cfg)
        if phases.ok(label):
            trained.append(name)
            if after_row:
                after_row(name)
        if ray.is_initialized() and i < len(cfgs) - 1:  # the last row's actors go with Ray's shut-down
            phases(f"release {name}", wait_for_release)
    return trained


def collect_row(out: Path, row: dict):
    """The row's verl log (out/<project>/<run>.jsonl) moved into its run folder as its attempt log, then its
    steps.parquet; d_n must be finite at every step verl logs (k > 0: once per parameter version)."""
    rd = run_dir(out, row)
    rd.mkdir(parents=True, exist_ok=True)
    log = Path(shared_log(str(out), row["name"], STUDENT, 0))
    shutil.move(str(log), str(logparse.attempt_log(rd)))
    k = int(row.get("staleness", 0))
    steps = logparse.write_steps(logparse.attempt_logs(rd), rd / "steps.parquet", run_id=row["name"],
                                 config=row["name"], student=STUDENT, seed=0, responses_per_step=64, staleness=k)
    print(steps[["step", "d_n", "loss", "staleness", "step_s", "rollout_s", "train_s", "weight_sync_s"]]
          .to_string(index=False), flush=True)
    every = max(1, k)
    if not (steps["d_n"].notna().all() and steps["step"].tolist() == list(range(every, STEPS + 1, every))):
        raise RuntimeError(f"{row['name']}: expected d_n for steps {list(range(every, STEPS + 1, every))}, got "
                           f"{steps['step'].tolist()} with d_n {steps['d_n'].tolist()}")
    return steps


# ---------------------------------------------------------------- evaluation and admission, one BF16 engine


class Merge(threading.Thread):
    """verl.model_merger of a row's last checkpoint (evaluate.policy_model), in the background."""

    def __init__(self, spec):
        super().__init__(daemon=True)
        self.spec, self.model, self.error, self.seconds = spec, None, None, 0.0

    def run(self):
        from opd.backends.verl import evaluate
        t = time.perf_counter()
        try:
            self.model = evaluate.policy_model(self.spec)
        except Exception as e:  # reported by the phase that waits for it
            self.error = e
        self.seconds = time.perf_counter() - t

    def result(self) -> str:
        self.join()
        print(f"[smoke] merge {self.spec.run_id} (background): {self.seconds:.1f} s", flush=True)
        if self.error:
            raise self.error
        return self.model


def evaluate_and_admit(out: Path, rows: list[dict], merges: dict, gpus: int, phases: Phases) -> dict:
    """The held-out evaluation of the student (step 0) and of each trained row's last step, then the admission
    check of the first row, with one BF16 engine (the evaluation's, which also rescores the admission's samples)
    and the admission's candidate engine: {policy: held-out frame}."""
    from opd import dag
    from opd.backends.verl import evaluate, gpu
    from opd.backends.verl.site import model_path
    base = dag.heldout_spec(train_spec(out, rows[0], gpus), 0, "") if rows else None
    spec0 = base or dag.heldout_spec(train_spec(out, ROWS[0], gpus), 0, "")
    engine = phases("evaluation engine start (BF16)", evaluate.heldout_engine, spec0, model_path(spec0.student_spec.model))
    if engine is None:
        return {}
    policies = {"student (step 0)": (spec0, model_path(spec0.student_spec.model))}
    for row in rows:
        spec = dag.heldout_spec(train_spec(out, row, gpus), STEPS, str(run_dir(out, row)))
        model = phases(f"merge {row['name']} (what remains)", merges[row["name"]].result)
        if model:
            policies[f"{row['name']} (step {STEPS})"] = (spec, model)
    samples = {}
    for name, (spec, model) in policies.items():
        s = phases(f"held-out generation: {name}", evaluate.generate_heldout, spec, model, llm=engine)
        if s is not None:
            samples[name] = s
    first = (rows or ROWS)[0]
    d_hat = phases(f"admission {first['name']} (candidate engine, rescoring)", gpu.offline_mismatch,
                   admission_spec(out, first, gpus), ref=engine)
    if d_hat is not None:
        print(f"{first['name']}: D_hat = {d_hat:.5f}", flush=True)
    gpu.close_engine(engine)
    held = {}
    for name, frame in samples.items():
        spec, model = policies[name]
        part = phases(f"held-out scoring: {name}", evaluate.score_heldout, spec, model, frame)
        if part is not None:
            held[name] = part
            print(f"{name}: KL {part['kl'].mean():.4f}, accuracy {part['correct'].mean():.3f}, "
                  f"{part['n_tokens'].mean():.1f} tokens per problem", flush=True)
    return held


# ---------------------------------------------------------------- times for the cost model


def times(phases: Phases, steps: dict) -> dict:
    """The measured phases as `{phase: {student or "*": hours}}` (opd.backends.verl.cost.scaled reads it): the
    start-ups, which are mostly fixed costs (Ray, imports, vLLM's engine start), for every student ("*": lower
    bounds for larger models, whose weights take longer to load); the rest for the toy student only."""
    h = 1 / 3600
    out: dict[str, dict[str, float]] = {}
    startup = [sec - float(steps[name]["step_s"].sum()) for label, sec in phases.seconds.items()
               for name in steps if label.startswith(f"train {name} ") and phases.ok(label)]
    if startup:
        out["train_restart_h"] = {"*": max(startup) * h}
        out["train_h"] = {STUDENT: max(float(s["step_s"].sum()) for s in steps.values()) * h}
    engine = phases.seconds.get("evaluation engine start (BF16)")
    if engine is not None and phases.ok("evaluation engine start (BF16)"):
        out["eval_job_start_h"] = {"*": engine * h}
    per_policy = [sec for label, sec in phases.seconds.items() if label.startswith("held-out ") and phases.ok(label)]
    n_policies = sum(label.startswith("held-out scoring") for label in phases.seconds)
    if n_policies:
        out["eval_step_h"] = {STUDENT: sum(per_policy) / n_policies * h}
    adm = [sec for label, sec in phases.seconds.items() if label.startswith("admission") and phases.ok(label)]
    if adm:
        out["admission_h"] = {STUDENT: adm[0] * h}
    return out


def prepare(out: Path) -> None:
    from opd.backends.tiny import model as M
    from opd.backends.verl.data import toy_task
    out.mkdir(parents=True, exist_ok=True)
    base = ROOT / "results" / "lean" / "_models" / "qwen-s"  # committed (the toy commits no weights): its shape
    for which in ("student", "teacher"):
        M.export_hf(M.load(base / f"{which}.pt"), out / which)
    toy_task(out)


def preflight(out: Path, rows: list[dict], gpus: int) -> dict:
    """Before any GPU work: the driver, the modules the rows need, every command through verl's checks."""
    from opd.backends.verl.site import check_driver
    check_driver("verl smoke")
    e = experiment(out, gpus=gpus)
    missing = {m: why for r in rows for m, why in runtime_modules(r, e["verl"]).items()
               if importlib.util.find_spec(m) is None}
    if importlib.util.find_spec("vllm") is None:
        missing["vllm"] = "the rollout engine (the cluster extra)"
    if missing:
        raise RuntimeError("this Python lacks " + "; ".join(f"{m} ({why})" for m, why in missing.items()))
    return check_commands(out, rows, gpus)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all this process sees)")
    p.add_argument("--rows", type=json.loads, default=ROWS)
    a = p.parse_args(argv)
    if a.gpus is None:
        import torch
        a.gpus = torch.cuda.device_count()
    from opd import dag
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)  # verl's and Ray's stray files (every path verl gets is absolute)
    phases = Phases()
    skipped = [f"{r['name']} (needs {3 if r.get('staleness') else 2} GPUs, or one they share; this node has {a.gpus})"
               for r in a.rows if not plan(a.gpus, int(r.get("staleness", 0)))]
    rows = [r for r in a.rows if plan(a.gpus, int(r.get("staleness", 0)))]
    phases("prepare (toy models, task)", prepare, out)
    fp8 = fp8_refusal(out / "student") if (out / "student").exists() else "no student"
    if fp8:
        skipped.append(f"fp8 row ({fp8})")
    cfgs = phases("checks (driver, modules, verl's config checks)", preflight, out, rows, a.gpus)
    worked, steps, merges = [], {}, {}
    if cfgs:
        worked.append("driver and verl's config checks")

        def after_row(name):
            row = cfgs[name][0]
            frame = phases(f"steps.parquet {name}", collect_row, out, row)
            if frame is not None:
                steps[name] = frame
            merges[name] = Merge(dag.heldout_spec(train_spec(out, row, a.gpus), STEPS, str(run_dir(out, row))))
            merges[name].start()

        trained = train_rows(cfgs, phases, after_row)
        import ray
        if ray.is_initialized():
            phases("Ray shut down", ray.shutdown)
        if trained:
            worked.append(f"one Ray session, verl trained {', '.join(trained)} ({STEPS} steps each)")
        trained_rows = [cfgs[n][0] for n in trained if n in steps]
        held = evaluate_and_admit(out, trained_rows, merges, a.gpus, phases)
        if held:
            worked.append(f"held-out evaluation of {len(held)} policies with one engine")
        if any(label.startswith("admission") and phases.ok(label) for label in phases.seconds):
            worked.append("admission check")
    print("\nphase times (s; the plan's estimates in the module docstring):")
    for name, sec in phases.seconds.items():
        print(f"  {sec:7.1f}  {name}{'  FAILED' if name in phases.failed else ''}")
    print(f"  {phases.total():7.1f}  total (budget {BUDGET_S})")
    t = times(phases, steps)
    (out / "smoke-times.json").write_text(json.dumps(t, indent=1) + "\n")
    print(f"\n{out / 'smoke-times.json'}: {json.dumps(t)}")
    print(verdict(phases, worked, skipped), flush=True)
    return 1 if phases.failed else 0


if __name__ == "__main__":
    sys.exit(main())
