"""Intervals at the level of the randomness (``theory.metrics.correlation``): Cochran's Q, the two-stage interval
and the cluster bootstrap of a within-group correlation, on simulated data with a known answer and coverage."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from theory.metrics import cochran_q, two_stage_interval, within_group_correlation


def _groups(rng, n_groups, size, rho_of_group):
    """``(x, y, g)``: ``size`` bivariate-normal points per group with the group's own correlation."""
    xs, ys, gs = [], [], []
    for j in range(n_groups):
        r = rho_of_group(j)
        x = rng.standard_normal(size)
        y = r * x + np.sqrt(1 - r * r) * rng.standard_normal(size)
        xs.append(x), ys.append(y), gs.append(np.full(size, j))
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(gs)


def test_cochran_q_by_hand():
    z, n = np.array([0.1, 0.3, -0.2]), np.array([13, 23, 8])
    w = n - 3.0
    zf = np.sum(w * z) / np.sum(w)
    q, df, p, i2 = cochran_q(z, n)
    assert q == pytest.approx(np.sum(w * (z - zf) ** 2)) and df == 2
    assert p == pytest.approx(stats.chi2.sf(q, 2)) and i2 == pytest.approx(max(0.0, (q - 2) / q))
    assert np.isnan(cochran_q(z[:1], n[:1])[0]) and np.isnan(cochran_q(z, np.array([3, 10, 10]))[0])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=2, max_size=12), st.floats(0.5, 0.99))
def test_two_stage_interval_is_the_t_interval_of_the_group_estimates_with_equal_weights(zs, conf):
    z = np.asarray(zs)
    m, lo, hi, p = two_stage_interval(z, np.ones_like(z), conf)
    assert m == pytest.approx(z.mean())
    if np.ptp(z) > 1e-9:
        half = stats.t.ppf(0.5 + conf / 2, z.size - 1) * z.std(ddof=1) / np.sqrt(z.size)
        assert (lo, hi) == pytest.approx((m - half, m + half), rel=1e-9, abs=1e-12)
        assert p == pytest.approx(stats.ttest_1samp(z, 0.0).pvalue, rel=1e-6, abs=1e-12)


def test_two_stage_needs_two_groups():
    with pytest.raises(ValueError, match="at least 2"):
        two_stage_interval(np.array([0.2]), np.array([1.0]))


def test_heterogeneous_groups_are_flagged_and_only_the_cluster_intervals_cover():
    """Groups with correlations spread around 0.3 (sd 0.3 on the z scale): the average's true value is known
    (the mean z of the population of groups), Q flags the spread, the Fisher interval (one common correlation,
    independent points) under-covers and the two-stage interval and the cluster bootstrap cover near 95 %."""
    rng = np.random.default_rng(0)
    true_z, hits, q_small = 0.3, {"fisher": 0, "two_stage": 0, "bootstrap": 0}, 0
    reps = 200
    for _ in range(reps):
        zg = true_z + 0.3 * rng.standard_normal(16)
        x, y, g = _groups(rng, 16, 40, lambda j: np.tanh(zg[j]))
        for m in hits:
            w = within_group_correlation(x, y, g, "pearson", ci_method=m, weighting="equal", n_resamples=400, seed=1)
            hits[m] += np.arctanh(w.lo) <= true_z <= np.arctanh(w.hi)
        q_small += w.q_p < 0.05
    cover = {m: h / reps for m, h in hits.items()}
    assert cover["fisher"] < 0.80, cover
    assert 0.88 <= cover["two_stage"] <= 0.99, cover
    assert 0.85 <= cover["bootstrap"] <= 0.99, cover
    assert q_small / reps > 0.8  # Q detects the spread in most replications


def test_homogeneous_groups_pass_q_and_every_interval_covers():
    rng = np.random.default_rng(1)
    hits, q_small, reps = {"fisher": 0, "two_stage": 0}, 0, 200
    for _ in range(reps):
        x, y, g = _groups(rng, 12, 30, lambda j: 0.4)
        for m in hits:
            w = within_group_correlation(x, y, g, "pearson", ci_method=m)
            hits[m] += w.lo <= 0.4 <= w.hi
        q_small += w.q_p < 0.05
        assert w.q_df == 11 and 0 <= w.i_squared <= 1
    cover = {m: h / reps for m, h in hits.items()}
    assert all(0.89 <= c <= 0.99 for c in cover.values()), cover
    assert q_small / reps < 0.12  # about the 5 % false-alarm rate


def test_the_cluster_bootstrap_covers_where_points_of_a_cluster_move_together():
    """x and y each share a cluster effect (independent of each other): the true correlation is 0, but with 5
    points per cluster moving together the naive interval (points independent) under-covers; resampling whole
    clusters covers near 95 %."""
    from theory.metrics import cluster_bootstrap_correlation, pearson

    rng = np.random.default_rng(2)
    reps, naive, clus = 150, 0, 0
    for _ in range(reps):
        c = np.repeat(np.arange(30), 5)
        x = rng.standard_normal(30)[c] + 0.3 * rng.standard_normal(c.size)
        y = rng.standard_normal(30)[c] + 0.3 * rng.standard_normal(c.size)
        r = pearson(x, y, ci_method="fisher")
        naive += r.lo <= 0 <= r.hi
        est, lo, hi, k = cluster_bootstrap_correlation(x, y, c, "pearson", n_resamples=300, seed=3)
        assert k == 30 and est == pytest.approx(r.estimate) and lo <= est <= hi
        clus += lo <= 0 <= hi
    assert naive / reps < 0.75 and 0.86 <= clus / reps <= 0.99, (naive / reps, clus / reps)


def test_the_cluster_bootstrap_refuses_what_it_cannot_resample():
    from theory.metrics import cluster_bootstrap_correlation

    with pytest.raises(ValueError, match="at least 2 clusters"):
        cluster_bootstrap_correlation([1.0, 2, 3], [1.0, 3, 2], [0, 0, 0], "pearson")
    with pytest.raises(ValueError, match="expected shape"):
        cluster_bootstrap_correlation([1.0, 2, 3], [1.0, 3, 2], [0, 1], "pearson")
