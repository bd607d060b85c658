"""VSR Appendix C (SVMD): property tests, Monte-Carlo confirmation, negative cases, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from theory import svmd as sv
from concentration import hoeffding_radius
from theory.instances import random_dense_mdp, random_policy
from theory_strategies import assert_close, assert_le, floats


def _normalise(w, axis=-1):
    w = np.asarray(w) + 1e-3
    return w / w.sum(axis=axis, keepdims=True)


@st.composite
def mdps(draw):
    H = draw(st.integers(1, 4))
    S = draw(st.integers(1, 4))
    A = draw(st.integers(1, 3))
    P = _normalise(draw(hnp.arrays(np.float64, (H, S, A, S), elements=floats(0.0, 1.0))))
    r = draw(hnp.arrays(np.float64, (H, S, A), elements=floats(0.0, 1.0)))
    rho = _normalise(draw(hnp.arrays(np.float64, S, elements=floats(0.0, 1.0))))
    pi = _normalise(draw(hnp.arrays(np.float64, (H, S, A), elements=floats(0.0, 1.0))))
    mu = _normalise(draw(hnp.arrays(np.float64, (H, S, A), elements=floats(0.0, 1.0))))
    return P, r, rho, pi, mu


def _returns_by_enumeration(P, r, rho, pi):
    """J(pi) by summing over every trajectory: independent of the backward recursion."""
    H, S, A, _ = P.shape
    total = 0.0
    stack = [(0, s, rho[s], 0.0) for s in range(S)]
    while stack:
        h, s, prob, ret = stack.pop()
        if prob == 0:
            continue
        for a in range(A):
            pa = prob * pi[h, s, a]
            if h == H - 1:
                total += pa * (ret + r[h, s, a])
            else:
                for t in range(S):
                    stack.append((h + 1, t, pa * P[h, s, a, t], ret + r[h, s, a]))
    return total


@given(mdps())
def test_lemma_c6_performance_difference(m):
    P, r, rho, pi, mu = m
    H = P.shape[0]
    J_mu, J_pi = _returns_by_enumeration(P, r, rho, mu), _returns_by_enumeration(P, r, rho, pi)
    assert_close(sv.expected_return(P, r, rho, pi), J_pi, scale=H)
    assert_close(J_mu - J_pi, sv.performance_difference(P, r, rho, mu, pi), scale=H)


@given(
    data=st.data(),
    A=st.integers(1, 6),
    H=st.integers(1, 20),
    eta=floats(1e-4, 5.0),
)
def test_lemma_c7_mirror_step(data, A, H, eta):
    pi_t = _normalise(data.draw(hnp.arrays(np.float64, A, elements=floats(0.0, 1.0))))
    p = _normalise(data.draw(hnp.arrays(np.float64, A, elements=floats(0.0, 1.0))))
    Q = data.draw(hnp.arrays(np.float64, A, elements=floats(0.0, float(H))))
    t = sv.mirror_step_terms(p, pi_t, Q, eta, H)
    assert_le(t.lhs, t.rhs, scale=abs(t.rhs) + eta * H)
    assert_close(t.three_point_lhs, t.three_point_rhs, scale=eta * H + 1.0)
    assert_le(t.drift, t.drift_bound, scale=eta * H)
    nxt = sv.mirror_step(pi_t, Q, eta)
    # closed form: log pi_{t+1} - log pi_t - eta Q is constant across actions (eq. 27)
    diff = np.log(nxt) - np.log(pi_t) - eta * Q
    assert np.ptp(diff) < 1e-9 * (1 + eta * H)


@given(data=st.data(), S=st.integers(1, 6), A=st.integers(1, 3), K=st.integers(1, 4), eps=floats(0.01, 1.0))
def test_lemma_c8_reweighting_identity(data, S, A, K, eps):
    d = _normalise(data.draw(hnp.arrays(np.float64, S, elements=floats(0.0, 1.0))))
    mu = (1 - eps) * _normalise(data.draw(hnp.arrays(np.float64, S, elements=floats(0.0, 1.0)))) + eps * d
    pi = _normalise(data.draw(hnp.arrays(np.float64, (S, A), elements=floats(0.0, 1.0))))
    f = data.draw(hnp.arrays(np.float64, (S, A), elements=floats(0.0, 5.0)))
    v = data.draw(hnp.arrays(np.float64, K, elements=floats(0.0, 5.0)))
    p = _normalise(data.draw(hnp.arrays(np.float64, (S, A, K), elements=floats(0.0, 1.0))))
    assert_close(sv.weighted_critic_loss(mu, d, pi, f, v, p), sv.on_policy_critic_loss(d, pi, f, v, p), scale=25.0)
    assert np.all(sv.on_policy_critic_loss(d, pi, f, v, p) >= 0)


@given(mdps(), st.integers(1, 25), floats(-1.0, 1.0))
def test_thm_c5_exact_critic_bound(m, T, log_eta_scale):
    P, r, rho, pi1, mu = m
    H = P.shape[0]
    D = sv.comparator_divergence(P, rho, mu, pi1)
    eta = sv.optimal_step_size(max(D, 1e-6), H, T) * float(np.exp(log_eta_scale))
    _, J = sv.svmd_exact(P, r, rho, pi1, eta, T)
    gap = sv.expected_return(P, r, rho, mu) - float(J.mean())
    assert_le(gap, sv.svmd_bound(D, eta, H, T).total, scale=H)


@given(D=floats(1e-3, 10.0), H=st.integers(1, 30), T=st.integers(1, 1000), kappa=floats(1.0, 10.0), factor=floats(0.05, 20.0))
def test_thm_c5_optimal_step_size(D, H, T, kappa, factor):
    betas = np.linspace(0, 0.05, H)
    eta = sv.optimal_step_size(D, H, T)
    best = sv.svmd_bound(D, eta, H, T, kappa, betas)
    assert_close(best.total, sv.bound_at_optimal_step(D, H, T, kappa, betas), scale=best.total)
    assert_close(best.optimization, best.drift, scale=best.total)  # balanced terms at the optimum
    assert_le(best.total, sv.svmd_bound(D, eta * factor, H, T, kappa, betas).total, scale=best.total)


def test_beta_radius_scaling():
    b1 = sv.critic_error_radius(1.0, 5, 10, 100, 0.05, 0.1, 1000)
    assert_close(sv.critic_error_radius(1.0, 5, 10, 100, 0.05, 0.1, 4000), b1 / 2)  # 1/sqrt(N)
    assert_close(sv.critic_error_radius(1.0, 5, 10, 100, 0.05, 0.4, 1000), b1 / 2)  # 1/sqrt(eps)
    assert_close(b1, np.sqrt(25 * np.log(5 * 10 * 100 / 0.05) / (0.1 * 1000)))


def test_monte_carlo_weighted_critic_loss():
    """Sample (s, a, G) under mu with weights d/mu: the mean weighted loss estimates the on-policy loss.

    Weighted losses lie in [0, H^2/eps] (Assumption C.4), so Hoeffding at 1e-6 is calibrated.
    """
    rng = np.random.default_rng(0)
    S, A, Hh, eps = 5, 3, 4.0, 0.25
    d = np.array([0.6, 0.1, 0.1, 0.1, 0.1])
    mu = (1 - eps) * np.array([0.0, 0.25, 0.25, 0.25, 0.25]) + eps * d  # under-samples state 0
    pi = rng.dirichlet(np.ones(A), size=S)
    f = rng.uniform(0, 1.0, size=(S, A))
    f[0] = Hh  # the critic is badly off exactly where d puts its mass
    v = np.array([0.0, 1.0, 2.5, 4.0])
    p = rng.dirichlet(np.ones(4), size=(S, A))
    exact = sv.on_policy_critic_loss(d, pi, f, v, p)
    n = 400_000
    s = rng.choice(S, size=n, p=mu)
    a = (rng.random(n)[:, None] > np.cumsum(pi[s], axis=1)).sum(axis=1).clip(max=A - 1)
    k = (rng.random(n)[:, None] > np.cumsum(p[s, a], axis=1)).sum(axis=1).clip(max=3)
    losses = d[s] / mu[s] * (f[s, a] - v[k]) ** 2
    t = hoeffding_radius(n, Hh**2 / eps, 1e-6)
    assert abs(losses.mean() - exact) < t
    # power: an unweighted estimate (the mistake the reweighting fixes) is far off
    unweighted = float(np.einsum("s,sa,sak,sak->", mu, pi, p, (f[..., None] - v) ** 2))
    assert abs(unweighted - exact) > 2 * t


def test_negative_c7_needs_bounded_critic():
    """With ||Q_hat||_inf > H the per-step inequality can fail: the assumption matters."""
    pi_t = np.array([0.5, 0.5])
    p = np.array([1.0, 0.0])
    Q = np.array([50.0, 0.0])
    eta, H = 1.0, 1.0
    nxt = sv.mirror_step(pi_t, Q, eta)
    lhs = eta * float(Q @ (p - pi_t))
    rhs = float(sv.kl(p, pi_t) - sv.kl(p, nxt)) + 0.5 * eta**2 * H**2
    assert lhs > rhs + 1.0
    with pytest.raises(ValueError, match=r"^Q_hat: must satisfy"):
        sv.mirror_step_terms(p, pi_t, Q, eta, H)


def test_negative_c8_without_weights_is_biased():
    d = np.array([0.9, 0.1])
    mu = np.array([0.1, 0.9])
    pi = np.ones((2, 1))
    f = np.array([[1.0], [0.0]])
    v = np.array([0.0])
    p = np.ones((2, 1, 1))
    on = sv.on_policy_critic_loss(d, pi, f, v, p)
    assert_close(sv.weighted_critic_loss(mu, d, pi, f, v, p), on)
    assert abs(sv.weighted_critic_loss(mu, mu, pi, f, v, p) - on) > 0.5  # w = 1 under mu: wrong target


def test_coverage_and_divergence():
    m = random_dense_mdp(np.random.default_rng(1), S=3, A=2, H=3)
    pi = random_policy(np.random.default_rng(2), 3, 3, 2)
    assert sv.coverage_constant(m.P, m.rho, pi, pi) == pytest.approx(1.0)
    assert sv.comparator_divergence(m.P, m.rho, pi, pi) == pytest.approx(0.0, abs=1e-12)
    mu = pi.copy()
    mu[:, :, 0], mu[:, :, 1] = 1.0, 0.0
    assert sv.coverage_constant(m.P, m.rho, mu, pi) > 1.0
    assert sv.comparator_divergence(m.P, m.rho, mu, pi) > 0


def test_bad_inputs():
    m = random_dense_mdp(np.random.default_rng(0), S=3, A=2, H=2)
    pi = random_policy(np.random.default_rng(0), 2, 3, 2)
    with pytest.raises(ValueError, match=r"^P: expected shape"):
        sv.evaluate_policy(m.P[:, :2], m.r, pi)
    with pytest.raises(ValueError, match=r"^P: rows must sum to 1"):
        sv.evaluate_policy(m.P * 0.5, m.r, pi)
    with pytest.raises(ValueError, match=r"^r: entries must lie in \[0.0, 1.0\]"):
        sv.evaluate_policy(m.P, m.r + 2.0, pi)
    with pytest.raises(ValueError, match=r"^rho: must sum to 1"):
        sv.stage_occupancy(m.P, m.rho * 2, pi)
    with pytest.raises(ValueError, match=r"^eta: must be a finite positive"):
        sv.svmd_bound(1.0, 0.0, 2, 10)
    with pytest.raises(ValueError, match=r"^kappa"):
        sv.svmd_bound(1.0, 0.1, 2, 10, kappa=0.5)
    with pytest.raises(ValueError, match=r"^eps: must lie in \(0, 1\]"):
        sv.critic_error_radius(1.0, 2, 3, 10, 0.1, 0.0, 100)
    with pytest.raises(ValueError, match=r"^mu_h: must be > 0 wherever d_h > 0"):
        sv.weighted_critic_loss([0.0, 1.0], [0.5, 0.5], np.ones((2, 1)), np.zeros((2, 1)), [0.0], np.ones((2, 1, 1)))
    with pytest.raises(ValueError, match=r"^T: must be >= 1"):
        sv.svmd_exact(m.P, m.r, m.rho, pi, 0.1, 0)
