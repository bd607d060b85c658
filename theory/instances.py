"""Random finite problems for the VSR Appendix B checks (used by ``vsr theory check`` and tests).

``build_problem`` turns raw unconstrained arrays into a valid problem (so hypothesis can draw
the raw arrays and shrink them); ``random_problem`` draws the raw arrays from a Generator.
Score vectors come from a linear-softmax policy ``pi(a|s) ∝ exp(theta . phi(s, a))`` so they are
genuine score functions: ``g(s, a) = phi(s, a) - sum_b pi(b|s) phi(s, b)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory import vsr_variance as vv
from theory._validate import as_array


@dataclass(frozen=True)
class FiniteProblem:
    """``d[s]``, ``pi[s,a]``, ``g[s,a,p]`` and a reward law on support ``r_values[k]``."""

    d: np.ndarray
    pi: np.ndarray
    g: np.ndarray
    r_values: np.ndarray
    r_probs: np.ndarray

    @property
    def m1(self) -> np.ndarray:
        return self.r_probs @ self.r_values

    @property
    def m2(self) -> np.ndarray:
        return self.r_probs @ (self.r_values**2)

    @property
    def H(self) -> np.ndarray:
        return vv.score_norms(self.g)

    @property
    def rbar(self) -> np.ndarray:
        return vv.state_reward_mean(self.pi, self.m1)

    @property
    def sigma(self) -> np.ndarray:
        return vv.state_reward_std(self.pi, self.m1, self.m2)

    @property
    def grad(self) -> np.ndarray:
        return vv.policy_gradient(self.d, self.pi, self.g, self.m1)

    def M(self, b) -> np.ndarray:
        return vv.signal_second_moment(self.pi, self.H, self.m1, self.m2, b)

    def V(self, mu, b) -> float:
        return vv.trace_variance(self.d, mu, self.pi, self.g, self.m1, self.m2, b)


def _normalise(w: np.ndarray, axis: int = -1) -> np.ndarray:
    """Normalise non-negative weights along ``axis``; all-zero slices become uniform."""
    w = np.abs(w)
    tot = w.sum(axis=axis, keepdims=True)
    w = np.where(tot > 0, w, 1.0)
    return w / w.sum(axis=axis, keepdims=True)


def build_problem(d_weights, logits, features, r_values, r_prob_weights, *, state_scales=None) -> FiniteProblem:
    """Assemble a valid problem from raw arrays.

    ``d_weights[s] >= 0`` (normalised), ``logits[s,a]``, ``features[s,a,p]``, ``r_values[k]``,
    ``r_prob_weights[s,a,k] >= 0`` (normalised over k). ``state_scales[s] > 0`` multiplies the
    score vectors of state s (changes H without breaking centring).
    """
    d = _normalise(as_array(d_weights, "d_weights", ndim=1))
    logits = as_array(logits, "logits", ndim=2, shape=(d.shape[0], None))
    z = logits - logits.max(axis=1, keepdims=True)
    pi = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    phi = as_array(features, "features", ndim=3, shape=(pi.shape[0], pi.shape[1], None))
    g = phi - np.einsum("sb,sbp->sp", pi, phi)[:, None, :]
    if state_scales is not None:
        g = g * as_array(state_scales, "state_scales", ndim=1, shape=(d.shape[0],))[:, None, None]
    v = as_array(r_values, "r_values", ndim=1)
    p = _normalise(as_array(r_prob_weights, "r_prob_weights", ndim=3, shape=(pi.shape[0], pi.shape[1], v.shape[0])), axis=2)
    return FiniteProblem(d, pi, g, v, p)


def random_problem(
    rng: np.random.Generator,
    *,
    n_states: int | None = None,
    n_actions: int | None = None,
    n_params: int | None = None,
    reward_levels: int = 2,
    R: float = 1.0,
) -> FiniteProblem:
    """A random problem; ``reward_levels = 2`` gives binary rewards {0, R}."""
    S = n_states or int(rng.integers(2, 8))
    A = n_actions or int(rng.integers(2, 5))
    P = n_params or int(rng.integers(2, 6))
    d = rng.dirichlet(np.full(S, 0.7))
    logits = rng.normal(scale=1.5, size=(S, A))
    feats = rng.normal(size=(S, A, P))
    v = np.linspace(0.0, R, reward_levels)
    w = rng.dirichlet(np.full(reward_levels, 0.6), size=(S, A))
    return build_problem(d, logits, feats, v, w)


def clean_problem(
    rng: np.random.Generator,
    G0: float = 1.0,
    *,
    n_states: int | None = None,
    n_actions: int | None = None,
    heterogeneity: float = 0.0,
    zero_sigma_states: int = 0,
) -> FiniteProblem:
    """Binary-reward problem satisfying Assumption B.3 (reward independent of the action given s).

    With ``heterogeneity = 0`` it also satisfies B.4 with ``E[H|s] = G0``; otherwise
    ``E[H|s] = G0 * exp(heterogeneity * z_s)`` with ``z_s ~ N(0, 1)``. ``zero_sigma_states``
    states get deterministic outcomes (sigma = 0).
    """
    S = n_states or int(rng.integers(3, 9))
    A = n_actions or int(rng.integers(2, 5))
    P = int(rng.integers(2, 6))
    d = rng.dirichlet(np.full(S, 0.8))
    logits = rng.normal(scale=1.0, size=(S, A))
    feats = rng.normal(size=(S, A, P))
    p_state = rng.uniform(0.02, 0.98, size=S)
    for s in range(min(zero_sigma_states, S - 1)):
        p_state[s] = float(rng.integers(0, 2))
    w = np.stack([1.0 - p_state, p_state], axis=1)[:, None, :].repeat(A, axis=1)
    base = build_problem(d, logits, feats, [0.0, 1.0], w)
    EH = np.einsum("sa,sa->s", base.pi, base.H)
    target = G0 * np.exp(heterogeneity * rng.normal(size=S))
    scales = np.sqrt(target / EH)
    return build_problem(d, logits, feats, [0.0, 1.0], w, state_scales=scales)


def random_proposal(rng: np.random.Generator, n_states: int) -> np.ndarray:
    """A full-support proposal."""
    return rng.dirichlet(np.full(n_states, 1.0)) * 0.98 + 0.02 / n_states


@dataclass(frozen=True)
class DenseMDP:
    """Finite-horizon MDP for the Appendix C checks: ``P[h,s,a,s']``, ``r[h,s,a]``, ``rho[s]``."""

    P: np.ndarray
    r: np.ndarray
    rho: np.ndarray

    @property
    def horizon(self) -> int:
        return self.P.shape[0]

    @property
    def n_states(self) -> int:
        return self.P.shape[1]

    @property
    def n_actions(self) -> int:
        return self.P.shape[2]


def random_dense_mdp(rng: np.random.Generator, *, S: int | None = None, A: int | None = None, H: int | None = None) -> DenseMDP:
    """Random stage-dependent MDP with rewards in [0, 1] and a full-support initial law."""
    S = S or int(rng.integers(2, 6))
    A = A or int(rng.integers(2, 4))
    H = H or int(rng.integers(1, 5))
    P = rng.dirichlet(np.full(S, 0.5), size=(H, S, A))
    r = rng.uniform(0.0, 1.0, size=(H, S, A)) * (rng.random((H, S, A)) < 0.7)
    rho = rng.dirichlet(np.ones(S))
    return DenseMDP(P, r, rho)


def random_policy(rng: np.random.Generator, H: int, S: int, A: int, concentration: float = 1.0) -> np.ndarray:
    """Random stage-dependent policy ``pi[h, s, a]`` with full support."""
    return rng.dirichlet(np.full(A, concentration), size=(H, S)) * 0.99 + 0.01 / A
