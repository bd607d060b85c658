"""Advantage estimators (registry, one signature) and the zero-variance group filter (Replay §3, Eq. 1).

Every estimator maps padded group rewards ``r[N, G]`` with a validity mask ``m[N, G]`` (groups
may differ in size, e.g. Reinforce-Ada-Est's per-prompt counts) to advantages ``A[N, G]``
(0 where ``m`` is 0), float64:

* ``grpo`` — ``A_i = (r_i − mean) / (std + ε_σ)``, ε_σ = 1e-6, with the group std
  ``sqrt(Σ (r_j − mean)² / (G − ddof))``: ``ddof = 1`` (Bessel, the default) is what verl's
  ``compute_grpo_outcome_advantage`` (``torch.std``) and TRL use — all three papers trained on
  verl — and ``ddof = 0`` is the population std of the papers' closed forms (Replay App. E;
  ``theory/`` keeps those). A zero-variance group gives exactly 0 (GRPO, Replay §3); so does a
  group of one sample (verl gives ``r/(1 + ε)`` there: a singleton carries no relative signal);
* ``gigpo`` — GiGPO for multi-turn episode groups only (:mod:`llm_harness.trainer.gigpo`; its
  parameters in ``algo.advantage_params``); every other estimator, on a multi-turn group, normalises
  the episode returns and gives each turn its episode's advantage;
* ``drgrpo`` — ``A_i = r_i − mean`` (Dr. GRPO: mean-centred, no std division; verl's
  ``norm_adv_by_std_in_grpo=False``);
* ``rloo`` — ``A_i = r_i − mean_{j≠i} r_j = G/(G−1) (r_i − mean)`` (leave-one-out baseline);
* ``constant`` — ``A_i = 1`` (SFT on expert trajectories: the policy loss with ρ≈1 becomes the
  log-likelihood gradient).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llm_harness.trainer.data import RolloutGroup
from vsr_util.registry import Registry

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "DEFAULT_DDOF",
    "GRPO_EPS",
    "episode_group_advantages",
    "estimate_advantages",
    "group_advantages",
    "informative",
    "pad_rewards",
    "register_advantage",
]

#: ε_σ of the GRPO z-score (Replay §3, Eq. 1; App. A, Table 7).
GRPO_EPS = 1e-6

Estimator = Callable[[np.ndarray, np.ndarray, float, int], np.ndarray]

#: the group-std convention of the papers' trainers (verl, TRL): Bessel-corrected
DEFAULT_DDOF = 1

#: name -> ``est(rewards[N, G], mask[N, G], eps, ddof) -> advantages[N, G]``; an estimator with the attribute
#: ``needs_group = True`` normalises within a group and needs G >= 2 (``loop.check_registries`` refuses less).
ADVANTAGE_ESTIMATORS: Registry[Estimator] = Registry("advantage estimator")


def register_advantage(name: str) -> Callable[[Estimator], Estimator]:
    """Decorator adding an estimator under ``name``; duplicates are rejected."""
    return ADVANTAGE_ESTIMATORS.register(name)


def _stats(r: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cnt = m.sum(-1, keepdims=True)
    mean = (r * m).sum(-1, keepdims=True) / np.maximum(cnt, 1.0)
    centred = (r - mean) * m
    return cnt, mean, centred


def _zero_var(centred: np.ndarray, mean: np.ndarray) -> np.ndarray:
    return np.all(np.abs(centred) <= 1e-12 * (1 + np.abs(mean)), axis=-1, keepdims=True)


@register_advantage("grpo")
def grpo(rewards: np.ndarray, mask: np.ndarray, eps: float = GRPO_EPS, ddof: int = DEFAULT_DDOF) -> np.ndarray:
    """Group z-score ``(r − mean)/(std + ε)``, std with ``G − ddof`` in the denominator (module doc);
    zero-variance and single-sample groups → 0 (Replay §3)."""
    if ddof not in (0, 1):
        raise ValueError(f"ddof: must be 0 (population std) or 1 (Bessel), got {ddof!r}")
    cnt, mean, centred = _stats(rewards, mask)
    std = np.sqrt((centred**2).sum(-1, keepdims=True) / np.maximum(cnt - ddof, 1.0))
    adv = centred / (std + eps)
    return np.where(_zero_var(centred, mean) | (cnt <= ddof), 0.0, adv) * mask


grpo.needs_group = True  # normalises within a group: a single sample per prompt gives no signal


@register_advantage("drgrpo")
def drgrpo(rewards: np.ndarray, mask: np.ndarray, eps: float = GRPO_EPS, ddof: int = DEFAULT_DDOF) -> np.ndarray:
    """Dr. GRPO advantage ``r − mean`` (no std division; ``eps`` and ``ddof`` unused); zero-variance → 0."""
    cnt, mean, centred = _stats(rewards, mask)
    return np.where(_zero_var(centred, mean), 0.0, centred) * mask


@register_advantage("rloo")
def rloo(rewards: np.ndarray, mask: np.ndarray, eps: float = GRPO_EPS, ddof: int = DEFAULT_DDOF) -> np.ndarray:
    """Leave-one-out ``r_i − mean_{j≠i} r_j = G/(G−1)(r_i − mean)`` (RLOO); needs G ≥ 2."""
    cnt, mean, centred = _stats(rewards, mask)
    if np.any(cnt < 2):
        raise ValueError("rewards: RLOO needs at least 2 samples per group")
    adv = centred * cnt / (cnt - 1.0)
    return np.where(_zero_var(centred, mean), 0.0, adv) * mask


rloo.needs_group = True


@register_advantage("constant")
def constant(rewards: np.ndarray, mask: np.ndarray, eps: float = GRPO_EPS, ddof: int = DEFAULT_DDOF) -> np.ndarray:
    """``A = 1`` on every valid sample (SFT on expert trajectories)."""
    return mask.astype(np.float64).copy()


def pad_rewards(groups: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Ragged group rewards → ``(rewards[N, Gmax], mask[N, Gmax])`` float64."""
    if len(groups) == 0:
        return np.zeros((0, 1)), np.zeros((0, 1))
    gmax = max(len(g) for g in groups)
    r = np.zeros((len(groups), max(gmax, 1)))
    m = np.zeros_like(r)
    for i, g in enumerate(groups):
        r[i, : len(g)] = np.asarray(g, dtype=np.float64)
        m[i, : len(g)] = 1.0
    return r, m


def group_advantages(name: str, groups: Sequence[Sequence[float]], eps: float = GRPO_EPS,
                     ddof: int = DEFAULT_DDOF) -> list[np.ndarray]:
    """Apply estimator ``name`` to ragged reward groups; returns one array per group."""
    est = ADVANTAGE_ESTIMATORS.lookup(name, where="advantage")
    r, m = pad_rewards(groups)
    if r.size and not np.all(np.isfinite(r)):
        raise ValueError("rewards: must be finite")
    a = est(r, m, eps, ddof)
    return [a[i, : len(g)].copy() for i, g in enumerate(groups)]


def estimate_advantages(name: str, groups: Sequence[RolloutGroup], eps: float = GRPO_EPS,
                        ddof: int = DEFAULT_DDOF, params: Mapping[str, Any] | None = None) -> list[RolloutGroup]:
    """Groups without advantages get estimator ``name``'s; groups that carry theirs (replayed
    rollouts) are returned unchanged. Multi-turn groups (``group.multiturn``) are normalised per
    episode (:func:`episode_group_advantages`); ``params`` are the
    estimator's parameters (``algo.advantage_params``)."""
    params = dict(params or {})
    todo = [i for i, g in enumerate(groups) if g.advantages is None and not g.multiturn]
    multi = [i for i, g in enumerate(groups) if g.advantages is None and g.multiturn]
    est = ADVANTAGE_ESTIMATORS.lookup(name, where="advantage")
    if todo and getattr(est, "for_episodes", None) is not None:
        raise ValueError(f"algo.advantage: {name!r} needs multi-turn episode groups (algo.collector: multiturn)")
    if todo and params:
        raise ValueError(f"algo.advantage_params: the {name!r} estimator takes no parameters, got {sorted(params)}")
    out = list(groups)
    if todo:
        advs = group_advantages(name, [groups[i].rewards for i in todo], eps, ddof)
        for i, a in zip(todo, advs):
            out[i] = groups[i].with_advantages(a)
    if multi:
        for i in multi:
            out[i] = groups[i].with_advantages(episode_group_advantages(name, groups[i], eps, ddof, params))
    return out


def _gigpo_matrix(rewards: np.ndarray, mask: np.ndarray, eps: float = GRPO_EPS, ddof: int = DEFAULT_DDOF) -> np.ndarray:
    """GiGPO on plain reward groups is undefined: it needs episodes and turns."""
    raise ValueError("algo.advantage: 'gigpo' needs multi-turn episode groups (algo.collector: multiturn)")


def _gigpo_episodes(g: RolloutGroup, eps: float, ddof: int, params: Mapping[str, Any]) -> np.ndarray:
    """GiGPO (verl-agent ``core_gigpo.py``) over one episode group's turns: episode advantage plus
    ``step_weight`` × the anchor-state step advantage (:mod:`llm_harness.trainer.gigpo`)."""
    from llm_harness.trainer.gigpo import GiGPOParams, gigpo_advantages
    from vsr_util.config_io import from_dict

    p = from_dict(GiGPOParams, dict(params), where="algo.advantage_params")
    info = g.info
    res = gigpo_advantages(np.zeros(g.size, dtype=np.int64), info["episode"], info["turn"], info["step_reward"],
                           info["anchor"], p, penalty=info["penalty"])
    return res.advantage


_gigpo_matrix.for_episodes = _gigpo_episodes  # type: ignore[attr-defined]
register_advantage("gigpo")(_gigpo_matrix)


def informative(group: RolloutGroup) -> bool:
    """True iff some sample has a non-zero (shaped) advantage — the zero-variance filter's test.

    With GRPO/RLOO and no shaping this is exactly "the rewards are mixed" (DAPO); a shaper that
    adds a bonus (ExTra novelty) can make an all-correct group informative.
    """
    if group.advantages is None:
        raise ValueError("group: advantages not computed")
    return bool(np.any(np.abs(group.advantages) > 0))


def episode_group_advantages(name: str, g: RolloutGroup, eps: float, ddof: int, params: Mapping[str, Any]) -> np.ndarray:
    """Per-row advantages of a multi-turn group (``llm_harness.trainer.multiturn`` module doc): ``gigpo`` from the episode and step
    structure, any other estimator on the episode returns, broadcast to each episode's turns."""
    est = ADVANTAGE_ESTIMATORS.lookup(name, where="algo.advantage")
    for_episodes = getattr(est, "for_episodes", None)
    if for_episodes is not None:
        return for_episodes(g, eps, ddof, params)
    if params:
        raise ValueError(f"algo.advantage_params: the {name!r} estimator takes no parameters, got {sorted(params)}")
    ep = g.info["episode"]
    a_ep = group_advantages(name, [np.asarray(g.info["episode_return"], dtype=np.float64)], eps, ddof)[0]
    return a_ep[ep]
