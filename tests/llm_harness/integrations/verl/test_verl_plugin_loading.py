"""``import verl`` in a fresh interpreter loads the toolkit through the ``verl.plugins`` entry point
(verl/__init__.py): nothing but ``import verl`` runs before the registries are read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("verl")

PROBE = """
import json, sys
import verl
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
out = {"plugin_imported": "llm_harness.integrations.verl" in sys.modules,
       "estimators": sorted(k for k in ADV_ESTIMATOR_REGISTRY if k.startswith("vsr_")),
       "agent_loops": sorted(k for k in _agent_loop_registry if k.startswith("vsr_"))}
if out["plugin_imported"]:
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.plugin.platform.platform_manager import PlatformRegistry
    from verl.workers.rollout.replica import RolloutReplicaRegistry
    from verl.workers.engine.base import EngineRegistry
    out["trainer"] = get_trainer_cls("vsr_sync").__name__
    out["platform"] = PlatformRegistry.get("cpu").__name__
    out["rollout"] = RolloutReplicaRegistry.get("vsr_hf").__name__
    out["cpu_engines"] = sorted(b for b, d in EngineRegistry._engines["language_model"].items() if "cpu" in d)
from verl.utils.device import get_device_name, get_nccl_backend
out["device"] = [get_device_name(), get_nccl_backend()]
print("PROBE" + json.dumps(out))
"""


def _probe(env_extra: dict[str, str]) -> subprocess.Popen:
    env = {**os.environ, **env_extra}
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    return subprocess.Popen([sys.executable, "-c", PROBE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p: subprocess.Popen) -> dict:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-2000:]
    return json.loads(next(line for line in out.splitlines() if line.startswith("PROBE"))[5:])


def test_entry_point_registers_estimators_agent_loop_trainer_mode_platform_and_rollout():
    from importlib.metadata import entry_points

    eps = {e.name: e.value for e in entry_points(group="verl.plugins")}
    assert eps.get("vsr-toolkit") == "llm_harness.integrations.verl"
    runs = {p: _probe({"VERL_USE_EXTERNAL_PLUGINS": "auto", "VERL_PLATFORM": p}) for p in ("cpu", "")}
    got = {p: _result(r) for p, r in runs.items()}
    common = {"plugin_imported": True, "trainer": "VSRSyncTrainer", "agent_loops": ["vsr_env", "vsr_env_eval", "vsr_prefix"],
              "estimators": sorted(["vsr_grpo", "vsr_drgrpo", "vsr_rloo", "vsr_constant", "vsr_extra_grpo", "vsr_gigpo"]),
              "platform": "PlatformCPU", "rollout": "HFRolloutReplica", "cpu_engines": ["fsdp", "fsdp2"]}
    assert got["cpu"] == {**common, "device": ["cpu", "gloo"]}
    # without VERL_PLATFORM the cpu platform is never chosen: verl's own fallback (nvidia) stands
    assert got[""] == {**common, "device": ["cuda", "nccl"]}
