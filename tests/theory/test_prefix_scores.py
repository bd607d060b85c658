"""theory.prefix_scores: VSR's σ̂ and ExTra's smoothed entropy (properties on random inputs)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.prefix_scores import p_hat, smoothed_entropy, smoothing_weights, std_hat, variance_hat

unit = st.floats(0.0, 1.0, allow_subnormal=False)


@given(unit, unit, unit)
def test_variance_hat_is_a_bernoulli_variance_of_the_interpolation(a, p0, r):
    p = float(p_hat(a, p0, r))
    assert 0.0 <= p <= 1.0 and min(p0, r) - 1e-12 <= p <= max(p0, r) + 1e-12
    s = float(variance_hat(a, p0, r))
    assert 0.0 <= s <= 0.25 and s == pytest.approx(p * (1 - p), abs=1e-15)
    assert float(std_hat(a, p0, r)) == pytest.approx(np.sqrt(s), abs=1e-12)
    # boundary conditions of the interpolation: p̂(0) = p0, p̂(1) = R
    assert float(p_hat(0.0, p0, r)) == pytest.approx(p0) and float(p_hat(1.0, p0, r)) == pytest.approx(r)


def test_variance_hat_rejects_out_of_range_inputs():
    with pytest.raises(ValueError, match="alpha"):
        variance_hat(1.5, 0.5, 1.0)
    with pytest.raises(ValueError, match="p0"):
        variance_hat(0.5, -0.1, 1.0)


def test_p_hat_variance_hat_and_std_hat_hand_values():
    # VSR §3.2: p = (1 - a) p0 + a R
    assert p_hat(0.25, 0.2, 1.0) == pytest.approx(0.75 * 0.2 + 0.25)
    assert p_hat(0.0, 0.3, 1.0) == pytest.approx(0.3)
    assert p_hat(1.0, 0.3, 0.0) == pytest.approx(0.0)
    p = 0.75 * 0.2 + 0.25
    assert variance_hat(0.25, 0.2, 1.0) == pytest.approx(p * (1 - p))
    assert std_hat(0.25, 0.2, 1.0) == pytest.approx(math.sqrt(p * (1 - p)))
    np.testing.assert_allclose(variance_hat([0.0, 0.5, 1.0], [0.5, 0.5, 0.5], [1, 1, 1]), [0.25, 0.1875, 0.0])
    with pytest.raises(ValueError, match="p0"):
        p_hat(0.5, 1.5, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        variance_hat(-0.1, 0.5, 1.0)


def test_smoothing_weights_hand_computation():
    # e0 = e1 (cos 1), e2 orthogonal to both (cos 0); tau = 0.5 -> logits 2, 2, 0 for rows 0/1
    e = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    w = smoothing_weights(e, 0.5)
    a, b = math.exp(2.0), math.exp(0.0)
    np.testing.assert_allclose(w[0], [a / (2 * a + b), a / (2 * a + b), b / (2 * a + b)], rtol=1e-12)
    np.testing.assert_allclose(w[2], [b / (2 * b + a), b / (2 * b + a), a / (2 * b + a)], rtol=1e-12)
    h = np.array([1.0, 3.0, 10.0])
    np.testing.assert_allclose(smoothed_entropy(h, e, 0.5), w @ h, rtol=1e-12)
    assert smoothed_entropy(h, e, 0.5)[0] == pytest.approx((a * 1 + a * 3 + b * 10) / (2 * a + b))


@given(st.integers(1, 8), st.integers(1, 5), st.floats(0.01, 5.0), st.integers(0, 2**31 - 1))
def test_smoothed_mte_is_a_convex_combination(n, d, tau, seed):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(n, d))
    h = rng.uniform(0, 3, size=n)
    w = smoothing_weights(e, tau)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(w >= 0)
    s = smoothed_entropy(h, e, tau)
    assert np.all(s >= h.min() - 1e-12) and np.all(s <= h.max() + 1e-12)
    # tiny tau: a candidate whose direction differs from all others keeps (almost) its own value
    u = e / np.linalg.norm(e, axis=1, keepdims=True)
    cos = u @ u.T
    np.fill_diagonal(cos, -np.inf)
    if n == 1 or cos.max() < 1 - 1e-2:  # other weights <= n exp(-1e-2 / 1e-4) ~ n e^-100
        np.testing.assert_allclose(smoothed_entropy(h, e, 1e-4), h, atol=1e-9)
    # identical embeddings share one weight row: smoothing returns the plain mean
    np.testing.assert_allclose(smoothed_entropy(h, np.ones((n, d)), tau), np.full(n, h.mean()), rtol=1e-12)


def test_smoothing_rejects_bad_tau_and_shapes():
    with pytest.raises(ValueError, match="tau"):
        smoothing_weights(np.eye(2), 0.0)
    with pytest.raises(ValueError, match="embeddings"):
        smoothed_entropy([1.0, 2.0], np.eye(3), 0.1)


# ------------------------------------------------------------------ the calibrated sigma-hat

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from theory.prefix_scores import fit_interpolation, interpolation, isotonic_increasing, variance_hat_calibrated  # noqa: E402

_obs = st.lists(st.tuples(st.floats(0, 1), st.floats(-0.5, 1.5), st.floats(0.1, 10)), max_size=40)


@given(_obs, st.integers(1, 12), st.floats(0.1, 20))
def test_fitted_curve_is_monotone_in_unit_interval_with_exact_boundaries(obs, bins, prior):
    a, f, w = (np.array([o[i] for o in obs]) for i in range(3))
    fb = fit_interpolation(a, f, w, bins=bins, prior=prior)
    assert fb.shape == (bins,) and np.all(np.diff(fb) >= -1e-12) and fb.min() >= 0 and fb.max() <= 1
    grid = np.linspace(0, 1, 101)
    curve = interpolation(grid, fb)
    assert np.all(np.diff(curve) >= -1e-12) and curve[0] == 0.0 and curve[-1] == 1.0
    for p0, r in ((0.1, 1.0), (0.3, 0.0)):  # p-hat(0) = p0 and p-hat(1) = R exactly
        ends = variance_hat_calibrated(np.array([0.0, 1.0]), p0, r, fb)
        np.testing.assert_allclose(ends, [p0 * (1 - p0), r * (1 - r)], atol=1e-15)


def test_without_data_it_is_the_linear_sigma_hat():
    fb = fit_interpolation([], [], [], bins=7)
    a = np.linspace(0, 1, 23)
    np.testing.assert_allclose(variance_hat_calibrated(a, 0.2, 1.0, fb), variance_hat(a, 0.2, 1.0), atol=1e-15)


def test_it_converges_to_a_convex_hint_ratio_curve_from_bernoulli_outcomes():
    """True curve f(a) = a^2 (convex, as the test bed's hint-ratio curve); 4,000 groups of 8
    continuations each. Per bin ~400 groups: Hoeffding at 1e-6/10 bounds the bin mean's error by
    sqrt(log(2e7)/(2*3200)) = 0.052, plus the within-bin spread of a^2 (<= 0.1 at width 0.1)."""
    rng = np.random.default_rng(0)
    n, g, p0 = 4000, 8, 0.1
    a = rng.random(n)
    y = rng.binomial(g, p0 + (1 - p0) * a**2) / g
    fb = fit_interpolation(a, (y - p0) / (1 - p0), np.full(n, float(g)), bins=10, prior=4.0)
    centres = (np.arange(10) + 0.5) / 10
    assert np.max(np.abs(fb - centres**2)) < 0.052 / (1 - p0) + 0.1
    assert np.max(np.abs(fb - centres)) > 0.15  # far from the linear assumption it replaced


def test_isotonic_pools_violators_and_refuses_bad_weights():
    np.testing.assert_allclose(isotonic_increasing([1.0, 0.0, 2.0], [1.0, 1.0, 1.0]), [0.5, 0.5, 2.0])
    np.testing.assert_allclose(isotonic_increasing([3.0, 1.0], [3.0, 1.0]), [2.5, 2.5])
    with pytest.raises(ValueError, match="w: weights must be > 0"):
        isotonic_increasing([1.0], [0.0])
    with pytest.raises(ValueError, match="bins"):
        fit_interpolation([0.5], [0.5], [1.0], bins=0)


def test_calibration_fraction_places_outcomes_between_p0_and_the_reward():
    from theory.prefix_scores import calibration_fraction

    # y = p0 -> 0, y = R -> 1, half way -> 0.5; below p0 / above R clip; R <= p0 carries no evidence
    got = calibration_fraction(np.array([0.2, 1.0, 0.6, 0.0, 1.0, 0.3, 0.5]), np.array([0.2, 0.2, 0.2, 0.2, 0.2, 0.3, 0.5]),
                               np.array([1.0, 1.0, 1.0, 1.0, 0.8, 0.3, 0.4]))
    np.testing.assert_allclose(got[:5], [0.0, 1.0, 0.5, 0.0, 1.0])
    assert np.isnan(got[5:]).all()
    # the plug-in folds exactly this into its curve: fit_interpolation on it reproduces a known curve
    a = np.array([0.25, 0.75])
    fb = fit_interpolation(a, calibration_fraction(0.1 + 0.9 * a**2, 0.1, 1.0), [1e9, 1e9], bins=2, prior=1.0)
    np.testing.assert_allclose(fb, a**2, rtol=1e-8)
