"""Monte-Carlo rollouts on a :class:`~gridworld.mdp.TabularMDP` (vectorised NumPy, seeded): test support.

The sampling reference the exact solvers are checked against (``test_rollouts.py``).  Episodes may start at any
augmented state ``(s, t0)``; they run the remaining ``H - t0`` decisions of the stage-indexed policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gridworld.mdp import TabularMDP
from gridworld.policies import as_policy
from theory._validate import as_array, check_nonnegative


@dataclass(frozen=True, eq=False)
class Rollouts:
    """Simulated episodes."""

    states: np.ndarray
    """``int32[n, H+1]``: ``s_t`` while the episode runs, -1 before ``t0`` and after it ended."""
    actions: np.ndarray
    """``int32[n, H]``: ``a_t`` taken at stage ``t`` (-1 where no decision was taken)."""
    success: np.ndarray
    """``bool[n]``: reached a goal within the horizon."""
    length: np.ndarray
    """``int[n]``: number of decisions taken."""


def _sample_rows(cum_rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw per row of ``cum_rows[n, m]`` (row-wise cumulative probabilities)."""
    idx = (cum_rows < u[:, None] * cum_rows[:, -1:]).sum(axis=1)
    return np.minimum(idx, cum_rows.shape[1] - 1)


def simulate(mdp: TabularMDP, pi, n_episodes: int, *, seed: int, start_states=None, start_stage: int = 0) -> Rollouts:
    """Roll out ``pi`` (``pi[s, a]`` or ``pi[t, s, a]``) for ``n_episodes`` episodes.

    ``start_states`` (int or ``int[n]``) overrides sampling ``s_{t0} ~ mdp.init``;
    ``start_stage`` is ``t0`` (default 0).
    """
    pi3 = as_policy(pi, mdp)
    n = int(n_episodes)
    if n <= 0:
        raise ValueError(f"n_episodes: must be positive, got {n_episodes!r}")
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    if not (0 <= int(start_stage) < H):
        raise ValueError(f"start_stage: must lie in [0, {H}), got {start_stage!r}")
    t0 = int(start_stage)
    rng = np.random.default_rng(seed)
    if start_states is None:
        s = rng.choice(S, size=n, p=mdp.init)
    else:
        s = np.broadcast_to(np.asarray(start_states, dtype=np.int64), (n,)).copy()
        if np.any(s < 0) or np.any(s >= S) or np.any(mdp.terminal[s]):
            raise ValueError(f"start_states: must be non-terminal states in [0, {S})")

    # Row-local cumulative probabilities keyed by row index, so one searchsorted serves all rows.
    rows = np.repeat(np.arange(mdp.n_pairs), np.diff(mdp.indptr))
    cs = np.cumsum(mdp.probs)
    before_row = np.concatenate([[0.0], cs])[mdp.indptr[:-1]]
    local = cs - np.repeat(before_row, np.diff(mdp.indptr))
    key = rows + local
    cum_pi = np.cumsum(pi3, axis=2)

    states = np.full((n, H + 1), -1, dtype=np.int32)
    actions = np.full((n, H), -1, dtype=np.int32)
    success = np.zeros(n, dtype=bool)
    length = np.zeros(n, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    states[:, t0] = s
    for t in range(t0, H):
        idx = np.flatnonzero(alive)
        if idx.size == 0:
            break
        cur = s[idx]
        tp = min(t, pi3.shape[0] - 1)
        a = _sample_rows(cum_pi[tp, cur], rng.random(idx.size))
        r = cur * A + a
        lo, hi = mdp.indptr[r], mdp.indptr[r + 1]
        target = r + rng.random(idx.size) * local[hi - 1]
        k = np.clip(np.searchsorted(key, target, side="right"), lo, hi - 1)
        nxt = mdp.indices[k].astype(np.int64)
        actions[idx, t] = a
        length[idx] += 1
        s[idx] = nxt
        ended = mdp.terminal[nxt]
        success[idx[ended]] = mdp.terminal_reward[nxt[ended]] == 1.0
        alive[idx[ended]] = False
        states[idx[~ended], t + 1] = nxt[~ended]
    return Rollouts(states=states, actions=actions, success=success, length=length)


def sample_augmented(dist, n: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` augmented states ``(t, s)`` i.i.d. from ``dist[t, s]`` (e.g. ``μ_var`` or ``d^π``)."""
    dist = as_array(dist, "dist", ndim=2)
    check_nonnegative(dist, "dist")
    total = dist.sum()
    if not abs(total - 1.0) <= 1e-8:
        raise ValueError(f"dist: must sum to 1 within 1e-08 (sums to {total:.10g})")
    rng = np.random.default_rng(seed)
    flat = rng.choice(dist.size, size=int(n), p=dist.ravel() / total)
    return flat // dist.shape[1], flat % dist.shape[1]
