"""Random goal-reaching MDPs given S, A, branching K and a seed (test MDPs for VSR App. B–C and SVMD).

Construction of :func:`random_mdp`:

* each pair ``(s, a)`` gets ``K`` *distinct* successors and probabilities drawn from
  ``Dirichlet(concentration · 1_K)``; successors are uniform over all states, or, with
  ``locality = w``, uniform over the band ``s + [-w, w]`` (mod S), which gives cache-friendly
  access like a gridworld;
* a cyclic order of the states is laid in (random; ``s -> s+1 mod S`` with ``locality`` so the
  band is respected): the first successor of action 0 is the next state on the cycle, so every
  state can reach every other one (the goals are reachable);
* ``n_goals`` states drawn at random are terminal with reward 1 (self-loop rows);
* ``init = "point"`` starts in one random non-goal state, ``"uniform"`` spreads the start over
  all non-goal states.
"""

from __future__ import annotations

import numpy as np

from gridworld.mdp import INDEX_DTYPE, TabularMDP
from theory._validate import check_positive_scalar

INITS = ("point", "uniform")


def random_mdp(
    n_states: int,
    n_actions: int,
    branching: int,
    *,
    seed: int,
    horizon: int = 64,
    n_goals: int = 1,
    init: str = "point",
    concentration: float = 1.0,
    locality: int | None = None,
) -> TabularMDP:
    """Random MDP with binary terminal reward (construction in the module docstring)."""
    for name, v, lo in (("n_states", n_states, 2), ("n_actions", n_actions, 1), ("branching", branching, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name}: must be an integer >= {lo}, got {v!r}")
    S, A, K = int(n_states), int(n_actions), int(branching)
    if not (isinstance(n_goals, (int, np.integer)) and 1 <= n_goals < S):
        raise ValueError(f"n_goals: must be an integer in [1, {S - 1}], got {n_goals!r}")
    if init not in INITS:
        raise ValueError(f"init: must be one of {INITS}, got {init!r}")
    concentration = check_positive_scalar(concentration, "concentration")
    span = S if locality is None else 2 * int(locality) + 1
    if locality is not None and (int(locality) < 1 or span > S):
        raise ValueError(f"locality: must be in [1, {(S - 1) // 2}], got {locality!r}")
    if K > span:
        raise ValueError(f"branching: K = {K} exceeds the {span} candidate successors")

    rng = np.random.default_rng(seed)
    n = S * A
    pair_state = np.repeat(np.arange(S, dtype=np.int64), A)

    def draw(rows: np.ndarray) -> np.ndarray:
        if locality is None:
            return rng.integers(0, S, size=(rows.size, K))
        off = rng.integers(-int(locality), int(locality) + 1, size=(rows.size, K))
        return (pair_state[rows, None] + off) % S

    cycle = rng.permutation(S) if locality is None else np.arange(S)
    nxt = np.empty(S, dtype=np.int64)
    nxt[cycle] = np.roll(cycle, -1)
    succ = draw(np.arange(n))
    succ[0::A, 0] = nxt  # action 0's first successor follows the cycle
    # Redraw rows with repeated successors until all are distinct (keeping the cycle entry).
    while True:
        srt = np.sort(succ, axis=1)
        dup = np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1)) if K > 1 else np.empty(0, np.int64)
        if dup.size == 0:
            break
        fresh = draw(dup)
        fixed = (dup % A) == 0
        fresh[fixed, 0] = succ[dup[fixed], 0]
        succ[dup] = fresh
    probs = rng.dirichlet(np.full(K, concentration), size=n)
    probs /= probs.sum(axis=1, keepdims=True)

    goals = rng.choice(S, size=n_goals, replace=False)
    terminal = np.zeros(S, dtype=bool)
    terminal[goals] = True
    reward = terminal.astype(float)
    # Terminal rows: one self-loop per action.
    term_rows = np.flatnonzero(np.repeat(terminal, A))
    counts = np.full(n, K, dtype=np.int64)
    counts[term_rows] = 1
    indptr = np.concatenate([[0], np.cumsum(counts)])
    keep = np.ones((n, K), dtype=bool)
    keep[term_rows, 1:] = False
    succ[term_rows, 0] = pair_state[term_rows]
    probs[term_rows, 0] = 1.0
    # Sort successors within each row (canonical CSR).
    order = np.argsort(succ, axis=1, kind="stable")
    succ = np.take_along_axis(succ, order, axis=1)
    probs = np.take_along_axis(probs, order, axis=1)
    keep = np.take_along_axis(keep, order, axis=1)

    init_vec = np.zeros(S)
    non_goal = np.flatnonzero(~terminal)
    if init == "point":
        init_vec[rng.choice(non_goal)] = 1.0
    else:
        init_vec[non_goal] = 1.0 / non_goal.size
    return TabularMDP(
        indptr=indptr.astype(INDEX_DTYPE),
        indices=succ[keep].astype(INDEX_DTYPE),
        probs=probs[keep],
        n_actions=A,
        terminal=terminal,
        terminal_reward=reward,
        init=init_vec,
        horizon=horizon,
        name=f"random-S{S}-A{A}-K{K}" + (f"-w{locality}" if locality is not None else "") + f"-{init}",
    )
