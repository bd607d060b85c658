"""PROS's pass-rate model (``theory.pros_posterior``): the Pólya–Gamma sampler against its moments, the child prior
scale, and the Gibbs sampler's posterior against direct numerical integration on a small tree.

Monte-Carlo bounds are calibrated (false-failure probability ≤ 1e-6 per test, Bonferroni over its checks):

* a PG draw of the sampler is ``Σ_k a_k g_k + const`` with independent ``g_k ~ Gamma(b, 1)`` and ``a_k <= a_1 =
  1/(2π²(¼ + c²/4π²))``; the sum of ``n`` draws is then sub-gamma on the right with variance factor ``v = n b Σ a_k²
  <= n Var PG(b, c)`` and scale ``a_1``, and sub-Gaussian with ``v`` on the left (Boucheron, Lugosi & Massart 2013,
  §2.4), so ``|mean − E| < sqrt(2 Var x / n) + a_1 x / n`` fails with probability ``<= 2 e^{−x}``;
* posterior means of ``sigmoid ψ`` in [0, 1] from independent chains: Bernstein's radius with the variance from the
  quadrature (``concentration.bernstein_radius``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from concentration import bernstein_radius
from theory.pros_posterior import child_sigma, gibbs_sweeps, pg_mean, pg_variance, sample_pg, sigmoid

EXAMPLES = 30
DELTA = 1e-6


def _pg_radius(b: float, c: float, n: int, delta: float) -> float:
    x = math.log(2.0 / delta)
    a1 = 1.0 / (2 * math.pi**2 * (0.25 + (c / (2 * math.pi)) ** 2))
    return math.sqrt(2.0 * float(pg_variance(b, c)) * x / n) + a1 * x / n


def test_pg_moments_match_the_series():
    """``E`` and ``Var`` of PG(b, c) in closed form against the defining series summed to 2·10^6 terms."""
    k = np.arange(1, 2_000_001) - 0.5
    for b, c in [(1.0, 0.0), (2.5, 1e-3), (0.3, 0.7), (7.0, -4.0), (1.0, 25.0)]:
        d2 = (c / (2 * math.pi)) ** 2
        mean = b * ((1.0 / (k**2 + d2)).sum() + 1.0 / k.size) / (2 * math.pi**2)  # + the tail, ≈ 1/K
        var = b * (1.0 / (k**2 + d2) ** 2).sum() / (4 * math.pi**4)
        assert float(pg_mean(b, c)) == pytest.approx(mean, rel=1e-9)
        assert float(pg_variance(b, c)) == pytest.approx(var, rel=1e-9)
    assert float(pg_mean(3.0, 0.0)) == 0.75 and float(pg_variance(3.0, 0.0)) == 3.0 / 24.0


@settings(max_examples=EXAMPLES, deadline=None)
@given(b=st.floats(0.05, 40.0), c=st.floats(-15.0, 15.0), seed=st.integers(0, 2**31 - 1))
def test_pg_sampler_mean_is_b_over_2c_tanh(b, c, seed):
    """E[ω] = (b / 2c) tanh(c / 2) for real b (decayed counts) within the calibrated radius."""
    n = 4000
    w = sample_pg(np.full(n, b), np.full(n, c), np.random.default_rng(seed))
    assert np.all(w > 0)
    want = b / (2 * c) * math.tanh(c / 2) if c != 0 else b / 4
    assert abs(float(w.mean()) - want) < _pg_radius(b, c, n, DELTA / EXAMPLES)


@pytest.mark.parametrize("b", [0.5, 1.0, 3.7])
def test_pg_sampler_at_c_zero_has_mean_b_over_4(b):
    n = 100_000
    w = sample_pg(np.full(n, b), np.zeros(n), np.random.default_rng(7))
    assert abs(float(w.mean()) - b / 4) < _pg_radius(b, 0.0, n, DELTA / 3)


class _MeanGamma:
    """A stand-in generator whose gamma draws are their means (``shape``): the sampler then returns its mean."""

    def gamma(self, shape):
        return np.array(shape, dtype=np.float64)


@pytest.mark.parametrize("terms", [1, 8, 64])
def test_the_truncated_tail_enters_by_its_exact_mean(terms):
    b = np.array([0.3, 1.0, 2.5, 7.0, 40.0])
    c = np.array([0.0, -1e-5, 0.7, -4.0, 25.0])
    np.testing.assert_allclose(sample_pg(b, c, _MeanGamma(), terms=terms), pg_mean(b, c), rtol=1e-12, atol=0)


def test_pg_of_zero_trials_is_zero_and_inputs_broadcast():
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(sample_pg(np.zeros(3), np.array([0.0, 1.0, -2.0]), rng), np.zeros(3))
    assert sample_pg(np.array([1.0, 0.0, 2.0]), 0.5, rng).shape == (3,)
    with pytest.raises(ValueError, match="b: must be non-negative"):
        sample_pg(np.array([-1.0]), 0.0, rng)


def test_child_sigma_spans_delta_around_the_parent():
    # parent p = 0.5: the 95 % interval of the child is [0.4, 0.6] on the probability scale
    assert float(child_sigma(np.array([0.0]), 0.1)[0]) == pytest.approx(math.log(0.6 / 0.4) / 1.96)
    # p = 0.95: the wider side is the lower one (p_hi is clipped at 0.99)
    psi = math.log(0.95 / 0.05)
    want = max(psi - math.log(0.85 / 0.15), math.log(0.99 / 0.01) - psi) / 1.96
    assert float(child_sigma(np.array([psi]), 0.1)[0]) == pytest.approx(want)
    assert float(child_sigma(np.array([0.0]), 0.001)[0]) == 0.02  # the floor


# ------------------------------------------------------------------------------ Gibbs against quadrature

MU0, TAU0 = 0.0, 1.5
#: a root and two children: (successes, trials) after decay (non-integer), children's prior σ
ROOT = (1.7, 6.4)
KIDS = [((4.5, 5.0), 0.6), ((0.3, 3.96), 1.0)]


def _loglik(psi, s, n):
    return s * -np.logaddexp(0.0, -psi) + (n - s) * -np.logaddexp(0.0, psi)


def _quadrature():
    """``E[sigmoid ψ]`` and ``E[sigmoid² ψ]`` of the root and each child under the joint posterior, by nested
    quadrature on a grid: the children are independent given the root, so ``p(ψ_r | data) ∝ N(ψ_r; μ0, τ0²)
    L_r(ψ_r) Π_j ∫ N(ψ_j; ψ_r, σ_j²) L_j(ψ_j) dψ_j``."""
    g = np.linspace(-14, 14, 2801)
    h = g[1] - g[0]
    sg = sigmoid(g)
    log_w = -0.5 * ((g - MU0) / TAU0) ** 2 + _loglik(g, *ROOT)
    inner = []
    for (s, n), sig in KIDS:
        K = np.exp(-0.5 * ((g[None, :] - g[:, None]) / sig) ** 2) / (sig * math.sqrt(2 * math.pi))  # [root, child]
        lik = np.exp(_loglik(g, s, n))
        I = (K * lik).sum(1) * h
        inner.append(((K * lik * sg).sum(1) * h / I, (K * lik * sg**2).sum(1) * h / I))
        log_w = log_w + np.log(I)
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    out = [((w * sg).sum(), (w * sg**2).sum())]
    out += [((w * m1).sum(), (w * m2).sum()) for m1, m2 in inner]
    return out


def test_gibbs_posterior_means_match_numerical_integration():
    """5,000 independent chains (one forest, one call) after 40 sweeps each (they mix within ~5): the posterior mean of sigmoid ψ of
    the root and both children within the calibrated Bernstein radius of the quadrature."""
    chains, sweeps = 5000, 40
    N = 1 + len(KIDS)
    parent = np.tile(np.array([-1] + [0] * len(KIDS)), chains) + np.repeat(np.arange(chains) * N, N) * np.tile(
        np.array([0] + [1] * len(KIDS)), chains)
    sigma2 = np.tile(np.array([TAU0**2] + [sig**2 for _, sig in KIDS]), chains)
    s = np.tile(np.array([ROOT[0]] + [k[0][0] for k in KIDS]), chains)
    n = np.tile(np.array([ROOT[1]] + [k[0][1] for k in KIDS]), chains)
    rng = np.random.default_rng(20261205)
    psi0 = rng.normal(MU0, TAU0, size=chains * N)  # dispersed starts
    psi = gibbs_sweeps(psi0, parent, sigma2, s, n, rng, mu0=MU0, tau0=TAU0, sweeps=sweeps).reshape(chains, N)
    exact = _quadrature()
    for j, (m1, m2) in enumerate(exact):
        est = float(sigmoid(psi[:, j]).mean())
        r = bernstein_radius(chains, m2 - m1**2, 1.0, DELTA / N)
        assert abs(est - m1) < r, (j, est, m1, r)
    # the data moved the nodes apart: child 1 (4.5 / 5) above the root, child 2 (0.3 / 3.96) below
    assert exact[1][0] > exact[0][0] > exact[2][0]


def test_gibbs_sweeps_keep_every_state_and_are_seeded():
    args = (np.zeros(3), np.array([-1, 0, 0]), np.array([0.0, 0.04, 0.04]), np.array([1.0, 2.0, 0.0]),
            np.array([2.0, 2.0, 2.0]))
    a = gibbs_sweeps(*args, np.random.default_rng(3), sweeps=5, keep=True)
    b = gibbs_sweeps(*args, np.random.default_rng(3), sweeps=5)
    assert a.shape == (5, 3) and np.array_equal(a[-1], b)


def test_gibbs_refuses_a_deeper_tree_and_bad_counts():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="parent"):
        gibbs_sweeps(np.zeros(3), np.array([-1, 0, 1]), np.ones(3), np.zeros(3), np.ones(3), rng)
    with pytest.raises(ValueError, match="s: successes"):
        gibbs_sweeps(np.zeros(1), np.array([-1]), np.ones(1), np.array([2.0]), np.array([1.0]), rng)
