"""The trainer's data model: start states, rollout groups and padded training batches.

* :class:`StartState` — where a group of rollouts starts. It keeps three things apart: the
  *interaction history* (``prefix_ids``, the fixed response prefix of a single-turn state — a
  replayed VSR prefix, an ExTra guided prefix — and ``history``, reserved for a serialized
  multi-turn interaction), the *origin* tag (:class:`Origin`), and *plug-in metadata*
  (``meta``: plain data a plug-in attaches, never read by the trainer). It also names the task
  :class:`~llm_harness.tasks.Problem` it is verified against and an optional sample count ``n``.
* :class:`RolloutGroup` — a start state plus its samples (new token ids, behaviour log-probs,
  rewards, verify results) and, once computed, advantages and per-sample importance weights;
  per-sample views derived from them: ``stopped``, the verified completion
  (:meth:`RolloutGroup.completion_ids` / ``completion_text``: prefix + sample without its stop token).
* :class:`TrainBatch` — padded tensors built once from a list of groups: one row per sample,
  ``input_ids[b, L]`` = prompt + prefix + response (right-padded); ``loss_mask[b, L-1]`` is 1
  exactly on the response tokens (prompt and prefix tokens are context, VSR §3.2, ExTra App. B.4), aligned with
  the next-token targets ``input_ids[b, 1:]``.

Plug-ins checkpoint start states, groups and verify results as plain data
(:func:`~llm_harness.trainer.checkpoint.check_plain`) through the ``*_to_plain`` /
``*_from_plain`` converters at the end of this module: a problem is stored by its id and restored
from the training split (:func:`problem_index`), so restored objects equal the originals.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch

from llm_harness.backends.completions import completion_ids  # noqa: F401  (used below; re-exported: its home before)
from llm_harness.tasks import Problem, VerifyResult

__all__ = [
    "ORIGINS",
    "Origin",
    "RolloutGroup",
    "StartState",
    "TrainBatch",
    "build_batch",
    "completion_ids",
    "group_from_plain",
    "group_to_plain",
    "problem_by_id",
    "problem_index",
    "start_state_from_plain",
    "start_state_to_plain",
    "verify_from_plain",
    "verify_to_plain",
]


class Origin(str, enum.Enum):
    """Where a start state comes from (used for per-origin metrics; never branched on)."""

    FRESH = "fresh"
    REPLAYED_PREFIX = "replayed_prefix"
    GUIDED = "guided"
    REPLAYED_ROLLOUT = "replayed_rollout"
    EXPERT = "expert"


#: Origins in a fixed order; ``TrainBatch.origin`` stores indices into it.
ORIGINS: tuple[Origin, ...] = tuple(Origin)


@dataclass(frozen=True, eq=False)
class StartState:
    """The state a rollout group starts from (prompt, optional fixed prefix)."""

    prompt_ids: tuple[int, ...]
    """Token ids of the rendered prompt (non-empty)."""
    problem: Problem
    """The task problem the completions are verified against (its own answer, ExTra App. B.4)."""
    prefix_ids: tuple[int, ...] = ()
    """Fixed response prefix appended to the prompt; generated continuations follow it; masked
    out of the loss; included in the verified completion text."""
    origin: Origin = Origin.FRESH
    """Tag: fresh / replayed_prefix / guided / replayed_rollout / expert."""
    n: int | None = None
    """Samples to draw from this state; ``None`` means the trainer's group size G."""
    history: tuple[Any, ...] = ()
    """Serialized multi-turn interaction before this state (turns as plain data); empty for
    single-turn tasks, whose token history is ``prefix_ids``. Not plug-in bookkeeping: see ``meta``."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Plug-in metadata (plain data, e.g. VSR's score and α of a replayed prefix); the trainer never
    reads it."""
    snapshot: Mapping[str, Any] | None = None
    """Environment snapshot (plain data, :meth:`llm_harness.envs.base.TextEnv.snapshot`) a multi-turn
    episode resumes from, together with ``history`` (the turns played before it); ``None``: the
    episode starts from the problem's seed."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_ids", tuple(int(t) for t in self.prompt_ids))
        object.__setattr__(self, "prefix_ids", tuple(int(t) for t in self.prefix_ids))
        object.__setattr__(self, "origin", Origin(self.origin))
        if not self.prompt_ids:
            raise ValueError("prompt_ids: must not be empty")
        if self.n is not None and (isinstance(self.n, bool) or int(self.n) < 1):
            raise ValueError(f"n: must be None or an int >= 1, got {self.n!r}")
        if isinstance(self.history, Mapping) or isinstance(self.history, (str, bytes)):
            raise ValueError(f"history: must be a sequence of turns, got {type(self.history).__name__} "
                             "(plug-in metadata belongs in meta)")
        object.__setattr__(self, "history", tuple(self.history))
        if not isinstance(self.meta, Mapping):
            raise ValueError(f"meta: must be a mapping, got {type(self.meta).__name__}")
        object.__setattr__(self, "meta", dict(self.meta))
        if self.snapshot is not None and not isinstance(self.snapshot, Mapping):
            raise ValueError(f"snapshot: must be None or a mapping, got {type(self.snapshot).__name__}")

    @property
    def bare(self) -> bool:
        """A bare prompt: no response prefix, no interaction history, no environment snapshot (what a prefix method
        may cut its prefixes from)."""
        return not self.prefix_ids and not self.history and self.snapshot is None

    @property
    def context_ids(self) -> tuple[int, ...]:
        """``prompt_ids + prefix_ids``: what generation continues from."""
        return self.prompt_ids + self.prefix_ids

    @property
    def key(self) -> tuple:
        """Identity of the state (problem id, prompt, prefix, interaction history): samples from equal
        keys belong to one group."""
        return (self.problem.id, self.prompt_ids, self.prefix_ids, repr(self.history))


@dataclass(eq=False)
class RolloutGroup:
    """A start state and its ``G`` samples (a GRPO group, Replay §3). Arrays are indexed by sample ``i``."""

    start: StartState
    """The state every sample continues from."""
    response_ids: list[tuple[int, ...]]
    """``response_ids[i]``: new token ids of sample ``i`` (no prompt, no prefix)."""
    behaviour_logprobs: list[np.ndarray]
    """``behaviour_logprobs[i][t] = log q(response_ids[i][t] | ...)`` cached at generation time."""
    rewards: np.ndarray
    """``rewards[i]`` in [0, 1], float64."""
    birth_step: int
    """Trainer step at which the samples were generated."""
    verify: list[VerifyResult | None] = field(default_factory=list)
    """Per-sample verification outcome (``None`` for samples not verified, e.g. loaded from disk)."""
    finish_reasons: list[str] = field(default_factory=list)
    """Per-sample ``"stop"`` / ``"length"``."""
    advantages: np.ndarray | None = None
    """``advantages[i]`` (float64) once estimated/shaped; replayed rollouts arrive with theirs."""
    weights: np.ndarray | None = None
    """Optional per-sample importance weights multiplying the loss (default 1)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Per-group extras written by plug-ins (e.g. novelty bonuses, MTE values); a multi-turn group
    (:mod:`llm_harness.trainer.multiturn`) keeps its per-row episode structure here (``episode``,
    ``turn``, ``step_reward``, ``anchor`` arrays)."""
    contexts: list[tuple[int, ...]] = field(default_factory=list)
    """Per-sample context ids (empty: every sample continues ``start.context_ids``). A multi-turn
    group has one row per turn, each with its own prompt (instruction, history window, observation)."""

    def __post_init__(self) -> None:
        g = len(self.response_ids)
        self.contexts = [tuple(int(t) for t in c) for c in self.contexts]
        if self.contexts and len(self.contexts) != g:
            raise ValueError(f"contexts: {len(self.contexts)} entries for {g} samples")
        self.response_ids = [tuple(int(t) for t in r) for r in self.response_ids]
        self.behaviour_logprobs = [np.asarray(b, dtype=np.float64) for b in self.behaviour_logprobs]
        self.rewards = np.asarray(self.rewards, dtype=np.float64)
        if len(self.behaviour_logprobs) != g:
            raise ValueError(f"behaviour_logprobs: {len(self.behaviour_logprobs)} entries for {g} samples")
        for i, (r, b) in enumerate(zip(self.response_ids, self.behaviour_logprobs)):
            if b.shape != (len(r),):
                raise ValueError(f"behaviour_logprobs[{i}]: shape {b.shape} differs from response length {len(r)}")
        if self.rewards.shape != (g,):
            raise ValueError(f"rewards: expected shape ({g},), got {self.rewards.shape}")
        for name in ("advantages", "weights"):
            v = getattr(self, name)
            if v is not None:
                v = np.asarray(v, dtype=np.float64)
                if v.shape != (g,):
                    raise ValueError(f"{name}: expected shape ({g},), got {v.shape}")
                setattr(self, name, v)

    @property
    def size(self) -> int:
        """Number of samples ``G``."""
        return len(self.response_ids)

    @property
    def mixed(self) -> bool:
        """True iff the rewards are not all equal (the group carries a GRPO signal)."""
        return bool(self.size > 1 and np.ptp(self.rewards) > 0)

    def context(self, i: int) -> tuple[int, ...]:
        """Context ids sample ``i`` continues (its own, or the start state's)."""
        return self.contexts[i] if self.contexts else self.start.context_ids

    @property
    def multiturn(self) -> bool:
        """True iff the group's rows are turns of episodes (``info["episode"]`` present)."""
        return "episode" in self.info

    @property
    def n_new_tokens(self) -> int:
        """Generated tokens of this group (responses only, stop tokens included)."""
        return sum(len(r) for r in self.response_ids)

    @property
    def stopped(self) -> list[bool]:
        """``stopped[i]``: a stop token ended sample ``i`` (its last token); False: the budget did."""
        return [r == "stop" for r in self.finish_reasons]

    def completion_ids(self, i: int) -> tuple[int, ...]:
        """Prefix + sample ``i`` without its final stop token: the completion that was verified."""
        return self.start.prefix_ids + completion_ids(self.response_ids[i], self.finish_reasons[i] == "stop")

    def completion_text(self, i: int, codec: Any) -> str:
        """Text sample ``i`` was verified on (:meth:`completion_ids` decoded by ``codec``, special tokens kept)."""
        return codec.decode(self.completion_ids(i))

    def with_advantages(self, advantages: np.ndarray) -> "RolloutGroup":
        """A copy with ``advantages`` replaced (validated)."""
        out = replace(self, advantages=np.asarray(advantages, dtype=np.float64), info=dict(self.info))
        return out

    def select(self, idx: Sequence[int]) -> "RolloutGroup":
        """A group holding samples ``idx`` only (same start state)."""
        idx = list(idx)
        return RolloutGroup(
            start=self.start,
            response_ids=[self.response_ids[i] for i in idx],
            behaviour_logprobs=[self.behaviour_logprobs[i] for i in idx],
            rewards=self.rewards[idx],
            birth_step=self.birth_step,
            verify=[self.verify[i] for i in idx] if self.verify else [],
            finish_reasons=[self.finish_reasons[i] for i in idx] if self.finish_reasons else [],
            advantages=None if self.advantages is None else self.advantages[idx],
            weights=None if self.weights is None else self.weights[idx],
            info=dict(self.info),
            contexts=[self.contexts[i] for i in idx] if self.contexts else [],
        )


@dataclass(frozen=True, eq=False)
class TrainBatch:
    """Padded tensors for one optimisation batch; row ``b`` is one sample.

    Shapes: ``input_ids[B, L]``, ``attention_mask[B, L]``, ``loss_mask[B, L-1]``,
    ``old_logprobs[B, L-1]`` (behaviour log-probs at the response positions, 0 elsewhere),
    ``advantages[B]``, ``weights[B]``, ``origin[B]`` (index into :data:`ORIGINS`),
    ``group[B]`` (index of the source group), ``rewards[B]``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    weights: torch.Tensor
    origin: torch.Tensor
    group: torch.Tensor
    rewards: torch.Tensor

    @property
    def size(self) -> int:
        """Number of rows ``B``."""
        return int(self.input_ids.shape[0])

    def rows(self, idx: torch.Tensor) -> "TrainBatch":
        """The sub-batch of rows ``idx`` (trailing all-padding columns trimmed)."""
        width = int(self.attention_mask[idx].sum(-1).max().item()) if len(idx) else 1
        width = max(width, 2)
        return TrainBatch(
            input_ids=self.input_ids[idx, :width],
            attention_mask=self.attention_mask[idx, :width],
            loss_mask=self.loss_mask[idx, : width - 1],
            old_logprobs=self.old_logprobs[idx, : width - 1],
            advantages=self.advantages[idx],
            weights=self.weights[idx],
            origin=self.origin[idx],
            group=self.group[idx],
            rewards=self.rewards[idx],
        )

    def to(self, device: torch.device | str) -> "TrainBatch":
        """The batch with every tensor on ``device`` (the policy's device)."""
        return TrainBatch(**{k: getattr(self, k).to(device) for k in self.__dataclass_fields__})

    def to_dict(self) -> dict[str, torch.Tensor]:
        """Plain tensors (for saving an offending batch)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def build_batch(groups: Sequence[RolloutGroup], pad_token_id: int) -> TrainBatch:
    """Pad every sample of ``groups`` into one :class:`TrainBatch` (groups need advantages).

    Row ``b`` holds ``context + response``; ``loss_mask[b, j] = 1`` iff target position ``j + 1``
    is a response token, so prompt and prefix tokens never enter the loss (VSR §3.2, ExTra App. B.4).
    """
    if not groups:
        raise ValueError("groups: must not be empty")
    rows: list[tuple[tuple[int, ...], int, np.ndarray]] = []
    adv, wts, org, grp, rew = [], [], [], [], []
    origin_index = {o: i for i, o in enumerate(ORIGINS)}
    for gi, g in enumerate(groups):
        if g.advantages is None:
            raise ValueError(f"groups[{gi}]: advantages not computed")
        for i in range(g.size):
            ctx = g.context(i)
            rows.append((ctx, len(ctx), g.behaviour_logprobs[i]))
            adv.append(g.advantages[i])
            wts.append(1.0 if g.weights is None else g.weights[i])
            org.append(origin_index[g.start.origin])
            grp.append(gi)
            rew.append(g.rewards[i])
    flat = [(g.context(i), r) for g in groups for i, r in enumerate(g.response_ids)]
    width = max(2, max(len(c) + len(r) for c, r in flat))
    b = len(flat)
    ids = np.full((b, width), pad_token_id, dtype=np.int64)
    am = np.zeros((b, width), dtype=np.int64)
    lm = np.zeros((b, width - 1), dtype=np.float32)
    olp = np.zeros((b, width - 1), dtype=np.float32)
    for k, ((ctx, resp), (_, c_len, blp)) in enumerate(zip(flat, rows)):
        seq = ctx + resp
        ids[k, : len(seq)] = seq
        am[k, : len(seq)] = 1
        if resp:
            lm[k, c_len - 1 : c_len - 1 + len(resp)] = 1.0
            olp[k, c_len - 1 : c_len - 1 + len(resp)] = blp
    return TrainBatch(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(am),
        loss_mask=torch.from_numpy(lm),
        old_logprobs=torch.from_numpy(olp),
        advantages=torch.tensor(adv, dtype=torch.float32),
        weights=torch.tensor(wts, dtype=torch.float32),
        origin=torch.tensor(org, dtype=torch.long),
        group=torch.tensor(grp, dtype=torch.long),
        rewards=torch.tensor(rew, dtype=torch.float32),
    )


# ------------------------------------------------------------------------------ plain-data converters (checkpoints)


def problem_index(problems: Iterable[Problem]) -> dict[str, Problem]:
    """``{problem.id: problem}`` of a split: where the ``*_from_plain`` converters find problems."""
    return {p.id: p for p in problems}


def problem_by_id(pid: Any, problems: Mapping[str, Problem]) -> Problem:
    """``problems[pid]``; ValueError if the checkpointed id is not in the training split."""
    try:
        return problems[pid]
    except (KeyError, TypeError):
        raise ValueError(f"problem: {pid!r} is not in the training split (a different task or split?)") from None


def verify_to_plain(v: VerifyResult | None) -> dict[str, Any] | None:
    """Plain data of a verify result (``None`` stays ``None``)."""
    if v is None:
        return None
    return {"reward": v.reward, "status": v.status.value, "extracted": v.extracted, "timed_out": v.timed_out,
            "detail": v.detail}


def verify_from_plain(d: Mapping[str, Any] | None) -> VerifyResult | None:
    """Inverse of :func:`verify_to_plain`."""
    return None if d is None else VerifyResult(**d)


def start_state_to_plain(s: StartState) -> dict[str, Any]:
    """Plain data of ``s``: token ids as lists, the problem by its id, the origin by its value."""
    return {"prompt_ids": list(s.prompt_ids), "problem": s.problem.id, "prefix_ids": list(s.prefix_ids),
            "origin": s.origin.value, "n": s.n, "history": list(s.history), "meta": dict(s.meta),
            "snapshot": None if s.snapshot is None else dict(s.snapshot)}


def start_state_from_plain(d: Mapping[str, Any], problems: Mapping[str, Problem]) -> StartState:
    """Inverse of :func:`start_state_to_plain` (``problems``: :func:`problem_index` of the training split)."""
    return StartState(tuple(d["prompt_ids"]), problem_by_id(d["problem"], problems), tuple(d["prefix_ids"]), Origin(d["origin"]),
                      d["n"], tuple(d["history"]), dict(d["meta"]), d.get("snapshot"))


def group_to_plain(g: RolloutGroup) -> dict[str, Any]:
    """Plain data of ``g``; the behaviour log-probs of all samples as one array (split by response length)."""
    blp = np.concatenate(g.behaviour_logprobs) if g.behaviour_logprobs else np.zeros(0)
    return {
        "start": start_state_to_plain(g.start),
        "response_ids": [list(r) for r in g.response_ids],
        "behaviour_logprobs": blp,
        "rewards": g.rewards.copy(),
        "birth_step": g.birth_step,
        "verify": [verify_to_plain(v) for v in g.verify],
        "finish_reasons": list(g.finish_reasons),
        "advantages": None if g.advantages is None else g.advantages.copy(),
        "weights": None if g.weights is None else g.weights.copy(),
        "info": dict(g.info),
        "contexts": [list(c) for c in g.contexts],
    }


def group_from_plain(d: Mapping[str, Any], problems: Mapping[str, Problem]) -> RolloutGroup:
    """Inverse of :func:`group_to_plain` (``problems``: :func:`problem_index` of the training split)."""
    blp = np.asarray(d["behaviour_logprobs"], dtype=np.float64)
    ends = np.cumsum([0] + [len(r) for r in d["response_ids"]]).tolist()
    if blp.shape != (ends[-1],):
        raise ValueError(f"behaviour_logprobs: shape {blp.shape} for {ends[-1]} response tokens")
    return RolloutGroup(
        start=start_state_from_plain(d["start"], problems),
        response_ids=[tuple(r) for r in d["response_ids"]],
        behaviour_logprobs=[blp[a:b].copy() for a, b in zip(ends, ends[1:])],
        rewards=d["rewards"].copy(),
        birth_step=d["birth_step"],
        verify=[verify_from_plain(v) for v in d["verify"]],
        finish_reasons=list(d["finish_reasons"]),
        advantages=None if d["advantages"] is None else d["advantages"].copy(),
        weights=None if d["weights"] is None else d["weights"].copy(),
        info=dict(d["info"]),
        contexts=[tuple(c) for c in d.get("contexts", [])],
    )
