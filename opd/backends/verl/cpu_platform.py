"""A CPU platform for verl 0.9.1, for tests only: verl's own training code (its FSDP2 engine, workers and losses)
runs on a machine without a GPU (tests/test_verl_cpu.py). File:line are under the installed `verl` package.

verl registers no CPU platform: its platform manager picks the platform named by `VERL_PLATFORM`, else the first
registered one whose `is_platform_available` is true, else falls back to "nvidia"
(plugin/platform/platform_manager.py:83-117), and `auto_set_device` then turns `trainer.device=cpu` into cuda
(utils/device.py:151-166). verl's extension points are used, nothing of verl is changed or patched:

- this module is a `verl.plugins` entry point (pyproject.toml), which `import verl` loads (verl/__init__.py:55-76);
- it registers the platform with verl's own registry (PlatformRegistry.register, platform_manager.py:42-70) only
  when `VERL_PLATFORM=opd-cpu` is set, and the platform refuses to start where CUDA is available: it is never
  selected by auto-detection (is_platform_available is false) and never on a GPU node;
- verl's FSDP engine is registered for cuda and npu only (workers/engine/fsdp/transformer_impl.py:1143); verl's
  `VERL_ENGINE_DEVICE` (workers/engine/base.py:405-406) selects it, set by the caller (the test) to "cuda".

Where the cluster imports verl (no `VERL_PLATFORM=opd-cpu`), loading this module registers nothing: verl's
platform detection, and everything after it, is exactly what it is without the project installed.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

NAME = "opd-cpu"  # VERL_PLATFORM's value that selects this platform
ENV = "VERL_PLATFORM"


def selected() -> bool:
    """Whether this process asked verl for the CPU platform (verl lower-cases the name: platform_manager.py:92)."""
    return os.environ.get(ENV, "").strip().lower() == NAME


def _meminfo(key: str) -> int:
    """A /proc/meminfo entry in bytes (0 where the file or the entry is missing)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def device_module():
    """The `torch.<device>` namespace verl calls through the platform (utils/device.py:105-111, get_torch_device):
    torch.cpu, plus the calls of torch.cuda that verl makes and torch.cpu lacks. The CPU has no device memory of its
    own: the allocator's counters are 0 (verl only logs them), mem_get_info is the machine's free and total memory,
    and the cache calls have nothing to do."""
    import types

    import torch

    m = types.ModuleType("opd_cpu_device", "torch.cpu with the torch.cuda calls verl makes")
    m.__dict__.update({k: getattr(torch.cpu, k) for k in dir(torch.cpu) if not k.startswith("__")})
    zero = lambda *a, **k: 0  # noqa: E731
    nothing = lambda *a, **k: None  # noqa: E731
    m.__dict__.update(
        current_device=lambda: "cpu", is_available=lambda: True, device_count=lambda: 1,
        memory_allocated=zero, memory_reserved=zero, max_memory_allocated=zero, max_memory_reserved=zero,
        reset_peak_memory_stats=nothing, reset_accumulated_memory_stats=nothing, empty_cache=nothing,
        ipc_collect=nothing, set_per_process_memory_fraction=nothing,
        mem_get_info=lambda *a: (_meminfo("MemAvailable"), _meminfo("MemTotal")),
        get_device_name=lambda *a: "cpu",
        get_device_properties=lambda *a: types.SimpleNamespace(name="cpu", total_memory=_meminfo("MemTotal")),
        get_rng_state=lambda *a: torch.get_rng_state(), set_rng_state=lambda state, *a: torch.set_rng_state(state),
        manual_seed=torch.manual_seed, manual_seed_all=torch.manual_seed)
    return m


def platform_class():
    """The CPU platform, a subclass of verl's PlatformBase (imported here: only a process that selects the platform
    pays for it)."""
    import torch
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl's device calls on a CPU: device "cpu", one device, gloo for collectives, no IPC, no profiler."""

        def __init__(self):
            if torch.cuda.is_available():
                raise RuntimeError(f"{ENV}={NAME} (opd.backends.verl.cpu_platform) is a test-only CPU platform and "
                                   f"CUDA is available here: unset {ENV} to run verl on the GPUs")

        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: _DEVICE)

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check=False) -> bool:
            return False  # chosen only by name (VERL_PLATFORM), never by verl's auto-detection

        def current_device(self) -> str:
            # verl passes the device id to torch as a device (`.to(get_device_id())`, `device=get_device_id()`):
            # an int there means a CUDA device in torch, so the CPU's id is the device's name
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            pass

        def synchronize(self, device_index=None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "OPD_CPU_VISIBLE_DEVICES"  # no CPU equivalent of CUDA_VISIBLE_DEVICES; verl only reads it

        def ray_resource_name(self) -> str:
            # Ray's logical GPU slots, which a CPU test's Ray cluster declares (ray.init(num_gpus=...)): verl places its
            # workers on "GPU" bundles and checks the cluster has enough (single_controller/ray/base.py:146-151,
            # 225-232); no GPU is used
            return "GPU"

        def ray_resource_options(self, num_gpus: float) -> dict:
            return {"num_gpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def cudart(self):
            return None

    _DEVICE = device_module()
    return PlatformCPU


def register() -> None:
    """Register the CPU platform under NAME with verl's registry."""
    from verl.plugin.platform.platform_manager import PlatformRegistry
    PlatformRegistry.register(platform=NAME)(platform_class())


if selected():  # loaded by `import verl` through the entry point: register only when asked for by name
    register()
