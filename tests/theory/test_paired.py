"""Paired-seed statistics of the comparisons: t-test, Holm, power (theory.metrics.paired)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from theory.metrics.paired import holm, paired_contrast, paired_power, seeds_for_power


def test_paired_contrast_is_scipys_paired_t_test():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.3, 0.02, 7), rng.normal(0.31, 0.02, 7)
    c = paired_contrast(b - a)
    t = sps.ttest_rel(b, a)
    assert c.n == 7 and c.p == pytest.approx(t.pvalue, rel=1e-10)
    lo, hi = t.confidence_interval(0.95)
    assert c.ci_low == pytest.approx(lo, rel=1e-10) and c.ci_high == pytest.approx(hi, rel=1e-10)
    assert math.isnan(paired_contrast([0.1]).p) and paired_contrast([]).n == 0
    assert paired_contrast([0.0, 0.0]).p != paired_contrast([0.0, 0.0]).p  # nan: no spread, no effect
    assert paired_contrast([0.1, 0.1, 0.1]).p < 1e-20  # (almost) no spread, an effect


def test_holm_on_a_worked_example():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, max(0.06, 0.04*1) = 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    out = holm([0.2, float("nan"), 0.01])
    assert math.isnan(out[1]) and out[0] == pytest.approx(0.2) and out[2] == pytest.approx(0.02)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_holm_dominates_raw_keeps_order_and_never_exceeds_one(p):
    adj = np.array(holm(p))
    p = np.array(p)
    assert np.all(adj >= p - 1e-15) and np.all(adj <= 1.0)
    assert np.all(adj <= np.minimum(1.0, p * len(p)) + 1e-12)  # never worse than Bonferroni
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-15)


def test_power_matches_a_monte_carlo_paired_t_test():
    """Rejection rate of scipy's paired t-test on simulated seeds; 4,000 trials: binomial sd <= 0.008,
    so 5 sd = 0.04."""
    rng = np.random.default_rng(0)
    delta, sd, n, alpha = 0.02, 0.025, 8, 0.05
    rej = 0
    trials = 4000
    for _ in range(trials):
        d = rng.normal(delta, sd, n)
        rej += sps.ttest_1samp(d, 0.0).pvalue < alpha
    assert abs(rej / trials - paired_power(delta, sd, n, alpha)) < 0.04
    assert paired_power(0.0, sd, n, alpha) == pytest.approx(alpha, abs=1e-9)  # size under the null


@settings(max_examples=60, deadline=None)
@given(st.floats(0.001, 0.1), st.floats(0.001, 0.1), st.integers(2, 40))
def test_power_grows_with_seeds_and_effect(delta, sd, n):
    p = paired_power(delta, sd, n)
    assert 0.0 <= p <= 1.0
    assert paired_power(delta, sd, n + 1) >= p - 1e-12
    assert paired_power(2 * delta, sd, n) >= p - 1e-12
    assert paired_power(delta, sd, n, alpha=0.01) <= p + 1e-12


def test_seeds_for_power_is_the_smallest_count_reaching_it():
    n = seeds_for_power(0.02, 0.03, 0.8, 0.05)
    assert paired_power(0.02, 0.03, n) >= 0.8 > paired_power(0.02, 0.03, n - 1)
    assert seeds_for_power(0.02, 0.03, 0.8, 0.05 / 6) > n
