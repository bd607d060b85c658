"""Sampling plug-ins on the trainer's refill mechanism: Reinforce-Ada-Est reallocation and DAPO dynamic sampling (VSR App. D.5 "Prompt-level adaptive allocation"; DAPO).

Both act through the same two stages of a step: a *refill* after a generation round asks for more
samples (Reinforce-Ada-Est tops up existing states; DAPO asks for more fresh prompts from the
shared stream), and DAPO's *keep* stage truncates the mixed fresh groups to the step's target.

* ``reinforce_ada_est`` — :class:`ReinforceAdaEst`;
* ``dapo`` — :class:`DynamicSampling`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from llm_harness.methods.common import plugin_config
from llm_harness.trainer.data import Origin
from llm_harness.trainer.plugins import GroupFilter, Plugin, PluginSmoke, StartStateSource, TrainContext, register_plugin
from llm_harness.trainer.step import Kept, Refill, SampleCounts, Step

__all__ = ["AdaConfig", "DynamicSampling", "ReinforceAdaEst", "allocate_counts"]


def allocate_counts(scores: np.ndarray, total: int, lo: int, hi: int) -> np.ndarray:
    """Integer counts ``N[i] ∈ [lo, hi]`` with ``Σ N = total`` and ``N ∝ scores`` as far as the box allows.

    Water-filling: find λ with ``Σ clip(λ s_i, lo, hi) = total`` by bisection, then round by largest
    remainders inside the box (VSR App. D.5, Reinforce-Ada-Est reallocation). ``scores[i] >= 0``;
    all-zero scores give an even split.
    """
    s = np.asarray(scores, dtype=np.float64)
    n = s.shape[0]
    if s.ndim != 1 or n == 0:
        raise ValueError(f"scores: expected a non-empty 1-D array, got shape {s.shape}")
    if np.any(~np.isfinite(s)) or np.any(s < 0):
        raise ValueError("scores: must be finite and >= 0")
    if not (1 <= lo <= hi):
        raise ValueError(f"lo: need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    if not (n * lo <= total <= n * hi):
        raise ValueError(f"total: {total} outside [{n * lo}, {n * hi}] for {n} prompts in [{lo}, {hi}]")
    if s.sum() == 0:
        s = np.ones(n)
    a, b = 0.0, hi / max(s[s > 0].min(), 1e-300)
    for _ in range(200):
        lam = 0.5 * (a + b)
        if np.clip(lam * s, lo, hi).sum() < total:
            a = lam
        else:
            b = lam
    x = np.clip(b * s, lo, hi)
    base = np.clip(np.floor(x), lo, hi).astype(np.int64)
    rem = int(total - base.sum())
    frac = x - np.floor(x)
    order = np.lexsort((np.arange(n), -frac))  # largest remainder first, ties by index
    k = 0
    while rem > 0:
        i = order[k % n]
        if base[i] < hi:
            base[i] += 1
            rem -= 1
        k += 1
    while rem < 0:
        i = order[::-1][k % n]
        if base[i] > lo:
            base[i] -= 1
            rem += 1
        k += 1
    return base


@dataclass(frozen=True)
class AdaConfig:
    """Parameters of ``reinforce_ada_est`` (the VSR paper's control: N_x in [4, 32])."""

    n_min: int = 4
    """Stage-1 samples per prompt (and the floor of N_x)."""
    n_max: int = 32
    """Cap of N_x."""


class ReinforceAdaEst(StartStateSource):
    """Prompt-level reallocation (Reinforce-Ada-Est style, the VSR App. D.5 control).

    Stage 1 draws ``n_min`` samples from every start state; stage 2 (the first refill round) tops
    state ``x`` up to ``N_x`` with ``N_x ∝ sqrt(p̂(1 − p̂))`` (Neyman), ``p̂ = (k + 1)/(n + 2)`` from
    stage 1, ``N_x ∈ [n_min, n_max]`` and ``Σ N_x = B·G`` fixed. Departure: the published method's
    exact estimator is not specified in our sources; this is the variance-proportional allocation
    the VSR paper's control describes (N_x ∈ [4, 32], fixed total).
    """

    def __init__(self, cfg: AdaConfig, group_size: int):
        if not (1 <= cfg.n_min <= group_size <= cfg.n_max):
            raise ValueError(f"plugins.reinforce_ada_est.n_min: need 1 <= n_min <= group_size <= n_max, got "
                             f"{cfg.n_min}, {group_size}, {cfg.n_max}")
        self.n_min, self.n_max, self.g = int(cfg.n_min), int(cfg.n_max), int(group_size)

    def plan_samples(self, step: Step, ctx: TrainContext) -> SampleCounts:
        return SampleCounts(n=(self.n_min,) * len(step.slots))

    def refill(self, step: Step, requested: Refill, ctx: TrainContext) -> Refill:
        if step.refills or not step.groups:  # stage 2 runs once, after round 0
            return Refill()
        groups = step.groups
        p = np.array([(g.rewards.sum() + 1.0) / (g.size + 2.0) for g in groups])
        counts = allocate_counts(np.sqrt(p * (1 - p)), self.g * len(groups), max(self.n_min, 1), self.n_max)
        out = []
        for g, c in zip(groups, counts):
            extra = int(c) - g.size
            if extra > 0:
                out.append(replace(g.start, n=extra))
        return Refill(states=tuple(out), metrics={"ada_topped_up": float(len(out))})


def redraw_cost(params: Mapping[str, Any], cost: Mapping[str, float]) -> float:
    """Update cost over GRPO's for the suites' sizing of a plug-in that draws a second generation round: DAPO's
    redraws of zero-variance groups, and Reinforce-Ada-Est's reallocation of a fixed budget (its updates took 1.39x
    GRPO's in the VSR regime's records, DAPO's factor): ``cost["redraw_factor"]``."""
    return cost["redraw_factor"]


@register_plugin("reinforce_ada_est", config=AdaConfig, cost=redraw_cost, smoke=PluginSmoke({"n_min": 2, "n_max": 8}),
                 summary="Reinforce-Ada-Est: a fixed sample budget reallocated to uncertain prompts in a second round")
def _make_reinforce_ada(params: Mapping[str, Any], ctx: TrainContext) -> Plugin:
    """``{n_min: 4, n_max: 32}``; the total is ``prompts_per_step × group_size``."""
    return ReinforceAdaEst(plugin_config(AdaConfig, params, "reinforce_ada_est"), ctx.config.rollout.group_size)


@dataclass(frozen=True)
class DapoConfig:
    """Parameters of ``dapo`` (dynamic sampling; the round cap is ``algo.max_gen_rounds``)."""

    truncate: bool = True
    """Keep only the first ``prompts_per_step`` mixed fresh groups (DAPO); False keeps every one."""


class DynamicSampling(StartStateSource, GroupFilter):
    """DAPO dynamic sampling: redraw fresh prompts until the step has ``B`` mixed groups (DAPO).

    After each round, the deficit ``B − #mixed groups of this step − fresh prompts already requested
    this round`` is asked for from the shared fresh stream (every round's tokens are counted); the
    keep stage then truncates the mixed *fresh* groups to the first ``B`` (groups of other origins
    are kept). A group is mixed by its rewards (DAPO's "not all equal").
    """

    def __init__(self, cfg: DapoConfig):
        self.cfg = cfg

    def refill(self, step: Step, requested: Refill, ctx: TrainContext) -> Refill:
        n_mixed = sum(g.mixed for g in step.groups)
        deficit = step.target - n_mixed - requested.fresh
        return Refill(fresh=max(0, deficit))

    def keep(self, step: Step, ctx: TrainContext) -> Kept:
        idx, n_fresh = [], 0
        for i, g in enumerate(step.kept):
            if g.start.origin is Origin.FRESH:
                if self.cfg.truncate and n_fresh >= step.target:
                    continue
                n_fresh += 1
            idx.append(i)
        return Kept(indices=tuple(idx), metrics={"dapo_truncated": float(len(step.kept) - len(idx))})


@register_plugin("dapo", config=DapoConfig, cost=redraw_cost, smoke=PluginSmoke({}),
                 summary="DAPO dynamic sampling: all-equal groups dropped, prompts redrawn until B mixed groups")
def _make_dapo(params: Mapping[str, Any], ctx: TrainContext) -> Plugin:
    """``plugins: {dapo: {}}`` (DAPO dynamic sampling; rounds capped by ``algo.max_gen_rounds``)."""
    return DynamicSampling(plugin_config(DapoConfig, params, "dapo"))
