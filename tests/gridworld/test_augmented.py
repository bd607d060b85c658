"""Time-augmented space helpers and the cell marginals used by heatmaps."""

from __future__ import annotations

import numpy as np
import pytest

from gridworld.augmented import (
    augmented_index,
    cell_average,
    cell_marginal,
    flatten,
    heatmap_fields,
    split_index,
    unflatten,
)
from gridworld.exact import solve
from gridworld.grid import build_gridworld
from gridworld.policies import random_softmax_policy


def test_flatten_round_trip_and_index():
    x = np.arange(12.0).reshape(3, 4)
    f = flatten(x)
    np.testing.assert_array_equal(unflatten(f, 4), x)
    i = augmented_index([2, 0], [1, 3], 4)
    np.testing.assert_array_equal(f[i], [x[2, 1], x[0, 3]])
    t, s = split_index(i, 4)
    np.testing.assert_array_equal(t, [2, 0])
    np.testing.assert_array_equal(s, [1, 3])
    with pytest.raises(ValueError, match="x_aug"):
        unflatten(f, 5)
    with pytest.raises(ValueError, match="s: must lie"):
        augmented_index(0, 4, 4)


def test_heatmap_marginals_keep_neyman_form():
    w = build_gridworld(slip=0.1)
    sol = solve(w.mdp, random_softmax_policy(w.mdp, seed=2), eps=0.2)
    hm = heatmap_fields(sol.d, sol.p, sol.fields)
    np.testing.assert_allclose(hm["d"].sum(), 1.0, atol=1e-12)
    np.testing.assert_allclose(hm["mu_var"].sum(), 1.0, atol=1e-12)
    # Cell marginal of μ_var is ∝ (cell marginal of d) × (d-weighted σ).
    prod = np.nan_to_num(hm["d"] * hm["sigma"])
    np.testing.assert_allclose(hm["mu_var"], prod / prod.sum(), atol=1e-12)
    np.testing.assert_allclose(hm["mu_eps"], 0.8 * hm["mu_var"] + 0.2 * hm["d"], atol=1e-12)
    # The goal is never a decision state: no d mass, σ and p undefined (NaN) there.
    g = w.mdp.goal_states[0]
    assert hm["d"][g] == 0 and np.isnan(hm["sigma"][g]) and np.isnan(hm["p"][g])
    assert w.to_grid(hm["mu_var"]).shape == (7, 7)


def test_cell_average_and_marginal_validation():
    f = np.array([[1.0, 2.0], [3.0, 4.0]])
    wts = np.array([[1.0, 0.0], [3.0, 0.0]])
    out = cell_average(f, wts)
    assert out[0] == pytest.approx(2.5) and np.isnan(out[1])
    np.testing.assert_array_equal(cell_marginal(wts), [4.0, 0.0])
    with pytest.raises(ValueError, match="weights: must be non-negative"):
        cell_average(f, -wts)
    with pytest.raises(ValueError, match="weights: expected shape"):
        cell_average(f, wts[:1])
