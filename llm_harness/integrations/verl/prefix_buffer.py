"""The prefix buffer for verl: one of the toolkit's prefix plug-ins — VSR's
:class:`~llm_harness.methods.vsr.VSRPlugin` or Prefix Sampling's
:class:`~llm_harness.methods.prefix_sampling.PrefixSamplingPlugin` — behind a step clock, shared by
every agent-loop worker as one named Ray actor (VSR §3.2; PS, arXiv 2605.05112).

verl 0.9.1 runs one agent loop per sample, in many workers, with no hook over what is generated (its
``trainer.v1.sampler.custom_sampler`` replay buffer only picks which finished groups a batch consumes); the
buffer must therefore be a process of its own that every sample talks to. PROS is not offered here: its cut needs
full-vocabulary token entropies that neither the agent loop's report nor this model-less actor has
(docs/scaling-out.md). :class:`PrefixBuffer` holds the
toolkit's plug-in unchanged and drives it through the plug-in API the toolkit's trainer uses
(``claim(Step, open_slots, ctx)`` then ``after_step(Step(groups), ctx)``) with the two calls an agent
loop makes:

* :meth:`PrefixBuffer.start_state` ``(uid, step)`` — the state the group ``uid`` starts from: the
  first call of a new ``step`` closes the previous step (``after_step`` with its complete groups:
  VSR inserts and evicts, PS updates its controller and triages) and draws the step's claim
  (``claim`` with ``prompts_per_step`` open slots: VSR's ``round(ρ · B)`` states, PS's at most
  ``⌊max_share · B⌋`` prefix tasks); the first ``len(claim)`` distinct uids that ask get a replayed
  state, the rest start fresh. Every sample of a uid gets the same answer.
* :meth:`PrefixBuffer.report` ``(uid, step, session_id, sample)`` — a finished sample (its response
  ids, behaviour log-probs, reward and, from the ``vsr_prefix`` loop, its finish reason). A group is
  complete when ``n`` samples arrived; complete groups reach the plug-in when the next step opens,
  with the state object the buffer handed out (its origin — ``fresh`` for a row's own prompt,
  ``replayed_prefix`` for a claimed state — and the ``meta`` the plug-in wrote: VSR's ``vsr_alpha`` /
  ``vsr_p0``, PS's ``ps_bucket`` / ``ps_ratio`` / ``ps_cut`` …). ``state_to_plain`` hands the agent
  loop a plain copy of that meta; what comes back is only the uid, so nothing the plug-in wrote can be
  lost or altered on the way.

**Which plug-in** (:data:`PREFIX_METHODS`, a registry): ``algorithm.vsr.prefix.method`` — ``vsr``
(the default, so every existing VSR config means what it meant) or ``prefix_sampling``; the other
keys of ``algorithm.vsr.prefix`` are that plug-in's config fields (``VSRConfig`` /
``PrefixSamplingConfig``, unknown keys refused naming ``algorithm.vsr.prefix.<key>``). One block,
not a sibling ``algorithm.vsr.ps``: a run has one prefix source (both would claim the same slots of
one actor), the agent loops' "prefix block set ⇒ buffer on" rule holds for either, and the
``vsr_prefix`` / ``vsr_env`` loops need no second registered name. An entry says which of its
plug-in's options verl refuses and whether the plug-in needs the policy's tokenizer.

VSR: insertion of the most recent successful trajectory per prompt with ``σ̂ = p̂(1 − p̂)``, recency
window, draws ∝ σ̂ without replacement. PS: every *fresh* complete group with pass rate ``< low``
keeps one successful trajectory (``> high``: one failed one, never with ``hard_only``), cut to
``⌊(1 − ratio_hard) · L⌋`` / ``⌊ratio_easy · L⌋`` tokens (``L`` without the stop token, capped at
``max_response_tokens − 1``, moved back to a line end with ``snap_to_line``); the prefix ids are the
reported response ids verbatim, replayed at the next step only. ``snap_to_line`` decodes tokens with
the policy's tokenizer, which the ``vsr_prefix`` loop hands to the actor (``tokenizer=``); a buffer
built without one refuses the first single-turn cut, naming ``algorithm.vsr.prefix.snap_to_line``.

Departures from the toolkit's trainer (documented, not hidden):

* which uids are replaced depends on the order in which their first samples reach the actor (verl
  runs samples concurrently), so a rerun replaces the same *number* of slots with states drawn by
  the same seeded draw (VSR's draw, PS's seeded subset when more tasks are pending than
  ``⌊max_share · B⌋``), not necessarily the same dataset rows; the replaced rows' prompts are not
  re-queued (verl's dataloader has consumed them);
* steps are verl's ``global_steps − 1`` (verl counts from 1, the plug-in from 0); a step in which no
  row of these loops ran (the next call skips it) gets ``after_step`` with no groups, so the plug-in's
  clock runs as in the toolkit: PS's pending tasks expire (a prefix is at most one step old), its
  controller's cool-down ticks, VSR's window evicts;
* a group whose ``n`` samples did not all report (a failed sample) reaches neither plug-in: VSR does
  not insert it, PS neither triages it nor counts it in its controller's pass rate or ``ps_solve_partial``;
* PS's ``L`` drops the stop token when the loop reports ``finish_reason: stop`` (a reply shorter than
  its budget, or ending in the tokenizer's EOS: the toolkit's backends say the same from the engine);
* token prefixes use VSR's ``positions: token | stride``; ``steps`` positions, ``oracle`` scores and the
  expert cold start need the toolkit's task objects and are refused here. PS needs no task object.

**Agents** (the ``vsr_env`` agent loop, :mod:`.env_loop`): a reported sample that carries its
``episode`` (seed, success, the policy's turns with their environment snapshots) makes its group the
toolkit's multi-turn group (:func:`~llm_harness.trainer.multiturn.episode_group`, one row per turn),
so the plug-in inserts (VSR) or cuts in turns (PS) the episode exactly as in the toolkit's trainer; a
drawn state comes back with its ``history``, ``snapshot`` and ``env_seed``. PS cuts episodes in turns and
never decodes, so the ``vsr_env`` loop (which passes no tokenizer) needs none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llm_harness.methods.common import plugin_config
from llm_harness.methods.prefix_sampling import BUCKETS, PrefixSamplingConfig, PrefixSamplingPlugin
from llm_harness.methods.vsr import VSRConfig, VSRPlugin
from llm_harness.tasks import Problem
from llm_harness.trainer.data import RolloutGroup, StartState
from llm_harness.trainer.step import Step
from vsr_util.registry import Registry

__all__ = ["ACTOR_NAME", "KEY", "PREFIX_METHODS", "PrefixBuffer", "PrefixMethod", "UNAVAILABLE", "buffer_actor", "needs_tokenizer",
           "parse_prefix", "state_to_plain"]

#: name of the Ray actor every agent-loop worker shares
ACTOR_NAME = "vsr_prefix_buffer"
#: the verl config block of the buffer's plug-in (what error messages name)
KEY = "algorithm.vsr.prefix"
#: the key of that block choosing the plug-in (the rest are the plug-in's config fields)
METHOD_KEY = "method"
DEFAULT_METHOD = "vsr"


@dataclass(frozen=True)
class PrefixMethod:
    """A prefix plug-in the buffer can hold: its config dataclass, its class (``cls(cfg, ctx)``), the config
    values verl cannot serve, which config key (if any) makes it decode tokens, and its part of :meth:`PrefixBuffer.summary`."""

    config: type
    plugin: Callable[[Any, Any], Any]
    summary: Callable[[Any], dict[str, Any]]
    refused: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """``field -> values`` verl refuses (they need the toolkit's task objects)."""
    decodes: Callable[[Any], str | None] = lambda cfg: None
    """The config key under which the plug-in decodes token ids (needs the policy's tokenizer), or None."""


def _vsr_summary(p: VSRPlugin) -> dict[str, Any]:
    return {"trajectories": len(p.buffer), "states": int(sum(t.positions.size for t in p.buffer.values()))}


def _ps_summary(p: PrefixSamplingPlugin) -> dict[str, Any]:
    return {"pending": len(p.pending), "pending_buckets": {b: sum(s.meta["ps_bucket"] == b for s in p.pending) for b in BUCKETS},
            "controller": {b: p.ctrl[b].to_plain() for b in BUCKETS}}


#: ``algorithm.vsr.prefix.method`` -> the plug-in the buffer holds (the toolkit's plug-in names)
PREFIX_METHODS: Registry[PrefixMethod] = Registry("verl prefix method", {
    "vsr": PrefixMethod(VSRConfig, VSRPlugin, _vsr_summary,
                        refused={"positions": ("steps",), "score": ("oracle",), "cold_start": (True,)}),
    "prefix_sampling": PrefixMethod(PrefixSamplingConfig, PrefixSamplingPlugin, _ps_summary,
                                    decodes=lambda cfg: "snap_to_line" if cfg.snap_to_line else None),
})


#: the toolkit's prefix plug-ins verl cannot serve, and why (named when a config asks for one)
UNAVAILABLE: dict[str, str] = {
    "pros": "its cut needs each correct row's full-vocabulary token entropies, which verl's agent loop does not report "
            "and this model-less actor cannot compute, and its selection decides what is generated, which verl's "
            "only sampler hook (trainer.v1.sampler.custom_sampler, over finished groups) cannot (docs/scaling-out.md); "
            "train it with the toolkit's trainer (plugins.pros)",
}


def parse_prefix(params: Mapping[str, Any] | None) -> tuple[str, PrefixMethod, Any]:
    """``(method name, its entry, its config)`` of an ``algorithm.vsr.prefix`` block; every error names the verl key."""
    raw = dict(params or {})
    name = raw.pop(METHOD_KEY, DEFAULT_METHOD)
    if name in UNAVAILABLE:
        raise ValueError(f"{KEY}.{METHOD_KEY}: {name!r} is not available on verl: {UNAVAILABLE[name]}; "
                         f"choose one of {sorted(PREFIX_METHODS)}")
    entry = PREFIX_METHODS.lookup(name, where=f"{KEY}.{METHOD_KEY}")
    try:
        cfg = plugin_config(entry.config, raw, name)
    except ValueError as exc:  # name the verl config key
        raise ValueError(f"{str(exc).replace(f'plugins.{name}', KEY, 1)} ({KEY}.{METHOD_KEY}: {name})") from None
    for k, bad in entry.refused.items():
        if getattr(cfg, k) in bad:
            raise ValueError(f"{KEY}.{k}: {getattr(cfg, k)!r} is not available on verl "
                             "(it needs the toolkit's task objects; llm_harness/integrations/verl/prefix_buffer.py)")
    return name, entry, cfg


def needs_tokenizer(params: Mapping[str, Any] | None) -> bool:
    """Whether the plug-in of ``algorithm.vsr.prefix`` decodes token ids (an agent loop then hands the actor its tokenizer)."""
    _, entry, cfg = parse_prefix(params)
    return entry.decodes(cfg) is not None


class _Codec:
    """The toolkit's :class:`~llm_harness.trainer.modeling.Codec` of the policy's tokenizer with single tokens'
    text memoised (PS decodes a kept trajectory token by token, in the actor every sample waits on); without a
    tokenizer, decoding names the config key that asked for it."""

    def __init__(self, tokenizer: Any, key: str | None):
        from llm_harness.trainer.modeling import Codec

        self.codec = None if tokenizer is None else Codec(tokenizer)
        self.tokenizer = tokenizer
        self.key = key
        self._one: dict[int, str] = {}

    def decode(self, ids: Sequence[int]) -> str:
        if self.codec is None:
            raise ValueError(f"{KEY}.{self.key or 'method'}: decodes token ids, but the buffer has no tokenizer (the vsr_prefix "
                             f"agent loop passes its own; a buffer built by hand needs tokenizer=, or set {KEY}.{self.key}=false)")
        ids = [int(t) for t in ids]
        if len(ids) != 1:
            return self.codec.decode(ids)
        if ids[0] not in self._one:
            self._one[ids[0]] = self.codec.decode(ids)
        return self._one[ids[0]]


@dataclass
class _Pending:
    state: StartState
    samples: dict[int, dict[str, Any]]


def state_to_plain(s: StartState) -> dict[str, Any]:
    """What an agent loop needs of a start state: context ids, the problem's verl reward fields, origin, the plug-in's meta."""
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


FINISH_REASONS = ("stop", "length")


class PrefixBuffer:
    """A prefix plug-in + step clock + group assembly (module doc); plain data in and out (Ray-safe).
    ``params``: the ``algorithm.vsr.prefix`` block; ``tokenizer``: the policy's, for a plug-in that decodes."""

    def __init__(self, params: Mapping[str, Any], *, n: int, prompts_per_step: int, max_response_tokens: int,
                 seed: int = 0, tokenizer: Any = None):
        self.method, entry, cfg = parse_prefix(params)
        for name, v in (("n", n), ("prompts_per_step", prompts_per_step), ("max_response_tokens", max_response_tokens)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name}: must be an int >= 1, got {v!r}")
        self.n, self.prompts_per_step = int(n), int(prompts_per_step)
        self.warnings: list[str] = []
        self._summary = entry.summary
        self.ctx = SimpleNamespace(config=SimpleNamespace(seed=int(seed), rollout=SimpleNamespace(max_new_tokens=int(max_response_tokens))),
                                   train_problems=(), warn=self.warnings.append, codec=_Codec(tokenizer, entry.decodes(cfg)))
        self.plugin = entry.plugin(cfg, self.ctx)
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
            for skipped in range(self.step + 1, step):  # no row of these loops ran: the plug-in's clock still runs
                res = self.plugin.after_step(Step(index=skipped), self.ctx)
                self.history.append({"step": float(skipped), **res.metrics, "vsr_groups_reported": 0.0})
        self.step = step
        claim = self.plugin.claim(Step(index=step), self.prompts_per_step, self.ctx)
        self.claimed = list(claim.states)
        self.metrics = dict(claim.metrics)
        self.assigned, self.pending = {}, {}

    def _close(self) -> None:
        groups = []
        for p in self.pending.values():
            if len(p.samples) < self.n:
                continue  # an incomplete group (a failed sample) does not reach the plug-in
            ss = [p.samples[k] for k in sorted(p.samples)]
            if any("episode" in x for x in ss):  # an agent's episodes: one row per turn (the toolkit's multi-turn group)
                from llm_harness.trainer.multiturn import episode_group

                groups.append(episode_group(p.state, [x["episode"] for x in ss], int(self.step)))
                continue
            fr = [s.get("finish_reason") for s in ss]
            groups.append(RolloutGroup(p.state, [tuple(s["response_ids"]) for s in ss],
                                       [np.asarray(s["logprobs"], dtype=np.float64) for s in ss],
                                       np.array([float(s["reward"]) for s in ss]), int(self.step),
                                       finish_reasons=fr if None not in fr else []))
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
        """A finished sample of group ``uid`` (``response_ids``, ``logprobs``, ``reward`` in [0, 1], optionally
        ``finish_reason``: ``stop`` when the last response token is a stop token, else ``length``; an agent's
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
        if sample.get("finish_reason") is not None:
            if sample["finish_reason"] not in FINISH_REASONS:
                raise ValueError(f"report: finish_reason must be one of {FINISH_REASONS}, got {sample['finish_reason']!r}")
            rec["finish_reason"] = str(sample["finish_reason"])
        if sample.get("episode") is not None:
            rec["episode"] = _episode(sample["episode"])  # malformed turns are named now, not when the step closes
        self.pending[uid].samples[int(session_id)] = rec

    def summary(self) -> dict[str, Any]:
        """The plug-in (``method``), the current step, the plug-in's state (VSR: ``trajectories``, ``states``; PS:
        ``pending`` tasks and the ``controller``), per-step metrics so far and warnings (plain data)."""
        return {"method": self.method, "step": self.step, **self._summary(self.plugin),
                "history": list(self.history), "warnings": list(self.warnings)}


#: this process's handle of the buffer actor: a named actor that is not detached lives while some handle
#: does, and verl builds an agent loop per sample, so the first handle is kept for the process's lifetime
_HANDLES: dict[str, Any] = {}


def buffer_actor(params: Mapping[str, Any], **kwargs: Any) -> Any:
    """The shared :class:`PrefixBuffer` Ray actor: created by the first caller in the Ray namespace
    (with its ``params`` and keyword arguments, e.g. ``tokenizer``), looked up by name by every later one;
    calls run one at a time. The handle is kept by this process (:data:`_HANDLES`), so the actor outlives
    the agent loop that made it."""
    import ray

    key = f"{ray.get_runtime_context().namespace}/{ACTOR_NAME}"
    if key not in _HANDLES:
        cls = ray.remote(num_cpus=0)(PrefixBuffer)
        _HANDLES[key] = cls.options(name=ACTOR_NAME, get_if_exists=True, max_concurrency=1).remote(dict(params), **kwargs)
    return _HANDLES[key]
