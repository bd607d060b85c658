"""SVMD (State-Visitation Policy Mirror Descent) theory: VSR Appendix C.

Dense NumPy reference over an explicit finite-horizon MDP, used to check the lemmas exactly:

* ``P[h, s, a, s']`` stage-dependent transitions (a stationary ``P[s, a, s']`` is broadcast),
* ``r[h, s, a]`` rewards in [0, 1], ``rho[s]`` initial distribution,
* policies ``pi[h, s, a]`` (stage-dependent), horizon ``H = pi.shape[0]``.

The sampled algorithm and its large-scale exact solvers live in ``gridworld/``; this module
is the small, obviously-correct reference they are tested against. Stages are 0-based here
(the paper counts 1..H).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory._validate import (
    as_array,
    check_in_range,
    check_nonnegative,
    check_positive_scalar,
    check_probability,
    check_simplex,
)


# ---------------------------------------------------------------------------------------------
# Finite-horizon MDP evaluation
# ---------------------------------------------------------------------------------------------


def _mdp(P, r, pi) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pi = as_array(pi, "pi", ndim=3)
    H, S, A = pi.shape
    check_simplex(pi, "pi", axis=2)
    P = as_array(P, "P", ndim=(3, 4))
    if P.ndim == 3:
        P = np.broadcast_to(P, (H,) + P.shape)
    if P.shape != (H, S, A, S):
        raise ValueError(f"P: expected shape ({H}, {S}, {A}, {S}) or ({S}, {A}, {S}), got {P.shape}")
    check_simplex(P, "P", axis=3)
    r = as_array(r, "r", ndim=(2, 3))
    if r.ndim == 2:
        r = np.broadcast_to(r, (H,) + r.shape)
    if r.shape != (H, S, A):
        raise ValueError(f"r: expected shape ({H}, {S}, {A}) or ({S}, {A}), got {r.shape}")
    check_in_range(r, "r", 0.0, 1.0)
    return P, r, pi


def evaluate_policy(P, r, pi) -> tuple[np.ndarray, np.ndarray]:
    """``Q[h, s, a]`` and ``V[h, s]`` (with ``V[H] = 0``) by backward induction (App. C.1)."""
    P, r, pi = _mdp(P, r, pi)
    H, S, A = pi.shape
    V = np.zeros((H + 1, S))
    Q = np.zeros((H, S, A))
    for h in range(H - 1, -1, -1):
        Q[h] = r[h] + P[h] @ V[h + 1]
        V[h] = np.einsum("sa,sa->s", pi[h], Q[h])
    return Q, V


def stage_occupancy(P, rho, pi) -> np.ndarray:
    """``d[h, s] = Pr(s_h = s)`` under ``pi`` from ``rho`` (forward recursion)."""
    pi = as_array(pi, "pi", ndim=3)
    H, S, A = pi.shape
    P, _, pi = _mdp(P, np.zeros((S, A)), pi)
    rho = check_simplex(as_array(rho, "rho", ndim=1, shape=(S,)), "rho")
    d = np.zeros((H, S))
    d[0] = rho
    for h in range(H - 1):
        d[h + 1] = np.einsum("s,sa,sat->t", d[h], pi[h], P[h])
    return d


def expected_return(P, r, rho, pi) -> float:
    """``J(pi) = E_{s ~ rho}[V_0(s)]``."""
    _, V = evaluate_policy(P, r, pi)
    rho = check_simplex(as_array(rho, "rho", ndim=1, shape=(V.shape[1],)), "rho")
    return float(rho @ V[0])


def performance_difference(P, r, rho, mu, pi) -> float:
    """Right-hand side of Lemma C.6: ``sum_h E_{s ~ d_h^mu} <Q_h^pi(s, .), mu_h - pi_h>``."""
    Q, _ = evaluate_policy(P, r, pi)
    d_mu = stage_occupancy(P, rho, mu)
    mu = as_array(mu, "mu", shape=Q.shape)
    return float(np.einsum("hs,hsa,hsa->", d_mu, Q, mu - as_array(pi, "pi", shape=Q.shape)))


# ---------------------------------------------------------------------------------------------
# Mirror step (Lemma C.7)
# ---------------------------------------------------------------------------------------------


def kl(p, q) -> np.ndarray:
    """Row-wise ``KL(p || q)`` over the last axis (0 log 0 = 0; inf if p > 0 where q = 0)."""
    p = as_array(p, "p")
    q = as_array(q, "q", shape=p.shape)
    check_nonnegative(p, "p")
    check_nonnegative(q, "q")
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - np.log(q)), 0.0)
    # KL >= 0 (Gibbs); clamp the rounding-level negatives of KL(p || p) ~ -1e-16
    return np.maximum(terms.sum(axis=-1), 0.0)


def mirror_step(pi, Q_hat, eta: float) -> np.ndarray:
    """KL-regularised mirror ascent ``pi'(a|s) ∝ pi(a|s) exp(eta Q_hat(s, a))`` (Algorithm 2, line 7).

    Works on any array whose last axis is the action axis; computed in log space.
    """
    pi = check_simplex(as_array(pi, "pi"), "pi", axis=-1)
    Q_hat = as_array(Q_hat, "Q_hat", shape=pi.shape)
    eta = check_positive_scalar(eta, "eta", strict=False)
    with np.errstate(divide="ignore"):
        logits = np.log(pi) + eta * Q_hat
    logits = logits - logits.max(axis=-1, keepdims=True)
    w = np.exp(logits)
    return w / w.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class MirrorStepTerms:
    """Terms of Lemma C.7 for one state: ``lhs <= rhs`` and the three-point identity (eq. 28)."""

    lhs: float  #: eta <Q_hat, p - pi_t>
    rhs: float  #: KL(p||pi_t) - KL(p||pi_{t+1}) + eta^2 H^2 / 2
    three_point_lhs: float  #: eta <Q_hat, p - pi_{t+1}>
    three_point_rhs: float  #: KL(p||pi_t) - KL(p||pi_{t+1}) - KL(pi_{t+1}||pi_t)
    drift: float  #: eta <Q_hat, pi_{t+1} - pi_t>
    drift_bound: float  #: eta^2 H^2 / 2 + KL(pi_{t+1}||pi_t)   (eq. 29)


def mirror_step_terms(p, pi_t, Q_hat, eta: float, H: float) -> MirrorStepTerms:
    """Evaluate Lemma C.7 at one state for comparator ``p`` (requires ``||Q_hat||_inf <= H``)."""
    p = check_simplex(as_array(p, "p", ndim=1), "p")
    pi_t = check_simplex(as_array(pi_t, "pi_t", ndim=1, shape=p.shape), "pi_t")
    Q_hat = as_array(Q_hat, "Q_hat", ndim=1, shape=p.shape)
    H = check_positive_scalar(H, "H")
    if np.max(np.abs(Q_hat)) > H * (1 + 1e-12):
        raise ValueError(f"Q_hat: must satisfy ||Q_hat||_inf <= H = {H} (got {np.max(np.abs(Q_hat)):.6g})")
    nxt = mirror_step(pi_t, Q_hat, eta)
    k_t, k_n, k_nt = float(kl(p, pi_t)), float(kl(p, nxt)), float(kl(nxt, pi_t))
    return MirrorStepTerms(
        lhs=eta * float(Q_hat @ (p - pi_t)),
        rhs=k_t - k_n + 0.5 * eta**2 * H**2,
        three_point_lhs=eta * float(Q_hat @ (p - nxt)),
        three_point_rhs=k_t - k_n - k_nt,
        drift=eta * float(Q_hat @ (nxt - pi_t)),
        drift_bound=0.5 * eta**2 * H**2 + k_nt,
    )


# ---------------------------------------------------------------------------------------------
# Theorem C.5 and its ingredients
# ---------------------------------------------------------------------------------------------


def comparator_divergence(P, rho, mu, pi1) -> float:
    """``D_mu = sum_h E_{s ~ d_h^mu} KL(mu_h(.|s) || pi_{1,h}(.|s))`` (Thm C.5)."""
    d_mu = stage_occupancy(P, rho, mu)
    mu = as_array(mu, "mu", ndim=3)
    pi1 = as_array(pi1, "pi1", shape=mu.shape)
    k = kl(mu, pi1)
    live = d_mu > 0
    if np.any(~np.isfinite(k[live])):
        raise ValueError("pi1: KL(mu || pi1) is infinite on the support of d^mu (mu puts mass where pi1 has none)")
    return float(np.sum(np.where(live, d_mu * k, 0.0)))


def coverage_constant(P, rho, mu, pi) -> float:
    """Smallest ``kappa`` with ``nu_h^mu(s, a) <= kappa nu_h^pi(s, a)`` for all h, s, a (Assumption C.3)."""
    d_mu = stage_occupancy(P, rho, mu)
    d_pi = stage_occupancy(P, rho, pi)
    nu_mu = d_mu[..., None] * as_array(mu, "mu", ndim=3)
    nu_pi = d_pi[..., None] * as_array(pi, "pi", ndim=3)
    if np.any((nu_mu > 0) & (nu_pi <= 0)):
        return float("inf")
    ratio = np.where(nu_mu > 0, nu_mu / np.where(nu_pi > 0, nu_pi, 1.0), 0.0)
    return max(1.0, float(ratio.max()))


def critic_error_radius(C: float, H: int, T: int, class_size: float, delta: float, eps: float, N: int) -> float:
    """``beta_h = sqrt(C H^2 log(H T |F_h| / delta) / (eps N_h))`` (Thm C.5; Lemma C.8 + union bound)."""
    C = check_positive_scalar(C, "C")
    for name, val in (("H", H), ("T", T), ("N", N)):
        if int(val) != val or val < 1:
            raise ValueError(f"{name}: must be a positive integer, got {val!r}")
    if class_size < 1:
        raise ValueError(f"class_size: |F_h| must be >= 1, got {class_size}")
    delta = check_probability(delta, "delta", open_low=True, open_high=True)
    eps = check_probability(eps, "eps", open_low=True)
    return float(np.sqrt(C * H**2 * np.log(H * T * class_size / delta) / (eps * N)))


@dataclass(frozen=True)
class SVMDBound:
    """Theorem C.5 right-hand side, term by term."""

    optimization: float  #: D_mu / (eta T)
    drift: float  #: eta H^3 / 2
    critic: float  #: 2 kappa sum_h beta_h
    total: float


def svmd_bound(D_mu: float, eta: float, H: int, T: int, kappa: float = 1.0, betas=()) -> SVMDBound:
    """``J(mu) - J(pi_bar_T) <= D_mu/(eta T) + eta H^3/2 + 2 kappa sum_h beta_h`` (Thm C.5)."""
    D_mu = check_positive_scalar(D_mu, "D_mu", strict=False)
    eta = check_positive_scalar(eta, "eta")
    if H < 1 or T < 1:
        raise ValueError(f"H, T: must be >= 1, got H={H}, T={T}")
    if kappa < 1:
        raise ValueError(f"kappa: coverage constant must be >= 1, got {kappa}")
    betas = check_nonnegative(as_array(betas, "betas", ndim=1, allow_empty=True), "betas")
    opt = D_mu / (eta * T)
    drift = eta * H**3 / 2.0
    critic = 2.0 * kappa * float(betas.sum())
    return SVMDBound(opt, drift, critic, opt + drift + critic)


def optimal_step_size(D_mu: float, H: int, T: int) -> float:
    """``eta* = sqrt(2 D_mu / (H^3 T))`` minimises the first two terms of Thm C.5."""
    D_mu = check_positive_scalar(D_mu, "D_mu")
    return float(np.sqrt(2.0 * D_mu / (H**3 * T)))


def bound_at_optimal_step(D_mu: float, H: int, T: int, kappa: float = 1.0, betas=()) -> float:
    """``sqrt(2 D_mu H^3 / T) + 2 kappa sum_h beta_h`` (Thm C.5, second form)."""
    betas = check_nonnegative(as_array(betas, "betas", ndim=1, allow_empty=True), "betas")
    return float(np.sqrt(2.0 * D_mu * H**3 / T) + 2.0 * kappa * betas.sum())


# ---------------------------------------------------------------------------------------------
# Lemma C.8 step 1: the importance-weighted critic loss equals the on-policy loss
# ---------------------------------------------------------------------------------------------


def weighted_critic_loss(mu_h, d_h, pi_h, f, G_values, G_probs) -> float:
    """``E_{s~mu_h, a~pi_h, G}[w(s) (f(s,a) - G)^2]`` with ``w = d_h / mu_h`` (Lemma C.8).

    ``G_values[k]`` is a shared support for returns-to-go, ``G_probs[s, a, k]`` their law.
    """
    d_h = check_simplex(as_array(d_h, "d_h", ndim=1), "d_h")
    mu_h = check_simplex(as_array(mu_h, "mu_h", ndim=1, shape=d_h.shape), "mu_h")
    pi_h = check_simplex(as_array(pi_h, "pi_h", ndim=2, shape=(d_h.shape[0], None)), "pi_h", axis=1)
    f = as_array(f, "f", shape=pi_h.shape)
    v = as_array(G_values, "G_values", ndim=1)
    p = check_simplex(as_array(G_probs, "G_probs", ndim=3, shape=pi_h.shape + (v.shape[0],)), "G_probs", axis=2)
    if np.any((d_h > 0) & (mu_h <= 0)):
        raise ValueError("mu_h: must be > 0 wherever d_h > 0 (Assumption C.4)")
    w = np.where(mu_h > 0, d_h / np.where(mu_h > 0, mu_h, 1.0), 0.0)
    sq = np.einsum("sak,sak->sa", p, (f[..., None] - v[None, None, :]) ** 2)
    return float(np.einsum("s,s,sa,sa->", mu_h, w, pi_h, sq))


def on_policy_critic_loss(d_h, pi_h, f, G_values, G_probs) -> float:
    """``E_{(s,a) ~ nu_h^pi, G}[(f(s,a) - G)^2]`` (Lemma C.8)."""
    return weighted_critic_loss(d_h, d_h, pi_h, f, G_values, G_probs)


# ---------------------------------------------------------------------------------------------
# Exact-critic SVMD (N -> infinity) on a dense MDP: the reference the sampled version is checked against
# ---------------------------------------------------------------------------------------------


def svmd_exact(P, r, rho, pi1, eta: float, T: int) -> tuple[np.ndarray, np.ndarray]:
    """Run T iterations of SVMD with the exact critic ``Q_hat = Q^{pi_t}``.

    Returns ``policies[t, h, s, a]`` for ``t = 0..T-1`` (pi_1..pi_T) and their returns ``J[t]``;
    the output of Algorithm 2 is their uniform mixture, with ``J(pi_bar_T) = mean(J)``.
    With an exact critic the proposal (and sigma) only affects which states are sampled, so it
    plays no role here.
    """
    if T < 1:
        raise ValueError(f"T: must be >= 1, got {T}")
    pi = np.array(as_array(pi1, "pi1", ndim=3))
    pols, J = [], []
    for _ in range(T):
        Q, V = evaluate_policy(P, r, pi)
        pols.append(pi.copy())
        J.append(float(check_simplex(as_array(rho, "rho", ndim=1), "rho") @ V[0]))
        pi = mirror_step(pi, Q, eta)
    return np.stack(pols), np.array(J)
