"""Checks of VSR Appendix C (SVMD): Lemmas C.6, C.7, C.8 and Theorem C.5."""

from __future__ import annotations

import numpy as np

from theory import svmd as sv
from theory.checks._registry import Comparison, register_check
from theory.instances import random_dense_mdp, random_policy


@register_check("lemma_c6_performance_difference", "VSR Lemma C.6")
def _c6(rng):
    """J(mu) - J(pi) equals sum_h E_{d_h^mu} <Q_h^pi, mu_h - pi_h> for random MDPs and policies."""
    m = random_dense_mdp(rng)
    pi = random_policy(rng, m.horizon, m.n_states, m.n_actions)
    mu = random_policy(rng, m.horizon, m.n_states, m.n_actions, concentration=0.3)
    lhs = sv.expected_return(m.P, m.r, m.rho, mu) - sv.expected_return(m.P, m.r, m.rho, pi)
    return Comparison(lhs, sv.performance_difference(m.P, m.r, m.rho, mu, pi), "==", scale=m.horizon)


@register_check("lemma_c7_mirror_step", "VSR Lemma C.7")
def _c7(rng):
    """eta <Q_hat, p - pi_t> <= KL(p||pi_t) - KL(p||pi_{t+1}) + eta^2 H^2 / 2."""
    A = int(rng.integers(2, 7))
    H = float(rng.integers(1, 10))
    eta = float(10 ** rng.uniform(-3, 0.5))
    pi_t = rng.dirichlet(np.ones(A))
    p = rng.dirichlet(np.full(A, 0.5))
    Q = rng.uniform(0.0, H, size=A)
    t = sv.mirror_step_terms(p, pi_t, Q, eta, H)
    return Comparison(t.lhs, t.rhs, "<=", scale=abs(t.rhs) + eta * H)


@register_check("lemma_c7_three_point_identity", "VSR Lemma C.7 proof (eq. 28)")
def _c7_three(rng):
    """eta <Q_hat, p - pi_{t+1}> = KL(p||pi_t) - KL(p||pi_{t+1}) - KL(pi_{t+1}||pi_t)."""
    A = int(rng.integers(2, 7))
    H = float(rng.integers(1, 10))
    eta = float(10 ** rng.uniform(-3, 0.5))
    t = sv.mirror_step_terms(rng.dirichlet(np.ones(A)), rng.dirichlet(np.ones(A)), rng.uniform(0, H, size=A), eta, H)
    return Comparison(t.three_point_lhs, t.three_point_rhs, "==", scale=eta * H + 1.0)


@register_check("lemma_c7_drift_bound", "VSR Lemma C.7 proof (eq. 29)")
def _c7_drift(rng):
    """eta <Q_hat, pi_{t+1} - pi_t> <= eta^2 H^2 / 2 + KL(pi_{t+1}||pi_t) (Hoelder + Pinsker)."""
    A = int(rng.integers(2, 7))
    H = float(rng.integers(1, 10))
    eta = float(10 ** rng.uniform(-3, 0.5))
    t = sv.mirror_step_terms(rng.dirichlet(np.ones(A)), rng.dirichlet(np.ones(A)), rng.uniform(-H, H, size=A), eta, H)
    return Comparison(t.drift, t.drift_bound, "<=", scale=eta * H)


@register_check("lemma_c8_reweighting", "VSR Lemma C.8 step 1")
def _c8(rng):
    """The d/mu-weighted critic loss under mu equals the on-policy loss, for any f and return law."""
    S, A, K = int(rng.integers(2, 7)), int(rng.integers(2, 4)), int(rng.integers(2, 5))
    d = rng.dirichlet(np.ones(S))
    eps = float(rng.uniform(0.05, 1.0))
    mu = (1 - eps) * rng.dirichlet(np.full(S, 0.5)) + eps * d
    pi = rng.dirichlet(np.ones(A), size=S)
    Hh = float(rng.integers(1, 8))
    f = rng.uniform(0, Hh, size=(S, A))
    v = np.sort(rng.uniform(0, Hh, size=K))
    p = rng.dirichlet(np.ones(K), size=(S, A))
    lhs = sv.weighted_critic_loss(mu, d, pi, f, v, p)
    return Comparison(lhs, sv.on_policy_critic_loss(d, pi, f, v, p), "==", scale=Hh * Hh)


@register_check("thm_c5_optimal_step", "VSR Thm C.5 (choice of eta)")
def _c5_eta(rng):
    """At eta* the first two terms sum to sqrt(2 D H^3 / T), and no other eta does better."""
    D = float(rng.uniform(0.01, 5.0))
    H, T = int(rng.integers(1, 20)), int(rng.integers(1, 500))
    betas = rng.uniform(0, 0.1, size=H)
    kappa = float(rng.uniform(1, 5))
    eta = sv.optimal_step_size(D, H, T)
    at_opt = sv.svmd_bound(D, eta, H, T, kappa, betas)
    closed = sv.bound_at_optimal_step(D, H, T, kappa, betas)
    other = sv.svmd_bound(D, eta * float(np.exp(rng.normal())), H, T, kappa, betas)
    return [Comparison(at_opt.total, closed, "==", scale=closed), Comparison(at_opt.total, other.total, "<=", scale=closed)]


@register_check("thm_c5_exact_critic", "VSR Thm C.5 with beta_h = 0 (exact critic)")
def _c5_exact(rng):
    """SVMD with Q_hat = Q^{pi_t}: J(mu) - J(pi_bar_T) <= D_mu/(eta T) + eta H^3/2 for any comparator."""
    m = random_dense_mdp(rng)
    H, S, A = m.horizon, m.n_states, m.n_actions
    pi1 = random_policy(rng, H, S, A)
    mu = random_policy(rng, H, S, A, concentration=0.2)
    T = int(rng.integers(1, 40))
    D = sv.comparator_divergence(m.P, m.rho, mu, pi1)
    eta = sv.optimal_step_size(max(D, 1e-6), H, T) * float(np.exp(rng.normal(scale=0.5)))
    _, J = sv.svmd_exact(m.P, m.r, m.rho, pi1, eta, T)
    gap = sv.expected_return(m.P, m.r, m.rho, mu) - float(J.mean())
    return Comparison(gap, sv.svmd_bound(D, eta, H, T).total, "<=", scale=H)
