"""Variance of the importance-weighted policy gradient and its optimal state proposal.

VSR Appendix B, over an explicit finite problem:

* ``d[s]``         state-visitation distribution d^pi (a probability vector),
* ``pi[s, a]``     the policy pi(a|s) (rows on the simplex),
* ``g[s, a, p]``   score vectors grad log pi(a|s); they must be centred, sum_a pi g = 0,
* rewards as a discrete law on a shared support: ``r_values[k]`` and ``r_probs[s, a, k]``
  = Pr(r = r_values[k] | s, a) (binary outcomes: ``r_values = [0, 1]``), or directly by their
  first two moments ``m1[s, a] = E[r|s,a]``, ``m2[s, a] = E[r^2|s,a]``,
* ``H[s, a] = ||g(s, a)||^2``, baselines ``b[s]`` and proposals ``mu[s]``.

The estimator is ``g_hat = (d(s)/mu(s)) (r - b(s)) g(s, a)`` with ``s ~ mu, a ~ pi(.|s)``.
It is unbiased, and its variance finite, exactly when ``mu > 0`` wherever
``d(s) M_b(s) > 0`` (states where ``(r - b) g`` vanishes almost surely contribute nothing);
that is the support condition validated here. The paper states the stronger
``supp mu >= supp d``; the weaker one is what the unsmoothed ``mu_var`` (zero where sigma = 0)
needs.

Sign convention: every *gap* here is ``V(d) - V(mu)`` (on-policy minus proposal), which is
``>= 0`` when the proposal ``mu`` has the smaller variance (the paper's Thm B.5 form, eq. 21).
Lemma B.8 (eq. 25) is written in the paper for ``V(mu_var) - V(d)``; its terms ``jensen`` and
``coupling`` keep the paper's signs, so ``gap = -(jensen + coupling)`` when ``sigma > 0`` on d.

Where this module departs from the paper: Lemma B.8 is stated for ``sigma > 0``
d-almost everywhere; :func:`variance_gap_decomposition` also handles states with
``sigma = 0`` by tracking the mass ``q = d(sigma > 0)`` explicitly (an extra, non-positive
term appears; see its docstring).
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
    check_support,
)

#: Score vectors must satisfy |sum_a pi(a|s) g(s,a)| <= SCORE_ATOL * (1 + max |g|).
SCORE_ATOL = 1e-8


# ---------------------------------------------------------------------------------------------
# Validation of the finite problem
# ---------------------------------------------------------------------------------------------


def _dist(d, name: str = "d") -> np.ndarray:
    return check_simplex(as_array(d, name, ndim=1), name)


def _policy(pi, n_states: int | None = None, name: str = "pi") -> np.ndarray:
    pi = as_array(pi, name, ndim=2, shape=(n_states, None))
    return check_simplex(pi, name, axis=1)


def _pair(x, pi: np.ndarray, name: str) -> np.ndarray:
    return as_array(x, name, ndim=2, shape=pi.shape)


def _state_vec(x, n_states: int, name: str) -> np.ndarray:
    return as_array(x, name, ndim=1, shape=(n_states,))


def check_score_vectors(pi, g, *, name: str = "g") -> np.ndarray:
    """Validate ``g[s, a, p]`` as score vectors of ``pi``: finite and ``sum_a pi g = 0``."""
    pi = _policy(pi)
    g = as_array(g, name, ndim=3, shape=(pi.shape[0], pi.shape[1], None))
    mean = np.einsum("sa,sap->sp", pi, g)
    tol = SCORE_ATOL * (1.0 + float(np.max(np.abs(g))))
    if np.max(np.abs(mean)) > tol:
        s = int(np.argmax(np.max(np.abs(mean), axis=1)))
        raise ValueError(
            f"{name}: not a score function of pi: sum_a pi(a|s) g(s,a) must be 0 "
            f"(state {s} has |mean| {np.max(np.abs(mean[s])):.3g})"
        )
    return g


def reward_moments(r_values, r_probs) -> tuple[np.ndarray, np.ndarray]:
    """First and second moments ``m1[s,a], m2[s,a]`` of a discrete reward law ``r_probs[s,a,k]``."""
    v = as_array(r_values, "r_values", ndim=1)
    p = as_array(r_probs, "r_probs", ndim=3, shape=(None, None, v.shape[0]))
    check_simplex(p, "r_probs", axis=2)
    return p @ v, p @ (v * v)


def bernoulli_moments(q) -> tuple[np.ndarray, np.ndarray]:
    """Moments of binary rewards with success probabilities ``q[s, a]`` (m1 = m2 = q)."""
    q = as_array(q, "q", ndim=2)
    check_in_range(q, "q", 0.0, 1.0)
    return q.copy(), q.copy()


def _moments(pi: np.ndarray, m1, m2) -> tuple[np.ndarray, np.ndarray]:
    m1 = _pair(m1, pi, "m1")
    m2 = _pair(m2, pi, "m2")
    check_nonnegative(m2, "m2")
    # Jensen: E[r^2] >= E[r]^2 for a genuine reward law.
    gap = m2 - m1 * m1
    if np.any(gap < -1e-12 * (1.0 + m2)):
        idx = tuple(int(i) for i in np.argwhere(gap < -1e-12 * (1.0 + m2))[0])
        raise ValueError(f"m2: second moment below squared mean at {idx} (not a valid reward law)")
    return m1, m2


# ---------------------------------------------------------------------------------------------
# Per-state quantities
# ---------------------------------------------------------------------------------------------


def score_norms(g) -> np.ndarray:
    """``H[s, a] = ||g(s, a)||^2`` (VSR §2.2, before eq. (5))."""
    g = as_array(g, "g", ndim=3)
    return np.einsum("sap,sap->sa", g, g)


def tabular_softmax_scores(pi) -> np.ndarray:
    """Score vectors of a tabular softmax policy w.r.t. its own logits.

    For state s the parameters are the logits theta[s, :], so
    ``g[s, a] = e_s (x) (e_a - pi(.|s))``; returned as ``g[s, a, s'*A + a']``.
    """
    pi = _policy(pi)
    S, A = pi.shape
    g = np.zeros((S, A, S * A))
    for s in range(S):
        g[s, :, s * A : (s + 1) * A] = np.eye(A) - pi[s][None, :]
    return g


def state_reward_mean(pi, m1) -> np.ndarray:
    """``r_bar(s) = E_{a~pi}[r | s]``."""
    pi = _policy(pi)
    # divide by the row sums so that a constant reward gives exactly that constant
    return np.einsum("sa,sa->s", pi, _pair(m1, pi, "m1")) / pi.sum(axis=1)


def state_reward_std(pi, m1, m2) -> np.ndarray:
    """``sigma_pi(s) = sqrt(Var(r | s))`` over a ~ pi and reward noise (VSR §2.2, after eq. (9))."""
    pi = _policy(pi)
    m1, m2 = _moments(pi, m1, m2)
    rbar = state_reward_mean(pi, m1)
    # law of total variance: within-action noise + spread of the action means; both terms are
    # non-negative and exactly zero for deterministic outcomes (no cancellation)
    var = np.einsum("sa,sa->s", pi, np.maximum(m2 - m1 * m1, 0.0) + (m1 - rbar[:, None]) ** 2) / pi.sum(axis=1)
    return np.sqrt(var)


def binary_sigma(p) -> np.ndarray:
    """``sigma = sqrt(p (1 - p))`` for binary rewards with success probability ``p``."""
    p = as_array(p, "p", ndim=(0, 1, 2))
    check_in_range(p, "p", 0.0, 1.0)
    return np.sqrt(p * (1.0 - p))


def signal_second_moment(pi, H, m1, m2, b) -> np.ndarray:
    """``M_b(s) = E_a[(r - b(s))^2 H(s, a)]`` (VSR eq. 12)."""
    pi = _policy(pi)
    H = _pair(H, pi, "H")
    check_nonnegative(H, "H")
    m1, m2 = _moments(pi, m1, m2)
    b = _state_vec(b, pi.shape[0], "b")
    # E[(r - b)^2 | s, a] = Var(r | s, a) + (E[r | s, a] - b)^2, computed without cancellation
    return np.einsum("sa,sa,sa->s", pi, H, np.maximum(m2 - m1 * m1, 0.0) + (m1 - b[:, None]) ** 2)


def policy_gradient(d, pi, g, m1) -> np.ndarray:
    """``grad J = E_{s~d, a~pi}[r g(s,a)]``, a vector of length P (baseline-free form)."""
    d = _dist(d)
    pi = _policy(pi, d.shape[0])
    g = check_score_vectors(pi, g)
    m1 = _pair(m1, pi, "m1")
    return np.einsum("s,sa,sa,sap->p", d, pi, m1, g)


def optimal_baseline(pi, H, m1) -> np.ndarray:
    """Statewise trace-variance-optimal baseline ``b*_w(s) = E[r H | s] / E[H | s]`` (Thm B.2, eq. 14).

    Where ``E[H | s] = 0`` every baseline is optimal; ``r_bar(s)`` is returned there.
    """
    pi = _policy(pi)
    H = check_nonnegative(_pair(H, pi, "H"), "H")
    m1 = _pair(m1, pi, "m1")
    num = np.einsum("sa,sa,sa->s", pi, m1, H)
    den = np.einsum("sa,sa->s", pi, H)
    rbar = np.einsum("sa,sa->s", pi, m1)
    out = rbar.copy()
    pos = den > 0
    out[pos] = num[pos] / den[pos]
    return out


def conditional_gradient_scale(pi, H, r_probs) -> tuple[np.ndarray, np.ndarray]:
    """``G[s, k] = E[H | s, r = r_values[k]]`` and ``Pr(r = r_values[k] | s)`` (Assumption B.3).

    Entries with zero reward probability are ``nan`` (the conditional is undefined there).
    """
    pi = _policy(pi)
    H = check_nonnegative(_pair(H, pi, "H"), "H")
    p = as_array(r_probs, "r_probs", ndim=3, shape=(pi.shape[0], pi.shape[1], None))
    check_simplex(p, "r_probs", axis=2)
    joint = np.einsum("sa,sak->sk", pi, p)
    num = np.einsum("sa,sa,sak->sk", pi, H, p)
    G = np.full_like(joint, np.nan)
    pos = joint > np.finfo(np.float64).tiny  # subnormal probabilities carry no precision
    G[pos] = num[pos] / joint[pos]
    return G, joint


@dataclass(frozen=True)
class GradientScaleReport:
    """How far a problem is from Assumptions B.3 / B.4."""

    G: np.ndarray  #: G[s, k] = E[H | s, r = v_k] (nan where Pr(r = v_k | s) = 0)
    G_state: np.ndarray  #: E[H | s]
    b3_max_deviation: float  #: max_s max_k |G[s,k] - E[H|s]| over observed rewards
    b4_spread: float  #: max - min of E[H|s] over states with d(s) > 0
    b3_holds: bool
    b4_holds: bool


def gradient_scale_report(d, pi, H, r_probs, *, rtol: float = 1e-9) -> GradientScaleReport:
    """Test Assumption B.3 (E[H|s,r] = G(s)) and B.4 (G constant on the support of d)."""
    d = _dist(d)
    pi = _policy(pi, d.shape[0])
    G, joint = conditional_gradient_scale(pi, H, r_probs)
    G_state = np.einsum("sa,sa->s", pi, _pair(H, pi, "H"))
    dev = np.where(np.isfinite(G), np.abs(np.nan_to_num(G) - G_state[:, None]), 0.0)
    dev = np.where(d[:, None] > 0, dev, 0.0)
    b3 = float(dev.max()) if dev.size else 0.0
    live = G_state[d > 0]
    spread = float(live.max() - live.min()) if live.size else 0.0
    scale = float(max(1.0, np.max(np.abs(G_state))))
    return GradientScaleReport(G, G_state, b3, spread, b3 <= rtol * scale, spread <= rtol * scale)


# ---------------------------------------------------------------------------------------------
# Proposals
# ---------------------------------------------------------------------------------------------


def neyman_proposal(d, score) -> np.ndarray:
    """``mu(s) = d(s) score(s) / sum_s' d(s') score(s')`` (Neyman allocation).

    ``score = sigma`` gives mu_var (Thm B.5, eq. 19); ``score = sqrt(M*_w)`` gives the exact
    joint optimum mu* (Thm B.2, eq. 16).
    """
    d = _dist(d)
    score = check_nonnegative(_state_vec(score, d.shape[0], "score"), "score")
    w = d * score
    z = w.sum()
    if z <= 0:
        raise ValueError("score: d * score has no mass (score is zero on the support of d); the proposal is undefined")
    return w / z


def variance_proposal(d, sigma) -> np.ndarray:
    """``mu_var(s) ∝ d^pi(s) sigma_pi(s)`` (VSR eq. 1 / eq. 19)."""
    return neyman_proposal(d, sigma)


def smoothed_proposal(mu, d, eps: float) -> np.ndarray:
    """``mu_eps = (1 - eps) mu + eps d`` (VSR §2.3; App. C.2, Algorithm 2 line 4); full support for eps > 0."""
    d = _dist(d)
    mu = _dist(mu, "mu")
    if mu.shape != d.shape:
        raise ValueError(f"mu: shape {mu.shape} does not match d shape {d.shape}")
    eps = check_probability(eps, "eps")
    return (1.0 - eps) * mu + eps * d


def importance_weights(d, mu) -> np.ndarray:
    """``w(s) = d(s) / mu(s)`` where mu > 0 (0 elsewhere). For mu_eps, w <= 1/eps."""
    d = _dist(d)
    mu = _dist(mu, "mu")
    out = np.zeros_like(d)
    pos = mu > 0
    out[pos] = d[pos] / mu[pos]
    return out


# ---------------------------------------------------------------------------------------------
# Variance (Lemma B.1) and its optimum (Thm B.2)
# ---------------------------------------------------------------------------------------------


def trace_variance_from_M(d, mu, M, grad_norm_sq: float) -> float:
    """``V(mu; b) = sum_s d(s)^2 / mu(s) M_b(s) - ||grad J||^2`` (Lemma B.1, eq. 13).

    Validates the support condition ``mu > 0`` wherever ``d M_b > 0``.
    """
    d = _dist(d)
    mu = _dist(mu, "mu")
    M = check_nonnegative(_state_vec(M, d.shape[0], "M"), "M")
    if mu.shape != d.shape:
        raise ValueError(f"mu: shape {mu.shape} does not match d shape {d.shape}")
    live = d * M > 0
    check_support(mu, "mu", live, "d(s) M_b(s) > 0")
    return float(np.sum(d[live] ** 2 / mu[live] * M[live]) - grad_norm_sq)


def trace_variance(d, mu, pi, g, m1, m2, b) -> float:
    """Lemma B.1: ``V(mu; b) = E_{s~d}[(d/mu) M_b(s)] - ||grad J||^2`` from the moments."""
    grad = policy_gradient(d, pi, g, m1)
    M = signal_second_moment(pi, score_norms(g), m1, m2, b)
    return trace_variance_from_M(d, mu, M, float(grad @ grad))


def estimator_moments_direct(d, mu, pi, g, r_values, r_probs, b) -> tuple[np.ndarray, float]:
    """Mean vector and trace covariance of ``g_hat`` by enumerating every (s, a, r) outcome.

    This is the *definition* ``tr Cov = E||g_hat||^2 - ||E g_hat||^2``, computed without
    Lemma B.1; it is the oracle the lemma is checked against.
    """
    d = _dist(d)
    mu = _dist(mu, "mu")
    pi = _policy(pi, d.shape[0])
    g = check_score_vectors(pi, g)
    v = as_array(r_values, "r_values", ndim=1)
    p = as_array(r_probs, "r_probs", ndim=3, shape=(pi.shape[0], pi.shape[1], v.shape[0]))
    check_simplex(p, "r_probs", axis=2)
    b = _state_vec(b, d.shape[0], "b")
    M = signal_second_moment(pi, score_norms(g), p @ v, p @ (v * v), b)
    check_support(mu, "mu", d * M > 0, "d(s) M_b(s) > 0")
    mean = np.zeros(g.shape[2])
    second = 0.0
    for s in range(d.shape[0]):
        if mu[s] <= 0:
            continue  # never sampled; (r - b) g = 0 a.s. there, so it owes nothing to the target
        w = d[s] / mu[s]
        for a in range(pi.shape[1]):
            for k in range(v.shape[0]):
                prob = mu[s] * pi[s, a] * p[s, a, k]
                if prob == 0:
                    continue
                x = w * (v[k] - b[s]) * g[s, a]
                mean += prob * x
                second += prob * float(x @ x)
    return mean, second - float(mean @ mean)


def sample_estimator(rng: np.random.Generator, n: int, d, mu, pi, g, r_values, r_probs, b) -> np.ndarray:
    """Draw ``n`` i.i.d. copies of ``g_hat`` (rows of the returned ``[n, P]`` array)."""
    d = _dist(d)
    mu = _dist(mu, "mu")
    pi = _policy(pi, d.shape[0])
    g = as_array(g, "g", ndim=3, shape=(pi.shape[0], pi.shape[1], None))
    v = as_array(r_values, "r_values", ndim=1)
    p = as_array(r_probs, "r_probs", ndim=3, shape=(pi.shape[0], pi.shape[1], v.shape[0]))
    b = _state_vec(b, d.shape[0], "b")
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    s = rng.choice(d.shape[0], size=n, p=mu)
    u = rng.random(n)
    a = (np.cumsum(pi[s], axis=1) < u[:, None]).sum(axis=1).clip(max=pi.shape[1] - 1)
    u2 = rng.random(n)
    k = (np.cumsum(p[s, a], axis=1) < u2[:, None]).sum(axis=1).clip(max=v.shape[0] - 1)
    w = np.zeros(n)
    pos = mu[s] > 0
    w[pos] = d[s[pos]] / mu[s[pos]]
    return (w * (v[k] - b[s]))[:, None] * g[s, a]


def optimal_signal_moment(pi, H, m1, m2) -> np.ndarray:
    """``M*_w(s) = E[(r - b*_w(s))^2 H | s]`` (eq. 15)."""
    return signal_second_moment(pi, H, m1, m2, optimal_baseline(pi, H, m1))


def optimal_proposal(d, pi, H, m1, m2) -> np.ndarray:
    """Joint optimum ``mu*(s) ∝ d(s) sqrt(M*_w(s))`` (Thm B.2, eq. 16)."""
    return neyman_proposal(d, np.sqrt(optimal_signal_moment(pi, H, m1, m2)))


def minimal_trace_variance(d, M_star, grad_norm_sq: float) -> float:
    """``min_{b, mu} V = (sum_s d sqrt(M*))^2 - ||grad J||^2`` (Cauchy-Schwarz value of Thm B.2)."""
    d = _dist(d)
    M_star = check_nonnegative(_state_vec(M_star, d.shape[0], "M_star"), "M_star")
    return float(np.sum(d * np.sqrt(M_star)) ** 2 - grad_norm_sq)


# ---------------------------------------------------------------------------------------------
# Clean case (Thm B.5) and the weak version (Lemma B.8, Lemma B.9, Thm B.7, Remark B.10)
# ---------------------------------------------------------------------------------------------


def _moment_d(d: np.ndarray, x: np.ndarray) -> float:
    return float(np.sum(d * x))


def _var_d(d: np.ndarray, x: np.ndarray) -> float:
    m = _moment_d(d, x)
    return max(_moment_d(d, (x - m) ** 2), 0.0)


def _cov_d(d: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return _moment_d(d, (x - _moment_d(d, x)) * (y - _moment_d(d, y)))


def clean_variance_gap(d, sigma, G0: float) -> float:
    """``V(d; r_bar) - V(mu_var; r_bar) = G0 Var_{s~d}(sigma)`` (Thm B.5, eq. 21).

    ``Var_{s~d}(sigma)`` is over all of ``d``, states with ``sigma = 0`` included
    (:attr:`GapDecomposition.var_sigma_all`), not the ``{sigma > 0}``-restricted variance of
    Lemma B.8 (:attr:`GapDecomposition.var_sigma_positive`).
    """
    d = _dist(d)
    sigma = check_nonnegative(_state_vec(sigma, d.shape[0], "sigma"), "sigma")
    G0 = check_positive_scalar(G0, "G0")
    return G0 * _var_d(d, sigma)


def standardized_weight(d, sigma) -> np.ndarray:
    """Proposal-corrected weight ``d / mu_var = E_d[sigma] / sigma`` on sigma > 0 (Thm B.5, eq. 20).

    Multiplying ``(r - r_bar) g`` by it gives ``E_d[sigma] (r - r_bar)/sigma g``: GRPO's
    standardized-residual form up to the constant ``E_d[sigma]``. Zero where sigma = 0.
    """
    d = _dist(d)
    sigma = check_nonnegative(_state_vec(sigma, d.shape[0], "sigma"), "sigma")
    z = _moment_d(d, sigma)
    if z <= 0:
        raise ValueError("sigma: zero on the support of d; mu_var is undefined")
    out = np.zeros_like(sigma)
    pos = sigma > 0
    out[pos] = z / sigma[pos]
    return out


def gradient_ratio_K(M, sigma) -> tuple[np.ndarray, np.ndarray]:
    """``K(s) = M(s) / sigma(s)^2`` on ``{sigma > 0}`` (eq. 22); returns ``(K, mask)``, K = nan off the mask."""
    M = check_nonnegative(as_array(M, "M", ndim=1), "M")
    sigma = check_nonnegative(as_array(sigma, "sigma", ndim=1, shape=M.shape), "sigma")
    mask = sigma > 0
    K = np.full_like(M, np.nan)
    K[mask] = M[mask] / sigma[mask] ** 2
    return K, mask


def _restricted(d, sigma, K) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    d = _dist(d)
    sigma = check_nonnegative(_state_vec(sigma, d.shape[0], "sigma"), "sigma")
    K = np.asarray(K, dtype=np.float64)  # may be nan off {sigma > 0}; validated on the mask below
    if K.shape != d.shape:
        raise ValueError(f"K: expected shape {d.shape}, got {K.shape}")
    mask = (sigma > 0) & (d > 0)
    q = min(float(d[mask].sum()), 1.0)
    if q <= 0:
        raise ValueError("sigma: zero on the support of d; the effective support {sigma > 0} is empty")
    Km = K[mask]
    if np.any(~np.isfinite(Km)) or np.any(Km < 0):
        raise ValueError("K: must be finite and non-negative on {sigma > 0}")
    return d[mask] / q, sigma[mask], Km, q


@dataclass(frozen=True)
class GapDecomposition:
    """Lemma B.8 with moments under ``d`` restricted (and renormalised) to ``{sigma > 0}``.

    ``gap = V(d) - V(mu_var) = -q * (jensen + coupling + zero_sigma)`` where ``q = d(sigma > 0)``
    (the module's sign convention: ``>= 0`` when mu_var is better).  The three terms keep the
    signs of the paper's eq. (25), which is written for ``V(mu_var) - V(d)``: with ``q = 1``,
    ``V(mu_var) - V(d) = jensen + coupling`` exactly; ``zero_sigma = -(1 - q) E[sigma] E[sigma K] <= 0``
    accounts for the states with ``sigma = 0`` that mu_var drops (the paper assumes none).

    Every moment (``mean_*``, ``var_*``, ``cov_*``) is under the restricted ``d`` except
    ``var_sigma_all``, the variance of sigma under all of ``d`` used by Thm B.5
    (:func:`clean_variance_gap`).
    """

    support_mass: float  #: q = d(sigma > 0)
    mean_K: float  #: E[K] on {sigma > 0}
    var_K: float  #: Var(K) on {sigma > 0}
    mean_sigma: float  #: E[sigma] on {sigma > 0}
    var_sigma_positive: float  #: Var(sigma) on {sigma > 0} (renormalised d): Lemma B.8's Var(sigma)
    var_sigma_all: float  #: Var_{s~d}(sigma) over all of d (sigma = 0 states included): Thm B.5's Var(sigma)
    var_sigma_sq: float  #: Var(sigma^2) on {sigma > 0}
    cov_sigma_K: float  #: Cov(sigma, K) on {sigma > 0}
    cov_sigma_sq_K: float  #: Cov(sigma^2, K) on {sigma > 0}
    jensen: float  #: -E[K] Var(sigma) (paper sign, Var on {sigma > 0})
    coupling: float  #: Delta_coup = E[sigma] Cov(sigma, K) - Cov(sigma^2, K) (paper sign)
    zero_sigma: float  #: -(1 - q) E[sigma] E[sigma K]
    gap: float  #: V(d) - V(mu_var) = -q (jensen + coupling + zero_sigma)



def variance_gap_decomposition(d, sigma, K) -> GapDecomposition:
    """Lemma B.8 (eq. 25): ``V(mu_var; r_bar) - V(d; r_bar) = -E[K] Var(sigma) + Delta_coup``.

    ``d[s]``, ``sigma[s]``, ``K[s]`` (nan allowed off ``{sigma > 0}``).  The returned ``gap`` is
    ``V(d) - V(mu_var)``, the negative of the left side above (module sign convention).
    """
    w, s, K, q = _restricted(d, sigma, K)
    mK, ms = _moment_d(w, K), _moment_d(w, s)
    vK, vs, vs2 = _var_d(w, K), _var_d(w, s), _var_d(w, s * s)
    c1, c2 = _cov_d(w, s, K), _cov_d(w, s * s, K)
    jensen = -mK * vs
    coupling = ms * c1 - c2
    zero = -(1.0 - q) * ms * _moment_d(w, s * K)
    return GapDecomposition(
        support_mass=q,
        mean_K=mK,
        var_K=vK,
        mean_sigma=ms,
        var_sigma_positive=vs,
        var_sigma_all=_var_d(_dist(d), np.asarray(sigma, dtype=np.float64)),
        var_sigma_sq=vs2,
        cov_sigma_K=c1,
        cov_sigma_sq_K=c2,
        jensen=jensen,
        coupling=coupling,
        zero_sigma=zero,
        gap=-q * (jensen + coupling + zero),
    )


def variance_gap_direct(d, sigma, M) -> float:
    """``V(d; r_bar) - V(mu_var; r_bar) = E_d[M] - Z E_d[M / sigma]`` with ``Z = E_d sigma``.

    Computed from Lemma B.1 directly (the ||grad J||^2 terms cancel); ``M = M_{r_bar}``, which
    vanishes where sigma = 0.  Sign: ``>= 0`` when mu_var is better (module convention).
    """
    d = _dist(d)
    sigma = check_nonnegative(_state_vec(sigma, d.shape[0], "sigma"), "sigma")
    M = check_nonnegative(_state_vec(M, d.shape[0], "M"), "M")
    mu = variance_proposal(d, sigma)
    return trace_variance_from_M(d, d, M, 0.0) - trace_variance_from_M(d, mu, M, 0.0)


def variance_of_square_bound(x, w, M_bound: float) -> tuple[float, float]:
    """Lemma B.9 for ``X`` with values ``x[i]`` in ``[0, M]`` and probabilities ``w[i]``.

    Returns ``(Var(X^2), 4 M^2 Var(X))``; the lemma says the first is <= the second.
    """
    w = _dist(w, "w")
    x = as_array(x, "x", ndim=1, shape=w.shape)
    M_bound = check_positive_scalar(M_bound, "M_bound")
    check_in_range(x, "x", 0.0, M_bound)
    return _var_d(w, x * x), 4.0 * M_bound**2 * _var_d(w, x)


@dataclass(frozen=True)
class AssumptionB6:
    """Assumption B.6 (and its Remark B.10 form for rewards in [0, R])."""

    lhs: float  #: sqrt(Var K) / E[K]
    rhs: float  #: (2 / (3 R)) sqrt(Var sigma)
    holds: bool


def assumption_b6(d, sigma, K, R: float = 1.0) -> AssumptionB6:
    """``sqrt(Var K)/E[K] < (2/(3R)) sqrt(Var sigma)`` on ``{sigma > 0}`` (eq. 23, Remark B.10)."""
    w, s, K, _ = _restricted(d, sigma, K)
    R = check_positive_scalar(R, "R")
    mK = _moment_d(w, K)
    # E[K] = 0 means no gradient signal anywhere: the ratio is undefined and B.6 does not hold
    lhs = np.sqrt(_var_d(w, K)) / mK if mK > 0 else float("inf")
    rhs = 2.0 / (3.0 * R) * np.sqrt(_var_d(w, s))
    return AssumptionB6(float(lhs), float(rhs), bool(lhs < rhs))


@dataclass(frozen=True)
class TheoremB7Chain:
    """Every inequality in the proof of Thm B.7 / Remark B.10 as (lhs, rhs) pairs, lhs <= rhs."""

    cs_sigma_K: tuple[float, float]  #: |Cov(sigma,K)| <= sqrt(Var sigma Var K)
    cs_sigma_sq_K: tuple[float, float]  #: |Cov(sigma^2,K)| <= sqrt(Var sigma^2 Var K)
    var_square: tuple[float, float]  #: Var sigma^2 <= R^2 Var sigma   (Lemma B.9, M = R/2)
    mean_sigma: tuple[float, float]  #: E sigma <= R/2
    coupling_bound: tuple[float, float]  #: |Delta_coup| <= (3R/2) sqrt(Var sigma Var K)  (eq. 26)
    #: |Delta_coup| <= (R - E sigma) sqrt(Var sigma Var K): a sharper constant (our corollary, not
    #: in the paper): Delta_coup = -Cov(f(sigma), K) with f(x) = x (x - E sigma), which is
    #: (R - E sigma)-Lipschitz on [0, R/2], and Var f(X) <= L^2 Var X for L-Lipschitz f.
    coupling_bound_sharp: tuple[float, float]
    #: q (E[K] Var sigma - (3R/2) sqrt(Var sigma Var K)) <= gap, with gap = V(d) - V(mu_var)
    gap_bound: tuple[float, float]
    conclusion: tuple[float, float] | None  #: 0 < gap = V(d) - V(mu_var), present only when Assumption B.6 holds

    def pairs(self) -> dict[str, tuple[float, float]]:
        keys = ("cs_sigma_K", "cs_sigma_sq_K", "var_square", "mean_sigma", "coupling_bound", "coupling_bound_sharp", "gap_bound")
        out = {k: getattr(self, k) for k in keys}
        if self.conclusion is not None:
            out["conclusion"] = self.conclusion
        return out


def theorem_b7_chain(d, sigma, K, R: float = 1.0) -> TheoremB7Chain:
    """The proof chain of Thm B.7 (binary rewards, R = 1) and Remark B.10 (rewards in [0, R]).

    ``sigma`` must be the within-state reward std, so ``sigma <= R/2``; this is validated.
    """
    R = check_positive_scalar(R, "R")
    dec = variance_gap_decomposition(d, sigma, K)
    w, s, Kr, q = _restricted(d, sigma, K)
    check_in_range(s, "sigma", 0.0, R / 2.0 * (1.0 + 1e-12))
    root = float(np.sqrt(dec.var_sigma_positive * dec.var_K))
    b6 = assumption_b6(d, sigma, K, R)
    # the paper's bound on V(mu_var) - V(d) = -gap, so its negative bounds the gap from below
    gap_lower = -(q * (dec.jensen + 1.5 * R * root))
    return TheoremB7Chain(
        cs_sigma_K=(abs(dec.cov_sigma_K), root),
        cs_sigma_sq_K=(abs(dec.cov_sigma_sq_K), float(np.sqrt(dec.var_sigma_sq * dec.var_K))),
        var_square=(dec.var_sigma_sq, R * R * dec.var_sigma_positive),
        mean_sigma=(dec.mean_sigma, R / 2.0),
        coupling_bound=(abs(dec.coupling), 1.5 * R * root),
        coupling_bound_sharp=(abs(dec.coupling), (R - dec.mean_sigma) * root),
        gap_bound=(gap_lower, dec.gap),
        conclusion=(0.0, dec.gap) if b6.holds else None,
    )
