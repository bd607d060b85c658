"""Exact solvers against Monte-Carlo rollouts, with calibrated binomial bounds (false failure <= 1e-6)."""

from __future__ import annotations

import numpy as np
import pytest

from gridworld.exact import solve
from gridworld.grid import build_gridworld
from gridworld.policies import random_softmax_policy, softmax
from gridworld.random_mdp import random_mdp
from gw_rollouts import sample_augmented, simulate
from gw_oracle import binomial_consistent

DELTA = 1e-6  # total false-failure budget of each test (Bonferroni over its checks)


def _greedyish_policy(world, temperature=1.0):
    """Softmax over -distance-to-goal of the intended neighbour: a competent but noisy policy."""
    m = world.mdp
    dist = world.distance_to_goal.astype(float)
    dist[dist < 0] = 99
    logits = np.zeros((m.n_states, 4))
    for a in range(4):
        nxt = np.array([m.successors(s, a)[0][np.argmax(m.successors(s, a)[1])] for s in range(m.n_states)])
        logits[:, a] = -dist[nxt] / temperature
    return softmax(logits)


@pytest.mark.parametrize(
    "case",
    ["grid7-uniform", "grid7-slip-greedy", "random-stage"],
)
def test_success_from_start_matches_rollouts(case):
    if case == "grid7-uniform":
        mdp = build_gridworld().mdp
        pi = np.full((mdp.n_states, 4), 0.25)
    elif case == "grid7-slip-greedy":
        w = build_gridworld(slip=0.2, horizon=20)
        mdp, pi = w.mdp, _greedyish_policy(w, temperature=1.5)
    else:
        mdp = random_mdp(80, 3, 3, seed=3, horizon=12, n_goals=3, init="uniform")
        pi = random_softmax_policy(mdp, seed=4, stage_dependent=True)
    sol = solve(mdp, pi)
    n = 20_000
    ro = simulate(mdp, pi, n, seed=17)
    k = int(ro.success.sum())
    assert binomial_consistent(k, n, sol.J, DELTA), (k / n, sol.J)
    assert np.all(ro.length <= mdp.horizon)


def test_continuation_success_and_occupancy_match_rollouts():
    """p[t0, s] from several augmented states, and d[t, s] on the most visited cells (Bonferroni)."""
    w = build_gridworld(slip=0.1, horizon=20)
    mdp = w.mdp
    pi = _greedyish_policy(w, temperature=2.0)
    sol = solve(mdp, pi)
    starts = [(w.start_state, 0), (int(w.state_of[3, 4]), 5), (int(w.state_of[5, 4]), 15), (int(w.state_of[0, 6]), 10)]
    n = 8_000
    top = np.argsort(sol.d[:-1].ravel())[::-1][:10]
    m_checks = len(starts) + top.size
    for i, (s, t0) in enumerate(starts):
        ro = simulate(mdp, pi, n, seed=100 + i, start_states=s, start_stage=t0)
        assert np.all(ro.states[:, :t0] == -1) and np.all(ro.states[:, t0] == s)
        assert binomial_consistent(int(ro.success.sum()), n, sol.p[t0, s], DELTA / m_checks), (s, t0)
    ro = simulate(mdp, pi, n, seed=7)
    for flat in top:
        t, s = divmod(int(flat), mdp.n_states)
        k = int((ro.states[:, t] == s).sum())
        assert binomial_consistent(k, n, sol.d[t, s], DELTA / m_checks), (t, s, k / n, sol.d[t, s])


def test_rollouts_are_seeded_and_validated():
    mdp = build_gridworld(slip=0.2, horizon=10).mdp
    pi = np.full((mdp.n_states, 4), 0.25)
    a, b = simulate(mdp, pi, 50, seed=1), simulate(mdp, pi, 50, seed=1)
    np.testing.assert_array_equal(a.states, b.states)
    np.testing.assert_array_equal(a.actions, b.actions)
    with pytest.raises(ValueError, match="start_stage"):
        simulate(mdp, pi, 5, seed=0, start_stage=10)
    with pytest.raises(ValueError, match="start_states"):
        simulate(mdp, pi, 5, seed=0, start_states=int(mdp.goal_states[0]))
    with pytest.raises(ValueError, match="n_episodes"):
        simulate(mdp, pi, 0, seed=0)


def test_sample_augmented_frequencies():
    mdp = random_mdp(10, 2, 2, seed=0, horizon=4, init="uniform")
    f = solve(mdp, random_softmax_policy(mdp, seed=1)).fields
    n = 20_000
    t, s = sample_augmented(f.mu_var, n, seed=3)
    counts = np.bincount(t * mdp.n_states + s, minlength=f.mu_var.size)
    probs = f.mu_var.ravel()
    m = int((probs > 0).sum())
    assert np.all(counts[probs == 0] == 0)
    for i in np.flatnonzero(probs > 0):
        assert binomial_consistent(int(counts[i]), n, probs[i], DELTA / m)
    with pytest.raises(ValueError, match="dist: must sum to 1"):
        sample_augmented(f.mu_var * 2, 5, seed=0)
