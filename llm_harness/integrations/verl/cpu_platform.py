"""verl's ``cpu`` platform: verl 0.9.1's own trainer on the host CPU (docs/scaling-out.md).

verl 0.9.1's platform layer registers ``nvidia``, ``npu`` and ``amd`` only and falls back to
``nvidia`` on a machine without an accelerator (its workers then ask for NCCL). The layer is a
registry, so the toolkit's ``verl.plugins`` entry point adds :class:`PlatformCPU` as ``cpu``,
chosen by ``VERL_PLATFORM=cpu`` (verl's own override; never auto-detected, so a GPU machine is
unaffected): device ``cpu``, process groups on ``gloo``, the ``torch.cpu`` module plus the memory and
RNG calls verl makes on a device module (memory figures are the process's resident set
and its peak). This module imports nothing of verl but the platform layer: the package imports it
first, because other verl modules ask for the platform when they are imported.
The rollout that goes with it is :mod:`.hf_rollout`; the override set of a run is ``scripts/verl/cpu.overrides``.

One verl function cannot be reached through the registry: ``verl.utils.distributed`` builds the
process-group backend as ``cpu:gloo,{device}:{backend}``, which torch rejects as a duplicate when the
device is ``cpu``. With ``VERL_PLATFORM=cpu`` (only then) :func:`_patch_process_groups` replaces its two
initialisers by ones that pass ``cpu:gloo`` alone; the upstream fix is to drop the second entry when
the device is ``cpu``.
"""

from __future__ import annotations

import contextlib
import os
import types
from typing import Any, Optional

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

__all__ = ["PLATFORM", "PlatformCPU", "register_engines", "selected"]

PLATFORM = "cpu"

def _proc_bytes(path: str, key: str) -> int:
    """A kB field of a ``/proc`` file in bytes (:func:`llm_harness.trainer.memory_check.proc_kib_field`; 0 if unreadable)."""
    from llm_harness.trainer.memory_check import proc_kib_field

    return proc_kib_field(path, key) or 0


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) host memory in bytes, as ``torch.cuda.mem_get_info`` reports device memory."""
    return _proc_bytes("/proc/meminfo", "MemAvailable"), _proc_bytes("/proc/meminfo", "MemTotal")


def _device_module() -> types.ModuleType:
    """``torch.cpu`` with the calls verl 0.9.1 makes on ``get_torch_device()`` that it lacks."""
    m = types.ModuleType("vsr_cpu_device")
    for name in ("Event", "Stream", "StreamContext", "current_stream", "device_count", "is_available", "stream",
                 "synchronize", "set_device"):
        setattr(m, name, getattr(torch.cpu, name))
    nothing = lambda *a, **k: None  # noqa: E731
    m.current_device = lambda: "cpu"
    m.empty_cache = m.ipc_collect = m.set_per_process_memory_fraction = m.reset_peak_memory_stats = nothing
    m.mem_get_info = _mem_get_info
    # the process's resident set (now / its peak) stands for allocated device memory
    m.memory_allocated = m.memory_reserved = lambda *a, **k: _proc_bytes("/proc/self/status", "VmRSS")
    m.max_memory_allocated = m.max_memory_reserved = lambda *a, **k: _proc_bytes("/proc/self/status", "VmHWM")
    m.get_rng_state = lambda *a, **k: torch.get_rng_state()
    m.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    m.manual_seed = m.manual_seed_all = torch.manual_seed
    m.get_device_name = lambda *a, **k: "cpu"
    m.is_initialized = lambda: True
    return m


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):
    """verl's platform interface on the host CPU (module doc). Ray schedules workers on its ``GPU``
    resource, which a CPU run declares as logical slots (``ray_init.num_gpus``): verl's resource
    pools count that resource whatever the platform."""

    _module = _device_module()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return self._module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: VERL_PLATFORM=cpu chooses it

    def current_device(self) -> str:
        # verl passes this to .to() / torch.device() / FSDP's device_id, where an int means accelerator 0
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def register_engines() -> tuple[str, ...]:
    """verl's FSDP engines (language and value model) for the ``cpu`` device too: verl 0.9.1 registers
    them for ``cuda`` and ``npu`` only, while the classes use the platform's device throughout.
    Returns the backends registered (none when a ``cpu`` entry already exists)."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    done = []
    for model_type, cls in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        for backend in ("fsdp", "fsdp2"):
            if PLATFORM not in EngineRegistry._engines.get(model_type, {}).get(backend, {}):
                EngineRegistry.register(model_type=model_type, backend=backend, device=PLATFORM)(cls)
                done.append(f"{model_type}/{backend}")
    return tuple(done)


def selected() -> bool:
    """Whether this process runs verl on the CPU platform (``VERL_PLATFORM=cpu``)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM


def _patch_process_groups() -> None:
    """``cpu:gloo`` as the backend of verl's global process group (module doc)."""
    from verl.utils import distributed

    ray_init, plain_init = distributed.initialize_global_process_group_ray, distributed.initialize_global_process_group
    if getattr(ray_init, "_vsr_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return ray_init(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    def initialize_global_process_group(timeout_second=36000):
        from datetime import timedelta

        torch.distributed.init_process_group(backend="cpu:gloo", timeout=timedelta(seconds=timeout_second),
                                             init_method=os.environ.get("DIST_INIT_METHOD", None))
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    initialize_global_process_group_ray._vsr_cpu = True
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray
    distributed.initialize_global_process_group = initialize_global_process_group


if selected():
    _patch_process_groups()
