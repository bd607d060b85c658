"""Zero-cost prefix scores shared by the trainer plug-ins and the prefix-value studies.

* VSR's interpolated continuation success ``p̂ = (1 − α) p0 + α R`` and its scores: the paper's
  ``σ̂ = p̂ (1 − p̂)`` — a Bernoulli *variance*, :func:`variance_hat` — and its square root
  ``sqrt(p̂ (1 − p̂))``, the standard deviation Neyman allocation uses, :func:`std_hat`
  (VSR §3.2, Alg. 1). The paper writes σ̂ for the variance; the names here say which
  one a caller gets;
* ExTra's embedding-smoothed entropy ``H̃[j] = Σ_k softmax_k(cos(e_j, e_k)/τ) H[k]``
  (ExTra §4.3, App. B).

NumPy float64, shapes checked on entry.
"""

from __future__ import annotations

import math

import numpy as np

from theory._validate import as_array, check_in_range
from vsr_util.checks import check_number

__all__ = ["MIN_CALIBRATION_GAP", "alpha_cut", "calibration_fraction", "fit_interpolation", "interpolation", "isotonic_increasing", "p_hat",
           "smoothed_entropy", "smoothing_weights", "std_hat", "variance_hat", "variance_hat_calibrated"]



def alpha_cut(alpha: float, length: int) -> int:
    """Token position of the prefix holding a fraction ``alpha`` of a ``length``-token trajectory.

    ``round(alpha * length)`` with halves rounded up (so ``alpha = 0.5`` of 5 tokens keeps 3),
    in ``[0, length]``: ``alpha = 0`` is the bare prompt, ``alpha = 1`` the whole trajectory
    (VSR Fig. 7, ``α_i = i / |τ|``).
    """
    alpha = check_number("alpha", alpha, 0, 1)
    length = check_number("length", length, 0, integer=True)
    return int(min(length, math.floor(alpha * length + 0.5)))

def p_hat(alpha, p0, reward) -> np.ndarray:
    """``p̂[i] = (1 − α[i]) p0[i] + α[i] R[i]`` (VSR Alg. 1 line 9); inputs broadcast, all in ``[0, 1]``.

    The result is clipped to ``[0, 1]`` (the convex combination can round one ulp past 1)."""
    a = check_in_range(as_array(alpha, "alpha", ndim=(0, 1)), "alpha", 0.0, 1.0)
    p = check_in_range(as_array(p0, "p0", ndim=(0, 1)), "p0", 0.0, 1.0)
    r = check_in_range(as_array(reward, "reward", ndim=(0, 1)), "reward", 0.0, 1.0)
    return np.clip((1.0 - a) * p + a * r, 0.0, 1.0)


def variance_hat(alpha, p0, reward) -> np.ndarray:
    """VSR's score as the paper defines it, ``σ̂ = p̂ (1 − p̂)``: the Bernoulli variance of the
    interpolated success ``p̂`` (VSR §3.2, App. D.5)."""
    p = p_hat(alpha, p0, reward)
    return p * (1.0 - p)


def std_hat(alpha, p0, reward) -> np.ndarray:
    """``sqrt(p̂ (1 − p̂))``: the Bernoulli standard deviation, the σ Neyman allocation ``μ ∝ d σ``
    uses (VSR §2.2, eq. (9); the VSR plug-in's ``score: sqrt``)."""
    return np.sqrt(variance_hat(alpha, p0, reward))


def smoothing_weights(embeddings, tau: float) -> np.ndarray:
    """``W[j, k] = softmax_k(cos(e_j, e_k) / τ)`` over the rows of ``embeddings[n, d]`` (ExTra §4.3).

    Rows with zero norm have cosine 0 with everything; each row of ``W`` sums to 1 (float64, the
    row maximum subtracted before exponentiation)."""
    e = as_array(embeddings, "embeddings", ndim=2)
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau: must be a finite number > 0, got {tau!r}")
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    u = np.divide(e, norms, out=np.zeros_like(e), where=norms > 0)
    z = (u @ u.T) / float(tau)
    z -= z.max(axis=1, keepdims=True)
    w = np.exp(z)
    return w / w.sum(axis=1, keepdims=True)


def smoothed_entropy(mte, embeddings, tau: float = 0.1) -> np.ndarray:
    """``H̃[j] = Σ_k softmax_k(cos(e_j, e_k)/τ) H[k]`` (ExTra §4.3): ``mte[n]`` the candidates' mean
    token entropies, ``embeddings[n, d]`` their embeddings (one prompt); returns ``H̃[n]``."""
    h = as_array(mte, "mte", ndim=1)
    e = as_array(embeddings, "embeddings", ndim=2, shape=(h.shape[0], None))
    return smoothing_weights(e, tau) @ h


# ------------------------------------------------------------------ a self-calibrating interpolation


def isotonic_increasing(y, w) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of ``y[n]`` with weights ``w[n] > 0`` (pool-adjacent-violators)."""
    y = as_array(y, "y", ndim=1)
    w = as_array(w, "w", ndim=1, shape=(y.shape[0],))
    if np.any(w <= 0):
        raise ValueError("w: weights must be > 0")
    vals, wts, cnt = [], [], []
    for yi, wi in zip(y, w):
        vals.append(float(yi)), wts.append(float(wi)), cnt.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            v2, w2, c2 = vals.pop(), wts.pop(), cnt.pop()
            v1, w1, c1 = vals.pop(), wts.pop(), cnt.pop()
            vals.append((v1 * w1 + v2 * w2) / (w1 + w2)), wts.append(w1 + w2), cnt.append(c1 + c2)
    return np.repeat(vals, cnt)


#: Smallest ``R − p0`` at which an outcome is evidence about ``f`` (below it p0 and R coincide).
MIN_CALIBRATION_GAP = 1e-9


def calibration_fraction(y, p0, reward) -> np.ndarray:
    """Where a success rate ``y[i]`` observed from a prefix sits between ``p0`` (``f = 0``) and ``R``
    (``f = 1``): ``clip((y − p0)/(R − p0), 0, 1)``, one observation of ``f(α)`` for
    :func:`fit_interpolation`; NaN where ``R − p0 <= MIN_CALIBRATION_GAP`` (no evidence). Inputs
    broadcast, all in [0, 1]. The VSR plug-in's online fit and the sigma-validation study both use it."""
    q = check_in_range(as_array(y, "y", ndim=(0, 1)), "y", 0.0, 1.0)
    p = check_in_range(as_array(p0, "p0", ndim=(0, 1)), "p0", 0.0, 1.0)
    r = check_in_range(as_array(reward, "reward", ndim=(0, 1)), "reward", 0.0, 1.0)
    gap = r - p
    ok = gap > MIN_CALIBRATION_GAP
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, np.clip((q - p) / np.where(ok, gap, 1.0), 0.0, 1.0), np.nan)


def fit_interpolation(alpha, fraction, weight, *, bins: int = 10, prior: float = 4.0) -> np.ndarray:
    """A monotone estimate of the hint-ratio curve ``f`` on ``bins`` equal α-bins (the calibrated σ̂).

    VSR's σ̂ assumes the continuation success from a prefix at ratio α of a trajectory with reward
    ``R`` interpolates linearly, ``p(α) = p0 + (R − p0) α``; the calibrated score replaces ``α`` by
    ``f(α)``, fitted from observed outcomes. ``fraction[n] = (y − p0)/(R − p0)`` is one observation
    (``y`` the success rate of a replayed group at ``alpha[n]``) with ``weight[n] > 0`` (e.g. its
    group size). Per bin: the weighted mean of the clipped fractions shrunk toward the linear curve
    with ``prior`` pseudo-observations at the bin centre (no data → exactly linear σ̂), then the
    weighted isotonic fit (``f`` non-decreasing), clipped to [0, 1]. Returns ``f[bins]`` at the bin
    centres ``(k + 0.5)/bins``; :func:`interpolation` reads it with ``f(0) = 0`` and ``f(1) = 1``.
    """
    a = check_in_range(as_array(alpha, "alpha", ndim=1, allow_empty=True), "alpha", 0.0, 1.0)
    fr = as_array(fraction, "fraction", ndim=1, shape=(a.shape[0],), allow_empty=True)
    w = as_array(weight, "weight", ndim=1, shape=(a.shape[0],), allow_empty=True)
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins: must be an int >= 1, got {bins!r}")
    if isinstance(prior, bool) or not isinstance(prior, (int, float)) or not math.isfinite(prior) or prior <= 0:
        raise ValueError(f"prior: must be a finite number > 0, got {prior!r}")
    if np.any(w < 0) or np.any(~np.isfinite(fr)):
        raise ValueError("weight: must be >= 0 (and fraction finite)")
    centres = (np.arange(bins) + 0.5) / bins
    idx = np.minimum((a * bins).astype(np.int64), bins - 1)
    sw = np.bincount(idx, weights=w, minlength=bins)
    sy = np.bincount(idx, weights=w * np.clip(fr, 0.0, 1.0), minlength=bins)
    mean = (sy + prior * centres) / (sw + prior)
    return np.clip(isotonic_increasing(mean, sw + prior), 0.0, 1.0)


def interpolation(alpha, f_bins) -> np.ndarray:
    """``f(α)``: piecewise linear through ``(0, 0)``, ``((k + 0.5)/K, f_bins[k])`` and ``(1, 1)`` (monotone
    when ``f_bins`` is non-decreasing in [0, 1], as :func:`fit_interpolation` returns it)."""
    a = check_in_range(as_array(alpha, "alpha", ndim=(0, 1)), "alpha", 0.0, 1.0)
    f = check_in_range(as_array(f_bins, "f_bins", ndim=1), "f_bins", 0.0, 1.0)
    k = f.shape[0]
    xs = np.concatenate([[0.0], (np.arange(k) + 0.5) / k, [1.0]])
    ys = np.concatenate([[0.0], f, [1.0]])
    return np.interp(a, xs, ys)


def variance_hat_calibrated(alpha, p0, reward, f_bins) -> np.ndarray:
    """The calibrated σ̂: ``p̂ = p0 + (R − p0) f(α)`` (``f`` from :func:`fit_interpolation`), ``p̂ (1 − p̂)``;
    ``p̂(0) = p0`` and ``p̂(1) = R`` exactly, and ``f(α) = α`` gives :func:`variance_hat`."""
    a = as_array(alpha, "alpha", ndim=(0, 1))
    p = check_in_range(as_array(p0, "p0", ndim=(0, 1)), "p0", 0.0, 1.0)
    r = check_in_range(as_array(reward, "reward", ndim=(0, 1)), "reward", 0.0, 1.0)
    ph = np.clip(p + (r - p) * interpolation(a, f_bins), 0.0, 1.0)
    return ph * (1.0 - ph)
