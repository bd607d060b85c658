"""PROS's two-level logit-normal pass-rate model and its Pólya–Gamma Gibbs sampler (PROS, ICLR 2026,
OpenReview lz1SRTcnUb; Pólya–Gamma augmentation: Polson, Scott & Windle 2013, JASA 108:1339).

A tree of depth 1: original queries (roots) and prefix-augmented queries (children of one root). Node ``j``
has a log-odds pass rate ``ψ_j`` and (decayed) binary counts: ``s[j]`` successes out of ``n[j]`` trials::

    ψ_root ~ N(μ0, τ0²),    ψ_child ~ N(ψ_root, σ_child²),    s | ψ ~ Bin(n, sigmoid ψ)

With counts decayed by γ per step, ``s`` and ``n`` are real; the likelihood is then the tempered
``sigmoid(ψ)^s (1 − sigmoid(ψ))^(n−s)``, which Pólya–Gamma augmentation handles exactly for real
``n > 0``: ``e^{sψ} / (1 + e^ψ)^n = 2^{−n} e^{κψ} E_ω[e^{−ωψ²/2}]`` with ``ω ~ PG(n, 0)`` and
``κ = s − n/2`` (Polson et al. 2013, Thm 1). The Gibbs sweep (:func:`gibbs_sweeps`) alternates::

    ω_j | ψ_j ~ PG(n_j, ψ_j)
    child:  ψ_j | ψ_root, ω_j ~ N(V (ψ_root/σ_j² + κ_j), V),  V = 1/(1/σ_j² + ω_j)
    root:   ψ_r | children, ω_r ~ N(V (μ0/τ0² + Σ_j ψ_j/σ_j² + κ_r), V),  V = 1/(1/τ0² + Σ_j 1/σ_j² + ω_r)

children first, then roots (the order of PROS's released sampler). ``PG(b, c)`` is drawn by
:func:`sample_pg`: the sum-of-gammas series of Polson et al. (2013, eq. 1),
``ω = (1/2π²) Σ_k g_k / ((k − ½)² + c²/4π²)``, ``g_k ~ Gamma(b, 1)``, which holds for every real
``b > 0`` (so decayed, non-integer counts need nothing special), truncated after ``terms`` terms with
the rest replaced by its expectation in closed form — so ``E[ω] = (b/2c) tanh(c/2)`` exactly, and the
variance lost is below ``b / (12 π⁴ terms³)`` (relative ``≈ 2/(π⁴ terms³)`` at ``c = 0``: 1e-7 at 64 terms).

The child's prior scale follows PROS's released sampler: ``σ`` is chosen so that a 95 % interval of the
child's pass rate spans ``± δ`` around the parent's (:func:`child_sigma`; δ = 0.1, floor 0.02).

Pure NumPy; every random draw comes from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import math

import numpy as np

from theory._validate import as_array, check_nonnegative, check_positive_scalar

__all__ = ["PG_TERMS", "child_sigma", "gibbs_sweeps", "pg_mean", "pg_variance", "sample_pg", "sigmoid"]

#: default number of explicit gamma terms of :func:`sample_pg` (the rest by its mean)
PG_TERMS = 64


def sigmoid(psi) -> np.ndarray:
    """``1 / (1 + e^{−ψ})`` elementwise, without overflow."""
    x = np.asarray(psi, dtype=np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def pg_mean(b, c) -> np.ndarray:
    """``E[PG(b, c)] = (b / 2c) tanh(c/2)``, ``b/4`` at ``c = 0`` (Polson et al. 2013, §2)."""
    b = check_nonnegative(as_array(b, "b", allow_empty=True), "b")
    c = np.abs(as_array(c, "c", allow_empty=True))
    b, c = np.broadcast_arrays(b, c)
    small = c < 1e-4
    safe = np.where(small, 1.0, c)
    return np.where(small, b * (0.25 - c * c / 48.0), b * np.tanh(safe / 2.0) / (2.0 * safe))


def pg_variance(b, c) -> np.ndarray:
    """``Var[PG(b, c)] = b (sinh c − c) / (4 c³ cosh²(c/2))``, ``b/24`` at ``c = 0`` (Polson et al. 2013, §2)."""
    b = check_nonnegative(as_array(b, "b", allow_empty=True), "b")
    c = np.abs(as_array(c, "c", allow_empty=True))
    b, c = np.broadcast_arrays(b, c)
    small = c < 1e-2
    safe = np.where(small, 1.0, c)
    exact = b * (np.sinh(safe) - safe) / (4.0 * safe**3 * np.cosh(safe / 2.0) ** 2)
    # series at 0: Var = b (1/24 − c²/120 + O(c⁴))
    return np.where(small, b * (1.0 / 24.0 - c * c / 120.0), exact)


def _series_sum(d: np.ndarray) -> np.ndarray:
    """``Σ_{k≥1} 1 / ((k − ½)² + d²) = π tanh(π d) / (2 d)`` (``π²/2`` at ``d = 0``)."""
    small = d < 1e-6
    safe = np.where(small, 1.0, d)
    return np.where(small, math.pi**2 / 2.0, math.pi * np.tanh(math.pi * safe) / (2.0 * safe))


def sample_pg(b, c, rng: np.random.Generator, terms: int = PG_TERMS) -> np.ndarray:
    """Draws ``ω[n] ~ PG(b[n], c[n])`` (real ``b >= 0``; ``PG(0, c)`` is the point mass at 0).

    ``ω = (1/2π²) [Σ_{k ≤ K} g_k / ((k − ½)² + d²) + b (S(d) − Σ_{k ≤ K} 1/((k − ½)² + d²))]`` with
    ``d = c / 2π``, ``g_k ~ Gamma(b, 1)`` and ``S(d) = Σ_{k ≥ 1} 1/((k − ½)² + d²)`` in closed form
    (module doc): the series of Polson et al. (2013, eq. 1) with its tail beyond ``K = terms`` replaced by
    the tail's mean. ``b`` and ``c`` broadcast to one shape ``[n]``.
    """
    b = check_nonnegative(as_array(b, "b", allow_empty=True), "b")
    c = as_array(c, "c", allow_empty=True)
    b, c = np.broadcast_arrays(b, c)
    if int(terms) < 1:
        raise ValueError(f"terms: must be >= 1, got {terms}")
    d2 = (c / (2.0 * math.pi)) ** 2
    shape = np.where(b > 0, b, 1.0)
    head = np.zeros(b.shape)
    partial = np.zeros(b.shape)
    for k in range(1, int(terms) + 1):  # term by term: memory O(n), not O(n · terms)
        den = (k - 0.5) ** 2 + d2
        head += rng.gamma(shape) / den
        partial += 1.0 / den
    tail = b * (_series_sum(np.sqrt(d2)) - partial)
    return np.where(b > 0, (head + tail) / (2.0 * math.pi**2), 0.0)


def child_sigma(psi_parent, delta: float = 0.1, floor: float = 0.02, p_clip: float = 0.01) -> np.ndarray:
    """Prior scale ``σ[n]`` of a new child given its parent's current log-odds ``psi_parent[n]`` (PROS's
    released sampler): with ``p = sigmoid(ψ_parent)``, ``p_lo = max(p_clip, p − δ)``, ``p_hi = min(1 − p_clip,
    p + δ)``, ``σ = max(ψ_parent − logit p_lo, logit p_hi − ψ_parent) / 1.96``, floored at ``floor`` — the
    child's pass rate lies within ``± δ`` of the parent's with prior probability ≈ 0.95 on the wider side."""
    psi = as_array(psi_parent, "psi_parent", allow_empty=True)
    delta = check_positive_scalar(delta, "delta")
    floor = check_positive_scalar(floor, "floor")
    p = sigmoid(psi)
    lo = np.maximum(p_clip, p - delta)
    hi = np.minimum(1.0 - p_clip, p + delta)
    s_lo = (psi - np.log(lo / (1.0 - lo))) / 1.96
    s_hi = (np.log(hi / (1.0 - hi)) - psi) / 1.96
    return np.maximum(np.maximum(s_lo, s_hi), floor)


def gibbs_sweeps(psi, parent, sigma2, s, n, rng: np.random.Generator, *, mu0: float = 0.0, tau0: float = 1.5,
                 sweeps: int = 100, terms: int = PG_TERMS, keep: bool = False) -> np.ndarray:
    """``sweeps`` Gibbs sweeps of the tree's log-odds from the state ``psi[N]`` (module doc).

    ``parent[N]``: ``-1`` for a root, else the index of the child's root (a root itself: depth 1);
    ``sigma2[N]``: each child's prior variance σ_j² (ignored for roots, whose prior is ``N(mu0, tau0²)``);
    ``s[N]`` / ``n[N]``: real success / trial counts (``0 <= s <= n``). Returns the state after the last
    sweep ``psi[N]``, or with ``keep`` every sweep's state ``draws[sweeps, N]``.
    """
    psi = as_array(psi, "psi", ndim=1).copy()
    N = psi.shape[0]
    parent = np.asarray(parent, dtype=np.int64)
    if parent.shape != (N,):
        raise ValueError(f"parent: expected shape ({N},), got {parent.shape}")
    roots = np.flatnonzero(parent < 0)
    kids = np.flatnonzero(parent >= 0)
    if kids.size and (np.any(parent[kids] >= N) or np.any(parent[parent[kids]] >= 0)):
        raise ValueError("parent: every child's parent must be a root (index in range with parent -1)")
    sigma2 = as_array(sigma2, "sigma2", shape=(N,))
    if kids.size and np.any(sigma2[kids] <= 0):
        raise ValueError("sigma2: children's prior variances must be > 0")
    s = check_nonnegative(as_array(s, "s", shape=(N,)), "s")
    n = check_nonnegative(as_array(n, "n", shape=(N,)), "n")
    if np.any(s > n * (1 + 1e-12) + 1e-12):
        raise ValueError("s: successes must not exceed trials")
    tau0 = check_positive_scalar(tau0, "tau0")
    sweeps = int(sweeps)
    if sweeps < 1:
        raise ValueError(f"sweeps: must be >= 1, got {sweeps}")
    kappa = s - n / 2.0
    inv_s2 = np.zeros(N)
    inv_s2[kids] = 1.0 / sigma2[kids]
    par = parent[kids]
    prec_kids = np.bincount(par, weights=inv_s2[kids], minlength=N)[roots]  # Σ_j 1/σ_j² per root
    out = np.empty((sweeps, N)) if keep else None
    for t in range(sweeps):
        if kids.size:
            om = sample_pg(n[kids], psi[kids], rng, terms)
            v = 1.0 / (inv_s2[kids] + om)
            m = v * (inv_s2[kids] * psi[par] + kappa[kids])
            psi[kids] = m + np.sqrt(v) * rng.standard_normal(kids.size)
        om = sample_pg(n[roots], psi[roots], rng, terms)
        pull = np.bincount(par, weights=inv_s2[kids] * psi[kids], minlength=N)[roots]
        v = 1.0 / (1.0 / tau0**2 + prec_kids + om)
        m = v * (mu0 / tau0**2 + pull + kappa[roots])
        psi[roots] = m + np.sqrt(v) * rng.standard_normal(roots.size)
        if out is not None:
            out[t] = psi
    return out if keep else psi
