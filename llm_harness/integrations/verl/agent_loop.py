"""VSR and Prefix Sampling on verl: an agent loop that starts a sample from a replayed prefix state
(VSR §3.2, Alg. 1; PS, arXiv 2605.05112).

Registered as ``vsr_prefix`` (verl's ``@register``; a dataset row runs it when its ``agent_name``
column says so); the buffer actor holds the prefix plug-in ``algorithm.vsr.prefix.method`` names
(``vsr``, the default, or ``prefix_sampling``; :mod:`.prefix_buffer`), so both methods run the same
rows and the same loop. Per sample, :meth:`VSRPrefixAgentLoop.run`:

1. builds the row's prompt ids (verl's Continuous Token builder on ``raw_prompt``; or the row's
   ``vsr_prompt_ids`` column when the dataset is pre-tokenized, as the toolkit's own tasks are);
2. asks the shared buffer actor (:mod:`.prefix_buffer`) which state group ``uid`` starts from at
   ``global_steps`` — the row's own prompt, or a replayed ``(prompt, prefix)`` (VSR: of another
   problem's successful trajectory; PS: a cut of a trajectory of last step's too-hard or too-easy group);
3. generates the continuation through ``server_manager.generate(request_id, prompt_ids,
   sampling_params)`` with ``max_tokens`` = response length − prefix length;
4. returns prefix + continuation as the response, the prefix under ``response_mask`` 0 (context,
   outside the loss, VSR §3.2), with ``reward_score`` computed here against the *state's* problem
   (``reward.custom_reward_function`` when configured, else verl's ``default_compute_score``):
   verl's reward stage would score a replayed state against the row's ground truth;
5. reports the sample to the buffer (the insertion hook: a group's ``n`` reports complete it) with
   its finish reason: ``stop`` when the reply is shorter than its budget or ends in the tokenizer's
   EOS (PS's cut length excludes the stop token, as the toolkit's backends report it).

Parameters: ``algorithm.vsr.prefix.*`` — ``method`` and the fields of that plug-in's config
(:class:`~llm_harness.methods.vsr.VSRConfig`: Hydra ``+algorithm.vsr.prefix.rho=0.5``;
:class:`~llm_harness.methods.prefix_sampling.PrefixSamplingConfig`:
``+algorithm.vsr.prefix.method=prefix_sampling +algorithm.vsr.prefix.max_share=0.5``). A plug-in
that decodes token ids (PS's ``snap_to_line``, on by default) gets the loop's tokenizer: the loop
that creates the buffer actor passes it. ``extra_fields`` carry ``vsr_origin``, ``vsr_prefix_len``,
``vsr_score`` (VSR's σ̂; NaN otherwise) and ``vsr_ps_bucket`` (PS's ``hard`` / ``easy``; empty
otherwise). Validation rows must keep verl's default agent loop
(``single_turn_agent``): verl 0.9.1 does not tell an agent loop whether it is validating.
Departure: the generated tokens are used as returned (no chat-template re-merge of the assistant
turn, which verl's single-turn loop does for multi-turn boundary handling).
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any
from uuid import uuid4

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from llm_harness.integrations.verl.prefix_buffer import buffer_actor, needs_tokenizer

__all__ = ["REGISTERED", "VSRPrefixAgentLoop", "prompt_key", "weight_versions"]

AGENT_NAME = "vsr_prefix"
REGISTERED = (AGENT_NAME,)


def prompt_key(prompt_ids: list[int]) -> str:
    """A problem id for VSR's one-trajectory-per-prompt rule: a hash of the prompt's token ids."""
    return hashlib.blake2b(np.asarray(prompt_ids, dtype=np.int64).tobytes(), digest_size=12).hexdigest()


def weight_versions(first: Any, last: Any) -> dict[str, Any]:
    """``min_global_steps`` of the first and ``max_global_steps`` of the last server reply of a sample
    (``TokenOutput.extra_fields``): verl's TransferQueue worker tags every row with them and its metrics
    stage needs them (verl's own loops pass the server's ``extra_fields`` on; ours build their own)."""
    out = {}
    lo = (getattr(first, "extra_fields", None) or {}).get("min_global_steps")
    hi = (getattr(last, "extra_fields", None) or {}).get("max_global_steps")
    if lo is not None:
        out["min_global_steps"] = lo
    if hi is not None:
        out["max_global_steps"] = hi
    return out


def _vsr_params(config: Any) -> dict[str, Any]:
    """``algorithm.vsr.prefix`` of a verl config (``method`` and the fields of its plug-in's config; empty: VSR's defaults;
    VSR's ``rho: 0``: every sample from its own prompt), parsed by
    :func:`~llm_harness.integrations.verl.estimators.vsr_params` (unknown ``algorithm.vsr`` keys refused)."""
    from llm_harness.integrations.verl.estimators import vsr_params

    return dict(vsr_params(config.get("algorithm", None) if config is not None else None).prefix)


@register(AGENT_NAME)
class VSRPrefixAgentLoop(AgentLoopBase):
    """Single-turn generation from the state VSR's buffer assigns to the sample's group (module doc)."""

    def __init__(self, *args: Any, buffer: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)
        if buffer is None:
            params = _vsr_params(self.config)
            buffer = buffer_actor(params, n=int(self.rollout_config.n),
                                  prompts_per_step=int(self.config.data.train_batch_size),
                                  max_response_tokens=self.response_length, seed=int(self.config.data.get("seed", 0) or 0),
                                  tokenizer=self.tokenizer if needs_tokenizer(params) else None)
        self.buffer = buffer
        from verl.trainer.ppo.reward import get_custom_reward_fn

        self._reward_fn = get_custom_reward_fn(self.config)

    async def _call(self, method: str, *args: Any) -> Any:
        fn = getattr(self.buffer, method)
        if hasattr(fn, "remote"):  # a Ray actor handle: its ObjectRef is awaitable
            return await fn.remote(*args)
        return fn(*args)

    async def _prompt_ids(self, kwargs: dict[str, Any]) -> list[int]:
        if kwargs.get("vsr_prompt_ids") is not None:
            return [int(t) for t in kwargs["vsr_prompt_ids"]]
        return list(await self.ct_build_initial_tokens(list(kwargs["raw_prompt"])))

    async def _score(self, state: dict[str, Any], solution_str: str) -> float:
        if self._reward_fn is not None:
            out = self._reward_fn(data_source=state["data_source"], solution_str=solution_str,
                                  ground_truth=state["ground_truth"], extra_info=state["extra_info"])
        else:
            from verl.utils.reward_score import default_compute_score

            out = default_compute_score(state["data_source"], solution_str, state["ground_truth"], state["extra_info"])
        if inspect.isawaitable(out):
            out = await out
        return float(out["score"] if isinstance(out, dict) else out)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One sample from the group's assigned state; reward and buffer report included (module doc)."""
        for k in ("uid", "global_steps"):
            if k not in kwargs:
                raise ValueError(f"vsr_prefix: the row has no {k!r} (verl's v1 trainer passes uid and global_steps)")
        uid, step, session = str(kwargs["uid"]), int(kwargs["global_steps"]) - 1, int(kwargs.get("session_id", 0))
        prompt_ids = await self._prompt_ids(kwargs)
        rm = kwargs.get("reward_model") or {}
        fresh = {"prompt_ids": prompt_ids, "problem_id": prompt_key(prompt_ids), "data_source": kwargs.get("data_source"),
                 "ground_truth": rm.get("ground_truth") if isinstance(rm, dict) else None,
                 "extra_info": kwargs.get("extra_info")}
        state = await self._call("start_state", uid, step, fresh)
        context, prefix = list(state["prompt_ids"]), list(state["prefix_ids"])
        budget = self.response_length - len(prefix)
        if budget < 1:
            raise ValueError(f"vsr_prefix: prefix of {len(prefix)} tokens leaves no room in response_length {self.response_length}")
        out = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=context + prefix,
                                                 sampling_params={**sampling_params, "max_tokens": budget})
        gen = [int(t) for t in out.token_ids][:budget]
        lps = [float(x) for x in out.log_probs][:budget] if out.log_probs else None
        response = prefix + gen
        reward = await self._score(state, self.tokenizer.decode(response, skip_special_tokens=True))
        # a reply shorter than its budget stopped on a stop token (EOS or another the server stops on), as in vsr_env
        eos = self.tokenizer.eos_token_id
        stopped = bool(gen) and (len(gen) < budget or gen[-1] in (eos if isinstance(eos, (list, tuple)) else [eos]))
        await self._call("report", uid, step, session,
                         {"response_ids": gen, "logprobs": lps if lps is not None else [0.0] * len(gen), "reward": reward,
                          "finish_reason": "stop" if stopped else "length"})
        return AgentLoopOutput(
            prompt_ids=context, response_ids=response, response_mask=[0] * len(prefix) + [1] * len(gen),
            response_logprobs=[0.0] * len(prefix) + lps if lps is not None else None, reward_score=reward, num_turns=2,
            metrics={}, extra_fields={**weight_versions(out, out), "vsr_origin": state["origin"], "vsr_prefix_len": len(prefix),
                                      "vsr_score": float(state["meta"].get("vsr_score", float("nan"))),
                                      "vsr_ps_bucket": str(state["meta"].get("ps_bucket", ""))},
        )
