"""Rollout-level |A| replay for GRPO as a trainer plug-in (Replay paper Alg. 1).

Each step, the groups the trainer kept (``step.kept``: this step's survivors of the zero-variance
filter and of any keep plug-in such as DAPO's truncation — the *fresh survivors*, ``B'``
rollouts) are stored with their birth step, birth advantages and cached
behaviour log-probs. Storage ``level``:

* ``rollout`` — every rollout is its own buffer unit (the paper's method);
* ``query`` — a whole group is one unit (the naive baselines).

Units are drawn without replacement with ``P(u) ∝ priority(u)^alpha`` (Efraimidis–Spirakis keys),
``priority``: ``abs_adv`` = ``|A_i| + eps`` (rollout level only), ``sigma_g`` = the birth group's
reward std ``+ eps``, ``uniform``. ``composition``:

* ``fresh_anchored`` — all fresh survivors are kept and ``round(ratio · B')`` stored rollouts are
  added (query level: whole groups until at least that many rollouts);
* ``pool`` — ``round((1 + ratio) · B')`` rollouts are drawn from one pool of the fresh survivors
  and the stored units (the DQN/PER pattern; fresh units not drawn are not trained on).

Replayed rollouts keep their birth advantages and group statistics (frozen, as in the paper) and
their behaviour log-probs as the PPO ratio's denominator; they are tagged ``replayed_rollout``,
so the trainer logs their clip fraction separately. Units older than ``max_age`` steps
(``birth < t − max_age``) are evicted; replay is off for the first ``warmup`` steps.
Departures: ``eps`` is not given in the paper (default 1e-6); draws are without replacement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llm_harness.methods.common import check_number, plugin_config
from llm_harness.methods.vsr import weighted_sample_without_replacement
from llm_harness.trainer.data import Origin, RolloutGroup, group_from_plain, group_to_plain, problem_index
from llm_harness.trainer.plugins import Plugin, PluginSmoke, RolloutReplay, StepHook, TrainContext, register_plugin
from llm_harness.trainer.rollout import derive_seed
from llm_harness.trainer.step import Composition, Result, Step
from vsr_util.registry import Registry

__all__ = ["COMPOSITIONS", "LEVELS", "PER_SAMPLE", "PRIORITIES", "ReplayConfig", "ReplayPlugin", "split_rollouts", "unit_priority"]

def _sigma_g(g: RolloutGroup) -> float:
    return float(g.info.get("replay_sigma_g", np.std(g.rewards)))


def _abs_adv(u: RolloutGroup, eps: float) -> float:
    return float(np.abs(u.advantages).mean()) + eps


_abs_adv.rollout_level_only = True  # a rollout's own |A|: meaningless for a whole query's group


#: name -> priority(unit, eps) before the exponent alpha; an entry with ``rollout_level_only`` needs ``level: rollout``
PRIORITIES: Registry[Callable[[RolloutGroup, float], float]] = Registry("replay priority", {
    "abs_adv": _abs_adv,
    "sigma_g": lambda u, eps: _sigma_g(u) + eps,
    "uniform": lambda u, eps: 1.0,
})

#: ``level`` -> how kept groups become buffer units: one unit per rollout (Replay's rollout level) or per query
LEVELS: Registry[Callable[[Sequence[RolloutGroup]], list[RolloutGroup]]] = Registry("replay level", {
    "rollout": lambda groups: [u for g in groups for u in split_rollouts(g)],
    "query": lambda groups: list(groups),
})


@dataclass(frozen=True)
class ReplayConfig:
    """Parameters of the ``replay`` plug-in (defaults: the Replay paper)."""

    ratio: float = 0.5
    """Replay ratio r: replayed rollouts per fresh survivor (paper 0.5)."""
    max_age: int = 10
    """τ_max: units born before ``t − max_age`` are evicted (paper 10)."""
    alpha: float = 0.5
    """Priority exponent α of ``P ∝ p^α`` (paper 0.5)."""
    eps: float = 1e-6
    """ε added to the priority (not given in the paper)."""
    warmup: int = 20
    """Steps with replay disabled (the buffer still fills; paper 20)."""
    level: str = "rollout"
    """Buffer unit: ``rollout`` (paper's method) or ``query`` (whole groups; the naive baselines)."""
    priority: str = "abs_adv"
    """``abs_adv`` (|A|+ε, rollout level), ``sigma_g`` (group reward std + ε) or ``uniform``."""
    composition: str = "fresh_anchored"
    """``fresh_anchored`` (paper) or ``pool`` (naive baselines)."""

    def __post_init__(self) -> None:
        check_number("ratio", self.ratio, 0, 1)
        check_number("max_age", self.max_age, 1, integer=True)
        check_number("alpha", self.alpha, 0, 1)
        check_number("eps", self.eps, 0)
        check_number("warmup", self.warmup, 0, integer=True)
        LEVELS.check(self.level, where="level")
        PRIORITIES.check(self.priority, where="priority")
        COMPOSITIONS.check(self.composition, where="composition")
        if getattr(PRIORITIES[self.priority], "rollout_level_only", False) and self.level != "rollout":
            raise ValueError(f"priority: {self.priority!r} is a rollout-level signal; use level: rollout "
                             f"(or {', '.join(n for n in PRIORITIES if not getattr(PRIORITIES[n], 'rollout_level_only', False))})")


#: ``info[PER_SAMPLE]``: a mapping name -> per-sample sequence that :func:`split_rollouts` slices
#: (e.g. the verl adapter's TransferQueue row keys); every other ``info`` entry is per group and dropped
PER_SAMPLE = "per_sample"


def split_rollouts(g: RolloutGroup) -> list[RolloutGroup]:
    """One single-sample group per rollout of ``g``, keeping its birth advantage, ``σ_g``, its own
    context (multi-turn rows) and its slice of ``info[PER_SAMPLE]``."""
    if g.advantages is None:
        raise ValueError("group: advantages not computed")
    sig = float(np.std(g.rewards))
    per = dict(g.info.get(PER_SAMPLE, {}))
    for k, v in per.items():
        if len(v) != g.size:
            raise ValueError(f"info[{PER_SAMPLE!r}][{k!r}]: {len(v)} entries for {g.size} samples")
    out = []
    for i in range(g.size):
        info: dict[str, Any] = {"replay_sigma_g": sig}
        if per:
            info[PER_SAMPLE] = {k: [v[i]] for k, v in per.items()}
        out.append(
            RolloutGroup(
                g.start, [g.response_ids[i]], [g.behaviour_logprobs[i]], g.rewards[i : i + 1], g.birth_step,
                verify=[g.verify[i]] if g.verify else [], finish_reasons=[g.finish_reasons[i]] if g.finish_reasons else [],
                advantages=g.advantages[i : i + 1], weights=None if g.weights is None else g.weights[i : i + 1],
                info=info, contexts=[g.contexts[i]] if g.contexts else [],
            )
        )
    return out


def unit_priority(units: Sequence[RolloutGroup], name: str, eps: float, alpha: float) -> np.ndarray:
    """Sampling weights ``priority(u)^alpha`` of buffer units."""
    p = np.array([PRIORITIES[name](u, eps) for u in units], dtype=np.float64)
    return p**alpha


def _as_replayed(u: RolloutGroup) -> RolloutGroup:
    return RolloutGroup(
        replace(u.start, origin=Origin.REPLAYED_ROLLOUT), list(u.response_ids), list(u.behaviour_logprobs), u.rewards.copy(),
        u.birth_step, verify=list(u.verify), finish_reasons=list(u.finish_reasons), advantages=u.advantages.copy(),
        weights=None if u.weights is None else u.weights.copy(), info=dict(u.info), contexts=list(u.contexts),
    )


class ReplayPlugin(RolloutReplay, StepHook):
    """The ``replay`` plug-in (module doc)."""

    def __init__(self, cfg: ReplayConfig, ctx: TrainContext):
        self.cfg = cfg
        self.seed = int(ctx.config.seed)
        self.train_problems = ctx.train_problems  # a checkpoint names problems by id
        self.buffer: list[RolloutGroup] = []

    def _units(self, groups: Sequence[RolloutGroup]) -> list[RolloutGroup]:
        return LEVELS[self.cfg.level](groups)

    def _evict(self, step: int) -> int:
        n = len(self.buffer)
        self.buffer = [u for u in self.buffer if u.birth_step >= step - self.cfg.max_age]
        return n - len(self.buffer)

    def _draw(self, units: Sequence[RolloutGroup], n_rollouts: int, rng: np.random.Generator) -> list[int]:
        """Indices of units drawn ∝ priority^α without replacement until ``n_rollouts`` rollouts."""
        if n_rollouts <= 0 or not units:
            return []
        w = unit_priority(units, self.cfg.priority, self.cfg.eps, self.cfg.alpha)
        order = weighted_sample_without_replacement(w, len(units), rng)
        out, total = [], 0
        for j in order:
            if total >= n_rollouts:
                break
            out.append(int(j))
            total += units[j].size
        return out

    def compose(self, step: Step, ctx: TrainContext) -> Composition:
        cfg, t = self.cfg, step.index
        self._evict(t)
        fresh = list(step.fresh)
        n_fresh = sum(g.size for g in fresh)
        metrics = {"replay_active": 0.0, "replay_drawn_rollouts": 0.0}
        if t < cfg.warmup or cfg.ratio == 0 or n_fresh == 0:
            if t >= cfg.warmup and n_fresh == 0:
                ctx.warn("replay: no fresh survivors this step; nothing replayed (fresh-anchored needs B' > 0)")
            return Composition(fresh=step.fresh, replayed=step.replayed, metrics=metrics)
        rng = np.random.default_rng(derive_seed(self.seed, t, 0x4E9))
        metrics["replay_active"] = 1.0
        fresh, drawn = COMPOSITIONS[cfg.composition](self, fresh, n_fresh, rng, ctx, metrics)
        metrics["replay_drawn_rollouts"] = float(sum(u.size for u in drawn))
        if drawn:
            metrics["replay_drawn_age_mean"] = float(np.mean([t - u.birth_step for u in drawn]))
            metrics["replay_drawn_abs_adv_mean"] = float(np.mean([np.abs(u.advantages).mean() for u in drawn]))
        return Composition(fresh=tuple(fresh), replayed=step.replayed + tuple(_as_replayed(u) for u in drawn), metrics=metrics)

    def after_step(self, step: Step, ctx: TrainContext) -> Result:
        """Store the step's kept groups (what the trainer kept after filtering; module doc)."""
        self.buffer.extend(self._units(step.kept))
        evicted = self._evict(step.index + 1)
        return Result(metrics={
            "replay_buffer_rollouts": float(sum(u.size for u in self.buffer)),
            "replay_buffer_units": float(len(self.buffer)),
            "replay_evicted_units": float(evicted),
        })

    def state_dict(self) -> dict[str, Any]:
        """The buffer's units as plain data."""
        return {"buffer": [group_to_plain(u) for u in self.buffer]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        problems = problem_index(self.train_problems)
        self.buffer = [group_from_plain(u, problems) for u in state["buffer"]]


def _fresh_anchored(plug: ReplayPlugin, fresh: list[RolloutGroup], n_fresh: int, rng: np.random.Generator, ctx: TrainContext,
                    metrics: dict[str, float]) -> tuple[list[RolloutGroup], list[RolloutGroup]]:
    """Every fresh survivor, plus ``ratio x`` as many stored rollouts drawn by priority (Replay's batch)."""
    if not plug.buffer:
        ctx.warn("replay: buffer empty when replay is due; training on fresh rollouts only")
    return fresh, [plug.buffer[j] for j in plug._draw(plug.buffer, int(round(plug.cfg.ratio * n_fresh)), rng)]


def _pool(plug: ReplayPlugin, fresh: list[RolloutGroup], n_fresh: int, rng: np.random.Generator, ctx: TrainContext,
          metrics: dict[str, float]) -> tuple[list[RolloutGroup], list[RolloutGroup]]:
    """``(1 + ratio) x`` the fresh rollouts drawn by priority from fresh and stored units together (an ablation)."""
    fresh_units = plug._units(fresh)
    pool = fresh_units + plug.buffer
    idx = plug._draw(pool, int(round((1 + plug.cfg.ratio) * n_fresh)), rng)
    nf = len(fresh_units)
    kept = [pool[j] for j in idx if j < nf]
    metrics["replay_pool_fresh_rollouts"] = float(sum(u.size for u in kept))
    return kept, [pool[j] for j in idx if j >= nf]


#: ``composition`` -> ``compose(plugin, fresh, n_fresh, rng, ctx, metrics) -> (fresh kept, replayed)``
COMPOSITIONS: Registry[Callable[..., tuple[list[RolloutGroup], list[RolloutGroup]]]] = Registry(
    "replay composition", {"fresh_anchored": _fresh_anchored, "pool": _pool})


def replay_cost(params: Mapping[str, Any], cost: Mapping[str, float]) -> float:
    """Update cost over GRPO's for the suites' sizing: replay trains ``1 + ratio`` times the fresh rows, and an update
    costs ``1 + cost["replay_row_share"] x ratio`` times GRPO's (``ratio`` unset: :class:`ReplayConfig`'s default)."""
    return 1.0 + cost["replay_row_share"] * float(params.get("ratio", ReplayConfig.ratio))


@register_plugin("replay", config=ReplayConfig, cost=replay_cost, smoke=PluginSmoke({"warmup": 1}, state_key="buffer"),
                 summary="Replay: rollout-level experience replay, |A| priority, age eviction, fresh-anchored batches "
                         "(Replay Alg. 1)")
def _make_replay(params: Mapping[str, Any], ctx: TrainContext) -> Plugin:
    """``plugins: {replay: {ratio: 0.5, max_age: 10, alpha: 0.5, level: rollout, priority: abs_adv, ...}}``."""
    return ReplayPlugin(plugin_config(ReplayConfig, params, "replay"), ctx)
