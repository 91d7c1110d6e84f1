"""What a paper run on a GPU cluster meets before its first step (issue 28): its own Ray cluster beside other jobs
on the node, a requeued job's stale result files, verl's optimizer and teacher context, the reward's scale."""
import os
import pickle
import socket
import subprocess
import sys

import pytest

from opd import config as C
from opd.backends.verl import gpu, reward
from opd.backends.verl import overrides as O


def composed_paper_runs(paper_composed):
    """A synchronous and an asynchronous paper run and their configs as conftest.paper_composed composed them."""
    composed = [(run, cfg) for _, _, run, _, _, cfg in paper_composed.values()]
    return [next(x for x in composed if x[0].row.staleness == 0), next(x for x in composed if x[0].row.staleness > 0)]


def test_verls_optimizer_is_the_tiny_trainers_adamw_without_decay_or_clipping(paper_composed):
    """verl's defaults (weight decay 0.01, gradients clipped at norm 1.0) would differ silently from the tiny
    backend's AdamW, and clipping caps exactly the gradient spikes of high-mismatch rows."""
    import torch
    for run, cfg in composed_paper_runs(paper_composed):
        optim = cfg.actor_rollout_ref.actor.optim
        assert optim.optimizer == "AdamW" and optim.lr == 1e-6, run.run_id
        assert optim.weight_decay == 0.0 and optim.clip_grad == float("inf"), run.run_id
    # verl's optimizer step with clip_grad inf (torch's clip_grad_norm_, as verl's FSDP engine calls it):
    # the gradient is unchanged and its norm still reported
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([30.0, 40.0, 0.0])
    assert float(torch.nn.utils.clip_grad_norm_([p], max_norm=float("inf"))) == 50.0
    assert p.grad.tolist() == [30.0, 40.0, 0.0]


def test_the_teacher_has_room_for_the_whole_response_and_one_token(paper_composed):
    """The teacher scores prompt + response and vLLM must still generate one token (vllm_async_server.py:593-599);
    left unset, its max_model_len is the model's context, which the toy's is exactly (11 + 40 tokens)."""
    for run, cfg in composed_paper_runs(paper_composed):
        teacher = cfg.distillation.teacher_models.teacher_model.inference
        assert teacher.max_model_len == cfg.data.max_prompt_length + cfg.data.max_response_length + 1, run.run_id
    assert O.teacher_context({"max_prompt_length": 11, "max_response_length": 40}) == 52


def test_reward_mean_is_the_fraction_of_right_answers_for_verls_math_scorer(paper_composed):
    """verl's math_dapo scorer (the paper's data) returns +1 / -1: the project's reward function gives 1 / 0, so
    reward_mean (critic/score/mean) is the accuracy, as in the tiny backend; every run uses it."""
    assert reward.compute_score("math_dapo", "so the answer is \\boxed{7}", "7") == 1.0
    assert reward.compute_score("math_dapo", "so the answer is \\boxed{8}", "7") == 0.0
    assert reward.compute_score("opd-toy", "3+5=8,8+9=17;17", "17") == 1.0
    for run, cfg in composed_paper_runs(paper_composed):
        assert cfg.reward.custom_reward_function.path == O.REWARD and os.path.exists(O.REWARD), run.run_id
        assert cfg.reward.custom_reward_function.name == "compute_score"


def test_a_requeued_jobs_batch_script_clears_the_earlier_attempts_results_before_any_task_starts(tmp_path):
    """After a node failure Slurm requeues the job under its id and submitit deletes no result file: task 0's
    error of the failed attempt would stand beside the new attempt's worker results, and the waiting rule would
    re-raise it while task 0 still trains. The batch script, which runs once per attempt, removes them (and a
    killed write's .save_tmp) before srun starts any task; another job's results stay. Clearing them from task 0
    instead raced a worker task that had already finished (the tiny backend's return at once)."""
    import submitit
    from opd import launch
    from opd.spec import Slurm
    folder = tmp_path / "slurm"
    folder.mkdir()
    paths = [submitit.core.utils.JobPaths(folder, "4242", t).result_pickle for t in range(3)]
    paths[0].write_bytes(pickle.dumps(("error", "Traceback: a Ray node died")))
    paths[1].write_bytes(pickle.dumps(("success", None)))
    save_tmp = paths[2].with_name(paths[2].name + ".save_tmp")
    save_tmp.write_bytes(b"half a pickle")
    other = submitit.core.utils.JobPaths(folder, "4243", 0).result_pickle  # another job's: kept
    other.write_bytes(pickle.dumps(("success", {})))
    ex = launch.executor(folder, Slurm.of({"setup": ["module load cuda"]}), "x.toy.s0")
    script = ex._executor._make_submission_file_text("python -m submitit.core._submit", "uid")
    line = launch.clear_earlier_results(folder)
    assert script.index(line) < script.index("module load cuda") < script.index("python -m submitit")
    subprocess.run(["bash", "-c", line], check=True, env={**os.environ, "SLURM_JOB_ID": "4242"})
    assert not any(p.exists() for p in paths) and not save_tmp.exists() and other.exists()

def test_a_training_jobs_slurm_shape_takes_whole_nodes(monkeypatch):
    """Two runs on one node would bind each other's weight-sync sockets (verl names them by the Ray job id,
    the same in every Ray cluster): a training job asks Slurm for whole nodes (sbatch --exclusive)."""
    import submitit

    from opd import launch
    from opd.spec import Experiment, Slurm
    from submitit.slurm.slurm import _make_sbatch_string
    cfg = C.load()
    run = C.runs(cfg, "paper")[0]
    spec = type("Spec", (), {"backend": "verl", "verl": Experiment.of(cfg, "paper").verl, "row": run.row})()
    shape = launch.train_shape(spec, Slurm.of(cfg["slurm"]))
    got = {}

    class Executor:
        def __init__(self, **kw):
            pass

        def update_parameters(self, **params):
            got.update(params)
    monkeypatch.setattr(submitit, "AutoExecutor", Executor)
    launch.executor(launch.Path("unused"), shape, "x")
    assert got["slurm_exclusive"] is True
    assert "#SBATCH --exclusive" in _make_sbatch_string("cmd", "/tmp/f", exclusive=True)  # what submitit writes
    assert not launch.single_job_shape("verl", Slurm.of(cfg["slurm"])).exclusive  # a 1-GPU job shares its node


def test_ray_clusters_of_two_jobs_are_their_own():
    """Each Slurm job derives its own ports and temp dir from its id (all its tasks the same ones)."""
    a, b = gpu.ray_cluster("73001"), gpu.ray_cluster("73002")
    assert a == gpu.ray_cluster("73001") and a.port != b.port and a.temp_dir != b.temp_dir
    assert abs(a.port - b.port) >= 5 and all(20000 <= c.port < 30000 for c in (a, b))
    assert len(a.temp_dir) < 40  # Ray's session sockets live below it (a Unix socket path has 107 bytes)


@pytest.mark.filterwarnings("ignore")
def test_two_jobs_ray_on_one_node_run_and_stop_apart(tmp_path):
    """Two jobs' Ray heads on one machine, as train_run starts them: both run, and stopping one job's Ray
    leaves the other's running (`ray stop` would have ended both)."""
    host = socket.gethostbyname(socket.gethostname())
    jobs = {}
    try:
        for job in ("91001", "91002"):
            env = gpu.ray_env(tmp_path / job)
            jobs[job] = (gpu.ray_cluster(job), env)
            jobs[job] = (*jobs[job], gpu.start_ray_head(1, host, env, jobs[job][0], timeout_s=120))
        (a, env_a, addr_a), (b, env_b, addr_b) = jobs.values()
        assert addr_a != addr_b and gpu._alive_nodes(addr_a, env_a) == 1 and gpu._alive_nodes(addr_b, env_b) == 1
        assert gpu.stop_ray(a) > 0
        assert gpu._alive_nodes(addr_b, env_b) == 1
        with pytest.raises(RuntimeError, match=f"nothing listens on {host}:{a.port}"):
            gpu.wait_for_port(host, a.port, timeout_s=1, poll_s=0.5)
        assert gpu.stop_ray(a) == 0  # none of its processes is left
    finally:
        for cluster, *_ in jobs.values():
            gpu.stop_ray(cluster)


FP8_ROW = {"name": "fp8-w8a8", "weights": "fp8_block", "activations": "fp8_group128"}


def test_an_fp8_rows_admission_engine_gets_its_weights_as_verls_weight_sync(tmp_path, monkeypatch):
    """vLLM's FP8 method assumes an FP8 checkpoint: started on the BF16 checkpoint with quantization set, it
    would cast the BF16 values into FP8 parameters and keep the block scales' initial values. The admission
    check's candidate engine for the native FP8 row starts on dummy weights (as verl's rollout does) and the
    student's BF16 checkpoint reaches verl's own `_update_weights` (which quantizes each tensor as it loads it),
    every tensor exactly as saved; the BF16 reference engine loads the checkpoint itself."""
    import types

    import torch

    from opd.backends.tiny.model import export_hf
    from opd.backends.verl import hook
    from opd.spec import AdmissionSpec
    from test_verl import LoadRecorder, tiny_model
    m = tiny_model(layers=2)
    export_hf(m, tmp_path / "student")
    engines = []

    events = []

    class Recorder(LoadRecorder):  # verl's extension's load and model iteration (vLLM's worker needs a GPU)
        def _update_weights(self, weights, *args, **kwargs):
            events.append("load")
            super()._update_weights(weights, *args, **kwargs)

        def _iter_all_models(self):
            yield "model"

    class FakeLLM:  # vLLM's LLM as _candidate_samples and offline_logratios use it; the worker is the real hook
        def __init__(self, model, **kw):
            self.kw, self.rpc = kw, []
            self.worker = type("Worker", (hook.WeightNumerics, Recorder), {})()
            self.worker.vllm_config = types.SimpleNamespace(additional_config={}, model_config=types.SimpleNamespace(
                model=model, hf_config=types.SimpleNamespace(num_hidden_layers=2)))
            self.worker.model_runner = types.SimpleNamespace(vllm_config=self.worker.vllm_config)
            self.model_config = types.SimpleNamespace(max_model_len=64)
            engines.append(self)

        def collective_rpc(self, method, args=()):
            self.rpc.append(method)
            return [getattr(self.worker, method)(*args)]

        def get_tokenizer(self):
            return None  # prompt_ids is replaced below

        def generate(self, prompts, sp):
            raise StopIteration  # the engines' set-up is what this test checks
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = FakeLLM, lambda **kw: kw
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    quant_utils = types.ModuleType("verl.utils.vllm.vllm_quant_utils")  # verl's FP8 helpers import vLLM
    quant_utils.apply_vllm_quant_patches = lambda: None
    quant_utils.is_quantized_model = lambda vllm_config: True  # the engine started with quantization fp8
    quant_utils.prepare_quanted_weights_for_loading = lambda model: events.append(f"prepare {model}") or "state"
    quant_utils.process_quanted_weights_after_loading = lambda model, st: events.append(f"finish {model} {st}")
    patch = types.ModuleType("verl.utils.vllm.patch")
    patch.patch_vllm_moe_model_weight_loader = lambda model: events.append("bf16 path")
    monkeypatch.setitem(sys.modules, "verl.utils.vllm.patch", patch)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    monkeypatch.setitem(sys.modules, "verl.utils.vllm.vllm_quant_utils", quant_utils)
    monkeypatch.setattr(gpu, "prompt_ids", lambda tok, m: [1, 2, 3])
    spec = AdmissionSpec.of({"experiment": "paper", "backend": "verl", "student": "s", "row": FP8_ROW, "prompts": 1,
                             "responses": 1, "seed": 0, "task_seed": 0, "student_path": None, "teacher_path": None,
                             "student_spec": {"model": str(tmp_path / "student"), "teacher": "t", "layers": 2},
                             "settings": {"max_response_length": 40}, "verl": {"data": {"train": "x", "heldout": ["y"]}}})
    with pytest.raises(StopIteration):
        gpu._candidate_samples(spec, spec.row, [[{"role": "user", "content": "1+1"}]])
    cand = engines[0]
    assert cand.kw["quantization"] == "fp8" and cand.kw["load_format"] == "dummy"
    assert cand.rpc == ["sync_checkpoint"]
    assert cand.worker.loaded.keys() == m.state_dict().keys()
    assert all(torch.equal(cand.worker.loaded[k], v) for k, v in m.state_dict().items())
    # verl's steps around every FP8 reload (workers/rollout/vllm_rollout/utils.py:297-301, 338-342), in its order
    assert events == ["prepare model", "load", "finish model state"]
    # without verl's extension (vLLM's CPU environment) the FP8 path says what it needs
    with pytest.raises(RuntimeError, match="verl's vLLM worker extension"):
        hook.WeightNumerics().sync_checkpoint(str(tmp_path / "student"))
