"""VSR for agents on verl: a multi-turn agent loop over the toolkit's text environments that starts an
episode from its initial state or from a replayed interaction state (VSR §4.2, App. D.3).

Registered as ``vsr_env`` (and ``vsr_env_eval``, the same episodes without the buffer, for
validation rows); a dataset row runs it when its ``agent_name`` says so (``make_data.py --task env
--agent vsr_env``: ``extra_info`` carries the env task's parameters and the episode seed).
Per sample, :meth:`VSREnvAgentLoop.run`:

1. builds the environment of the row's ``env`` task and asks the shared buffer actor
   (:mod:`.prefix_buffer`, the toolkit's ``VSRPlugin``; only when ``algorithm.vsr.prefix`` is set) for
   the group's start: the row's seed, or a replayed interaction state of another episode — its
   ``history`` and environment ``snapshot``, restored exactly (:func:`~llm_harness.envs.episodes.prepare_episode`);
2. the prompt is the toolkit's turn text (:func:`~llm_harness.envs.episodes.turn_text`: instruction,
   the task's history window of the restored history, the current observation) — the history before
   a replay point is prompt context, outside the loss;
3. each turn generates at most ``algorithm.vsr.agent.turn_tokens`` tokens through
   ``server_manager.generate`` from the whole interaction so far and steps the environment on the
   reply (:func:`~llm_harness.envs.episodes.play_turn`, the step of the toolkit's episode runner);
   the environment's next observation is appended as feedback tokens under ``response_mask`` 0
   (``"\\nO:<observation>\\nA:"``, the toolkit's turn format, inside a user turn of the chat template
   when the tokenizer has one);
4. the row's reward is the episode return (the toolkit's: success reward minus invalid-action
   penalties); ``extra_fields`` carry the turns for ``vsr_gigpo`` (``gigpo_turn_ends`` / ``anchors``
   = the observation each turn acted on / ``step_rewards`` before penalties / ``penalties``);
5. reports the episode to the buffer (seed, success, each turn with its snapshot), whose closing step
   builds the toolkit's multi-turn group and inserts the successful episode's interaction states.

Departures from the toolkit's multi-turn collector, forced by verl's one-row-per-sample token model:
within an episode each turn continues the *whole* interaction (verl's multi-turn format: replies and
feedback interleaved in one response) instead of re-rendering a windowed prompt, so the history
window applies to the restored history only; an episode that would overflow
``rollout.response_length`` (or the server's context, ``max_model_len``: prompt + interaction) ends there (``vsr_truncated``, counted a failure). Untested here: the
chat-template feedback path (the test bed has no chat template; the GPU recipes' instruct models do).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from llm_harness.integrations.verl.agent_loop import _vsr_params, weight_versions
from llm_harness.integrations.verl.prefix_buffer import buffer_actor

__all__ = ["REGISTERED", "VSREnvAgentLoop", "VSREnvEvalAgentLoop", "feedback_text"]

AGENT_NAME = "vsr_env"
EVAL_NAME = "vsr_env_eval"
REGISTERED = (AGENT_NAME, EVAL_NAME)


def feedback_text(observation: str, tokenizer: Any) -> str:
    """The tokens-to-be of the environment's feedback after a reply: the toolkit's ``\\nO:<obs>\\nA:``
    turn format; with a chat template, that text as a user turn plus the generation prompt (the
    template's rendering of ``[system, user]`` minus its rendering of ``[system]``)."""
    from llm_harness.envs.prompt import ACT_TAG, OBS_TAG
    from llm_harness.tasks.base import has_chat_template

    text = f"{OBS_TAG}{observation.rstrip(chr(10))}\n{ACT_TAG}"
    if not has_chat_template(tokenizer):
        return "\n" + text
    sys_msg = {"role": "system", "content": "x"}
    head = tokenizer.apply_chat_template([sys_msg], tokenize=False)
    full = tokenizer.apply_chat_template([sys_msg, {"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    if not full.startswith(head):
        raise ValueError("vsr_env: the chat template's rendering of a user turn does not extend its rendering of the system turn")
    return "\n" + full[len(head):].lstrip("\n")


def _agent_params(config: Any) -> dict[str, int]:
    from llm_harness.integrations.verl.estimators import vsr_params

    raw = dict(vsr_params(config.get("algorithm", None)).agent)
    unknown = sorted(set(raw) - {"turn_tokens", "max_turns"})
    if unknown:
        raise ValueError(f"algorithm.vsr.agent: unknown keys {unknown} (turn_tokens, max_turns)")
    out = {"turn_tokens": int(raw.get("turn_tokens", 8)), "max_turns": int(raw.get("max_turns", 0))}
    if out["turn_tokens"] < 1 or out["max_turns"] < 0:
        raise ValueError(f"algorithm.vsr.agent: turn_tokens must be >= 1 and max_turns >= 0, got {out}")
    return out


@register(AGENT_NAME)
class VSREnvAgentLoop(AgentLoopBase):
    """Episodes of a toolkit text environment, started where VSR's buffer says (module doc)."""

    #: whether groups may start from VSR's buffer (``vsr_env_eval``: never)
    uses_buffer = True

    def __init__(self, *args: Any, buffer: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        from llm_harness.trainer.modeling import Codec

        self.response_length = int(self.rollout_config.response_length)
        # the server's context bound (vLLM's max_model_len; the same default): prompt + interaction must fit in it
        self.max_model_len = int(getattr(self.rollout_config, "max_model_len", None)
                                 or int(self.rollout_config.prompt_length) + self.response_length)
        self.agent = _agent_params(self.config)
        vsr = _vsr_params(self.config)
        if not self.uses_buffer:
            buffer = None
        elif buffer is None and vsr:
            buffer = buffer_actor(vsr, n=int(self.rollout_config.n), prompts_per_step=int(self.config.data.train_batch_size),
                                  max_response_tokens=self.response_length, seed=int(self.config.data.get("seed", 0) or 0))
        self.buffer = buffer
        self.codec = Codec(self.tokenizer)
        self._tasks: dict[str, Any] = {}

    def _task(self, params: str) -> Any:
        if params not in self._tasks:
            from llm_harness.tasks import get_task

            self._tasks[params] = get_task("env", **json.loads(params))
        return self._tasks[params]

    async def _call(self, method: str, *args: Any) -> Any:
        fn = getattr(self.buffer, method)
        if hasattr(fn, "remote"):
            return await fn.remote(*args)
        return fn(*args)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One episode from the group's assigned start (module doc)."""
        from llm_harness.envs.episodes import EpisodeStart, play_turn, prepare_episode, turn_text
        from llm_harness.envs.prompt import Turn

        for k in ("uid", "global_steps", "extra_info"):
            if k not in kwargs:
                raise ValueError(f"vsr_env: the row has no {k!r} (make_data.py --task env writes extra_info; "
                                 "verl's v1 trainer passes uid and global_steps)")
        info = kwargs["extra_info"] or {}
        if "params" not in info or "seed" not in info:
            raise ValueError("vsr_env: extra_info needs the env task's 'params' (JSON) and the episode 'seed' (make_data.py --task env)")
        uid, step, session = str(kwargs["uid"]), int(kwargs["global_steps"]) - 1, int(kwargs.get("session_id", 0))
        task = self._task(str(info["params"]))
        window, fmt, tok = task.config.window, task.config.reply_format, self.tokenizer
        env = task.make_env()
        start = EpisodeStart(int(info["seed"]))
        state = {"origin": "fresh", "meta": {}}
        if self.buffer is not None:
            obs0 = env.reset(start.seed)
            fresh_ids = self.codec.encode(turn_text(env.instruction, [], obs0, window=window, tokenizer=tok, reply_format=fmt))
            state = await self._call("start_state", uid, step, {
                "prompt_ids": list(fresh_ids), "problem_id": str(info.get("problem_id", f"{task.env_name}/s{start.seed}")),
                "env_seed": start.seed, "data_source": kwargs.get("data_source"), "ground_truth": None, "extra_info": info})
            if state.get("snapshot") is not None:
                start = EpisodeStart(int(state["env_seed"]), snapshot=state["snapshot"],
                                     history=tuple(Turn(str(h["observation"]), str(h["action"])) for h in state["history"]))
        turns, obs = prepare_episode(env, start)
        prompt_ids = list(self.codec.encode(turn_text(env.instruction, turns, obs, window=window, tokenizer=tok, reply_format=fmt)))
        response: list[int] = []
        mask: list[int] = []
        lps: list[float] = []
        played, ends = [], []
        eos = self.tokenizer.eos_token_id
        truncated, has_lps, first, last = False, True, None, None
        limit = min(self.response_length, self.max_model_len - len(prompt_ids))  # the interaction's length bound
        while True:
            room = limit - len(response)
            if room < 1:
                truncated = True
                break
            budget = min(self.agent["turn_tokens"], room)
            out = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt_ids + response,
                                                     sampling_params={**sampling_params, "max_tokens": budget})
            first = out if first is None else first
            last = out
            gen = [int(t) for t in out.token_ids][:budget]
            if not gen:
                raise ValueError(f"vsr_env: the server returned no token for turn {len(played)} of seed {start.seed}")
            glp = [float(x) for x in out.log_probs][:budget] if out.log_probs else None
            has_lps = has_lps and glp is not None
            # a reply shorter than its budget stopped on a stop token (EOS or another the server stops on)
            finish = "stop" if len(gen) < budget or gen[-1] == eos else "length"
            # the toolkit's windowed rendering of this state: only the buffer uses it (a replayed state's prompt)
            text = turn_text(env.instruction, turns, obs, window=window, tokenizer=tok, reply_format=fmt) if self.buffer is not None else ""
            pt, obs, done = play_turn(env, turns, obs, text, self.codec.encode(text) if text else (),
                                      SimpleNamespace(token_ids=gen, sampling_logprobs=glp or [0.0] * len(gen), finish_reason=finish),
                                      self.codec)
            played.append(pt)
            response += gen
            mask += [1] * len(gen)
            lps += glp or [0.0] * len(gen)
            ends.append(len(response))
            if done or (self.agent["max_turns"] and len(played) >= self.agent["max_turns"]):
                break
            fb = list(self.codec.encode(feedback_text(obs, tok)))
            if len(response) + len(fb) >= limit:
                truncated = True
                break
            response += fb
            mask += [0] * len(fb)
            lps += [0.0] * len(fb)
        success = bool(env.success)  # a truncated episode has not ended, so it has not succeeded
        ret = float(sum(t.reward for t in played))
        if self.buffer is not None:
            episode = {"seed": start.seed, "success": success,
                       "turns": [{**vars(t), "snapshot": dict(t.snapshot)} for t in played]}
            await self._call("report", uid, step, session, {"response_ids": [t for p in played for t in p.token_ids],
                                                            "logprobs": [x for p in played for x in p.sampling_logprobs],
                                                            "reward": float(success), "episode": episode})
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=response, response_mask=mask, response_logprobs=lps if has_lps else None,
            reward_score=ret, num_turns=2 * len(played), metrics={},
            extra_fields={**weight_versions(first, last), "gigpo_turn_ends": ends, "gigpo_anchors": [t.observation for t in played],
                          "gigpo_step_rewards": [t.reward + t.penalty for t in played],
                          "gigpo_penalties": [t.penalty for t in played], "vsr_origin": state["origin"],
                          "vsr_score": float(state["meta"].get("vsr_score", float("nan"))), "vsr_success": float(success),
                          "vsr_truncated": float(truncated), "vsr_episode_turns": float(len(played)),
                          "vsr_invalid_actions": float(sum(not t.valid for t in played))},
        )


@register(EVAL_NAME)
class VSREnvEvalAgentLoop(VSREnvAgentLoop):
    """The same episodes from the row's own seed, never touching VSR's buffer: the agent loop of
    validation rows (verl 0.9.1 does not tell an agent loop whether it is validating)."""

    uses_buffer = False
