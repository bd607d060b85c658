"""GiGPO advantages over the flat steps of multi-turn episodes.

GiGPO (Feng et al. 2025, arXiv:2505.10978, Eqs. 3 and 5–8), with the semantics of verl-agent's
``gigpo/core_gigpo.py`` (``compute_gigpo_outcome_advantage``). One *step* ``k`` is one policy turn;
the inputs are flat per-step arrays in any order:

* ``episode_group[k]`` — the episode group: the G episodes started from one start state;
* ``episode[k]`` — the trajectory (globally unique id; one trajectory lies in one episode group);
* ``turn[k]`` — the turn index; a trajectory's turns are consecutive integers ``t0, t0+1, …``;
* ``reward[k]`` — the step's environment reward;
* ``anchor[k]`` — a hashable key of the current observation *without history* (e.g. the
  rendered grid); compared by Python equality (so ``1 == 1.0 == True`` are one key);
* ``penalty[k]`` (optional) — an invalid-action penalty entering the way verl-agent applies it
  (below). A penalty folded into ``reward`` instead is summed into the episode return and
  discounted into earlier steps' returns — the textbook reading, not verl-agent's.

The quantities (``ε`` = ``eps``, ``ω`` = ``step_weight``):

1. discounted returns within a trajectory, ``G_t = r_t + γ G_{t+1}`` (Eq. 5; verl-agent
   ``compute_step_discounted_returns``), and the episode return ``R(τ) = Σ_t r_t`` (each
   trajectory's rewards summed once, verl-agent's ``episode_rewards``);
2. the *episode score* of step k, ``s_k = R(τ_k) − p_k``, and the *step value*
   ``v_k = G_k − p_k``: verl-agent puts ``R(τ)`` on every step row (``EpisodeRewardManager``) and
   ``apply_invalid_action_penalty`` then subtracts ``coef · invalid_k`` from that row's score and
   from its already-discounted step return (so a penalty is neither summed into the episode nor
   propagated to earlier turns);
3. the episode advantage ``A^E_k = norm(s_k; episode group)`` (Eq. 3): mean and std over the
   episode group's samples — with ``episode_stats="steps"`` (verl-agent's default,
   ``compute_mean_std_cross_steps=True``) the samples are the group's step rows, so a trajectory
   of n turns weighs n times; with ``"trajectories"`` (the paper's Eq. 3, verl-agent's
   ``False``) one sample per trajectory, its mean episode score ``R(τ) − mean_k p_k``. A group
   with a single sample gets mean 0 and std 1 (verl-agent ``episode_norm_reward``);
4. anchor-state groups (Eq. 6; verl-agent ``build_step_group``): steps of the *same episode group*
   whose anchors are exactly equal, at any turn and in any trajectory (a revisited state joins
   its group);
5. the step advantage ``A^S_k = norm(v_k; anchor group)`` (Eq. 7; ``step_norm_reward``); a
   singleton anchor group gets mean ``v_k`` and std 1, i.e. ``A^S_k = 0``;
6. ``A_k = A^E_k + ω A^S_k`` (Eq. 8; ``step_advantage_w``).

``norm`` is a registered mode (:data:`NORM_MODES`): ``mean_norm`` ``x − μ`` (default; verl-agent's
Sokoban and WebShop runs) or ``mean_std_norm`` ``(x − μ)/(σ + ε)`` with the Bessel-corrected
``σ`` of ``torch.std`` and ``ε = 1e-6`` (AlfWorld runs). verl-agent's GiGPO examples use
``γ = 0.95``, ``ω = 1`` and an invalid-action coefficient of 0.1.

**An episode group that starts mid-episode.** A VSR replay state is a prefix of an interaction
(history + environment snapshot). The G episodes restarted from one replayed state form *one*
episode group of their own — a new ``episode_group`` id, never shared with the episodes the state
was cut from nor with another replay of the same state in the same batch — so their anchors
group only with each other. Turns count from the start of the environment episode: the first
generated turn after ``j`` replayed actions has ``turn = j`` (only the order within a trajectory
enters the maths, so an offset changes nothing). The replayed prefix contributes no steps: its
rewards are in neither ``R(τ)`` nor ``G_t`` (they would be the same constant for all G
episodes), and its tokens are context, outside the loss.

Departures from verl-agent (everything else is meant to agree; the tests compare against a
float64 transcription of its torch functions):

* float64 throughout (verl-agent's rewards and returns are float32);
* the group mean is computed shifted by the group's first value, so a group of identical values
  normalises to exactly 0 (a plain mean can leave a ~1e-17 residue that ``/(σ + ε)`` turns into
  ~1e-11); near-ties are *not* snapped to 0, unlike ``advantages.grpo``;
* a single-sample episode group keeps verl-agent's mean 0, std 1 (``A^E = s`` or
  ``s/(1 + ε)``), whereas the project's ``grpo`` estimator gives a singleton group 0;
* ``"trajectories"`` with per-step penalties: a trajectory's sample is its mean episode score;
  verl-agent takes the score of whichever of its rows comes first in the batch (order-dependent);
* no similarity-based anchor matching (verl-agent's ``enable_similarity``, off by default);
* one scalar per step: broadcasting to tokens and masking are the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import numpy as np

from vsr_util.checks import check_number
from vsr_util.registry import Registry

__all__ = [
    "EPISODE_STATS",
    "GiGPOParams",
    "GiGPOResult",
    "NORM_MODES",
    "anchor_groups",
    "discounted_returns",
    "episode_advantages",
    "episode_returns",
    "gigpo_advantages",
    "step_advantages",
]

Norm = Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]

#: mode name -> ``norm(x[K], mean[K], std[K], eps) -> [K]`` (each step with its group's statistics).
NORM_MODES: Registry[Norm] = Registry("GiGPO normalisation mode")


@NORM_MODES.register("mean_norm")
def mean_norm(x: np.ndarray, mean: np.ndarray, std: np.ndarray, eps: float) -> np.ndarray:
    """``x − μ`` (verl-agent ``remove_std=True``)."""
    return x - mean


@NORM_MODES.register("mean_std_norm")
def mean_std_norm(x: np.ndarray, mean: np.ndarray, std: np.ndarray, eps: float) -> np.ndarray:
    """``(x − μ)/(σ + ε)``, σ Bessel-corrected (verl-agent ``remove_std=False``, ``torch.std``)."""
    return (x - mean) / (std + eps)


#: what the episode-level mean and std run over (module doc, item 3)
EPISODE_STATS = ("steps", "trajectories")


@dataclass(frozen=True)
class GiGPOParams:
    """GiGPO's parameters (defaults: verl-agent's GiGPO examples)."""

    gamma: float = 0.95
    """Discount γ ∈ [0, 1] of the step returns ``G_t = r_t + γ G_{t+1}`` (``algorithm.gamma``)."""
    step_weight: float = 1.0
    """ω ≥ 0 in ``A = A_episode + ω A_step`` (``algorithm.gigpo.step_advantage_w``); 0 is
    episode-level GRPO-style normalisation."""
    mode: str = "mean_norm"
    """Normalisation within a group, a :data:`NORM_MODES` name (``algorithm.gigpo.mode``)."""
    eps: float = 1e-6
    """ε > 0 of ``mean_std_norm``'s ``(x − μ)/(σ + ε)``."""
    episode_stats: str = "steps"
    """Samples of the episode-level mean/std: ``steps`` (every step row, verl-agent's default) or
    ``trajectories`` (one per trajectory, the paper's Eq. 3)."""

    def __post_init__(self) -> None:
        check_number("gamma", self.gamma, 0.0, 1.0)
        check_number("step_weight", self.step_weight, 0.0)
        check_number("eps", self.eps, 0.0, lo_open=True)
        NORM_MODES.check(self.mode, "mode")
        if self.episode_stats not in EPISODE_STATS:
            raise ValueError(f"episode_stats: must be one of {EPISODE_STATS}, got {self.episode_stats!r}")


@dataclass(frozen=True)
class GiGPOResult:
    """Per-step outputs of :func:`gigpo_advantages`, each ``[K]`` in the input order."""

    advantage: np.ndarray
    """``A = A^E + ω A^S``."""
    episode_advantage: np.ndarray
    """``A^E``, the episode-group part."""
    step_advantage: np.ndarray
    """``A^S``, the anchor-group part (0 in singleton anchor groups)."""
    episode_return: np.ndarray
    """``R(τ_k)``, the step's trajectory return (penalties excluded)."""
    step_value: np.ndarray
    """``v_k = G_k − p_k``, the value normalised within anchor groups."""
    step_group: np.ndarray
    """Anchor-group id (dense ints, mere labels)."""
    step_group_size: np.ndarray
    """Size of the step's anchor group (1 = singleton)."""


# ------------------------------------------------------------------ input checks
def _ints(name: str, v: Sequence[int], n: int | None = None) -> np.ndarray:
    a = np.asarray(v)
    if a.ndim != 1:
        raise ValueError(f"{name}: must be one-dimensional, got shape {a.shape}")
    if a.size and (a.dtype == bool or not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{name}: must hold ints, got dtype {a.dtype}")
    if n is not None and a.size != n:
        raise ValueError(f"{name}: length {a.size} != {n} steps")
    return a.astype(np.int64)


def _floats(name: str, v: Sequence[float], n: int) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if a.ndim != 1 or a.size != n:
        raise ValueError(f"{name}: must have shape ({n},), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: must be finite")
    return a


def _trajectory_order(episode: np.ndarray, turn: np.ndarray) -> np.ndarray:
    """Steps sorted by (episode, turn); ValueError unless every trajectory's turns are consecutive."""
    order = np.lexsort((turn, episode))
    e, t = episode[order], turn[order]
    same = e[1:] == e[:-1]
    bad = same & (t[1:] != t[:-1] + 1)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"turn: trajectory {e[i]} has turns {t[i]} then {t[i + 1]}; they must be "
                         "distinct and consecutive")
    return order


# ------------------------------------------------------------------ pure pieces
def discounted_returns(episode: Sequence[int], turn: Sequence[int], reward: Sequence[float],
                       gamma: float = 0.95) -> np.ndarray:
    """``G[k] = r_k + γ G[next turn of k's trajectory]`` (0 after the last turn; GiGPO Eq. 5).

    ``episode[K]``, ``turn[K]`` int, ``reward[K]`` float → ``G[K]`` float64, input order.
    """
    check_number("gamma", gamma, 0.0, 1.0)
    ep = _ints("episode", episode)
    n = ep.size
    tu, r = _ints("turn", turn, n), _floats("reward", reward, n)
    if n == 0:
        return np.zeros(0)
    order = _trajectory_order(ep, tu)
    e, rs = ep[order], r[order]
    has_next = np.append(e[1:] == e[:-1], False)
    # steps-from-the-end of each sorted step: sweep level by level, last turns first
    start = np.append(True, e[1:] != e[:-1])
    seg = np.cumsum(start) - 1
    seg_end = np.flatnonzero(np.append(e[1:] != e[:-1], True))
    to_end = seg_end[seg] - np.arange(n)
    g = np.zeros(n)
    for d in range(int(to_end.max()) + 1):
        i = np.flatnonzero(to_end == d)
        g[i] = rs[i] + gamma * np.where(has_next[i], g[np.minimum(i + 1, n - 1)], 0.0)
    out = np.empty(n)
    out[order] = g
    return out


def episode_returns(episode: Sequence[int], reward: Sequence[float]) -> np.ndarray:
    """``R[k] = Σ_{j ∈ τ_k} r_j``, every step carrying its trajectory's return once.

    ``episode[K]`` int, ``reward[K]`` → ``R[K]`` float64.
    """
    ep = _ints("episode", episode)
    r = _floats("reward", reward, ep.size)
    _, inv = np.unique(ep, return_inverse=True)
    return np.bincount(inv, r)[inv] if ep.size else np.zeros(0)


def _group_mean(x: np.ndarray, gid: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group ``g`` (every one of ``0..n_groups-1`` present): mean and count of ``x[gid == g]``.

    The mean is shifted by the group's first sample, so identical samples give it exactly.
    """
    cnt = np.bincount(gid, minlength=n_groups).astype(np.float64)
    _, first = np.unique(gid, return_index=True)
    ref = x[first]
    return ref + np.bincount(gid, x - ref[gid], n_groups) / cnt, cnt


def _group_stats(x: np.ndarray, gid: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group: mean, Bessel-corrected std (0 for one sample) and count of ``x[gid == g]``."""
    mean, cnt = _group_mean(x, gid, n_groups)
    ss = np.bincount(gid, (x - mean[gid]) ** 2, n_groups)
    return mean, np.sqrt(ss / np.maximum(cnt - 1.0, 1.0)), cnt


def episode_advantages(episode_group: Sequence[int], episode: Sequence[int], score: Sequence[float],
                       mode: str = "mean_norm", eps: float = 1e-6, episode_stats: str = "steps") -> np.ndarray:
    """``A^E[k] = norm(score[k]; k's episode group)`` (GiGPO Eq. 3; verl-agent ``episode_norm_reward``).

    ``episode_group[K]``, ``episode[K]`` int, ``score[K]`` (= ``R(τ_k) − p_k``) → ``A^E[K]``.
    Statistics over the group's steps or trajectories (``episode_stats``, module doc); a group
    with one sample gets mean 0, std 1.
    """
    norm = NORM_MODES.lookup(mode, "mode")
    if episode_stats not in EPISODE_STATS:
        raise ValueError(f"episode_stats: must be one of {EPISODE_STATS}, got {episode_stats!r}")
    grp = _ints("episode_group", episode_group)
    n = grp.size
    ep, s = _ints("episode", episode, n), _floats("score", score, n)
    if n == 0:
        return np.zeros(0)
    _, g = np.unique(grp, return_inverse=True)
    if episode_stats == "steps":
        sample, sample_group = s, g
    else:
        traj, t = np.unique(ep, return_inverse=True)
        sample = _group_mean(s, t, traj.size)[0]
        sample_group = np.zeros(traj.size, dtype=np.int64)
        sample_group[t] = g
    mean, std, cnt = _group_stats(sample, sample_group, int(g.max()) + 1)
    single = cnt == 1
    mean, std = np.where(single, 0.0, mean), np.where(single, 1.0, std)
    return norm(s, mean[g], std[g], eps)


def anchor_groups(episode_group: Sequence[int], anchor: Sequence[Hashable]) -> np.ndarray:
    """Anchor-group id ``[K]`` of each step: equal ids iff same episode group and equal anchor
    (GiGPO Eq. 6; verl-agent ``build_step_group``). Ids are dense, in order of first appearance."""
    grp = _ints("episode_group", episode_group)
    if len(anchor) != grp.size:
        raise ValueError(f"anchor: length {len(anchor)} != {grp.size} steps")
    ids: dict[tuple[int, Hashable], int] = {}
    out = np.empty(grp.size, dtype=np.int64)
    for k, (g, a) in enumerate(zip(grp.tolist(), anchor)):
        try:
            out[k] = ids.setdefault((g, a), len(ids))
        except TypeError:
            raise ValueError(f"anchor: step {k}'s anchor ({type(a).__name__}) is not hashable; "
                             "pass a str or tuple") from None
    return out


def step_advantages(step_group: Sequence[int], value: Sequence[float], mode: str = "mean_norm",
                    eps: float = 1e-6) -> np.ndarray:
    """``A^S[k] = norm(value[k]; k's anchor group)``, 0 in singleton groups (GiGPO Eq. 7;
    verl-agent ``step_norm_reward``). ``step_group[K]`` int, ``value[K]`` → ``A^S[K]``."""
    norm = NORM_MODES.lookup(mode, "mode")
    sg = _ints("step_group", step_group)
    v = _floats("value", value, sg.size)
    if sg.size == 0:
        return np.zeros(0)
    _, g = np.unique(sg, return_inverse=True)
    mean, std, cnt = _group_stats(v, g, int(g.max()) + 1)
    std = np.where(cnt == 1, 1.0, std)  # the singleton's own mean: x − x = 0 exactly
    return norm(v, mean[g], std[g], eps)


def gigpo_advantages(episode_group: Sequence[int], episode: Sequence[int], turn: Sequence[int],
                     reward: Sequence[float], anchor: Sequence[Hashable], params: GiGPOParams = GiGPOParams(),
                     penalty: Sequence[float] | None = None) -> GiGPOResult:
    """GiGPO advantages of ``K`` flat steps (module doc; GiGPO Eq. 8).

    ``episode_group[K]``, ``episode[K]``, ``turn[K]`` int; ``reward[K]``, ``penalty[K]`` (default
    0) float; ``anchor[K]`` hashable → :class:`GiGPOResult` of ``[K]`` arrays in the input order.
    Computed in the canonical (episode group, episode, turn) order — sums run over each
    trajectory's turns in order, as verl-agent accumulates them — so permuting the steps permutes
    the outputs bit for bit (anchor-group ids aside, which are mere labels).
    """
    if not isinstance(params, GiGPOParams):
        raise ValueError(f"params: must be a GiGPOParams, got {type(params).__name__}")
    grp = _ints("episode_group", episode_group)
    n = grp.size
    ep, tu = _ints("episode", episode, n), _ints("turn", turn, n)
    r = _floats("reward", reward, n)
    p = np.zeros(n) if penalty is None else _floats("penalty", penalty, n)
    if len(anchor) != n:
        raise ValueError(f"anchor: length {len(anchor)} != {n} steps")
    pairs = np.unique(np.stack([ep, grp], axis=1), axis=0)
    split = np.flatnonzero(pairs[1:, 0] == pairs[:-1, 0])
    if split.size:
        j = int(split[0])
        raise ValueError(f"episode: trajectory {pairs[j, 0]} lies in episode groups {pairs[j, 1]} and {pairs[j + 1, 1]}")
    order = np.lexsort((tu, ep, grp))
    grp, ep, tu, r, p = grp[order], ep[order], tu[order], r[order], p[order]
    sg = anchor_groups(grp, [anchor[i] for i in order])
    ret = episode_returns(ep, r)
    value = discounted_returns(ep, tu, r, params.gamma) - p
    a_e = episode_advantages(grp, ep, ret - p, params.mode, params.eps, params.episode_stats)
    a_s = step_advantages(sg, value, params.mode, params.eps)
    size = np.bincount(sg)[sg] if n else np.zeros(0, dtype=np.int64)
    out = {"advantage": a_e + params.step_weight * a_s, "episode_advantage": a_e, "step_advantage": a_s,
           "episode_return": ret, "step_value": value, "step_group": sg, "step_group_size": size}
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    return GiGPOResult(**{k: v[back] for k, v in out.items()})
