"""Curriculum statistics of the variance-optimal proposal (gridworld.curriculum)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridworld.curriculum import cell_marginals, curriculum_stats, stage_mass, trend_scalars
from gridworld.exact import solve
from gridworld.grid import build_gridworld
from gridworld.policies import random_softmax_policy, uniform_policy
from gw_oracle import random_mdps

#: sigma = sqrt(p (1 - p)) turns a rounding error of eps in p near 0 or 1 into one of sqrt(eps)
SIGMA_ATOL = 4 * np.sqrt(np.finfo(float).eps)


def test_stats_on_a_three_cell_corridor_by_hand():
    """``S . G``, uniform policy, H = 2. From S only 'right' moves (1/4); from the middle cell
    'right' reaches G (1/4), 'left' returns to S (1/4). So d[0] = (S: 1), d[1] = (S: 3/4, m: 1/4),
    p[1, m] = 1/4, p[1, S] = 0 and J = p[0, S] = 1/16: μ_var puts sqrt(15)/16 on (0, S) and
    (1/4) sqrt(3)/4 on (1, m), so its mass sits nearer G than d^π's."""
    grid = build_gridworld("S.G", horizon=2)
    sol = solve(grid.mdp, uniform_policy(grid.mdp), solver="numpy")
    st_ = curriculum_stats(grid, sol)
    s0, s1 = np.sqrt(15) / 16, np.sqrt(3) / 16  # μ_var mass (unnormalised) at (0, S) and (1, m)
    sig_S = np.sqrt(15) / 16 / (1 + 3 / 4)  # σ at S averaged over t with weights d = 1, 3/4 (σ(1, S) = 0)
    sig_m = np.sqrt(3) / 4
    expect = {
        "J": 1 / 16,
        "start_distance": 2.0,
        "mu_distance": (2 * s0 + 1 * s1) / (s0 + s1),
        "d_distance": (2 * 1 + 2 * 3 / 4 + 1 * 1 / 4) / 2,
        "sigma_distance": (2 * sig_S + 1 * sig_m) / (sig_S + sig_m),
    }
    for k, v in expect.items():
        assert st_[k] == pytest.approx(v, rel=1e-12), k
    assert st_["mu_frac"] == pytest.approx(expect["mu_distance"] / 2, rel=1e-12)
    assert st_["tilt"] == pytest.approx((expect["mu_distance"] - expect["d_distance"]) / 2, rel=1e-12)
    assert st_["tilt"] < 0
    d_cell, sig_cell, mu_cell = cell_marginals(sol)
    np.testing.assert_allclose(d_cell[:2], [7 / 8, 1 / 8], rtol=1e-12)
    np.testing.assert_allclose(mu_cell[:2], np.array([s0, s1]) / (s0 + s1), rtol=1e-12)
    np.testing.assert_allclose(sig_cell[:2], [sig_S, sig_m], rtol=1e-12)
    np.testing.assert_allclose(stage_mass(sol), [s0, s1], rtol=1e-12)


@pytest.mark.parametrize("slip", [0.0, 0.1])
def test_cell_marginals_keep_the_neyman_form(slip):
    """Over cells, μ_var is ∝ (cell marginal of d^π) × (σ averaged over t with weights d^π), as on (t, s)."""
    w = build_gridworld(slip=slip)
    sol = solve(w.mdp, random_softmax_policy(w.mdp, seed=2), eps=0.2)
    d_cell, sig_cell, mu_cell = cell_marginals(sol)
    np.testing.assert_allclose([d_cell.sum(), mu_cell.sum()], [1.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(mu_cell, d_cell * sig_cell / (d_cell * sig_cell).sum(), atol=1e-12)
    g = w.mdp.goal_states[0]  # the goal is never a decision state
    assert d_cell[g] == 0 and sig_cell[g] == 0 and mu_cell[g] == 0


@settings(max_examples=30)
@given(case=random_mdps(max_horizon=15), stage=st.booleans())
def test_stage_mass_of_mu_var_never_increases(case, stage):
    """Σ_s d[t, s] σ(t, s) is non-increasing in t for any policy (Jensen on the success
    martingale: gridworld.curriculum module doc), so μ_var weights early stages most."""
    mdp, seed = case
    sol = solve(mdp, random_softmax_policy(mdp, seed=seed + 3, scale=2.0, stage_dependent=stage), solver="numpy")
    m = stage_mass(sol)
    assert np.all(np.diff(m) <= SIGMA_ATOL)


@pytest.mark.parametrize("slip", [0.0, 0.3])
def test_stage_mass_never_increases_on_the_maze_with_traps(slip):
    grid = build_gridworld("S..X\n.#..\n...G", slip=slip, horizon=30)
    for seed in range(5):
        m = stage_mass(solve(grid.mdp, random_softmax_policy(grid.mdp, seed=seed, scale=3.0), solver="numpy"))
        assert np.all(np.diff(m) <= SIGMA_ATOL)
        assert m[0] > 0


def test_trend_scalars_of_a_synthetic_curve():
    u = np.array([0, 10, 20, 30])
    mu = np.array([0.4, 0.3, 0.6, 0.5])
    d = np.array([0.5, 0.45, 0.45, 0.4])
    tr = trend_scalars(u, mu, d, threshold=0.05)
    assert tr["mu0"] == 0.4 and tr["d0"] == 0.5
    assert tr["mu_min"] == 0.3 and tr["update_min"] == 10
    assert tr["walk_back"] == pytest.approx(0.3)  # largest after the minimum (0.6), not the last
    assert tr["tilt0"] == pytest.approx(-0.1) and tr["tilt_end"] == pytest.approx(0.1)
    assert tr["tilt_change"] == pytest.approx(0.2)
    assert tr["paper_picture"] and tr["relative_picture"]
    # moving only toward G: no walk-back; starting past halfway: not the paper's picture
    tr = trend_scalars(u, [0.8, 0.7, 0.6, 0.55], [0.9, 0.8, 0.6, 0.5])
    assert tr["walk_back"] == 0.0 and not tr["paper_picture"]
    assert tr["relative_picture"]  # tilt -0.1 -> +0.05
    # undefined iterates (J = 1 exactly) are skipped, an undefined first one is refused
    tr = trend_scalars(u, [0.8, np.nan, 0.6, 0.7], [0.9, np.nan, 0.6, 0.5])
    assert tr["update_min"] == 20 and tr["walk_back"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="^mu_frac: undefined at the first iterate"):
        trend_scalars(u, [np.nan, 0.7, 0.6, 0.7], [0.9, 0.8, 0.6, 0.5])
