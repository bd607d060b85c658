"""VSR's prefix buffer for verl: the toolkit's :class:`~llm_harness.methods.vsr.VSRPlugin` behind a
step clock, shared by every agent-loop worker as one named Ray actor (VSR §3.2).

verl 0.9.1 runs one agent loop per sample, in many workers, with no sampler hook; the buffer must
therefore be a process of its own that every sample talks to. :class:`PrefixBuffer` holds the
toolkit's VSR plug-in unchanged (insertion of the most recent successful trajectory per prompt
with ``σ̂ = p̂(1 − p̂)``, recency window, draws ∝ σ̂ without replacement) and drives it with the two
calls an agent loop makes:

* :meth:`PrefixBuffer.start_state` ``(uid, step)`` — the state the group ``uid`` starts from: the
  first call of a new ``step`` closes the previous step (``VSRPlugin.after_step`` with its
  complete groups: insert, evict) and draws the step's claim (``VSRPlugin.claim`` with
  ``prompts_per_step`` open slots, i.e. ``round(ρ · B)`` states); the first ``len(claim)`` distinct
  uids that ask get a replayed state, the rest start fresh. Every sample of a uid gets the same answer.
* :meth:`PrefixBuffer.report` ``(uid, step, session_id, sample)`` — a finished sample (its response
  ids, behaviour log-probs and reward). A group is complete when ``n`` samples arrived; a fresh
  complete group with a success enters the buffer when the next step opens, its success rate is ``p0``.

Departures from the toolkit's trainer (documented, not hidden):

* which uids are replaced depends on the order in which their first samples reach the actor (verl
  runs samples concurrently), so a rerun replaces the same *number* of slots with states drawn by
  the same seeded draw, not necessarily the same dataset rows; the replaced rows' prompts are not
  re-queued (verl's dataloader has consumed them);
* steps are verl's ``global_steps − 1`` (verl counts from 1, the plug-in from 0);
* token prefixes use ``positions: token | stride``; ``steps`` positions, ``oracle`` scores and the
  expert cold start need the toolkit's task objects and are refused here.

**Agents** (the ``vsr_env`` agent loop, :mod:`.env_loop`): a reported sample that carries its
``episode`` (seed, success, the policy's turns with their environment snapshots) makes its group the
toolkit's multi-turn group (:func:`~llm_harness.trainer.multiturn.episode_group`, one row per turn),
so the plug-in inserts the successful episode's interaction states exactly as in the toolkit's
trainer; a drawn state comes back with its ``history``, ``snapshot`` and ``env_seed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Mapping

import numpy as np

from llm_harness.methods.common import plugin_config
from llm_harness.methods.vsr import VSRConfig, VSRPlugin
from llm_harness.tasks import Problem
from llm_harness.trainer.data import RolloutGroup, StartState
from llm_harness.trainer.step import Step

__all__ = ["ACTOR_NAME", "PrefixBuffer", "buffer_actor", "state_to_plain"]

#: name of the Ray actor every agent-loop worker shares
ACTOR_NAME = "vsr_prefix_buffer"

_REFUSED = {"positions": ("steps",), "score": ("oracle",), "cold_start": (True,)}


@dataclass
class _Pending:
    state: StartState
    samples: dict[int, dict[str, Any]]


def state_to_plain(s: StartState) -> dict[str, Any]:
    """What an agent loop needs of a start state: context ids, the problem's verl reward fields, origin."""
    m = dict(s.problem.metadata)
    return {"prompt_ids": list(s.prompt_ids), "prefix_ids": list(s.prefix_ids), "origin": s.origin.value,
            "problem_id": s.problem.id, "data_source": m.get("data_source"), "ground_truth": m.get("ground_truth"),
            "extra_info": m.get("extra_info"), "meta": dict(s.meta), "env_seed": m.get("seed"),
            "history": [dict(h) for h in s.history], "snapshot": None if s.snapshot is None else dict(s.snapshot)}


def _episode(ep: Mapping[str, Any]) -> Any:
    """An ``EpisodeResult`` from a reported episode (``turns``: the fields of ``PolicyTurn``, ``success``, ``seed``)."""
    from llm_harness.envs.episodes import EpisodeResult, EpisodeStart, PolicyTurn

    turns = tuple(PolicyTurn(**{**t, "prompt_ids": tuple(t["prompt_ids"]), "token_ids": tuple(t["token_ids"]),
                                "sampling_logprobs": tuple(t["sampling_logprobs"])}) for t in ep["turns"])
    if not turns:
        raise ValueError("report: an episode with no policy turn")
    return EpisodeResult(EpisodeStart(int(ep["seed"])), (), turns, bool(ep["success"]))


class PrefixBuffer:
    """VSR plug-in + step clock + group assembly (module doc); plain data in and out (Ray-safe)."""

    def __init__(self, params: Mapping[str, Any], *, n: int, prompts_per_step: int, max_response_tokens: int,
                 seed: int = 0):
        try:
            cfg = plugin_config(VSRConfig, dict(params or {}), "vsr")
        except ValueError as exc:  # name the verl config key
            raise ValueError(str(exc).replace("plugins.vsr", "algorithm.vsr.prefix", 1)) from None
        for k, bad in _REFUSED.items():
            if getattr(cfg, k) in bad:
                raise ValueError(f"algorithm.vsr.prefix.{k}: {getattr(cfg, k)!r} is not available on verl "
                                 "(it needs the toolkit's task objects; module doc)")
        for name, v in (("n", n), ("prompts_per_step", prompts_per_step), ("max_response_tokens", max_response_tokens)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name}: must be an int >= 1, got {v!r}")
        self.n, self.prompts_per_step = int(n), int(prompts_per_step)
        self.warnings: list[str] = []
        self.ctx = SimpleNamespace(config=SimpleNamespace(seed=int(seed), rollout=SimpleNamespace(max_new_tokens=int(max_response_tokens))),
                                   train_problems=(), warn=self.warnings.append)
        self.plugin = VSRPlugin(cfg, self.ctx)
        self.step: int | None = None
        self.claimed: list[StartState] = []
        self.assigned: dict[str, StartState | None] = {}
        self.pending: dict[str, _Pending] = {}
        self.metrics: dict[str, float] = {}
        self.history: list[dict[str, float]] = []

    # ---------------------------------------------------------------- step clock

    def _advance(self, step: int) -> None:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise ValueError(f"step: must be an int, got {step!r}")
        step = int(step)
        if self.step is not None and step < self.step:
            raise ValueError(f"step: {step} is older than the buffer's current step {self.step} (synchronous trainer modes only)")
        if self.step == step:
            return
        if self.step is not None:
            self._close()
        self.step = step
        claim = self.plugin.claim(Step(index=step), self.prompts_per_step, self.ctx)
        self.claimed = list(claim.states)
        self.metrics = dict(claim.metrics)
        self.assigned, self.pending = {}, {}

    def _close(self) -> None:
        groups = []
        for p in self.pending.values():
            if len(p.samples) < self.n:
                continue  # an incomplete group (a failed sample) does not enter the buffer
            ss = [p.samples[k] for k in sorted(p.samples)]
            if any("episode" in x for x in ss):  # an agent's episodes: one row per turn (the toolkit's multi-turn group)
                from llm_harness.trainer.multiturn import episode_group

                groups.append(episode_group(p.state, [x["episode"] for x in ss], int(self.step)))
                continue
            groups.append(RolloutGroup(p.state, [tuple(s["response_ids"]) for s in ss],
                                       [np.asarray(s["logprobs"], dtype=np.float64) for s in ss],
                                       np.array([float(s["reward"]) for s in ss]), int(self.step)))
        res = self.plugin.after_step(Step(index=int(self.step), groups=tuple(groups)), self.ctx)
        self.history.append({"step": float(self.step), **self.metrics, **res.metrics, "vsr_groups_reported": float(len(groups))})

    # ---------------------------------------------------------------- the agent loop's calls

    def start_state(self, uid: str, step: int, fresh: Mapping[str, Any]) -> dict[str, Any]:
        """The state of group ``uid`` at ``step`` (plain data); ``fresh`` = the row's own prompt:
        ``prompt_ids``, ``problem_id``, ``data_source``, ``ground_truth``, ``extra_info``."""
        self._advance(step)
        if uid not in self.assigned:
            st = self.claimed.pop(0) if self.claimed else None
            if st is None:
                meta = {k: fresh.get(k) for k in ("data_source", "ground_truth", "extra_info")}
                if fresh.get("env_seed") is not None:  # an agent's episode: the environment seed (EnvTask.seed_of)
                    meta["seed"] = int(fresh["env_seed"])
                prob = Problem(str(fresh["problem_id"]), "verl prompt", str(fresh.get("ground_truth") or ""), metadata=meta)
                st = StartState(tuple(int(t) for t in fresh["prompt_ids"]), prob)
            self.assigned[uid] = st
            self.pending[uid] = _Pending(st, {})
        return state_to_plain(self.assigned[uid])

    def report(self, uid: str, step: int, session_id: int, sample: Mapping[str, Any]) -> None:
        """A finished sample of group ``uid`` (``response_ids``, ``logprobs``, ``reward`` in [0, 1]; an agent's
        sample also ``episode``: ``{"seed", "success", "turns": [the fields of PolicyTurn]}``)."""
        if self.step != int(step) or uid not in self.pending:
            raise ValueError(f"report: group {uid!r} of step {step} was not started at the buffer's step {self.step}")
        r = sample["response_ids"]
        if not 0.0 <= float(sample["reward"]) <= 1.0:
            raise ValueError(f"report: reward must lie in [0, 1] (VSR's p̂ interpolates success rates), got {sample['reward']!r}")
        if len(sample["logprobs"]) != len(r):
            raise ValueError(f"report: {len(sample['logprobs'])} log-probs for {len(r)} response tokens")
        rec = {"response_ids": [int(t) for t in r], "logprobs": [float(x) for x in sample["logprobs"]],
               "reward": float(sample["reward"])}
        if sample.get("episode") is not None:
            rec["episode"] = _episode(sample["episode"])  # malformed turns are named now, not when the step closes
        self.pending[uid].samples[int(session_id)] = rec

    def summary(self) -> dict[str, Any]:
        """Buffer size, the current step, per-step metrics so far and warnings (plain data)."""
        return {"step": self.step, "trajectories": len(self.plugin.buffer),
                "states": int(sum(t.positions.size for t in self.plugin.buffer.values())),
                "history": list(self.history), "warnings": list(self.warnings)}


#: this process's handle of the buffer actor: a named actor that is not detached lives while some handle
#: does, and verl builds an agent loop per sample, so the first handle is kept for the process's lifetime
_HANDLES: dict[str, Any] = {}


def buffer_actor(params: Mapping[str, Any], **kwargs: Any) -> Any:
    """The shared :class:`PrefixBuffer` Ray actor: created by the first caller in the Ray namespace
    (with its ``params``), looked up by name by every later one; calls run one at a time. The handle
    is kept by this process (:data:`_HANDLES`), so the actor outlives the agent loop that made it."""
    import ray

    key = f"{ray.get_runtime_context().namespace}/{ACTOR_NAME}"
    if key not in _HANDLES:
        cls = ray.remote(num_cpus=0)(PrefixBuffer)
        _HANDLES[key] = cls.options(name=ACTOR_NAME, get_if_exists=True, max_concurrency=1).remote(dict(params), **kwargs)
    return _HANDLES[key]
