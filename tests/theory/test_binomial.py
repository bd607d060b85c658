"""Confidence intervals of the test-bed evaluation: exact CP, clustered CP, the calibrated consistency test."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from theory.metrics.binomial import (
    beta_interval,
    clopper_pearson,
    clustered_interval,
    clustered_wilson,
    effective_size,
    paired_consistent,
    poisson_binomial_pmf,
    wilson_interval,
)


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (17, 200), (150, 151)])
def test_clopper_pearson_matches_scipy(k, n):
    ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    lo, hi = clopper_pearson(k, n, 0.95)
    assert lo == pytest.approx(ref.low, abs=1e-12) and hi == pytest.approx(ref.high, abs=1e-12)


def test_one_sample_per_problem_gives_the_exact_interval():
    rng = np.random.default_rng(0)
    c = (rng.random((80, 1)) < 0.3).astype(int)
    p, lo, hi = clustered_interval(c)
    assert p == c.mean()
    assert (lo, hi) == clopper_pearson(int(c.sum()), 80)


def test_clustered_interval_widens_with_within_problem_correlation():
    # all samples of a problem agree: 4 samples carry the information of 1 -> the problem-level interval
    per_problem = np.array([1] * 30 + [0] * 70)
    c = np.repeat(per_problem[:, None], 4, axis=1)
    p, lo, hi = clustered_interval(c)
    lo1, hi1 = clopper_pearson(30, 100)
    assert p == 0.3
    assert lo == pytest.approx(lo1, rel=0.05) and hi == pytest.approx(hi1, rel=0.05)
    naive = clopper_pearson(120, 400)
    assert hi - lo > 1.5 * (naive[1] - naive[0])
    # independent samples: close to the interval over all samples, never wider than per-problem counting allows
    rng = np.random.default_rng(1)
    ind = (rng.random((100, 4)) < 0.3).astype(int)
    _, lo2, hi2 = clustered_interval(ind)
    nl, nh = clopper_pearson(int(ind.sum()), 400)
    assert hi2 - lo2 == pytest.approx(nh - nl, rel=0.25)


def test_clustered_interval_coverage():
    """Monte-Carlo coverage of the 95% interval on clustered data (problems with varied rates).

    Misses over R runs are Binomial(R, q); with q <= 0.05 (nominal), P(misses > bound) <= 1e-6.
    """
    rng = np.random.default_rng(2)
    runs, n_prob, m = 400, 150, 4
    rates = rng.beta(0.6, 1.2, size=(runs, n_prob))  # heterogeneous problems
    truth = 0.6 / 1.8
    c = (rng.random((runs, n_prob, m)) < rates[..., None]).astype(int)
    misses = 0
    for r in range(runs):
        _, lo, hi = clustered_interval(c[r])
        misses += not (lo <= truth <= hi)
    bound = int(stats.binom.isf(1e-6, runs, 0.05))
    # Korn-Graubard is approximately (not exactly) calibrated: allow nominal 5% + the binomial bound
    assert misses <= bound, (misses, bound)


def test_poisson_binomial_pmf_matches_enumeration_and_binomial():
    q = np.array([0.1, 0.5, 0.9, 0.3])
    want = np.zeros(5)
    for bits in itertools.product([0, 1], repeat=4):
        want[sum(bits)] += np.prod([qi if b else 1 - qi for qi, b in zip(q, bits)])
    assert np.allclose(poisson_binomial_pmf(q), want, atol=1e-15)
    assert np.allclose(poisson_binomial_pmf(np.full(30, 0.3)), stats.binom.pmf(np.arange(31), 30, 0.3), atol=1e-14)


@pytest.mark.parametrize("m", [1, 2])
def test_paired_test_false_failure_rate_is_bounded_exactly(m):
    """Enumerate every outcome of 4 problems x (1 new + m reference samples) under rates p[i]:
    P(reject) <= alpha (the conditional test is exact, so also unconditionally)."""
    alpha = 0.1
    for p in ([0.2, 0.5, 0.7, 0.9], [0.5, 0.5, 0.5, 0.5], [0.05, 0.3, 0.6, 0.95]):
        rej = 0.0
        for bits in itertools.product([0, 1], repeat=4 * (m + 1)):
            o = np.array(bits).reshape(4, m + 1)
            prob = np.prod(np.where(o == 1, np.array(p)[:, None], 1 - np.array(p)[:, None]))
            rej += prob * (not paired_consistent(o[:, 0], o[:, 1:].sum(1), m, alpha)[0])
        assert rej <= alpha + 1e-12, (m, p, rej)


def test_paired_test_with_one_reference_sample_is_mcnemar():
    new = np.array([1] * 30 + [0] * 12 + [1] * 50 + [0] * 8)
    ref = np.array([0] * 30 + [1] * 12 + [1] * 50 + [0] * 8)
    ok, pval, (s, e) = paired_consistent(new, ref, 1, 0.05)
    assert pval == pytest.approx(stats.binomtest(30, 42, 0.5).pvalue, rel=1e-9)
    assert not ok and s == 80 and e == pytest.approx(50 + 21)


def test_paired_test_detects_shifts_and_accepts_the_same_model():
    rng = np.random.default_rng(3)
    p = rng.beta(0.8, 1.2, size=300)
    ref = (rng.random((300, 4)) < p[:, None]).sum(1)
    same = (rng.random(300) < p).astype(int)
    better = (rng.random(300) < np.minimum(1.0, p + 0.25)).astype(int)
    worse = (rng.random(300) < np.maximum(0.0, p - 0.25)).astype(int)
    assert paired_consistent(same, ref, 4, 1e-6)[0]
    assert not paired_consistent(better, ref, 4, 1e-6)[0]
    assert not paired_consistent(worse, ref, 4, 1e-6)[0]


def test_bad_inputs():
    with pytest.raises(ValueError, match="confidence"):
        clopper_pearson(1, 2, 1.5)
    with pytest.raises(ValueError, match="x"):
        beta_interval(3, 2)
    with pytest.raises(ValueError, match="n"):
        beta_interval(0, 0)
    with pytest.raises(ValueError, match="correct"):
        clustered_interval(np.array([1, 0]))
    with pytest.raises(ValueError, match="correct"):
        clustered_interval(np.array([[2, 0]]))
    with pytest.raises(ValueError, match="new"):
        paired_consistent(np.array([1, 0]), np.array([1]), 1)
    with pytest.raises(ValueError, match="new"):
        paired_consistent(np.array([2]), np.array([1]), 1)
    with pytest.raises(ValueError, match="ref_counts"):
        paired_consistent(np.array([1]), np.array([3]), 2)
    with pytest.raises(ValueError, match="ref_samples"):
        paired_consistent(np.array([1]), np.array([1]), 0)
    with pytest.raises(ValueError, match="alpha"):
        paired_consistent(np.array([1]), np.array([1]), 1, alpha=1.0)
    with pytest.raises(ValueError, match="q"):
        poisson_binomial_pmf(np.array([1.5]))


@pytest.mark.parametrize("k,n", [(0, 20), (7, 20), (20, 20), (1, 1), (13, 128), (500, 1024)])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_wilson_matches_scipy(k, n, confidence):
    from scipy.stats import binomtest

    ref = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    lo, hi = wilson_interval(k, n, confidence)
    assert lo == pytest.approx(ref.low, abs=1e-12) and hi == pytest.approx(ref.high, abs=1e-12)


def test_clustered_wilson_uses_the_effective_size():
    rng = np.random.default_rng(0)
    one = (rng.random((128, 1)) < 0.3).astype(int)
    assert clustered_wilson(one)[1:] == wilson_interval(one.sum(), 128)  # one sample per seed: plain Wilson
    per_seed = (rng.random(128) < 0.3).astype(int)
    copies = np.repeat(per_seed[:, None], 8, axis=1)  # 8 identical episodes per seed carry one seed's information
    p, n_eff = effective_size(copies)
    assert p == per_seed.mean() and n_eff == pytest.approx(127.0)  # p(1-p) / (s^2 / 128), s^2 with ddof 1
    assert clustered_wilson(copies)[1:] == pytest.approx(wilson_interval(p * n_eff, n_eff))
    p, lo, hi = clustered_wilson(np.zeros((16, 8), dtype=int))
    assert p == 0.0 and lo == 0.0 and hi == pytest.approx(wilson_interval(0, 16)[1])
