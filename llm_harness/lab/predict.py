"""What the VSR theory predicts for an allocation: the variance of its gradient estimator per generated token.

The estimator of every allocation is the mean over ``n`` samples of ``X = w(s) A ∇ log π(y | s)``: a start
state ``s`` drawn from the allocation's proposal ``μ``, ``y`` a sampled continuation with reward ``r``, the
leave-one-out advantage ``A = r − mean of the group's other rewards`` and the allocation's weight ``w(s)``
(``d(s)/μ(s)`` for the importance-weighted allocations, 1 otherwise). VSR App. B, Lemma B.1 (eq. 13):

    tr Var(X) = Σ_s μ(s) w(s)² M(s) − ‖E X‖²,   M(s) = E[A² ‖∇ log π‖² | s].

Which terms are estimated and how (the probe, :mod:`llm_harness.lab.probe`):

* ``M(s)`` under Assumption B.3 (the score norm does not depend on the reward given the state):
  ``M(s) = G(s) σ²(s) · G/(G − 1)``; ``σ²(s) = p(s)(1 − p(s))`` from the probe's Monte-Carlo successes (the
  unbiased ``k(n − k)/(n(n − 1))``), ``G/(G − 1)`` the leave-one-out baseline's inflation for groups of ``G``;
  ``G(s) = E‖∇ log π(y|s)‖²`` measured on a few probe samples per state ("B.3"), or a constant ("B.4",
  where it cancels from every ratio).
* ``‖E X‖²`` is dropped: it is below 1 % of ``E‖X‖²`` whenever the per-sample SNR is, which the realised
  statistics check (a per-sample SNR of 0.01 is already high for policy gradients).
* Samples of one group share their state. Two *different* continuations have nearly orthogonal score vectors
  in a model's parameter space and their covariance (O(1/G) through the shared baseline) is ignored; two
  *identical* continuations have identical score vectors and identical advantages, so a state that repeats
  itself adds about ``(G − 1) G(s) Σ_r D_r (r − p)²`` per sample (``D_r`` the share of ordered pairs
  that are the same continuation with reward ``r``, measured by the probe): the "+dup" prediction
  (:func:`duplicate_second_moment`). Late expert prefixes, whose successful continuations are one string,
  are where it matters.
* Tokens: ``T(s)``, the mean continuation length at ``s``; DAPO's filtered groups are generated and paid
  for but do not enter the mean.

The signal. Every importance-weighted allocation has ``E X = ∇J`` (DAPO: ``∇J / P(kept)``), whatever the
states' gradients are. For the allocations without weights (VSR's prefix restarts) ``E X = Σ_s μ(s) g(s)`` with
``g(s) = E[A ∇ log π | s]``, which App. B does not give; the prediction assumes

* **Assumption S** (aligned, homogeneous signal): ``g(s) = c · σ(s) sqrt(G(s)) · u`` for one direction ``u`` and
  one constant ``c`` — every state's expected gradient points the same way and carries the same share of its
  Cauchy–Schwarz bound ``‖Cov(r, ∇ log π | s)‖ ≤ σ(s) sqrt(G(s))``. A state whose outcome is certain (σ = 0)
  carries no signal, which is VSR's premise.

Under S, ``E X = s_A ∇J`` with ``s_A = Σ μ w σ √G / Σ d σ √G`` (1 for every importance-weighted allocation, so
S only matters for the biased ones); the realised cosines and ``⟨E g, r⟩²`` test it. Predicted gain of
allocation ``A`` over the uniform one, per generated token:

    gain = s_A² · (m_U t_U) / (m_A t_A),   m = E[X²] per kept sample, t = generated tokens per kept sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Prediction", "duplicate_second_moment", "leave_one_out_inflation", "predict", "unbiased_bernoulli_variance"]


def leave_one_out_inflation(group_size: int) -> float:
    """``E[A²] / σ² = G/(G − 1)`` for ``A = r − mean of the other G − 1 rewards`` (i.i.d. rewards of variance σ²)."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size: must be an int >= 2 (a leave-one-out baseline needs a second sample), got {group_size!r}")
    return group_size / (group_size - 1.0)


def unbiased_bernoulli_variance(k, n) -> np.ndarray:
    """``k (n − k) / (n (n − 1))``: unbiased for ``p (1 − p)`` from ``k`` successes in ``n >= 2`` draws."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if np.any(n < 2) or np.any(k < 0) or np.any(k > n):
        raise ValueError("unbiased_bernoulli_variance: need n >= 2 and 0 <= k <= n")
    return k * (n - k) / (n * (n - 1.0))


def duplicate_second_moment(group_size: int, score_sq, p, dup_success, dup_failure) -> np.ndarray:
    """Per-sample second moment added by identical continuations within a group (module doc): a duplicate pair
    ``i, j`` with reward ``r`` has ``A_i = A_j`` and, given ``r_j = r``, ``E[A_i²] = c² (r − p)² + (G − 2) σ²/(G − 1)²``
    with ``c = (G − 2)/(G − 1)``; per sample ``(G − 1) G(s) Σ_r D_r E[A_i² | pair, r]``, ``σ² = p (1 − p)``."""
    leave_one_out_inflation(group_size)
    G = float(group_size)
    g = np.asarray(score_sq, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    d1 = np.asarray(dup_success, dtype=np.float64)
    d0 = np.asarray(dup_failure, dtype=np.float64)
    if np.any(d1 < 0) or np.any(d0 < 0) or np.any(d1 + d0 > 1 + 1e-12):
        raise ValueError("dup_success, dup_failure: shares of pairs, each >= 0, summing to <= 1")
    var = p * (1.0 - p)
    # A_i = A_j for a duplicate pair with reward r; given r_j = r, A_i = r (G−2)/(G−1) − (sum of the G−2 others)/(G−1)
    a = ((G - 2.0) / (G - 1.0)) ** 2
    b = (G - 2.0) / (G - 1.0) ** 2 * var
    return (G - 1.0) * g * (d1 * (a * (1.0 - p) ** 2 + b) + d0 * (a * p**2 + b))


@dataclass(frozen=True)
class Prediction:
    """Per kept sample: ``second_moment`` E[X²] (tr, the ‖E X‖² term dropped), ``tokens`` generated, ``signal_scale``."""

    second_moment: float
    tokens: float
    signal_scale: float = 1.0

    @property
    def noise_per_token(self) -> float:
        """``m t / s²``: the variance-times-cost whose inverse is the SNR per token up to ``‖∇J‖²``."""
        return self.second_moment * self.tokens / self.signal_scale ** 2 if self.signal_scale > 0 else math.inf

    def gain_over(self, base: "Prediction") -> float:
        """Predicted SNR-per-token ratio ``self / base``."""
        a, b = self.noise_per_token, base.noise_per_token
        return b / a if a > 0 else math.inf


def predict(mu, weights, M, tokens, *, keep=None, signal=None, d=None) -> Prediction:
    """:class:`Prediction` of an allocation drawing states from ``mu`` with weights ``weights`` (module doc).

    ``M[s]``: ``E[A² ‖∇ log π‖² | s]``; ``tokens[s]``: mean generated tokens per sample at ``s``; ``keep[s]``
    (optional, DAPO): probability that a group at ``s`` is kept (samples of dropped groups count as tokens
    and contribute nothing); ``signal[s]`` with ``d`` (optional, Assumption S): the norm of the state's expected
    gradient up to a common constant, e.g. ``σ(s) sqrt(G(s))``, and the training distribution ``d``; without them
    the signal scale is that of an unbiased allocation. Every array has one entry per state; ``mu`` sums to 1.
    """
    mu = np.asarray(mu, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    M = np.asarray(M, dtype=np.float64)
    T = np.asarray(tokens, dtype=np.float64)
    if mu.ndim != 1 or any(x.shape != mu.shape for x in (w, M, T)):
        raise ValueError(f"predict: mu, weights, M, tokens need one shape, got {mu.shape}, {w.shape}, {M.shape}, {T.shape}")
    if np.any(mu < 0) or not math.isclose(float(mu.sum()), 1.0, rel_tol=1e-9, abs_tol=1e-12):
        raise ValueError(f"mu: must be a distribution (>= 0, sums to 1), sums to {float(mu.sum())!r}")
    if np.any(~np.isfinite(M[mu > 0])) or np.any(M < 0):
        raise ValueError("M: must be finite and >= 0 wherever mu > 0")
    k = np.ones_like(mu) if keep is None else np.asarray(keep, dtype=np.float64)
    if k.shape != mu.shape or np.any(k < 0) or np.any(k > 1):
        raise ValueError("keep: one probability in [0, 1] per state")
    kept = float(np.sum(mu * k))
    if kept <= 0:
        raise ValueError("keep: no state is ever kept under mu")
    live = mu > 0
    # E[X² | kept]: X = 0 on dropped groups, so E[X²] over generated samples divided by P(kept)
    m = float(np.sum(mu[live] * w[live] ** 2 * M[live])) / kept
    t = float(np.sum(mu[live] * T[live])) / kept
    scale = 1.0
    if signal is not None:
        if d is None:
            raise ValueError("predict: signal needs the training distribution d")
        sg = np.asarray(signal, dtype=np.float64)
        dd = np.asarray(d, dtype=np.float64)
        if sg.shape != mu.shape or dd.shape != mu.shape or np.any(sg < 0) or np.any(~np.isfinite(sg)):
            raise ValueError("signal, d: one finite entry >= 0 per state")
        base = float(np.sum(dd * sg))
        if not base > 0:
            raise ValueError("signal: zero under d (no state of the training distribution carries signal)")
        scale = float(np.sum(mu * w * sg)) / base
    return Prediction(m, t, scale / kept)
