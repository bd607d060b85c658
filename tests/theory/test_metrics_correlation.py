"""Correlations with CIs and within-group correlation (VSR App. D.5; ExTra App. C.1)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from theory.metrics import (
    CI_METHODS,
    CORRELATIONS,
    SPEARMAN_FISHER_VARIANCE,
    correlation,
    fisher_z_interval,
    pearson,
    spearman,
    within_group_correlation,
)

RTOL = 4 * np.sqrt(np.finfo(float).eps)
FALSE_FAILURE = 1e-6


def bivariate(rng, n, rho, reps=None):
    shape = (n,) if reps is None else (reps, n)
    x = rng.normal(size=shape)
    y = rho * x + np.sqrt(1 - rho**2) * rng.normal(size=shape)
    return x, y


def binomial_band(reps: int, p: float, delta: float) -> tuple[int, int]:
    """Counts outside [lo, hi] have probability <= delta under Binomial(reps, p)."""
    return int(stats.binom.ppf(delta / 2, reps, p)), int(stats.binom.isf(delta / 2, reps, p))


# --------------------------------------------------------------------------------------------
# Point estimates, p-values and Fisher intervals against SciPy
# --------------------------------------------------------------------------------------------

# Values on a 1/8 grid (exact in binary, ties likely): transformed copies stay exact.
values = st.integers(-800, 800).map(lambda v: v / 8)
samples = st.integers(4, 40).flatmap(
    lambda n: st.tuples(st.lists(values, min_size=n, max_size=n), st.lists(values, min_size=n, max_size=n))
).filter(lambda xy: np.ptp(xy[0]) > 0 and np.ptp(xy[1]) > 0)


@given(samples)
def test_estimates_and_p_values_match_scipy(xy):
    x, y = map(np.asarray, xy)
    p, s = pearson(x, y), spearman(x, y)
    ref_p, ref_s = stats.pearsonr(x, y), stats.spearmanr(x, y)
    assert p.estimate == pytest.approx(ref_p.statistic, rel=1e-9, abs=1e-9)
    assert s.estimate == pytest.approx(ref_s.statistic, rel=1e-9, abs=1e-9)
    assert p.p_value == pytest.approx(ref_p.pvalue, rel=1e-6, abs=1e-12)
    assert s.p_value == pytest.approx(ref_s.pvalue, rel=1e-6, abs=1e-12)
    for res in (p, s):
        assert -1.0 <= res.lo <= res.estimate <= res.hi <= 1.0
        assert res.n == len(x) and res.confidence == 0.95 and res.ci_method == "fisher"


@given(samples)
def test_pearson_fisher_interval_is_scipys(xy):
    x, y = map(np.asarray, xy)
    res = pearson(x, y, confidence=0.9)
    ci = stats.pearsonr(x, y).confidence_interval(0.9)
    assert (res.lo, res.hi) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-9)


def test_spearman_fisher_interval_uses_fieller_variance():
    x, y = bivariate(np.random.default_rng(3), 40, 0.4)
    res = spearman(x, y)
    z, half = np.arctanh(res.estimate), stats.norm.ppf(0.975) * np.sqrt(1.06 / 37)
    assert (res.lo, res.hi) == pytest.approx((np.tanh(z - half), np.tanh(z + half)), rel=RTOL)
    # and it is wider than the interval with Pearson's variance 1/(n-3)
    lo1, hi1 = fisher_z_interval(res.estimate, 40)
    assert res.lo < lo1 and res.hi > hi1


@given(samples)
def test_rank_and_affine_invariance(xy):
    x, y = map(np.asarray, xy)
    s = spearman(x, y).estimate
    assert spearman(np.exp(x / 50), 3 * y - 7).estimate == pytest.approx(s, rel=1e-9, abs=1e-12)
    assert spearman(-x, y).estimate == pytest.approx(-s, rel=1e-9, abs=1e-12)
    p = pearson(x, y).estimate
    assert pearson(2 * x + 1, y).estimate == pytest.approx(p, rel=1e-9, abs=1e-9)


# --------------------------------------------------------------------------------------------
# Coverage (Monte Carlo, calibrated binomial band)
# --------------------------------------------------------------------------------------------


def test_fisher_interval_coverage_on_bivariate_normal():
    """95% Fisher intervals cover rho (Pearson) and 6/pi asin(rho/2) (Spearman) at the nominal rate.

    Count of covering intervals ~ Binomial(R, 0.95); band at false-failure 1e-6 (Bonferroni over
    the two methods).  Fisher's approximation error at n = 30, rho = 0.5 is < 0.003 (40k-rep
    simulation), well inside the band (+/- 0.024).  The R intervals are computed vectorised
    with the registry's variance; the first reps are checked against :func:`correlation`.
    """
    rng = np.random.default_rng(2024)
    R, n, rho = 2000, 30, 0.5
    x, y = bivariate(rng, n, rho, reps=R)
    estimates = {
        "pearson": stats.pearsonr(x, y, axis=1).statistic,
        "spearman": stats.pearsonr(stats.rankdata(x, axis=1), stats.rankdata(y, axis=1), axis=1).statistic,
    }
    targets = {"pearson": rho, "spearman": 6 / np.pi * np.arcsin(rho / 2)}
    lo_band, hi_band = binomial_band(R, 0.95, FALSE_FAILURE / len(targets))
    for method, target in targets.items():
        var = CORRELATIONS[method].fisher_variance
        lo, hi = fisher_z_interval(estimates[method], n, variance=var)
        for i in range(20):
            res = correlation(x[i], y[i], method)
            assert (res.lo, res.hi) == pytest.approx((lo[i], hi[i]), rel=1e-9, abs=1e-12)
        hits = int(np.sum((lo <= target) & (target <= hi)))
        assert lo_band <= hits <= hi_band, (method, hits, (lo_band, hi_band))
        # negative case: the same band rejects a miscalibrated (90%) interval
        lo90, hi90 = fisher_z_interval(estimates[method], n, variance=var, confidence=0.9)
        assert not (lo_band <= int(np.sum((lo90 <= target) & (target <= hi90))) <= hi_band)


def test_within_group_fisher_coverage():
    """Within-group average over 5 groups of 12 with a common rho: 95% coverage (binomial band)."""
    rng = np.random.default_rng(77)
    R, G, n, rho = 600, 5, 12, 0.4
    groups = np.repeat(np.arange(G), n)
    lo_band, hi_band = binomial_band(R, 0.95, FALSE_FAILURE)
    hits = 0
    for _ in range(R):
        x, y = bivariate(rng, G * n, rho)
        x = x + 5 * groups  # group offsets must not matter
        res = within_group_correlation(x, y, groups, "pearson")
        hits += res.lo <= rho <= res.hi
    assert lo_band <= hits <= hi_band, (hits, (lo_band, hi_band))


# --------------------------------------------------------------------------------------------
# Bootstrap
# --------------------------------------------------------------------------------------------


def _scipy_bootstrap(x, y, stat, method, seed, n_resamples):
    kw = {"rng": np.random.default_rng(seed)}
    if "rng" not in inspect.signature(stats.bootstrap).parameters:  # SciPy < 1.15
        kw = {"random_state": np.random.default_rng(seed)}
    return stats.bootstrap((x, y), stat, paired=True, vectorized=True, n_resamples=n_resamples,
                           method=method, **kw).confidence_interval


def _spearman_axis(a, b, axis):
    return stats.pearsonr(stats.rankdata(a, axis=axis), stats.rankdata(b, axis=axis), axis=axis).statistic


@pytest.mark.parametrize("method", ["pearson", "spearman"])
@pytest.mark.parametrize("ci_method, scipy_method", [("bootstrap_percentile", "percentile"), ("bootstrap_bca", "BCa")])
def test_bootstrap_matches_scipy_with_the_same_seed(method, ci_method, scipy_method):
    x, y = bivariate(np.random.default_rng(11), 25, 0.3)
    stat = (lambda a, b, axis: stats.pearsonr(a, b, axis=axis).statistic) if method == "pearson" else _spearman_axis
    ref = _scipy_bootstrap(x, y, stat, scipy_method, seed=5, n_resamples=2000)
    res = correlation(x, y, method, ci_method=ci_method, n_resamples=2000, seed=5)
    assert (res.lo, res.hi) == pytest.approx((ref.low, ref.high), rel=1e-9, abs=1e-12)
    assert res.n_resamples == 2000 and res.ci_method == ci_method


def test_bootstrap_is_seeded_and_drops_degenerate_resamples():
    x, y = bivariate(np.random.default_rng(1), 20, 0.5)
    a = pearson(x, y, ci_method="bootstrap_bca", n_resamples=500, seed=3)
    b = pearson(x, y, ci_method="bootstrap_bca", n_resamples=500, seed=3)
    c = pearson(x, y, ci_method="bootstrap_bca", n_resamples=500, seed=4)
    assert a == b and (a.lo, a.hi) != (c.lo, c.hi)
    # 4 binary pairs: many resamples have constant x or y; they are dropped, the rest used.
    xs, ys = [0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0]
    for ci in ("bootstrap_percentile", "bootstrap_bca"):
        res = spearman(xs, ys, ci_method=ci, n_resamples=1000, seed=0)
        assert 0 < res.n_resamples < 1000 and np.isfinite(res.lo) and np.isfinite(res.hi)
        assert -1.0 <= res.lo <= res.hi <= 1.0


def test_bca_does_not_depend_on_units_when_resamples_tie_with_the_estimate():
    """x, y on a 3x3 grid (r = 0): ~3% of resamples give r = 0 exactly in exact arithmetic, but
    in floats some come out as +/-1e-17; ties are counted with a tolerance, so rescaling x and y
    (which changes the rounding) leaves the BCa interval unchanged."""
    x = np.repeat([1.0, 2.0, 3.0], 3)
    y = np.tile([1.0, 2.0, 3.0], 3)
    for seed in range(3):
        a = pearson(x, y, ci_method="bootstrap_bca", n_resamples=2000, seed=seed)
        b = pearson(0.3 * x + 0.1, 7.1 * y - 0.3, ci_method="bootstrap_bca", n_resamples=2000, seed=seed)
        assert (a.lo, a.hi) == pytest.approx((b.lo, b.hi), rel=1e-9, abs=1e-12)


def test_bca_levels_hand_example():
    from theory.metrics.correlation import _bca_levels

    # 2 of 4 resamples tie with the estimate, none below: z0 = Phi^-1(1/4); constant jackknife: a = 0
    lo, hi = _bca_levels(np.array([0.0, 0.0, 1.0, 1.0]), 0.0, np.ones(5), 0.95)
    z0, z = stats.norm.ppf(0.25), stats.norm.ppf(0.975)
    assert (lo, hi) == pytest.approx((stats.norm.cdf(2 * z0 - z), stats.norm.cdf(2 * z0 + z)), rel=1e-12)
    # a symmetric jackknife has zero skewness: a = 0; z0 = 0 gives the percentile levels
    lo, hi = _bca_levels(np.array([-1.0, 1.0]), 0.0, np.array([-1.0, 0.0, 1.0]), 0.9)
    assert (lo, hi) == pytest.approx((0.05, 0.95), rel=1e-12)
    # acceleration a = sum d^3 / (6 (sum d^2)^1.5), d = mean - theta_jack
    jack = np.array([0.0, 0.0, 0.0, 4.0])
    d = jack.mean() - jack
    a = np.sum(d**3) / (6 * np.sum(d**2) ** 1.5)
    lo, hi = _bca_levels(np.array([-1.0, 1.0]), 0.0, jack, 0.95)
    assert lo == pytest.approx(stats.norm.cdf(-z / (1 + a * z)), rel=1e-12)
    assert hi == pytest.approx(stats.norm.cdf(z / (1 - a * z)), rel=1e-12)


# --------------------------------------------------------------------------------------------
# Within-group correlation
# --------------------------------------------------------------------------------------------


def test_within_group_counts_skips_and_weights():
    rng = np.random.default_rng(5)
    parts, labels = [], []
    for label, size in [("a", 10), ("b", 6), ("tiny", 3), ("c", 20)]:
        parts.append(bivariate(rng, size, 0.6))
        labels += [label] * size
    x = np.concatenate([p[0] for p in parts] + [np.arange(5.0)])
    y = np.concatenate([p[1] for p in parts] + [np.ones(5)])  # group "const": constant y
    g = np.array(labels + ["const"] * 5)
    res = within_group_correlation(x, y, g, "spearman")
    assert res.group_labels == ("a", "b", "c")
    assert (res.n_groups_used, res.n_groups_skipped) == (3, 2)
    assert (res.n_skipped_too_small, res.n_skipped_constant) == (1, 1)
    assert res.n_points_used == 36 and res.group_sizes == (10, 6, 20)
    r = np.array([stats.spearmanr(x[g == k], y[g == k]).statistic for k in ("a", "b", "c")])
    np.testing.assert_allclose(res.group_estimates, r, rtol=1e-12)
    w = np.array([7.0, 3.0, 17.0])
    z_bar = np.sum(w * np.arctanh(r)) / w.sum()
    se = np.sqrt(SPEARMAN_FISHER_VARIANCE / w.sum())
    assert res.estimate == pytest.approx(np.tanh(z_bar), rel=RTOL)
    assert (res.lo, res.hi) == pytest.approx(tuple(np.tanh(z_bar + np.array([-1, 1]) * 1.959963984540054 * se)), rel=RTOL)
    assert res.p_value == pytest.approx(2 * stats.norm.sf(abs(z_bar) / se), rel=1e-9)
    eq = within_group_correlation(x, y, g, "spearman", weighting="equal")
    assert eq.estimate == pytest.approx(np.tanh(np.mean(np.arctanh(r))), rel=RTOL)
    se_eq = np.sqrt(SPEARMAN_FISHER_VARIANCE * np.sum(1 / w)) / 3
    assert eq.hi == pytest.approx(np.tanh(np.mean(np.arctanh(r)) + 1.959963984540054 * se_eq), rel=RTOL)


def test_within_group_differs_from_pooled_under_confounding():
    """Negative case: group offsets create a pooled correlation the within-group average removes."""
    rng = np.random.default_rng(9)
    G, n = 8, 15
    g = np.repeat(np.arange(G), n)
    x = rng.normal(size=G * n) + 4 * g
    y = rng.normal(size=G * n) + 4 * g  # independent within groups
    # at confidence 1 - 1e-6 the within-group CI misses 0 with probability ~1e-6
    within = within_group_correlation(x, y, g, "pearson", confidence=1 - FALSE_FAILURE)
    pooled = pearson(x, y, confidence=1 - FALSE_FAILURE)
    assert within.lo <= 0.0 <= within.hi
    assert pooled.lo > 0.9


def test_within_group_bootstrap_and_clipping():
    rng = np.random.default_rng(4)
    g = np.repeat(np.arange(6), 8)
    x, y = bivariate(rng, 48, 0.5)
    y[:8] = x[:8]  # group 0 is perfectly correlated: r = 1 is clipped
    res = within_group_correlation(x, y, g, "pearson", ci_method="bootstrap", n_resamples=2000, seed=1)
    assert res.n_clipped == 1 and res.group_estimates[0] == pytest.approx(1.0)
    assert -1 <= res.lo <= res.estimate <= res.hi <= 1
    again = within_group_correlation(x, y, g, "pearson", ci_method="bootstrap", n_resamples=2000, seed=1)
    assert again == res
    # groups of 3 are allowed only with equal weights and a bootstrap CI (Var z is infinite)
    g3 = np.repeat(np.arange(16), 3)
    r3 = within_group_correlation(x, y, g3, "pearson", weighting="equal", ci_method="bootstrap", min_size=3)
    assert r3.n_groups_used + r3.n_skipped_constant == 16 and np.isnan(r3.p_value)


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

X = np.arange(6.0)
Y = np.array([1.0, 3.0, 2.0, 5.0, 4.0, 6.0])


@pytest.mark.parametrize(
    "args, kwargs, arg",
    [
        ((X, Y[:5]), {}, "y"),
        ((X[:2], Y[:2]), {}, "x"),
        ((X[:3], Y[:3]), {}, "x"),  # Fisher needs n >= 4
        ((np.ones(6), Y), {}, "x"),
        ((X, np.ones(6)), {}, "y"),
        ((np.append(X[:5], np.nan), Y), {}, "x"),
        ((X.reshape(2, 3), Y.reshape(2, 3)), {}, "x"),
        ((X, Y, "kendall"), {}, "method"),
        ((X, Y), {"ci_method": "jackknife"}, "ci_method"),
        ((X, Y), {"confidence": 1.0}, "confidence"),
        ((X, Y), {"confidence": 0.0}, "confidence"),
        ((X, Y), {"ci_method": "bootstrap_bca", "n_resamples": 1}, "n_resamples"),
        ((X, Y), {"n_resamples": 10.5}, "n_resamples"),
    ],
)
def test_correlation_bad_input(args, kwargs, arg):
    with pytest.raises(ValueError, match=rf"^{arg}:"):
        correlation(*args, **kwargs)


@pytest.mark.parametrize(
    "r, n, kwargs, arg",
    [(1.2, 10, {}, "r"), (0.5, 3, {}, "n"), (0.5, 10, {"confidence": 2.0}, "confidence"),
     (0.5, 10, {"variance": 0.0}, "variance"), (np.nan, 10, {}, "r")],
)
def test_fisher_z_interval_bad_input(r, n, kwargs, arg):
    with pytest.raises(ValueError, match=rf"^{arg}:"):
        fisher_z_interval(r, n, **kwargs)


G8 = np.repeat([0, 1], 4)
X8 = np.array([1.0, 2, 3, 4, 1, 3, 2, 4])
Y8 = np.array([2.0, 1, 4, 3, 1, 2, 3, 4])


@pytest.mark.parametrize(
    "args, kwargs, arg",
    [
        ((X8, Y8, G8[:7], "pearson"), {}, "groups"),
        ((X8, Y8, G8.reshape(2, 4), "pearson"), {}, "groups"),
        ((X8, Y8, np.arange(8), "pearson"), {}, "groups"),  # every group too small
        ((X8, np.ones(8), G8, "pearson"), {}, "groups"),  # every group constant
        ((X8, Y8[:7], G8, "pearson"), {}, "y"),
        ((X8, Y8, G8, "kendall"), {}, "method"),
        ((X8, Y8, G8, "pearson"), {"weighting": "size"}, "weighting"),
        ((X8, Y8, G8, "pearson"), {"ci_method": "bootstrap_bca"}, "ci_method"),
        ((X8, Y8, G8, "pearson"), {"min_size": 3}, "min_size"),
        ((X8, Y8, G8, "pearson"), {"min_size": 2, "weighting": "equal", "ci_method": "bootstrap"}, "min_size"),
        ((X8, Y8, G8, "pearson"), {"max_abs_r": 1.0}, "max_abs_r"),
        ((X8, Y8, G8, "pearson"), {"confidence": -0.1}, "confidence"),
        ((X8, Y8, np.zeros(8), "pearson"), {"ci_method": "bootstrap"}, "groups"),  # 1 group
        ((X8, Y8, np.array([0, "a", 1, "b", 0, "a", 1, "b"], dtype=object), "pearson"), {}, "groups"),
    ],
)
def test_within_group_bad_input(args, kwargs, arg):
    with pytest.raises(ValueError, match=rf"^{arg}:"):
        within_group_correlation(*args, **kwargs)


def test_registries_are_complete():
    assert set(CI_METHODS) == {"fisher", "bootstrap_percentile", "bootstrap_bca"}
