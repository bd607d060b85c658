"""theory.prefix_scores: VSR's σ̂ and ExTra's smoothed entropy (properties on random inputs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.prefix_scores import p_hat, sigma_hat, smoothed_entropy, smoothing_weights

unit = st.floats(0.0, 1.0, allow_subnormal=False)


@given(unit, unit, unit)
def test_sigma_hat_is_a_bernoulli_variance_of_the_interpolation(a, p0, r):
    p = float(p_hat(a, p0, r))
    assert 0.0 <= p <= 1.0 and min(p0, r) - 1e-12 <= p <= max(p0, r) + 1e-12
    s = float(sigma_hat(a, p0, r))
    assert 0.0 <= s <= 0.25 and s == pytest.approx(p * (1 - p), abs=1e-15)
    assert float(sigma_hat(a, p0, r, sqrt=True)) == pytest.approx(np.sqrt(s), abs=1e-12)
    # boundary conditions of the interpolation: p̂(0) = p0, p̂(1) = R
    assert float(p_hat(0.0, p0, r)) == pytest.approx(p0) and float(p_hat(1.0, p0, r)) == pytest.approx(r)


def test_sigma_hat_rejects_out_of_range_inputs():
    with pytest.raises(ValueError, match="alpha"):
        sigma_hat(1.5, 0.5, 1.0)
    with pytest.raises(ValueError, match="p0"):
        sigma_hat(0.5, -0.1, 1.0)


@given(st.integers(1, 6), st.integers(1, 4), st.floats(0.05, 5.0), st.integers(0, 2**31 - 1))
def test_smoothing_weights_are_row_stochastic_and_smoothing_is_a_convex_combination(n, d, tau, seed):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(n, d))
    h = rng.uniform(0, 3, size=n)
    w = smoothing_weights(e, tau)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(w > 0)
    ht = smoothed_entropy(h, e, tau)
    assert np.all(ht >= h.min() - 1e-12) and np.all(ht <= h.max() + 1e-12)
    # identical embeddings share one weight row: smoothing returns the plain mean
    same = smoothed_entropy(h, np.ones((n, d)), tau)
    np.testing.assert_allclose(same, np.full(n, h.mean()), rtol=1e-12)
