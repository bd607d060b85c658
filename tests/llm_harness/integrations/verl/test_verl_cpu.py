"""The pieces that run verl 0.9.1's own trainer on the CPU, one by one: the ``cpu`` platform (device module,
process groups) and the ``vsr_hf`` rollout server (generation against the toolkit's HF backend, weight
updates). ``test_verl_end_to_end`` runs them together inside verl's loop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

pytest.importorskip("verl")
import torch  # noqa: E402

from llm_harness.backends import HFBackend, SamplingParams  # noqa: E402
from llm_harness.integrations.verl import hf_rollout  # noqa: E402
from llm_harness.integrations.verl.cpu_platform import PlatformCPU  # noqa: E402
from llm_harness.integrations.verl.hf_rollout import HFRolloutServer, HFServerAdapter  # noqa: E402
from llm_harness.testbed.paths import shipped_checkpoint  # noqa: E402

PROMPT = [20, 18, 6, 15, 4, 16, 19, 22]


def server(**over) -> HFRolloutServer:
    cfg = SimpleNamespace(prompt_length=16, response_length=24, seed=3, max_model_len=None, **over)
    return HFRolloutServer(cfg, SimpleNamespace(local_path=str(shipped_checkpoint("high")), path="unused"))


def test_device_module_answers_verls_calls_on_the_host():
    m = PlatformCPU().device_module
    free, total = m.mem_get_info()
    assert 0 < free <= total and m.memory_allocated() > 0 and m.max_memory_reserved() > 0
    state = m.get_rng_state()
    a = torch.rand(3)
    m.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
    assert m.current_device() == "cpu" and torch.zeros(1).to(m.current_device()).device.type == "cpu"
    p = PlatformCPU()
    assert (p.device_name, p.communication_backend_name(), p.ray_resource_name()) == ("cpu", "gloo", "GPU")
    assert not p.is_platform_available(use_smi_check=True)  # chosen by VERL_PLATFORM only


PG = """
import os, torch
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
import verl
from verl.utils.distributed import initialize_global_process_group_ray
initialize_global_process_group_ray(timeout_second=None)
t = torch.ones(2)
torch.distributed.all_reduce(t)
print("PG", torch.distributed.get_backend(), t.tolist())
"""


@pytest.mark.parametrize("platform,ok", [("cpu", True), ("", False)])
def test_verls_process_group_starts_on_gloo_only_on_the_cpu_platform(platform, ok):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VERL_PLATFORM": platform, "PORT": str(port)}
    p = subprocess.run([sys.executable, "-c", PG], env=env, capture_output=True, text=True, timeout=300)
    if ok:
        assert p.returncode == 0, p.stderr[-2000:]
        assert "PG cpu:gloo [1.0, 1.0]" in p.stdout
    else:  # verl's own backend string on a machine without NCCL: what the cpu platform fixes
        assert p.returncode != 0 and ("NCCL" in p.stderr or "nccl" in p.stderr)


def test_server_generates_what_the_toolkits_backend_samples_with_its_seed():
    s = server()
    out = asyncio.run(s.generate(PROMPT, {"temperature": 1.0, "top_p": 1.0, "logprobs": True, "max_tokens": 10}, "r0"))
    ref = HFBackend.from_pretrained(str(shipped_checkpoint("high"))).generate(
        [PROMPT], 1, SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=10, seed=3))[0][0]
    assert out.token_ids == list(ref.token_ids) and out.log_probs == pytest.approx(list(ref.sampling_logprobs), abs=1e-6)
    assert 1 <= len(out.token_ids) <= 10 and out.extra_fields == {"global_steps": None}
    second = asyncio.run(s.generate(PROMPT, {"temperature": 1.0}, "r1"))  # the next request: the next seed, no log-probs asked
    assert second.log_probs is None and len(second.token_ids) <= 24 and s.stats()["requests"] == 2


def test_server_budget_and_bad_requests_are_named():
    s = server()
    out = asyncio.run(s.generate(list(range(3, 20)) + [3] * 20, {"max_tokens": 100, "ignore_eos": True}, "r"))
    assert len(out.token_ids) == 40 - 37  # max_model_len = prompt_length + response_length caps the request
    with pytest.raises(ValueError, match="no room"):
        asyncio.run(s.generate([3] * 40, {}, "r"))
    with pytest.raises(ValueError, match="repetition_penalty"):
        asyncio.run(s.generate(PROMPT, {"repetition_penalty": 1.2}, "r"))
    with pytest.raises(ValueError, match="text prompts only"):
        asyncio.run(s.generate(PROMPT, {}, "r", image_data=[1]))


def test_weight_updates_replace_every_tensor_and_refuse_what_does_not_fit():
    s = server()
    state = {k: v + 0.01 for k, v in s.backend.model.state_dict().items()}  # lm_head.weight (tied) included
    assert asyncio.run(s.load_weights(state, global_steps=4)) == len(state)
    now = s.parameters()
    assert all(torch.equal(now[k], state[k]) for k in now)
    out = asyncio.run(s.generate(PROMPT, {"max_tokens": 2}, "r"))
    assert out.extra_fields["global_steps"] == 4 and s.stats()["weight_updates"] == 1
    with pytest.raises(KeyError, match="does not have"):
        asyncio.run(s.load_weights({"model.nope": torch.zeros(1)}))
    k = next(iter(state))
    with pytest.raises(ValueError, match="shape"):
        asyncio.run(s.load_weights({k: torch.zeros(1)}))


def test_adapter_sends_full_tensors_to_its_replicas_server(monkeypatch):
    got = {}

    class Remote:
        async def _call(self, state, steps):
            got.update(state=state, steps=steps)

        def remote(self, state, steps):
            return self._call(state, steps)

    monkeypatch.setattr(hf_rollout.ray, "get_actor", lambda name: got.setdefault("name", name) and SimpleNamespace(load_weights=Remote()))
    a = object.__new__(HFServerAdapter)
    a.replica_rank, a.is_leader = 0, True
    w = torch.arange(6.0).view(2, 3)
    asyncio.run(a.update_weights(iter([("x", w)]), global_steps=7))
    assert got["name"] == hf_rollout.server_name(0) and got["steps"] == 7 and torch.equal(got["state"]["x"], w)
    assert got["state"]["x"].data_ptr() != w.data_ptr()  # a copy, not the trainer's storage
    with pytest.raises(ValueError, match="named_tensors"):
        asyncio.run(a.update_weights(iter([]), wire_format="delta_flush"))
    with pytest.raises(ValueError, match="LoRA"):
        asyncio.run(a.update_weights(iter([]), peft_config={"r": 8}))
