"""verl's own training code executed on a CPU (marker verl_cpu): verl 0.9.1's FSDP2 engine, started through the
project's test-only CPU platform (opd.backends.verl.cpu_platform, a `verl.plugins` entry point selected with
VERL_PLATFORM=opd-cpu), takes one OPD optimizer step of the toy student with the loss the project's overrides
configure. tests/verl_cpu/one_update.py runs it in a process of its own (verl fixes its platform once per process)
and says what differs from a GPU run; docs/testing.md lists what this covers of the cluster path and what it cannot.

verl comes with the `test` extra. Where verl or the entry point is missing the tests skip and say why, except under
CI (CI set, as .ci/run does), where they fail: nothing would be checked."""
import json
import math
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytestmark = pytest.mark.verl_cpu
ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "verl_cpu" / "one_update.py"
ENTRY = "opd.backends.verl.cpu_platform"


def missing(why: str):
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI is set: the verl_cpu tests must run)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def verl_cpu():
    try:
        import verl  # noqa: F401
    except ImportError as e:
        missing(f"verl is not installed ({e}): pip install -e '.[test]'")
    if not any(ep.value == ENTRY for ep in entry_points(group="verl.plugins")):
        missing(f"the verl.plugins entry point {ENTRY} is not registered: reinstall this package (pip install -e .)")


def run(args: list[str], env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    r = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return r


def test_the_cpu_platform_is_inert_unless_named(verl_cpu):
    """Without VERL_PLATFORM=opd-cpu, importing verl (which loads the entry point) registers nothing, so verl's platform
    detection is what it is without this project; registered, verl's auto-detection still never picks it."""
    probe = ("import json, verl\n"
             "from verl.plugin.platform import platform_manager as pm\n"
             "from opd.backends.verl import cpu_platform\n"
             "before = list(pm.PlatformRegistry.registered_names())\n"
             "cpu_platform.register()\n"
             "print(json.dumps([before, list(pm.PlatformRegistry.registered_names()), pm._detect_platform_name()]))")
    before, after, detected = json.loads(run(["-c", probe], env={"VERL_PLATFORM": None}).stdout.strip().splitlines()[-1])
    assert "opd-cpu" not in before and "opd-cpu" in after
    assert detected != "opd-cpu"
    named = ("import verl\nfrom verl.utils.device import get_device_name, get_nccl_backend\n"
             "print(get_device_name(), get_nccl_backend())")
    r = run(["-c", named], env={"VERL_PLATFORM": "opd-cpu", "CUDA_VISIBLE_DEVICES": ""})
    assert r.stdout.split()[-2:] == ["cpu", "gloo"]


def test_one_opd_update_by_verls_fsdp2_engine_on_a_cpu(verl_cpu, tmp_path):
    """verl's ActorRolloutRefWorker builds its FSDP2 engine on the CPU from the composed config, recomputes log p_old
    and takes one step of verl's OPD loss (k1 as a policy gradient, token mean, no task reward). Checked against
    computations outside verl: the step's loss is the k1 token mean of the student's and the teacher's log-probs
    (the policy ratio is 1 up to BF16 recomputation), verl's log-probs are the tiny backend's fp32 student's up to
    BF16, and every parameter moved by AdamW's first step (lr, no weight decay: the project's optimizer)."""
    run([str(SCRIPT), str(tmp_path)], env={"PYTHONWARNINGS": "ignore"})
    r = json.loads((tmp_path / "result.json").read_text())
    m = r["metrics"]
    assert (r["platform"], r["backend"], r["dist_backend"]) == ("cpu", "gloo", "gloo")
    assert r["engine"] == "verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead" and r["strategy"] == "fsdp2"
    # the project's loss settings, as the overrides composed them
    assert (r["loss_mode"], r["use_policy_gradient"], r["use_task_rewards"], r["loss_agg_mode"]) == \
        ("k1", True, False, "token-mean")
    assert r["weight_decay"] == 0.0 and r["response_tokens"] > r["sequences"]
    # finite loss and gradient; the loss is the k1 token mean (a task-reward term would add to it)
    assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0
    assert m["loss"] == pytest.approx(m["distillation/loss"], abs=1e-6)
    assert abs(m["loss"] - r["k1_token_mean"]) < 2e-3 + 0.02 * abs(r["k1_token_mean"]), (m["loss"], r["k1_token_mean"])
    # verl's forward pass (packed sequences, BF16 autocast) computes the toy student's log-probs
    assert r["old_vs_fp32_max"] < 0.1, r["old_vs_fp32_max"]
    # d_n's two terms as logparse reads them: finite, and near 0 for the BF16 engine against the BF16 trainer
    d_n = r["rollout_corr_kl"] + m["distillation/ppo_kl"]
    assert math.isfinite(d_n) and abs(d_n) < 0.01, d_n
    # every parameter changed, each by at most AdamW's first step (|step| <= lr), the largest by about lr
    assert r["finite_after"]
    for name, delta in r["changed"].items():
        assert 0.5 * r["lr"] < delta < 1.01 * r["lr"], (name, delta, r["lr"])
