"""The GPU side of the verl backend: the multi-node training job (Ray + verl), the offline admission check
with vLLM, and the pieces the evaluation jobs (opd.backends.verl.evaluate) share with it. Needs the
`cluster` extra (verl, vLLM) and GPUs; nothing here runs on a laptop. benchmarks/verl_smoke.py runs the toy
model's OPD steps end to end on one GPU."""
from __future__ import annotations

import gc
import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd

from opd import stats, store
from opd.rows import Row
from opd.spec import AdmissionSpec, KVAttributionSpec, Network, Slurm, TrainSpec, Verl

from . import logparse
from .checkpoints import Pruner
from .layout import layout as layout_of
from .hook import GUARD_LOG
from .overrides import HOOK, entry_point, overrides, runtime_modules, vllm_kv_args, weight_numerics
from .plan import native_engine_args
from .site import check_driver, data_path, model_path

def _read_parquets(paths) -> pd.DataFrame:
    """Data files as config.yaml names them (a relative path is the repository's: site.data_path), joined."""
    paths = [paths] if isinstance(paths, (str, Path)) else paths
    return pd.concat([pd.read_parquet(data_path(str(p))) for p in paths], ignore_index=True)


class Allocation(NamedTuple):
    nodes: int
    head: str  # the host of task 0 (the Ray head)


def _allocation() -> Allocation:
    """The Slurm allocation this task runs in; (1, this host) outside Slurm."""
    if "SLURM_JOB_NODELIST" not in os.environ:
        return Allocation(1, socket.gethostname())
    hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]], capture_output=True,
                           text=True, check=True).stdout.split()
    return Allocation(len(hosts), hosts[0])


def wait_for_port(host: str, port: int, timeout_s: float, poll_s: float = 2.0) -> None:
    """Return once a TCP server accepts connections on host:port; RuntimeError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=poll_s).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on {host}:{port} after {timeout_s:.0f} s") from None
            time.sleep(poll_s)


def ray_env(run_dir: Path) -> dict:
    """Ray's own authentication settings for every Ray process of a multi-node job (head, workers, verl's
    driver): token authentication with one token file in the run folder, which every node sees (the run
    folder is on the shared filesystem). Without them the nodes would disagree whenever a ~/.ray/auth_token
    exists (any earlier local ray.init writes one): Ray 2.60's `ray start` then turns token authentication
    on (ray/scripts/scripts.py:1069), while a process joining by address does not (ray/_private/worker.py:1972-1977)
    and is refused (InvalidAuthToken)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(Path(run_dir).resolve() / "slurm" / "ray_auth_token")}


def _write_ray_token(env: dict) -> None:
    import secrets
    path = Path(env["RAY_AUTH_TOKEN_PATH"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(secrets.token_hex(32))
    tmp.chmod(0o600)
    tmp.replace(path)  # a worker never reads half a token


def _alive_nodes(address: str, env: dict) -> int:
    """The cluster's live node count, asked by a separate process with the job's Ray settings."""
    code = "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))"
    r = subprocess.run([sys.executable, "-c", code, address], env={**os.environ, **env}, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"cannot reach the Ray head at {address}:\n{r.stderr[-2000:]}")
    return int(r.stdout.split()[-1])


class RayCluster(NamedTuple):
    """A job's own Ray cluster: its head's port (and the ports after it) and a node-local temp dir of its own.
    Two jobs on one node (an 8-GPU node holding two 4-GPU runs, or a job after a crashed one) would otherwise
    meet: every head on port 6379 and its dashboard agent on 52365, one /tmp/ray whose ray_current_cluster file
    an address-less `ray.init()` attaches to (ray/_private/services.py:413-453), and `ray stop`, which ends
    every Ray process of the user on the node (ray/scripts/scripts.py stop())."""
    port: int
    temp_dir: str

    def ports(self) -> list[str]:
        """`ray start`'s per-node port options (the head also takes --port and the client server's)."""
        return [f"--dashboard-agent-listen-port={self.port + 3}", f"--dashboard-agent-grpc-port={self.port + 4}",
                f"--temp-dir={self.temp_dir}"]

    def logs(self) -> Path:
        """This node's Ray logs (the raylet's, every worker's, and so vLLM's, which runs in Ray workers):
        `<temp dir>/session_latest/logs` (ray/_private/node.py: session_latest symlink, get_logs_dir_path)."""
        return Path(self.temp_dir) / "session_latest" / "logs"


def copy_logs(cluster: RayCluster, run_dir: Path) -> Path | None:
    """Copy this node's Ray and vLLM logs into the run folder (`logs/<attempt's job id>/<host>/`), before the
    node-local temp dir is lost with the job. Returns the copy, None when this node has no logs."""
    import shutil
    src = cluster.logs()
    if not src.is_dir():
        return None
    dest = Path(run_dir) / "logs" / str(os.environ.get("SLURM_JOB_ID", "local")) / socket.gethostname()
    shutil.copytree(src, dest, dirs_exist_ok=True, ignore_dangling_symlinks=True,
                    ignore=shutil.ignore_patterns("*.sock", "sockets"))
    return dest


def network_env(network: Network | None) -> dict:
    """The variables NCCL and Gloo read for the interface between nodes (NCCL's and PyTorch's own settings,
    from verl.network.interface), for every Ray process of the job; empty when unset."""
    if network is None or not network.interface:
        return {}
    return {"NCCL_SOCKET_IFNAME": network.interface, "GLOO_SOCKET_IFNAME": network.interface}


def node_ip(network: Network | None) -> list[str]:
    """`ray start`'s --node-ip-address: this node's IPv4 address on verl.network.interface (none when unset)."""
    if network is None or not network.interface:
        return []
    import psutil
    addrs = psutil.net_if_addrs().get(network.interface)
    ip = next((a.address for a in addrs or () if a.family == socket.AF_INET), None)
    if ip is None:
        raise RuntimeError(f"verl.network.interface {network.interface!r}: no IPv4 address on {socket.gethostname()} "
                           f"(interfaces: {sorted(psutil.net_if_addrs())})")
    return [f"--node-ip-address={ip}"]


RAY_PORTS = range(20000, 30000, 5)  # five ports a job: above Ray's worker ports (10002-19999), below Linux's ephemeral


def ray_cluster(job_id: str | None = None) -> RayCluster:
    """The job's Ray cluster: from the Slurm job id (every task of the job derives the same; two jobs on one
    node differ unless their ids differ by a multiple of 2,000), else a free port and a temp dir of this
    process's (a run outside Slurm)."""
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if job_id is None:
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return RayCluster(port, f"/tmp/opd-ray-p{os.getpid()}")
    digits = int("".join(c for c in str(job_id) if c.isdigit()) or 0)
    return RayCluster(RAY_PORTS[digits % len(RAY_PORTS)], f"/tmp/opd-ray-{job_id}")  # short: Ray's sockets live in it


def start_ray_head(nodes: int, head: str, env: dict, cluster: RayCluster, timeout_s: float = 600,
                   network: Network | None = None) -> str:
    """Start the job's Ray head on this node (`cluster`: its port and temp dir) with a fresh token (`env`:
    ray_env) and wait until `nodes` nodes (this one included) have joined; returns the cluster's address,
    which verl's `ray.init` reads from RAY_ADDRESS (Ray's own variable): never an address-less init.
    `network`: verl.network (the interface's address as the node's, the dashboard on or off)."""
    _write_ray_token(env)
    dashboard = bool(network and network.dashboard)
    subprocess.run(["ray", "start", "--head", f"--port={cluster.port}", f"--ray-client-server-port={cluster.port + 1}",
                    f"--include-dashboard={str(dashboard).lower()}", f"--dashboard-port={cluster.port + 2}",
                    *cluster.ports(), *node_ip(network), "--disable-usage-stats"], check=True,
                   env={**os.environ, **env, **network_env(network)})
    address = f"{head}:{cluster.port}"
    deadline = time.monotonic() + timeout_s
    while (alive := _alive_nodes(address, env)) < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {alive} of {nodes} Ray nodes joined within {timeout_s:.0f} s")
        time.sleep(5)
    return address


def stop_ray(cluster: RayCluster, grace_s: float = 16) -> int:
    """Stop this node's processes of the job's Ray cluster, and no other Ray: every process whose command line
    names the cluster's temp dir (Ray's head, raylet, agents and log monitor all do; the workers end with
    their raylet); SIGTERM, then SIGKILL after `grace_s` as `ray stop` does. Returns how many it stopped."""
    import psutil
    procs = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.info["pid"] != os.getpid() and any(cluster.temp_dir in a for a in p.info["cmdline"] or ()):
            procs.append(p)
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return len(procs)


def _ray_worker(head: str, env: dict, cluster: RayCluster, network: Network | None = None,
                run_dir: Path | None = None) -> None:
    """Join the head's Ray cluster (waiting for it to start) and block until the head stops Ray; then copy this
    node's Ray logs into the run folder."""
    wait_for_port(head, cluster.port, timeout_s=600)
    try:
        subprocess.run(["ray", "start", f"--address={head}:{cluster.port}", *cluster.ports(), *node_ip(network),
                        "--block"], check=False, env={**os.environ, **env, **network_env(network)})
    finally:
        stop_ray(cluster)  # whatever of this node's part outlived the head
        if run_dir is not None:
            copy_logs(cluster, run_dir)


def train_worker(spec: TrainSpec, run_dir: Path) -> None:
    """Tasks 1, 2, ... of a multi-node run (one per node): lend this node's GPUs to task 0's Ray cluster
    until task 0 stops it. Writes only this node's Ray logs (run folder's logs/)."""
    check_driver(f"{spec.run_id} (node {socket.gethostname()})")
    _ray_worker(_allocation().head, ray_env(run_dir), ray_cluster(), spec.verl.network, Path(run_dir))


def signal_lead_s(default: int = Slurm.SIGNAL_DELAY_S) -> int:
    """Seconds before its time limit at which Slurm signals this job: the `--signal=USR2@N` line submitit wrote
    into the job's batch script (submitit/slurm/slurm.py:482), else submitit's default."""
    import re
    try:
        import submitit
        script = Path(submitit.JobEnvironment().paths.submission_file).read_text()
    except Exception:  # not a submitit job (a run by hand)
        return default
    m = re.search(r"--signal=\w+@(\d+)", script)
    return int(m.group(1)) if m else default


def job_end(job_id: str) -> float | None:
    """The Slurm job's end (its time limit) as a Unix time, from `scontrol show job` (EndTime, the node's local
    time), None when Slurm gives none (no limit)."""
    from datetime import datetime
    out = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True).stdout
    for tok in out.split():
        if tok.startswith("EndTime="):
            try:
                return datetime.fromisoformat(tok.split("=", 1)[1]).timestamp()
            except ValueError:  # Unknown, None
                return None
    return None


# verl's deadline save: the fully-async trainer saves a checkpoint once the time left until this Unix time is at
# most its longest step + 60 s + trainer.esi_redundant_time (utils/checkpoint/checkpoint_manager.py:262-284,
# experimental/fully_async_policy/fully_async_trainer.py:873-897); verl reads the time from this variable
DEADLINE_VAR = "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"


def deadline_env(job_id: str | None = None) -> dict:
    """For a k > 0 run in a Slurm job: verl's deadline variable set to the moment Slurm signals the job before its
    time limit (job_end - signal_lead_s), so verl saves the last version before submitit requeues the job and
    the next attempt resumes from it; empty outside Slurm or without a time limit."""
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    end = job_end(job_id) if job_id else None
    return {} if end is None else {DEADLINE_VAR: str(int(end - signal_lead_s()))}


def train_run(spec: TrainSpec | Mapping, run_dir: Path) -> None:
    """Task 0 of a run: Ray across the allocation's nodes, verl's trainer (resuming from its own
    checkpoints), then verl's JSONL log as steps.parquet. The held-out evaluation is not part of it."""
    spec = TrainSpec.of(spec)
    check_driver(spec.run_id)  # first: a node whose driver cannot run CUDA 13 fails in seconds, not in verl
    run_dir = Path(run_dir).resolve()  # verl runs inside the run folder: every path it gets is absolute
    row, student, seed = spec.row, spec.student, spec.seed
    missing = {m: why for m, why in runtime_modules(row, spec.verl).items() if importlib.util.find_spec(m) is None}
    if missing:  # before Ray and verl start: verl would fail minutes later, with its GPUs allocated
        raise RuntimeError(f"{spec.run_id}: this Python lacks " + "; ".join(f"{m} ({why})" for m, why in missing.items()))
    nodes, head = _allocation()
    need = layout_of(spec.verl, row).slurm()["nodes"]
    if "SLURM_JOB_NODELIST" in os.environ and nodes != need:
        raise RuntimeError(f"{spec.run_id}: the allocation has {nodes} node(s), the row's verl layout needs {need}")
    # verl's file logger truncates its file: every attempt gets its own (logparse reads them all); the
    # path reaches the logger's Ray actor through the runtime_env in the overrides
    network = spec.verl.network
    args = overrides(row, spec.student_spec, spec.settings, spec.verl, student=student, seed=seed,
                     run_dir=str(run_dir), log_path=str(logparse.attempt_log(run_dir)), guard=spec.guard,
                     env={**network_env(network), **(deadline_env() if row.staleness else {})})
    # a held-out file of earlier weights is not this training's: run.json must not record it (the evaluation
    # jobs write the run's heldout.parquet after the training; evaluate.gather_heldout)
    (run_dir / "heldout.parquet").unlink(missing_ok=True)
    # the job's own Ray cluster, also on one node, and verl's driver joins it by address
    cluster = ray_cluster()
    env = {**os.environ, **ray_env(run_dir)}
    pruner = Pruner(run_dir, spec) if not spec.verl.keep_checkpoints else None
    try:
        env["RAY_ADDRESS"] = start_ray_head(nodes, head, ray_env(run_dir), cluster, network=network)
        subprocess.run([sys.executable, "-m", entry_point(row), *args], check=True, env=env, cwd=run_dir)
    finally:  # also when verl fails: the workers' `ray start --block` returns, so their tasks end
        stop_ray(cluster)
        copy_logs(cluster, run_dir)
        if pruner:
            pruner.stop()
    t = spec.settings
    logparse.write_steps(logparse.attempt_logs(run_dir), run_dir / "steps.parquet", run_id=spec.run_id,
                         config=row.name, student=student, seed=seed,
                         responses_per_step=t.prompts_per_step * t.responses_per_prompt, staleness=row.staleness,
                         guard_log=run_dir / GUARD_LOG if spec.guard else None)
    # the job ends here and releases its nodes: the held-out evaluation reads the checkpoints in jobs of its
    # own, one GPU per evaluated step (opd.backends.verl.evaluate, workflow/rules/verl_eval.smk)


class SequenceKL(NamedTuple):
    kl: float  # the summed exact full-vocabulary KL(student || teacher) over the response's tokens
    kl_sampled: float  # the summed sampled-token log ratio
    tokens: int


def _sequence_kl(student, teacher, ids, prompt_len: int, chunk: int = 2048) -> SequenceKL:
    """Over one response: the summed exact full-vocabulary KL(student || teacher) per token, the summed
    sampled-token log ratio, and the token count. Each model runs its decoder once; its output layer and
    the log-softmax run over chunks of positions, so no full-vocabulary logit tensor of a long response
    is ever held (16k positions x 152k vocabulary would be 5 GB per model in BF16). The two models may
    sit on different devices."""
    import torch
    with torch.no_grad():
        hs = student.get_decoder()(ids.to(student.device)).last_hidden_state[0]
        ht = teacher.get_decoder()(ids.to(teacher.device)).last_hidden_state[0]
        head_s, head_t = student.get_output_embeddings(), teacher.get_output_embeddings()
        y = ids[0, prompt_len:].to(student.device)
        kl = kls = 0.0
        for i in range(0, len(y), chunk):
            rows = slice(prompt_len - 1 + i, prompt_len - 1 + min(i + chunk, len(y)))
            ls = head_s(hs[rows]).float().log_softmax(-1)
            lt = head_t(ht[rows]).float().log_softmax(-1).to(ls.device)
            yy = y[i:i + chunk, None]
            kl += float((ls.exp() * (ls - lt)).sum())
            kls += float((ls.gather(1, yy) - lt.gather(1, yy)).sum())
    return SequenceKL(kl, kls, len(y))


def prompt_ids(tok, messages: list) -> list[int]:
    """A chat's prompt token ids as the chat template writes them. The template already holds any BOS
    (DeepSeek-R1-Distill's and Llama 3's do), so the rendered text is tokenized without adding special
    tokens; handing vLLM the text would tokenize it with them, and a second BOS."""
    return tok(tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True),
               add_special_tokens=False)["input_ids"]


def load_weights(llm, model_dir: str) -> None:
    """Load a checkpoint folder's weights into a running standalone engine (the hook's `reload_checkpoint`)
    and drop every cached KV block: vLLM's prefix cache is on by default and reloading weights leaves it,
    so the next requests would reuse blocks the previous weights computed (verl clears it after every weight
    sync too: workers/rollout/vllm_rollout/vllm_rollout.py:246-248, vllm_async_server.py:864-870)."""
    llm.collective_rpc("reload_checkpoint", args=(model_dir, {}))
    if llm.reset_prefix_cache() is False:  # False: requests still running (None from versions that return nothing)
        raise RuntimeError("vLLM did not reset its prefix cache after a weight reload")


def _candidate_samples(spec: AdmissionSpec | KVAttributionSpec, row: Row,
                       messages: list) -> list[tuple[list[int], list[int], list[float]]]:
    """The candidate engine (the row's vLLM KV-cache settings and native quantization, the hook's weight
    numerics) answers each chat `messages` R times: (prompt ids, response ids, the engine's log-probability of each response token)."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    s = spec.student_spec
    numerics = weight_numerics(row, spec.seed)
    native = native_engine_args(row, s.layers)
    if native:  # verl's loader patches, as its rollout server installs them before its engine starts (:1259)
        from verl.utils.vllm.vllm_quant_utils import apply_vllm_quant_patches
        apply_vllm_quant_patches()
    cand = LLM(model_path(s.model), worker_extension_cls=HOOK, **_engine_args(spec.seed, spec.verl), **vllm_kv_args(row, s.layers),
               **native)
    if native:  # started on dummy weights: the BF16 checkpoint arrives as verl's weight sync, quantized on load
        cand.collective_rpc("sync_checkpoint", args=(None, numerics or {}))
    elif numerics:
        cand.collective_rpc("reload_checkpoint", args=(None, numerics))
    tok = cand.get_tokenizer()
    prompts = [TokensPrompt(prompt_token_ids=prompt_ids(tok, m)) for m in messages]
    # the reference engine rescores prompt + response as a prompt and must still emit one token:
    # keep every sequence one position short of the context
    room = cand.model_config.max_model_len - max(len(p["prompt_token_ids"]) for p in prompts) - 1
    outs = cand.generate(prompts, SamplingParams(n=spec.responses, temperature=1.0, logprobs=0,
                                                 max_tokens=min(spec.settings.max_response_length, room)))
    samples = [(list(o.prompt_token_ids), list(c.token_ids), [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)])
               for o in outs for c in o.outputs]
    close_engine(cand)  # its GPU memory back before the next engine's start-up measures what is free
    return samples


def close_engine(llm) -> None:
    """End a standalone vLLM engine now (its engine-core process and GPU memory), not whenever the garbage
    collector runs its finalizer (vllm/v1/engine/core_client.py: weakref.finalize(self, engine_core.shutdown);
    shutdown detaches it, so it runs once). Every standalone engine ends here before the next one starts: at
    gpu_memory_utilization 0.5 a second engine's start-up check fails while the first still holds its half."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if hasattr(core, "shutdown"):
        core.shutdown()
    gc.collect()


def _engine_args(seed: int, verl: Verl) -> dict:
    """A standalone engine's arguments: BF16, the job's seed, and config.yaml's `verl.engine` extras."""
    return {"dtype": "bfloat16", "seed": seed, **verl.engine}


class LogRatios(NamedTuple):
    sums: np.ndarray  # per sequence: the sum of log q - log p over its response tokens
    tokens: np.ndarray  # per sequence: its response tokens


def offline_logratios(spec: AdmissionSpec | KVAttributionSpec, rows: list[Row], ref=None) -> list[LogRatios]:
    """Per row, per sequence (prompts in order, `responses` sequences each): the sum of log q - log p over
    the response's tokens and their count. Each row's candidate engine samples; one standard BF16 engine
    (the same student weights) rescores every row's tokens. `ref`: a running BF16 engine to rescore with
    instead of starting one (the student's weights loaded into it first: load_weights; it stays open)."""
    messages = offline_messages(spec)
    samples = [_candidate_samples(spec, row, messages) for row in rows]
    if ref is not None:
        load_weights(ref, model_path(spec.student_spec.model))
        return [rescore(ref, seqs) for seqs in samples]
    ref = reference_engine(spec)
    try:
        return [rescore(ref, seqs) for seqs in samples]
    finally:
        close_engine(ref)


def offline_messages(spec: AdmissionSpec | KVAttributionSpec) -> list[list]:
    """The chats an offline measurement samples: `prompts` training prompts drawn with the spec's seed."""
    train = _read_parquets(spec.verl.data.train).sample(n=spec.prompts, random_state=spec.seed)
    return [list(p) for p in train["prompt"]]


def reference_engine(spec: AdmissionSpec | KVAttributionSpec):
    """The standard BF16 engine on the student's weights, which rescores candidate samples."""
    from vllm import LLM
    return LLM(model_path(spec.student_spec.model), **_engine_args(spec.seed, spec.verl))


def rescore(ref, seqs: list[tuple[list[int], list[int], list[float]]]) -> LogRatios:
    """One candidate's samples (prompt ids, response ids, the candidate's log-probabilities) rescored by the
    reference engine: per sequence the sum of log q - log p over its response tokens, and their count."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    rescored = ref.generate([TokensPrompt(prompt_token_ids=list(p) + list(r)) for p, r, _ in seqs],
                            SamplingParams(max_tokens=1, prompt_logprobs=0))
    diffs = [np.asarray(lq) - np.array([out_.prompt_logprobs[len(pr) + i][t].logprob for i, t in enumerate(r)])
             for (pr, r, lq), out_ in zip(seqs, rescored)]
    return LogRatios(np.array([d.sum() for d in diffs]), np.array([len(d) for d in diffs], dtype=np.int64))


def offline_mismatch(spec: AdmissionSpec | Mapping, ref=None) -> float:
    """D_hat of the spec's row: the mean per-token log q - log p over all response tokens (offline_logratios;
    `ref` as there)."""
    spec = AdmissionSpec.of(spec)
    sums, tokens = offline_logratios(spec, [spec.row], ref)[0]
    return float(sums.sum() / tokens.sum())


def admission_job(spec: AdmissionSpec | Mapping, out: Path) -> None:
    """One row per sequence (stats.sequence_frame), with the job's seconds (both engines' start included)."""
    spec = AdmissionSpec.of(spec)
    t0 = time.perf_counter()
    sums, tokens = offline_logratios(spec, [spec.row])[0]
    seqs = stats.sequence_frame(sums, tokens, spec.responses, config=spec.row.name, student=spec.student)
    store.write_table(seqs.assign(seconds=time.perf_counter() - t0), out)
