"""VSR Appendix B: property tests (hypothesis), Monte-Carlo confirmations and negative cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from theory import vsr_variance as vv
from concentration import bernstein_radius
from theory.instances import build_problem, clean_problem, random_problem
from theory_strategies import assert_close, assert_le, clean_problems, floats, problems, proposals

# ------------------------------------------------------------------------------------------
# Lemma B.1 and unbiasedness
# ------------------------------------------------------------------------------------------


@given(data=st.data())
def test_lemma_b1_equals_enumerated_trace_covariance(data):
    P = data.draw(problems())
    mu = data.draw(proposals(P.d.size))
    b = data.draw(hnp.arrays(np.float64, P.d.size, elements=floats(-2.0, 2.0)))
    mean, direct = vv.estimator_moments_direct(P.d, mu, P.pi, P.g, P.r_values, P.r_probs, b)
    V = P.V(mu, b)
    g2 = float(P.grad @ P.grad)
    assert_close(V, direct, scale=V + g2)
    # unbiased for every baseline and full-support proposal (eq. 11)
    assert_close(float(np.linalg.norm(mean - P.grad)), 0.0, scale=1.0 + np.sqrt(g2) + np.abs(P.g).max())


@pytest.mark.parametrize(
    "seed,levels",
    [(0, 2), (1, 3), (7, 5)],  # pinned instances: binary, three-level and five-level rewards
)
def test_lemma_b1_pinned(seed, levels):
    P = random_problem(np.random.default_rng(seed), reward_levels=levels)
    mu = np.full(P.d.size, 1.0 / P.d.size)
    b = np.zeros(P.d.size)
    _, direct = vv.estimator_moments_direct(P.d, mu, P.pi, P.g, P.r_values, P.r_probs, b)
    assert_close(P.V(mu, b), direct, scale=direct + float(P.grad @ P.grad))


def _estimator_outcomes(P, mu, b):
    """Every (value vector, probability) of g_hat: the exact law the Monte-Carlo test samples from."""
    vals, probs = [], []
    for s in range(P.d.size):
        for a in range(P.pi.shape[1]):
            for k in range(P.r_values.size):
                pr = mu[s] * P.pi[s, a] * P.r_probs[s, a, k]
                if pr > 0:
                    vals.append(P.d[s] / mu[s] * (P.r_values[k] - b[s]) * P.g[s, a])
                    probs.append(pr)
    return np.array(vals), np.array(probs)


def _mc_problem():
    # rewards strongly action-dependent so that ||grad J||^2 is large next to the MC radius
    rng = np.random.default_rng(3)
    S, A, Pn = 4, 3, 3
    q = np.array([[0.95, 0.05, 0.5], [0.9, 0.1, 0.2], [0.02, 0.98, 0.5], [0.5, 0.5, 0.5]])
    w = np.stack([1 - q, q], axis=2)
    return build_problem(rng.uniform(0.2, 1.0, S), rng.normal(size=(S, A)), 3.0 * rng.normal(size=(S, A, Pn)), [0.0, 1.0], w)


def test_monte_carlo_trace_variance_matches_lemma_b1():
    """Sample g_hat under mu_var-smoothed; the mean of ||g_hat - grad J||^2 estimates V(mu; b).

    The radius is Bernstein's with the exact variance and range of that statistic (enumerated),
    at false-failure rate 1e-6; the precondition asserts the test has the power to notice a
    dropped ||grad J||^2 term.
    """
    P = _mc_problem()
    mu = vv.smoothed_proposal(vv.variance_proposal(P.d, P.sigma), P.d, 0.3)
    b = P.rbar
    V = P.V(mu, b)
    vals, probs = _estimator_outcomes(P, mu, b)
    x = np.sum((vals - P.grad) ** 2, axis=1)
    assert_close(float(probs @ x), V, scale=V)  # exact mean of the statistic is V (Lemma B.1)
    var_x = float(probs @ (x - V) ** 2)
    bound = float(np.max(np.abs(x - V)))
    n = 200_000
    t = bernstein_radius(n, var_x, bound, 1e-6)
    g2 = float(P.grad @ P.grad)
    assert t < 0.5 * g2, "test would not detect a missing ||grad J||^2 term"
    sample = vv.sample_estimator(np.random.default_rng(11), n, P.d, mu, P.pi, P.g, P.r_values, P.r_probs, b)
    stat = float(np.mean(np.sum((sample - P.grad) ** 2, axis=1)))
    assert abs(stat - V) < t, f"MC {stat:.6g} vs exact {V:.6g} (radius {t:.3g})"


def test_monte_carlo_estimator_is_unbiased():
    """Each coordinate of the sample mean of g_hat is within a Bonferroni-Bernstein radius of grad J."""
    P = _mc_problem()
    mu = np.array([0.1, 0.2, 0.3, 0.4])
    b = np.array([0.7, -0.3, 0.0, 2.0])  # arbitrary baseline: unbiasedness must not depend on it
    vals, probs = _estimator_outcomes(P, mu, b)
    n = 200_000
    sample = vv.sample_estimator(np.random.default_rng(12), n, P.d, mu, P.pi, P.g, P.r_values, P.r_probs, b)
    delta = 1e-6 / P.grad.size
    for j in range(P.grad.size):
        var_j = float(probs @ (vals[:, j] - P.grad[j]) ** 2)
        t = bernstein_radius(n, var_j, float(np.max(np.abs(vals[:, j] - P.grad[j]))), delta)
        assert abs(sample[:, j].mean() - P.grad[j]) < t


# ------------------------------------------------------------------------------------------
# Theorem B.2
# ------------------------------------------------------------------------------------------


@given(data=st.data())
def test_thm_b2_baseline_and_proposal_are_optimal(data):
    P = data.draw(problems())
    bstar = vv.optimal_baseline(P.pi, P.H, P.m1)
    b = data.draw(hnp.arrays(np.float64, P.d.size, elements=floats(-2.0, 2.0)))
    Mb, Ms = P.M(b), P.M(bstar)
    for s in range(P.d.size):
        assert_le(Ms[s], Mb[s], scale=Mb[s])
    mu = data.draw(proposals(P.d.size))
    g2 = float(P.grad @ P.grad)
    Mstar = vv.optimal_signal_moment(P.pi, P.H, P.m1, P.m2)
    if np.sum(P.d * np.sqrt(Mstar)) <= 0:
        return  # no signal anywhere: every proposal has variance 0
    mustar = vv.optimal_proposal(P.d, P.pi, P.H, P.m1, P.m2)
    Vstar = P.V(mustar, bstar)
    assert_close(Vstar, vv.minimal_trace_variance(P.d, Mstar, g2), scale=Vstar + g2)
    assert_le(Vstar, P.V(mu, b), scale=P.V(mu, b) + g2)


# ------------------------------------------------------------------------------------------
# Assumptions B.3 / B.4 and Theorem B.5
# ------------------------------------------------------------------------------------------


@given(clean_problems())
def test_thm_b5_variance_gap_and_neyman_form(case):
    P, G0 = case
    rep = vv.gradient_scale_report(P.d, P.pi, P.H, P.r_probs)
    assert rep.b3_holds and rep.b4_holds
    if np.sum(P.d * P.sigma) <= 0:
        return
    muvar = vv.variance_proposal(P.d, P.sigma)
    g2 = float(P.grad @ P.grad)
    gap = P.V(P.d, P.rbar) - P.V(muvar, P.rbar)
    assert_close(gap, vv.clean_variance_gap(P.d, P.sigma, G0), scale=P.V(P.d, P.rbar) + g2)
    assert gap >= -1e-12
    np.testing.assert_allclose(vv.optimal_baseline(P.pi, P.H, P.m1), P.rbar, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(vv.optimal_proposal(P.d, P.pi, P.H, P.m1, P.m2), muvar, rtol=1e-7, atol=1e-12)


def test_thm_b5_gap_is_strict_iff_sigma_varies():
    rng = np.random.default_rng(5)
    P = clean_problem(rng, G0=2.0, n_states=5)
    muvar = vv.variance_proposal(P.d, P.sigma)
    assert P.V(P.d, P.rbar) - P.V(muvar, P.rbar) > 1e-6  # sigma non-constant: strict
    # constant sigma: every state has the same success probability -> mu_var = d, no gain
    w = np.tile(np.array([[0.3, 0.7]]), (5, 3, 1))
    Q = build_problem(np.ones(5), rng.normal(size=(5, 3)), rng.normal(size=(5, 3, 2)), [0.0, 1.0], w)
    np.testing.assert_allclose(vv.variance_proposal(Q.d, Q.sigma), Q.d, rtol=1e-12)
    assert vv.clean_variance_gap(Q.d, Q.sigma, 1.0) < 1e-15


@given(clean_problems(allow_zero_sigma=False))
def test_thm_b5_standardized_residual_weight(case):
    P, _ = case
    muvar = vv.variance_proposal(P.d, P.sigma)
    np.testing.assert_allclose(vv.importance_weights(P.d, muvar), vv.standardized_weight(P.d, P.sigma), rtol=1e-10)
    # (d/mu_var)(r - r_bar) = E_d[sigma] (r - r_bar)/sigma: GRPO's standardized residual up to a constant
    z = float(np.sum(P.d * P.sigma))
    np.testing.assert_allclose(vv.standardized_weight(P.d, P.sigma) * P.sigma, z, rtol=1e-10)


# ------------------------------------------------------------------------------------------
# Lemma B.8, Lemma B.9, Theorem B.7, Remark B.10
# ------------------------------------------------------------------------------------------


@given(problems())
def test_lemma_b8_decomposition_matches_lemma_b1(P):
    if np.sum(P.d * P.sigma) <= 0:
        return
    M = P.M(P.rbar)
    K, _ = vv.gradient_ratio_K(M, P.sigma)
    dec = vv.variance_gap_decomposition(P.d, P.sigma, K)
    muvar = vv.variance_proposal(P.d, P.sigma)
    direct = P.V(P.d, P.rbar) - P.V(muvar, P.rbar)  # the gap convention: V(d) - V(mu)
    assert_close(dec.gap, direct, scale=P.V(P.d, P.rbar) + float(P.grad @ P.grad))
    assert dec.zero_sigma <= 0.0
    if dec.support_mass == 1.0:
        # the paper's eq. (25) exactly (written for V(mu_var) - V(d) = -direct)
        assert_close(-direct, -dec.mean_K * dec.var_sigma_positive + dec.coupling, scale=P.V(P.d, P.rbar) + 1.0)


def test_lemma_b8_with_zero_sigma_states_tracks_the_mass():
    rng = np.random.default_rng(2)
    P = clean_problem(rng, heterogeneity=0.8, n_states=6, zero_sigma_states=2)
    assert np.sum(P.d[P.sigma == 0]) > 0
    M = P.M(P.rbar)
    K, _ = vv.gradient_ratio_K(M, P.sigma)
    dec = vv.variance_gap_decomposition(P.d, P.sigma, K)
    assert dec.support_mass < 1.0 and dec.zero_sigma < 0
    assert_close(dec.gap, vv.variance_gap_direct(P.d, P.sigma, M), scale=float(np.sum(P.d * M)))
    # the paper's formula with restricted moments and no mass correction would be wrong here
    naive = -(dec.jensen + dec.coupling)  # jensen, coupling keep the paper's sign (V(mu_var) - V(d))
    assert abs(naive - dec.gap) > 1e-6


def test_var_sigma_conventions_are_named():
    """Lemma B.8's Var(sigma) is over {sigma > 0} (renormalised d); Thm B.5's is over all of d."""
    d, sigma, K = np.array([0.2, 0.3, 0.5]), np.array([0.0, 0.1, 0.3]), np.array([np.nan, 1.0, 2.0])
    dec = vv.variance_gap_decomposition(d, sigma, K)
    w = d[1:] / d[1:].sum()
    assert dec.var_sigma_positive == pytest.approx(float(w @ sigma[1:] ** 2 - (w @ sigma[1:]) ** 2))
    assert dec.var_sigma_all == pytest.approx(float(d @ sigma**2 - (d @ sigma) ** 2))
    assert dec.var_sigma_all == vv.clean_variance_gap(d, sigma, 1.0)  # what Thm B.5 uses, bit for bit
    assert dec.var_sigma_positive != pytest.approx(dec.var_sigma_all)


@given(
    x=hnp.arrays(np.float64, st.integers(1, 8), elements=floats(0.0, 1.0)),
    M=floats(0.01, 100.0),
    data=st.data(),
)
def test_lemma_b9(x, M, data):
    w = data.draw(proposals(x.size))
    lhs, rhs = vv.variance_of_square_bound(x * M, w, M)
    assert_le(lhs, rhs, scale=rhs + 1e-12 * M**4)


def test_lemma_b9_constant_is_tight():
    # X uniform on {M - h, M}: Var(X^2)/Var(X) -> 4 M^2 as h -> 0
    M = 2.0
    lhs, rhs = vv.variance_of_square_bound([M - 1e-4, M], [0.5, 0.5], M)
    assert lhs <= rhs and lhs / rhs > 0.9999


@given(problems(reward_levels=2))
def test_thm_b7_proof_chain(P):
    if np.sum(P.d * P.sigma) <= 0:
        return
    K, _ = vv.gradient_ratio_K(P.M(P.rbar), P.sigma)
    chain = vv.theorem_b7_chain(P.d, P.sigma, K)
    for step, (lhs, rhs) in chain.pairs().items():
        assert_le(lhs, rhs, scale=float(np.nanmax(K)) + 1.0), step


@given(clean_problems(homogeneous=False, allow_zero_sigma=True))
def test_thm_b7_conclusion_when_b6_holds(case):
    P, _ = case
    if np.sum(P.d * P.sigma) <= 0:
        return
    K, _ = vv.gradient_ratio_K(P.M(P.rbar), P.sigma)
    b6 = vv.assumption_b6(P.d, P.sigma, K)
    muvar = vv.variance_proposal(P.d, P.sigma)
    if b6.holds and b6.rhs > 1e-6:  # skip Var(sigma) at rounding level, where "<" is not decidable
        assert P.V(muvar, P.rbar) < P.V(P.d, P.rbar)


def test_b6_and_b7_chain_pinned_values():
    """Hand-computed instance: d = (1/2, 1/2), sigma = (0.1, 0.3), K = (1, 3).

    Var sigma = 0.01, E K = 2, Var K = 1, Cov(sigma, K) = 0.1, Cov(sigma^2, K) = 0.04,
    Delta = 0.2 * 0.1 - 0.04 = -0.02, V(mu_var) - V(d) = -2 * 0.01 - 0.02 = -0.04, so the gap
    V(d) - V(mu_var) is +0.04.
    """
    d, sigma, K = [0.5, 0.5], np.array([0.1, 0.3]), np.array([1.0, 3.0])
    b6 = vv.assumption_b6(d, sigma, K)
    assert b6.lhs == pytest.approx(0.5) and b6.rhs == pytest.approx(2 / 3 * 0.1) and not b6.holds
    assert vv.assumption_b6(d, sigma, K, R=0.1).rhs == pytest.approx(2 / 0.3 * 0.1)
    dec = vv.variance_gap_decomposition(d, sigma, K)
    assert dec.coupling == pytest.approx(-0.02) and dec.jensen == pytest.approx(-0.02) and dec.gap == pytest.approx(0.04)
    chain = vv.theorem_b7_chain(d, sigma, K)
    assert chain.coupling_bound == pytest.approx((0.02, 0.15))
    assert chain.coupling_bound_sharp == pytest.approx((0.02, 0.08))
    assert chain.var_square == pytest.approx((0.0016, 0.01))
    assert chain.gap_bound == pytest.approx((0.02 - 0.15, 0.04))
    assert chain.conclusion is None  # B.6 fails here, so the theorem claims nothing (mu_var wins anyway: gap > 0)


def test_coupling_bound_constants_are_not_tight_but_sharp_one_is_approached():
    """Two-point sigma in {0, eps}, K perfectly anti-correlated: |Delta| / sqrt(Var sigma Var K) -> 1 - E sigma
    is not reached there (it gives (a+b)/2), but the sharp bound's ratio stays <= 1 < 3/2 everywhere."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(2000):
        n = int(rng.integers(2, 6))
        sigma = rng.uniform(0, 0.5, n)
        K = rng.uniform(0, 5, n)
        d = rng.dirichlet(np.full(n, 0.5))
        dec = vv.variance_gap_decomposition(d, sigma, K)
        root = np.sqrt(dec.var_sigma_positive * dec.var_K)
        if root > 1e-12:
            worst = max(worst, abs(dec.coupling) / root / (1 - dec.mean_sigma))
    assert worst <= 1.0 + 1e-9


@given(problems(reward_levels=4, R=3.0))
def test_remark_b10_bounded_rewards(P):
    if np.sum(P.d * P.sigma) <= 0:
        return
    assert np.all(P.sigma <= 1.5 + 1e-12)
    K, _ = vv.gradient_ratio_K(P.M(P.rbar), P.sigma)
    chain = vv.theorem_b7_chain(P.d, P.sigma, K, R=3.0)
    for step, (lhs, rhs) in chain.pairs().items():
        assert_le(lhs, rhs, scale=9.0 * float(np.nanmax(K)) + 1.0), step


@given(data=st.data(), eps=floats(0.01, 1.0))
def test_smoothed_proposal(data, eps):
    P = data.draw(problems())
    if np.sum(P.d * P.sigma) <= 0:
        return
    muvar = vv.variance_proposal(P.d, P.sigma)
    mue = vv.smoothed_proposal(muvar, P.d, eps)
    assert np.all(mue[P.d > 0] > 0)
    assert np.all(vv.importance_weights(P.d, mue) <= 1.0 / eps * (1 + 1e-12))
    V = lambda mu: P.V(mu, P.rbar)  # noqa: E731
    assert_le(V(mue), (1 - eps) * V(muvar) + eps * V(P.d), scale=V(P.d) + float(P.grad @ P.grad))


# ------------------------------------------------------------------------------------------
# Negative cases: each assumption matters
# ------------------------------------------------------------------------------------------


def test_b6_violated_mu_var_is_worse_than_on_policy():
    """K ∝ 1/sigma^2 (large gradients exactly where sigma is small): V(mu_var) > V(d)."""
    rng = np.random.default_rng(9)
    P0 = clean_problem(rng, n_states=5)
    sig = P0.sigma
    EH = np.einsum("sa,sa->s", P0.pi, P0.H)
    target = 0.05 / sig**2  # K(s) = E[H|s] under clean rewards
    P = build_problem(P0.d, np.log(P0.pi), P0.g, [0.0, 1.0], P0.r_probs, state_scales=np.sqrt(target / EH))
    K, _ = vv.gradient_ratio_K(P.M(P.rbar), P.sigma)
    assert not vv.assumption_b6(P.d, P.sigma, K).holds
    muvar = vv.variance_proposal(P.d, P.sigma)
    assert P.V(muvar, P.rbar) > P.V(P.d, P.rbar) + 1e-6


def test_b3_violated_rbar_is_not_the_optimal_baseline():
    """When H correlates with the reward inside a state, b*_w != r_bar and strictly beats it."""
    pi = np.array([[0.8, 0.2]])
    g = np.array([[[0.2], [-0.8]]])  # centred: 0.8*0.2 + 0.2*(-0.8) = 0; H = (0.04, 0.64)
    q = np.array([[0.9, 0.1]])
    m1, m2 = vv.bernoulli_moments(q)
    H = vv.score_norms(g)
    rep = vv.gradient_scale_report([1.0], pi, H, np.stack([1 - q, q], axis=2))
    assert not rep.b3_holds
    bstar = vv.optimal_baseline(pi, H, m1)
    rbar = vv.state_reward_mean(pi, m1)
    assert abs(bstar[0] - rbar[0]) > 0.1
    assert vv.signal_second_moment(pi, H, m1, m2, bstar)[0] < vv.signal_second_moment(pi, H, m1, m2, rbar)[0] - 1e-3


def test_b4_violated_mu_var_is_not_the_joint_optimum():
    rng = np.random.default_rng(4)
    P = clean_problem(rng, heterogeneity=1.0, n_states=5)
    assert not vv.gradient_scale_report(P.d, P.pi, P.H, P.r_probs).b4_holds
    muvar = vv.variance_proposal(P.d, P.sigma)
    mustar = vv.optimal_proposal(P.d, P.pi, P.H, P.m1, P.m2)
    assert P.V(mustar, P.rbar) < P.V(muvar, P.rbar) - 1e-6


# ------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------


def test_bad_inputs_name_the_argument():
    P = random_problem(np.random.default_rng(0), n_states=3, n_actions=2)
    with pytest.raises(ValueError, match=r"^d: must sum to 1"):
        vv.trace_variance(P.d * 2, P.d, P.pi, P.g, P.m1, P.m2, P.rbar)
    with pytest.raises(ValueError, match=r"^pi: rows must sum to 1"):
        vv.state_reward_mean(P.pi * 0.5, P.m1)
    with pytest.raises(ValueError, match=r"^mu: support condition violated"):
        vv.trace_variance(P.d, np.array([1.0, 0.0, 0.0]), P.pi, P.g, P.m1, P.m2, P.rbar)
    with pytest.raises(ValueError, match=r"^g: not a score function"):
        vv.policy_gradient(P.d, P.pi, P.g + 1.0, P.m1)
    with pytest.raises(ValueError, match=r"^m1: expected shape"):
        vv.state_reward_mean(P.pi, P.m1[:, :1])
    with pytest.raises(ValueError, match=r"^H: must be non-negative"):
        vv.optimal_baseline(P.pi, -P.H, P.m1)
    with pytest.raises(ValueError, match=r"^eps: must lie in"):
        vv.smoothed_proposal(P.d, P.d, 1.5)
    with pytest.raises(ValueError, match=r"^d: contains NaN"):
        vv.neyman_proposal(np.array([np.nan, 1.0]), [1.0, 1.0])
    with pytest.raises(ValueError, match=r"^score: d \* score has no mass"):
        vv.neyman_proposal([0.5, 0.5], [0.0, 0.0])
    with pytest.raises(ValueError, match=r"^x: entries must lie in"):
        vv.variance_of_square_bound([0.5, 2.0], [0.5, 0.5], 1.0)
    with pytest.raises(ValueError, match=r"^m2: second moment below squared mean"):
        vv.state_reward_std(P.pi, P.m1 + 0.5, P.m1 * 0 + 0.01)
    with pytest.raises(ValueError, match=r"^r_probs: rows must sum to 1"):
        vv.reward_moments([0.0, 1.0], np.full((3, 2, 2), 0.3))
    with pytest.raises(ValueError, match=r"^sigma: entries must lie in"):
        K = np.ones(3)
        vv.theorem_b7_chain(P.d, np.array([0.2, 0.9, 0.3]), K)  # sigma > R/2 is impossible for R = 1


def test_d_mu_support_condition_is_the_weak_one():
    """mu_var is zero where sigma = 0; that is admissible because M_{r_bar} vanishes there."""
    P = clean_problem(np.random.default_rng(8), n_states=5, zero_sigma_states=2)
    muvar = vv.variance_proposal(P.d, P.sigma)
    assert np.any((muvar == 0) & (P.d > 0))
    assert np.isfinite(P.V(muvar, P.rbar))
    with pytest.raises(ValueError, match="support"):
        P.V(muvar, P.rbar + 0.1)  # with a shifted baseline (r - b) g no longer vanishes there
