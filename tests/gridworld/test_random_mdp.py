"""Random MDP builder."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

from gridworld.random_mdp import random_mdp


@pytest.mark.parametrize("locality", [None, 7])
def test_structure(locality):
    m = random_mdp(200, 3, 4, seed=0, horizon=20, n_goals=3, locality=locality)
    assert (m.n_states, m.n_actions, m.horizon) == (200, 3, 20)
    assert m.terminal.sum() == 3 and np.all(m.terminal_reward[m.terminal] == 1.0)
    lens = np.diff(m.indptr).reshape(200, 3)
    assert np.all(lens[~m.terminal] == 4) and np.all(lens[m.terminal] == 1)
    for r in range(m.n_pairs):
        row = m.indices[m.indptr[r] : m.indptr[r + 1]]
        assert np.all(np.diff(row) > 0)  # sorted, distinct
        if locality is not None and not m.terminal[r // 3]:
            off = (row - r // 3 + 100) % 200 - 100
            assert np.all(np.abs(off) <= locality)
    assert m.init.sum() == 1.0 and np.count_nonzero(m.init) == 1 and not m.terminal[np.argmax(m.init)]


def test_strongly_connected_so_goals_are_reachable():
    # One action, one successor: without the laid-in cycle a random functional graph would
    # leave most states unable to reach the goal.
    m = random_mdp(300, 1, 1, seed=5, horizon=10)
    rows = np.repeat(np.arange(m.n_pairs), np.diff(m.indptr))
    keep = ~m.terminal[rows]
    g = sp.csr_matrix((np.ones(keep.sum()), (rows[keep], m.indices[keep])), shape=(300, 300))
    # Every state reaches the goal: BFS from the goal on the reversed graph (goal out-edges removed).
    order = breadth_first_order(g.T, m.goal_states[0], directed=True, return_predecessors=False)
    assert order.size == 300


def test_seeded_and_uniform_init():
    a = random_mdp(50, 2, 3, seed=9, init="uniform")
    b = random_mdp(50, 2, 3, seed=9, init="uniform")
    np.testing.assert_array_equal(a.probs, b.probs)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert not np.array_equal(a.probs, random_mdp(50, 2, 3, seed=10, init="uniform").probs)
    np.testing.assert_allclose(a.init[~a.terminal], 1.0 / (~a.terminal).sum())


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(n_states=1), "n_states"),
        (dict(n_actions=0), "n_actions"),
        (dict(branching=0), "branching"),
        (dict(branching=11), "branching"),
        (dict(n_goals=10), "n_goals"),
        (dict(init="corner"), "init"),
        (dict(concentration=0.0), "concentration"),
        (dict(locality=6), "locality"),
        (dict(horizon=0), "horizon"),
    ],
)
def test_bad_args(kw, match):
    args = dict(n_states=10, n_actions=2, branching=2, seed=0)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        random_mdp(**args)
