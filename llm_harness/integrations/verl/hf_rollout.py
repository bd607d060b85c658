"""The ``vsr_hf`` rollout: verl 0.9.1's token-in/token-out server on the host CPU (docs/scaling-out.md).

verl 0.9.1's rollout registries name vLLM, SGLang and TensorRT-LLM servers only; none runs in a
CPU-only verl environment. The toolkit registers ``vsr_hf`` (``actor_rollout_ref.rollout.name=vsr_hf``):
:class:`HFRolloutReplica` starts one :class:`HFRolloutServer` Ray actor per replica that answers verl's
``generate`` with the toolkit's :class:`~llm_harness.backends.HFBackend` (sampling log-probs
included); :class:`HFServerAdapter` is the rollout inside verl's hybrid worker, whose
``update_weights`` (verl's ``naive`` checkpoint engine, after each actor update) sends the actor's
full tensors to that server. Sleep, wake-up and KV-cache calls are no-ops: the server keeps no
cache between requests and its weights stay in host memory. With :mod:`.cpu_platform` it runs
verl's own trainer on the CPU; on a GPU machine it is a slow but exact reference rollout.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import ray
import torch
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

__all__ = ["REGISTERED", "ROLLOUT", "HFRolloutReplica", "HFRolloutServer", "HFServerAdapter", "server_name"]

ROLLOUT = "vsr_hf"
REGISTERED = (ROLLOUT,)


def server_name(replica_rank: int) -> str:
    """The Ray actor name of replica ``replica_rank``'s server (the adapter finds it by this name)."""
    return f"vsr_hf_rollout_server_{replica_rank}"


def _sampling(params: dict[str, Any], max_tokens: int, seed: int):
    """verl's sampling dict (vLLM's names) as the toolkit's :class:`~llm_harness.backends.SamplingParams`;
    a parameter the HF backend cannot honour is refused, not ignored."""
    from llm_harness.backends import SamplingParams

    neutral = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    unsupported = {k: v for k, v in params.items() if k in neutral and v is not None and float(v) != neutral[k]}
    if unsupported:
        raise ValueError(f"{ROLLOUT}: sampling parameters the HF rollout does not implement: {unsupported}")
    top_k = int(params.get("top_k", 0) or 0)
    return SamplingParams(temperature=float(params.get("temperature", 1.0)), top_p=float(params.get("top_p", 1.0)),
                          top_k=max(top_k, 0), max_new_tokens=int(max_tokens), ignore_eos=bool(params.get("ignore_eos", False)),
                          seed=int(seed))


class HFRolloutServer:
    """One replica's token-in/token-out server: the toolkit's HF backend over a host copy of the policy.

    Requests run one at a time (an ``asyncio.Lock``; the backend is not reentrant), each with its own
    seed (``rollout.seed`` + a request counter), so a run is repeatable when verl issues requests in a
    fixed order. ``load_weights`` replaces the parameters in place and records ``global_steps``,
    which every reply carries in ``extra_fields`` as vLLM's server does."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0):
        from llm_harness.backends import HFBackend, HFBackendConfig

        self.config, self.replica_rank = config, replica_rank
        path = getattr(model_config, "local_path", None) or model_config.path
        self.backend = HFBackend.from_pretrained(path, config=HFBackendConfig(model=path, device="cpu", dtype="float32"))
        # vLLM's max_model_len: the configured one, else prompt + response length; never past the model's context
        want = int(getattr(config, "max_model_len", None) or (config.prompt_length + config.response_length))
        self.max_len = min(want, self.backend.max_context)
        self.global_steps: Optional[int] = None
        self.requests = 0
        self.weight_updates = 0
        self._lock = asyncio.Lock()

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None, **_: Any) -> TokenOutput:
        if image_data is not None or video_data is not None or audio_data is not None:
            raise ValueError(f"{ROLLOUT}: the HF rollout takes text prompts only")
        params = dict(sampling_params)
        room = self.max_len - len(prompt_ids)
        if room < 1:
            raise ValueError(f"{ROLLOUT}: prompt of {len(prompt_ids)} tokens leaves no room in max_model_len {self.max_len}")
        want = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if want is None:
            want = min(self.config.response_length, self.config.prompt_length + self.config.response_length - len(prompt_ids))
        max_tokens = max(1, min(int(want), room))
        async with self._lock:
            seed = int(self.config.seed) + 1_000_003 * self.replica_rank + self.requests
            self.requests += 1
            sample = self.backend.generate([list(map(int, prompt_ids))], 1, _sampling(params, max_tokens, seed))[0][0]
        want_lp = bool(params.get("logprobs", False)) or params.get("logprobs") == 0
        return TokenOutput(token_ids=[int(t) for t in sample.token_ids],
                           log_probs=[float(x) for x in sample.sampling_logprobs] if want_lp else None,
                           stop_reason="completed", extra_fields={"global_steps": self.global_steps})

    async def load_weights(self, state: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> int:
        """Copy ``state`` (HF parameter names, full tensors) into the model; returns how many tensors
        were copied. A name the model lacks, or a shape that differs, is an error (nothing is skipped)."""
        async with self._lock:
            params = self.backend.model.state_dict(keep_vars=True)  # tied weights under each of their names
            missing = sorted(set(state) - set(params))
            if missing:
                raise KeyError(f"{ROLLOUT}: weights the rollout model does not have: {missing[:5]}")
            with torch.no_grad():
                for name, t in state.items():
                    if params[name].shape != t.shape:
                        raise ValueError(f"{ROLLOUT}: {name} has shape {tuple(t.shape)}, the rollout model "
                                         f"{tuple(params[name].shape)}")
                    params[name].copy_(t.to(params[name].dtype))
            self.global_steps = global_steps
            self.weight_updates += 1
            return len(state)

    def stats(self) -> dict[str, Any]:
        """What the server did: requests answered, weight updates received, the last ``global_steps``."""
        return {"requests": self.requests, "weight_updates": self.weight_updates, "global_steps": self.global_steps}

    def parameters(self) -> dict[str, torch.Tensor]:
        """The rollout model's parameters (to check a weight sync)."""
        return {k: v.detach().clone() for k, v in self.backend.model.named_parameters()}

    async def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    wake_up = sleep = abort_all_requests = resume_generation = clear_kv_cache = _nothing
    release_kv_cache = resume_kv_cache = start_profile = stop_profile = _nothing


class HFRolloutReplica(RolloutReplica):
    """A replica of :class:`HFRolloutServer` (one server; rollout world size 1 per replica)."""

    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(f"{ROLLOUT}: tensor/data/pipeline parallel sizes must be 1 (world size {self.world_size})")
        server = ray.remote(HFRolloutServer).options(name=server_name(self.replica_rank), num_cpus=0,
                                                     max_concurrency=self.max_concurrency).remote(
            config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        await server.stats.remote()  # constructed (the model loaded) before the trainer goes on
        self.servers = [server]
        self._server_handle = server
        self._server_address = server_name(self.replica_rank)

    def rollout_worker_use_gpu(self) -> bool:
        return False


class HFServerAdapter(BaseRollout):
    """The rollout inside verl's hybrid worker: weight updates go to this replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any):
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        self.replica_rank, self.is_leader = rank // world, rank % world == 0
        self.sleep_level = 2

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"{ROLLOUT}: weight format {wire_format!r} is not supported (named_tensors only)")
        if kwargs.get("peft_config") is not None:
            raise ValueError(f"{ROLLOUT}: LoRA adapters are not supported; merge them (model.lora.merge=True)")
        state = {name: t.detach().to("cpu", copy=True) for name, t in weights}
        if self.is_leader:
            server = ray.get_actor(server_name(self.replica_rank))
            await server.load_weights.remote(state, kwargs.get("global_steps"))


def _register() -> tuple[str, ...]:
    RolloutReplicaRegistry.register(ROLLOUT, lambda: HFRolloutReplica)
    # verl 0.9.1 keeps the in-worker rollout classes in a module dict with no register function
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT, "async")] = f"{__name__}.HFServerAdapter"
    return REGISTERED


_register()
