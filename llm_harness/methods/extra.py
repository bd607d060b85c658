"""ExTra as trainer plug-ins: correctness-gated novelty and MTE-guided prefix regeneration (ExTra §4).

ExTra (Algorithm 1) adds two things to GRPO, both implemented by one plug-in class,
:class:`ExtraPlugin`, registered under three names:

* ``extra`` (full), ``extra_novelty`` (ExTra-N), ``extra_regen`` (ExTra-R).

**Novelty** (``AdvantageShaper``, eq. 1–2). For every group generated this step, each correct
sample ``i`` (``R_i > 0``) gets ``r_int(i) = 1 − max_{z' ∈ C_i} cos(z_i, z')`` with ``C_i`` = the
prompt's memory ``Φ(x)`` of recent correct-response embeddings plus the embeddings of the other
correct samples of the group (``max ∅ = 0``); incorrect samples get 0. Then
``Â = Â_estimator + γ r_int`` (``normalization: post``, eq. 2) or ``Â = estimator(R + γ r_int)``
(``pre``, App. D.1). ``Φ(x)`` keeps the ``memory_size`` most recent correct embeddings (App. B.3).
The signal is a ``NOVELTY_SIGNALS`` entry: an embedder of :mod:`~llm_harness.embedders`
(``policy_hidden``, ``ngram4``, ``minilm``) or ``surprise`` (below). Bonuses are stored in
``group.info["extra_novelty"]``.

**Regeneration** (``AdvantageShaper`` for the scoring, ``StartStateSource`` for injection). From
step ``warmup_steps`` on (0-based; the paper's ``t > T_warm`` with 1-based ``t``), every fresh group
with no correct sample is eligible: each response is decoded, cut into reasoning steps by
``task.split_steps``, and every strict step prefix ``p`` (shorter than the response budget) is
scored by ``MTE(p)`` from one batched ``backend.score_batch`` call (full-vocabulary entropies at
the rollout temperature) and embedded by ``prefix_embedder``. The prompt's prefix cache (≤
``prefix_cache`` distinct prefixes, most recent kept) is smoothed (``H̃_j = Σ_k softmax_k(cos/τ) H_k``)
and ``p* = argmin H̃`` is enqueued as the guided state ``[x, p*]`` (``Origin.GUIDED``, the prompt's
**own** problem). The FIFO queue (≤ ``queue_size``; the oldest entry is dropped when full) replaces
later batches: ExTra claims at most ``floor(max_guided_frac × open slots)`` slots per step (before
the fresh draw, so no fresh prompt is consumed for a replaced slot).

**Metrics** (``StepHook``): ``extra_novelty_*``, ``extra_regen_*``, ``extra_queue_*``,
``extra_guided_injected`` and wall times ``time_extra_embed_s`` / ``time_extra_regen_s``.

Departures from the paper (and its official code):

* Guided states carry the guided prompt's own problem, so prefix + suffix is verified against the
  right answer (the official code keeps the replaced batch row's answer — a bug).
* MTE and prefix embeddings are computed at shaping time, i.e. under the policy that generated the
  rollouts (the paper reads entropies from the rollout logits), through one extra scoring pass;
  they are not free as in the paper.
* ``policy_hidden`` (the test-bed default) replaces MiniLM, which knows nothing about the
  step-arithmetic character vocabulary; ``minilm`` is available for natural-language tasks.
* ``surprise`` is not defined in the paper's text; here it is the policy's per-token surprise of
  the sampled solution, ``s_i = −(1/|y_i|) Σ_t log q(y_t | ·)`` from the cached behaviour log-probs
  (``q = π_θ_old`` at the rollout temperature without truncation), mapped to
  ``r_int(i) = 1[R_i > 0] (1 − exp(−s_i))`` ∈ [0, 1): one minus the geometric-mean token
  probability. It needs no memory and no extra forward pass.
* For a guided group, novelty embeds prefix + suffix (the verified solution); surprise uses the
  suffix only (the prefix has no behaviour log-probs).
* The number of guided states per batch is not bounded in the paper (Alg. 1 l.4 replaces "the
  tail"); ``max_guided_frac`` (default 1.0 = unbounded) caps it. Guided states take open slots
  only, so composing with VSR keeps VSR's replayed prefixes; the paper overwrites drawn prompts,
  here the replaced prompts are not drawn (they come in the next step, as for GRPO).
* Identical prefixes are kept once in the prefix cache (the newest MTE/embedding wins).
"""

from __future__ import annotations

import abc
import math
import time
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llm_harness.embedders import EMBEDDERS, Embedder, build_embedder
from llm_harness.methods.mte import char_to_token_cuts, mean_token_entropy, select_prefix, step_char_cuts
from llm_harness.trainer.advantages import DEFAULT_DDOF, GRPO_EPS, group_advantages
from llm_harness.trainer.data import Origin, RolloutGroup, StartState, problem_index, start_state_from_plain, start_state_to_plain
from llm_harness.trainer.plugins import AdvantageShaper, PluginSmoke, StartStateSource, StepHook, TrainContext, register_plugin
from llm_harness.trainer.step import Claim, Result, Shaped, Step
from theory.extra import novelty_bonus
from vsr_util.checks import check_number
from vsr_util.registry import Registry

__all__ = [
    "NORMALIZATIONS",
    "NOVELTY_SIGNALS",
    "ExtraConfig",
    "ExtraPlugin",
    "NoveltySignal",
    "parse_extra_params",
    "register_novelty_signal",
    "shaped_advantages",
    "surprise_bonus",
]


# ------------------------------------------------------------------------------ pure pieces


def surprise_bonus(logprobs: Sequence[np.ndarray], correct) -> np.ndarray:
    """``b_i = 1[correct_i] (1 − exp(mean_t logprobs[i][t]))`` (policy-surprise novelty; module doc).

    ``logprobs[i][t]`` = behaviour log-prob of token ``t`` of sample ``i`` (≤ 0); an empty sample
    has surprise 0. Returns ``b[G]`` in [0, 1).
    """
    c = np.asarray(correct, dtype=bool)
    if c.shape != (len(logprobs),):
        raise ValueError(f"correct: expected shape ({len(logprobs)},), got {c.shape}")
    out = np.zeros(len(logprobs))
    for i, lp in enumerate(logprobs):
        lp = np.asarray(lp, dtype=np.float64)
        if np.any(~np.isfinite(lp)) or np.any(lp > 1e-9):
            raise ValueError(f"logprobs[{i}]: must be finite and <= 0")
        if c[i] and lp.size:
            out[i] = -math.expm1(float(lp.mean()))
    return out


def _post(adv: np.ndarray, rewards: np.ndarray, bonus: np.ndarray, gamma: float, estimator: str, eps: float,
          ddof: int) -> np.ndarray:
    return adv + gamma * bonus


def _pre(adv: np.ndarray, rewards: np.ndarray, bonus: np.ndarray, gamma: float, estimator: str, eps: float,
         ddof: int) -> np.ndarray:
    return group_advantages(estimator, [rewards + gamma * bonus], eps, ddof)[0]


#: where the bonus enters: ``post`` = ``Â + γ b`` (ExTra eq. 2); ``pre`` = ``estimator(R + γ b)`` (App. D.1)
NORMALIZATIONS: Registry[Callable[..., np.ndarray]] = Registry("novelty normalization", {"post": _post, "pre": _pre})


def shaped_advantages(advantages, rewards, bonus, gamma: float, normalization: str = "post",
                      estimator: str = "grpo", eps: float = GRPO_EPS, ddof: int = DEFAULT_DDOF) -> np.ndarray:
    """Advantages ``A[G]`` of one group with novelty ``bonus[G]`` added (eq. 2 or App. D.1)."""
    a = np.asarray(advantages, dtype=np.float64)
    r = np.asarray(rewards, dtype=np.float64)
    b = np.asarray(bonus, dtype=np.float64)
    if not (a.shape == r.shape == b.shape and a.ndim == 1):
        raise ValueError(f"bonus: shapes of advantages {a.shape}, rewards {r.shape}, bonus {b.shape} must be equal (G,)")
    return NORMALIZATIONS.lookup(normalization, where="normalization")(a, r, b, float(gamma), estimator, eps, ddof)


# ------------------------------------------------------------------------------ novelty signals


class NoveltySignal(abc.ABC):
    """Computes the correctness-gated bonus of every sample of a list of groups (and updates memory)."""

    @abc.abstractmethod
    def bonuses(self, groups: Sequence[RolloutGroup], memory: dict[str, np.ndarray], memory_size: int) -> list[np.ndarray]:
        """``out[g][i]`` for groups in order; ``memory[problem_id]`` (``[M, D]``) is read and updated."""


class EmbeddingNovelty(NoveltySignal):
    """ExTra eq. 1 with an embedder ``h`` and the per-prompt memory of correct responses."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder

    def bonuses(self, groups, memory, memory_size):
        items = [(gi, i) for gi, g in enumerate(groups) for i in range(g.size) if g.rewards[i] > 0]
        emb = (
            self.embedder.embed(
                [groups[gi].start.prompt_ids for gi, _ in items],
                [groups[gi].start.prefix_ids + groups[gi].response_ids[i] for gi, i in items],
            )
            if items
            else None
        )
        out, at = [], 0
        for g in groups:
            b = np.zeros(g.size)
            idx = np.flatnonzero(g.rewards > 0)
            if idx.size:
                z = np.asarray(emb[at : at + idx.size], dtype=np.float64)
                at += idx.size
                pid = g.start.problem.id
                mem = memory.get(pid)
                b[idx] = novelty_bonus(z, np.ones(idx.size, dtype=bool), mem)
                unit = (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)
                new = unit if mem is None else np.concatenate([mem, unit])
                memory[pid] = np.ascontiguousarray(new[-memory_size:])
            out.append(b)
        return out


class SurpriseNovelty(NoveltySignal):
    """Policy-surprise bonus from the cached behaviour log-probs (no memory; module doc)."""

    def bonuses(self, groups, memory, memory_size):
        return [surprise_bonus(g.behaviour_logprobs, g.rewards > 0) for g in groups]


NoveltyFactory = Callable[[Mapping[str, Any], Any, str], NoveltySignal]
#: name -> factory(embedder_params, ctx, where)
NOVELTY_SIGNALS: Registry[NoveltyFactory] = Registry("novelty signal")


def register_novelty_signal(name: str) -> Callable[[NoveltyFactory], NoveltyFactory]:
    """Decorator adding a novelty signal under ``name``; duplicates are rejected."""
    return NOVELTY_SIGNALS.register(name)


def _embedding_signal(name: str) -> NoveltyFactory:
    def make(params: Mapping[str, Any], ctx: Any, where: str) -> NoveltySignal:
        return EmbeddingNovelty(build_embedder(name, params, ctx, where))

    return make


for _name in list(EMBEDDERS):
    register_novelty_signal(_name)(_embedding_signal(_name))


@register_novelty_signal("surprise")
def _make_surprise(params: Mapping[str, Any], ctx: Any, where: str) -> NoveltySignal:
    if params:
        raise ValueError(f"{where}.{sorted(params)[0]}: unknown key; the 'surprise' signal takes no parameters")
    return SurpriseNovelty()


# ------------------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class ExtraConfig:
    """Parameters of the ExTra plug-in (``plugins.<name>.*``); paper values cited per field."""

    novelty: bool = True
    """Apply the correctness-gated novelty bonus (ExTra-N part)."""
    regen: bool = True
    """Run MTE-guided prefix regeneration (ExTra-R part)."""
    gamma: float = 1.0
    """Novelty weight γ >= 0 (ExTra eq. 2; γ = 1 is the paper's default, §5.7; γ = 0 is ExTra-R)."""
    normalization: str = "post"
    """``post``: ``Â + γ b`` (eq. 2, default); ``pre``: ``estimator(R + γ b)`` (App. D.1 variant)."""
    embedder: str = "policy_hidden"
    """Novelty signal: ``policy_hidden`` (test-bed default), ``ngram4``, ``minilm`` (paper default), ``surprise``."""
    embedder_params: Mapping[str, Any] = field(default_factory=dict)
    """Parameters of the novelty embedder (e.g. ``{dim: 2048}`` for ``ngram4``, ``{path: ...}`` for ``minilm``)."""
    memory_size: int = 6
    """Correct-response embeddings kept per prompt (App. B.3: the 6 most recent = the paper's G)."""
    warmup_steps: int = 30
    """Steps without regeneration (App. B.5: T_warm = 30); regeneration runs from 0-based step ``warmup_steps``."""
    prefix_cache: int = 128
    """Distinct prefixes cached per prompt for smoothing (App. B.5: 128)."""
    tau: float = 0.1
    """Smoothing temperature τ > 0 of ``softmax(cos/τ)`` (§4.3; 0.1 is our default: ExTra's hyper-parameter table lists τ but its value did not survive the text we have)."""
    queue_size: int = 4096
    """Capacity of the guided-state FIFO (App. B.5: 4,096); the oldest entry is dropped when full."""
    max_guided_frac: float = 1.0
    """At most ``floor(max_guided_frac × #fresh states)`` guided states replace the batch tail per step
    (in [0, 1]; the paper states no cap: 1.0)."""
    prefix_embedder: str | None = None
    """Embedder of prefixes for smoothing (``None``: the novelty embedder, or ``policy_hidden`` when
    that is ``surprise`` or novelty is off)."""
    prefix_embedder_params: Mapping[str, Any] | None = None
    """Parameters of ``prefix_embedder`` (``None``: ``embedder_params`` when it is the same embedder)."""
    mte_temperature: float | None = None
    """Temperature of the scored entropies (``None``: the rollout temperature)."""


_NOVELTY_KEYS = {"gamma", "normalization", "embedder", "embedder_params", "memory_size"}
_REGEN_KEYS = {"warmup_steps", "prefix_cache", "tau", "queue_size", "max_guided_frac", "prefix_embedder",
               "prefix_embedder_params", "mte_temperature"}
#: registered name -> (forced flags, allowed keys)
_VARIANTS: dict[str, tuple[dict[str, bool], set[str]]] = {
    "extra": ({}, {"novelty", "regen"} | _NOVELTY_KEYS | _REGEN_KEYS),
    "extra_novelty": ({"novelty": True, "regen": False}, set(_NOVELTY_KEYS)),
    "extra_regen": ({"novelty": False, "regen": True}, set(_REGEN_KEYS)),
}


def parse_extra_params(name: str, params: Mapping[str, Any]) -> ExtraConfig:
    """Validated :class:`ExtraConfig` for registered variant ``name`` (errors name ``plugins.<name>.<param>``)."""
    where = f"plugins.{name}"
    forced, allowed = _VARIANTS[name]
    params = dict(params or {})
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown key for {name!r}; allowed: {sorted(allowed)}")
    base = ExtraConfig()
    d = {f.name: getattr(base, f.name) for f in fields(ExtraConfig)}
    d.update(params)
    d.update(forced)
    for flag in ("novelty", "regen"):
        if not isinstance(d[flag], bool):
            raise ValueError(f"{where}.{flag}: must be true or false, got {d[flag]!r}")
    if not (d["novelty"] or d["regen"]):
        raise ValueError(f"{where}.novelty: at least one of novelty / regen must be true")
    d["gamma"] = check_number(f"{where}.gamma", d["gamma"], 0.0)
    NORMALIZATIONS.check(d["normalization"], where=f"{where}.normalization")
    NOVELTY_SIGNALS.check(d["embedder"], where=f"{where}.embedder")
    for k in ("embedder_params", "prefix_embedder_params"):
        if d[k] is not None and not isinstance(d[k], Mapping):
            raise ValueError(f"{where}.{k}: must be a mapping, got {type(d[k]).__name__}")
    d["memory_size"] = check_number(f"{where}.memory_size", d["memory_size"], 1, integer=True)
    d["warmup_steps"] = check_number(f"{where}.warmup_steps", d["warmup_steps"], 0, integer=True)
    d["prefix_cache"] = check_number(f"{where}.prefix_cache", d["prefix_cache"], 1, integer=True)
    d["queue_size"] = check_number(f"{where}.queue_size", d["queue_size"], 1, integer=True)
    d["tau"] = check_number(f"{where}.tau", d["tau"], 0.0, lo_open=True)
    d["max_guided_frac"] = check_number(f"{where}.max_guided_frac", d["max_guided_frac"], 0.0, 1.0)
    if d["mte_temperature"] is not None:
        d["mte_temperature"] = check_number(f"{where}.mte_temperature", d["mte_temperature"], 0.0, lo_open=True)
    if d["prefix_embedder"] is None:
        d["prefix_embedder"] = d["embedder"] if (d["novelty"] and d["embedder"] in EMBEDDERS) else "policy_hidden"
    elif d["prefix_embedder"] not in EMBEDDERS:
        raise ValueError(f"{where}.prefix_embedder: unknown embedder {d['prefix_embedder']!r}; registered: {sorted(EMBEDDERS)}")
    if d["prefix_embedder_params"] is None:
        d["prefix_embedder_params"] = dict(d["embedder_params"]) if d["prefix_embedder"] == d["embedder"] else {}
    d["embedder_params"] = dict(d["embedder_params"])
    d["prefix_embedder_params"] = dict(d["prefix_embedder_params"])
    return ExtraConfig(**d)


# ------------------------------------------------------------------------------ the plug-in


@dataclass
class _PrefixEntry:
    prefix: tuple[int, ...]
    mte: float
    emb: np.ndarray


class ExtraPlugin(StartStateSource, AdvantageShaper, StepHook):
    """ExTra-N / ExTra-R / full ExTra over the trainer's plug-in points (module doc)."""

    def __init__(self, cfg: ExtraConfig, ctx: TrainContext, name: str = "extra"):
        self.cfg = cfg
        self.name = name
        where = f"plugins.{name}"
        self.signal: NoveltySignal | None = None
        self.prefix_embedder: Embedder | None = None
        if cfg.novelty:
            self.signal = NOVELTY_SIGNALS[cfg.embedder](cfg.embedder_params, ctx, f"{where}.embedder_params")
        if cfg.regen:
            shared = isinstance(self.signal, EmbeddingNovelty) and cfg.prefix_embedder == cfg.embedder and (
                dict(cfg.prefix_embedder_params) == dict(cfg.embedder_params))
            self.prefix_embedder = self.signal.embedder if shared else build_embedder(  # type: ignore[union-attr]
                cfg.prefix_embedder, cfg.prefix_embedder_params, ctx, f"{where}.prefix_embedder_params")
        self.memory: dict[str, np.ndarray] = {}
        self.prefix_cache: dict[str, list[_PrefixEntry]] = {}
        self.queue: deque[StartState] = deque()
        self.dropped = 0
        self.train_problems = ctx.train_problems  # a checkpoint names problems by id

    # ---------------------------------------------------------------- StartStateSource

    def claim(self, step: Step, open_slots: int, ctx: TrainContext) -> Claim:
        """Guided states dequeued in FIFO order, at most ``floor(max_guided_frac × open_slots)``."""
        if not self.cfg.regen:
            return Claim()
        k = min(len(self.queue), int(math.floor(self.cfg.max_guided_frac * open_slots + 1e-9)))
        states = tuple(self.queue.popleft() for _ in range(k))
        return Claim(states=states, metrics={"extra_guided_injected": float(k)})

    # ---------------------------------------------------------------- AdvantageShaper

    def shape(self, step: Step, ctx: TrainContext) -> Shaped:
        """Novelty bonus on this step's groups; regeneration scoring of its all-incorrect fresh groups."""
        groups, metrics = list(step.groups), {}
        if self.signal is not None:
            groups = self._novelty(step.index, groups, ctx, metrics)
        if self.cfg.regen:
            self._regenerate(step.index, groups, ctx, metrics)
        return Shaped(groups=tuple(groups), metrics=metrics)

    def _novelty(self, step: int, groups: list[RolloutGroup], ctx: TrainContext, metrics: dict[str, float]) -> list[RolloutGroup]:
        t0 = time.perf_counter()
        todo = [j for j, g in enumerate(groups) if g.birth_step == step and g.advantages is not None]
        sub = [groups[j] for j in todo]
        bonuses = self.signal.bonuses(sub, self.memory, self.cfg.memory_size) if sub else []  # type: ignore[union-attr]
        a = ctx.config.algo
        all_b, all_c, n_inf = [], [], 0
        for j, b in zip(todo, bonuses):
            g = groups[j]
            adv = shaped_advantages(g.advantages, g.rewards, b, self.cfg.gamma, self.cfg.normalization, a.advantage,
                                     a.eps_sigma, a.std_ddof)
            ng = g.with_advantages(adv)
            ng.info["extra_novelty"] = b.copy()
            groups[j] = ng
            all_b.append(b)
            all_c.append(g.rewards > 0)
            n_inf += int(not np.any(g.advantages != 0) and np.any(adv != 0))
        b = np.concatenate(all_b) if all_b else np.zeros(0)
        c = np.concatenate(all_c) if all_c else np.zeros(0, dtype=bool)
        metrics.update({
            "extra_novelty_bonus_mean": float(b.mean()) if b.size else float("nan"),
            "extra_novelty_bonus_pos_frac": float(np.mean(b > 0)) if b.size else float("nan"),
            "extra_novelty_bonus_mean_correct": float(b[c].mean()) if c.any() else float("nan"),
            "extra_novelty_groups_activated": float(n_inf),
            "extra_memory_prompts": float(len(self.memory)),
            "time_extra_embed_s": time.perf_counter() - t0,
        })
        return groups

    def _candidates(self, g: RolloutGroup, ctx: TrainContext) -> list[tuple[tuple[int, ...], list[int]]]:
        """Per response: (verified token ids, strict step-prefix lengths within the response budget)."""
        budget = ctx.config.rollout.max_new_tokens - len(g.start.prefix_ids)
        out = []
        for i, r in enumerate(g.response_ids):
            stopped = bool(g.finish_reasons) and g.finish_reasons[i] == "stop"
            ids = r[:-1] if stopped and r else r
            text = ctx.codec.decode(ids)
            cuts = char_to_token_cuts(ids, step_char_cuts(ctx.task.split_steps(text), len(text)), ctx.codec.decode)
            out.append((ids, [k for k in cuts if 1 <= k < min(len(ids), budget)]))
        return out

    def _regenerate(self, step: int, groups: list[RolloutGroup], ctx: TrainContext, metrics: dict[str, float]) -> None:
        t0 = time.perf_counter()
        active = step >= self.cfg.warmup_steps
        eligible = [g for g in groups if g.start.origin is Origin.FRESH and g.birth_step == step and not np.any(g.rewards > 0)] if active else []
        rows: list[tuple[int, tuple[int, ...], tuple[int, ...], list[int]]] = []  # (group, context, ids, cuts)
        for gi, g in enumerate(eligible):
            for ids, cuts in self._candidates(g, ctx):
                if cuts:
                    rows.append((gi, g.start.context_ids, ids, cuts))
        n_enq, sel = 0, []
        if rows:
            r = ctx.config.rollout
            temp = self.cfg.mte_temperature or r.temperature
            scores = ctx.backend.score_batch([x[1] for x in rows], [x[2] for x in rows], temperature=temp, with_entropy=True)
            embs = self.prefix_embedder.embed_prefixes(  # type: ignore[union-attr]
                [eligible[x[0]].start.prompt_ids for x in rows], [x[2] for x in rows], [x[3] for x in rows])
            per_group: dict[int, list[_PrefixEntry]] = {}
            for (gi, _, ids, cuts), sc, e in zip(rows, scores, embs):
                mte = mean_token_entropy(sc.entropies)
                for j, k in enumerate(cuts):
                    per_group.setdefault(gi, []).append(_PrefixEntry(tuple(ids[:k]), float(mte[k - 1]), np.asarray(e[j], dtype=np.float32)))
            for gi, g in enumerate(eligible):
                if gi not in per_group:
                    continue
                entries = self._update_cache(g.start.problem.id, per_group[gi])
                j, ht = select_prefix(np.array([x.mte for x in entries]), np.stack([x.emb for x in entries]), self.cfg.tau)
                best = entries[j]
                self._enqueue(StartState(
                    g.start.prompt_ids, g.start.problem, best.prefix, Origin.GUIDED,
                    meta={"extra_source_step": step, "extra_mte": best.mte, "extra_smoothed_mte": float(ht[j])},
                ))
                g.info["extra_guided_prefix_len"] = len(best.prefix)
                g.info["extra_guided_mte"] = float(ht[j])
                sel.append(float(ht[j]))
                n_enq += 1
        metrics.update({
            "extra_regen_active": float(active),
            "extra_regen_groups": float(len(eligible)),
            "extra_regen_prefixes": float(sum(len(x[3]) for x in rows)),
            "extra_regen_enqueued": float(n_enq),
            "extra_regen_selected_mte": float(np.mean(sel)) if sel else float("nan"),
            "time_extra_regen_s": time.perf_counter() - t0,
        })

    def _update_cache(self, pid: str, new: list[_PrefixEntry]) -> list[_PrefixEntry]:
        """Append ``new`` to the prompt's cache (one entry per distinct prefix, newest wins), keep the newest ``prefix_cache``."""
        old = self.prefix_cache.get(pid, [])
        seen = {e.prefix for e in new}
        merged: dict[tuple[int, ...], _PrefixEntry] = {}
        for e in [e for e in old if e.prefix not in seen] + new:
            merged.pop(e.prefix, None)
            merged[e.prefix] = e
        entries = list(merged.values())[-self.cfg.prefix_cache :]
        self.prefix_cache[pid] = entries
        return entries

    def _enqueue(self, state: StartState) -> None:
        if len(self.queue) >= self.cfg.queue_size:
            self.queue.popleft()
            self.dropped += 1
        self.queue.append(state)

    # ---------------------------------------------------------------- StepHook

    def after_step(self, step: Step, ctx: TrainContext) -> Result:
        """Queue metrics (the novelty and regeneration metrics come from :meth:`shape` and :meth:`claim`)."""
        if not self.cfg.regen:
            return Result()
        return Result(metrics={"extra_queue_len": float(len(self.queue)),
                               "extra_queue_dropped_total": float(self.dropped)})

    # ---------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Memories, prefix caches and the guided queue as plain data."""
        return {
            "memory": {k: v.copy() for k, v in self.memory.items()},
            "prefix_cache": {k: [[list(e.prefix), e.mte, e.emb.copy()] for e in v] for k, v in self.prefix_cache.items()},
            "queue": [start_state_to_plain(s) for s in self.queue],
            "dropped": self.dropped,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.memory = {k: np.asarray(v, dtype=np.float32) for k, v in state["memory"].items()}
        self.prefix_cache = {
            k: [_PrefixEntry(tuple(p), float(h), np.asarray(e, dtype=np.float32)) for p, h, e in v]
            for k, v in state["prefix_cache"].items()
        }
        problems = problem_index(self.train_problems)
        self.queue = deque(start_state_from_plain(s, problems) for s in state["queue"])
        self.dropped = int(state["dropped"])


def _factory(name: str) -> Callable[[Mapping[str, Any], Any], ExtraPlugin]:
    def make(params: Mapping[str, Any], ctx: TrainContext) -> ExtraPlugin:
        return ExtraPlugin(parse_extra_params(name, params), ctx, name)

    make.__doc__ = f"``plugins.{name}``: see :class:`ExtraConfig` for the parameters and defaults."
    return make


def extra_cost(params: Mapping[str, Any], cost: Mapping[str, float]) -> float:
    """Update cost over GRPO's for the suites' sizing: ExTra's scoring passes (novelty embedding, entropies for
    regeneration), ``cost["plugin_factor"]`` for each ExTra variant."""
    return cost["plugin_factor"]


_SUMMARY = {"extra": "ExTra: correctness-gated novelty bonus and entropy-guided prefix regeneration (ExTra §4)",
            "extra_novelty": "ExTra's correctness-gated novelty bonus alone (ExTra §4)",
            "extra_regen": "ExTra's entropy-guided prefix regeneration alone (ExTra §4)"}
#: each variant's state-test run: regeneration acts on failed samples (a task that is hard for the toy policy)
_SMOKE = {"extra": PluginSmoke({"warmup_steps": 0, "embedder": "ngram4"}, state_key="queue", hard=True),
          "extra_novelty": PluginSmoke({"embedder": "ngram4"}, state_key="memory"),
          "extra_regen": PluginSmoke({"warmup_steps": 0}, state_key="prefix_cache", hard=True)}
for _variant in _VARIANTS:
    register_plugin(_variant, config=ExtraConfig, cost=extra_cost, smoke=_SMOKE[_variant],
                    summary=_SUMMARY[_variant])(_factory(_variant))
