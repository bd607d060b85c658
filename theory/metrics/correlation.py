"""Pearson / Spearman correlations with 95% CIs, and within-group correlation (VSR App. D.5; ExTra App. C.1).

Shapes: ``x[i]``, ``y[i]`` paired observations, ``groups[i]`` a label per observation.

* Point estimates and p-values come from :func:`scipy.stats.pearsonr` (exact test under
  bivariate normality) and :func:`scipy.stats.spearmanr` (t approximation).
* CI methods (registry :data:`CI_METHODS`):

  - ``"fisher"``: ``tanh(atanh(r) -/+ z_{1-a/2} * se)`` with ``se = sqrt(v / (n - 3))``,
    ``v = 1`` for Pearson (Fisher 1921; identical to ``pearsonr(...).confidence_interval()``)
    and ``v = 1.06`` for Spearman (Fieller, Hartley & Pearson 1957, Biometrika 44:470).
    Needs ``n >= 4``.
  - ``"bootstrap_percentile"`` and ``"bootstrap_bca"``: paired nonparametric bootstrap
    (Efron & Tibshirani 1993, §13.3 and §14.3), seeded.  With the same seed the resamples,
    the percentile interval and (for data without ties) the BCa interval equal those of
    ``scipy.stats.bootstrap(..., paired=True, method=...)``; unlike SciPy, resamples in which
    ``x`` or ``y`` is constant (correlation undefined) are dropped instead of turning the
    interval into NaN, ``CorrelationResult.n_resamples`` counts the ones kept, and BCa counts
    ties with the estimate up to :data:`BCA_TIE_ATOL` (SciPy uses exact float equality, so its
    interval on tied data depends on rounding).  Needs ``n >= 3``.

* :func:`within_group_correlation` averages per-group correlations through Fisher's z
  (the fixed-effect meta-analytic average of Hedges & Olkin 1985), as ExTra App. C.1 does for
  its within-problem Spearman correlations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special, stats

from theory._validate import as_array, check_probability
from vsr_util.registry import Registry

__all__ = [
    "SPEARMAN_FISHER_VARIANCE",
    "BCA_TIE_ATOL",
    "CORRELATIONS",
    "CI_METHODS",
    "WITHIN_GROUP_WEIGHTINGS",
    "CorrelationResult",
    "WithinGroupCorrelation",
    "correlation",
    "pearson",
    "spearman",
    "fisher_z_interval",
    "within_group_correlation",
    "cochran_q",
    "two_stage_interval",
    "cluster_bootstrap_correlation",
]

#: Var(atanh(r_s)) ~= 1.06 / (n - 3) for Spearman's r_s (Fieller, Hartley & Pearson 1957).
SPEARMAN_FISHER_VARIANCE = 1.06

#: Bootstrap statistics are evaluated on at most this many numbers at a time (memory bound).
_CHUNK_ELEMENTS = 1 << 22


# ---------------------------------------------------------------------------------------------
# Vectorised statistics (samples on the last axis, any leading batch axes)
# ---------------------------------------------------------------------------------------------


def _pearson_last_axis(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``r[...]`` of ``x[..., i]``, ``y[..., i]``; NaN where x or y is constant."""
    degenerate = (np.ptp(x, axis=-1) == 0) | (np.ptp(y, axis=-1) == 0)
    xm = x - x.mean(axis=-1, keepdims=True)
    ym = y - y.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.sum(xm * ym, axis=-1) / np.sqrt(np.sum(xm * xm, axis=-1) * np.sum(ym * ym, axis=-1))
    return np.where(degenerate, np.nan, np.clip(r, -1.0, 1.0))


def _spearman_last_axis(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho = Pearson's r of the (average-tie) ranks, along the last axis."""
    return _pearson_last_axis(stats.rankdata(x, axis=-1), stats.rankdata(y, axis=-1))


@dataclass(frozen=True)
class _CorrelationKind:
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray]
    """Vectorised estimator over the last axis (NaN on constant input)."""
    p_value: Callable[[np.ndarray, np.ndarray], float]
    """Two-sided p-value of H0: no correlation, from SciPy."""
    fisher_variance: float
    """``v`` in ``Var(atanh(r)) ~= v / (n - 3)``."""


#: Correlation coefficients by name.
CORRELATIONS: Registry[_CorrelationKind] = Registry(
    "correlation",
    {
        "pearson": _CorrelationKind(
            statistic=_pearson_last_axis,
            p_value=lambda x, y: float(stats.pearsonr(x, y).pvalue),
            fisher_variance=1.0,
        ),
        "spearman": _CorrelationKind(
            statistic=_spearman_last_axis,
            p_value=lambda x, y: float(stats.spearmanr(x, y).pvalue),
            fisher_variance=SPEARMAN_FISHER_VARIANCE,
        ),
    },
)


@dataclass(frozen=True)
class CorrelationResult:
    """A correlation coefficient with its confidence interval."""

    estimate: float
    """Pearson's r or Spearman's rho on all ``n`` pairs."""
    lo: float
    """Lower end of the confidence interval."""
    hi: float
    """Upper end of the confidence interval."""
    n: int
    """Number of pairs."""
    method: str
    """``"pearson"`` or ``"spearman"``."""
    ci_method: str
    """Key of :data:`CI_METHODS` used for ``lo``/``hi``."""
    p_value: float
    """Two-sided p-value of zero correlation (SciPy's test, whatever the CI method)."""
    confidence: float
    """Confidence level of the interval (e.g. 0.95)."""
    n_resamples: int | None = None
    """Bootstrap resamples kept (non-degenerate); ``None`` for the Fisher interval."""


# ---------------------------------------------------------------------------------------------
# Confidence intervals
# ---------------------------------------------------------------------------------------------


def _z_crit(confidence: float) -> float:
    return float(special.ndtri(0.5 + confidence / 2.0))


def fisher_z_interval(r, n, *, confidence: float = 0.95, variance: float = 1.0):
    """Fisher-z interval ``tanh(atanh(r) -/+ z_{(1+conf)/2} sqrt(variance / (n - 3)))`` (95% CIs as in VSR App. D.5).

    Args:
      r: ``r[...]`` correlation estimates in [-1, 1] (``|r| = 1`` gives the point interval).
      n: ``n[...]`` sample sizes, >= 4 (broadcast against ``r``).
      confidence: level in (0, 1).
      variance: ``v`` in ``Var(atanh r) = v / (n - 3)``; 1 for Pearson,
        :data:`SPEARMAN_FISHER_VARIANCE` for Spearman.

    Returns:
      ``(lo, hi)``, floats for scalar inputs, else arrays; always ``-1 <= lo <= r <= hi <= 1``.
    """
    confidence = check_probability(confidence, "confidence", open_low=True, open_high=True)
    if not (np.isfinite(variance) and variance > 0):
        raise ValueError(f"variance: must be a finite positive number, got {variance!r}")
    r = as_array(r, "r")
    if np.any(np.abs(r) > 1):
        raise ValueError(f"r: entries must lie in [-1, 1] (largest |r| is {np.max(np.abs(r)):.6g})")
    n = as_array(n, "n")
    if np.any(n < 4):
        raise ValueError(f"n: Fisher-z interval needs n >= 4 (smallest n is {np.min(n):.6g})")
    with np.errstate(divide="ignore"):
        z = np.arctanh(r)
    half = _z_crit(confidence) * np.sqrt(variance / (n - 3.0))
    lo, hi = np.tanh(z - half), np.tanh(z + half)
    if np.ndim(lo) == 0:
        return float(lo), float(hi)
    return lo, hi


CIMethod = Callable[..., "tuple[float, float, int | None]"]


def _fisher_ci(x, y, kind: _CorrelationKind, estimate: float, confidence: float, n_resamples: int, rng) -> tuple:
    n = x.shape[0]
    if n < 4:
        raise ValueError(f"x: the Fisher-z interval needs at least 4 pairs, got {n}")
    lo, hi = fisher_z_interval(estimate, n, confidence=confidence, variance=kind.fisher_variance)
    return lo, hi, None


def _bootstrap_distribution(x, y, kind: _CorrelationKind, n_resamples: int, rng) -> np.ndarray:
    """Statistic on ``n_resamples`` paired resamples (indices drawn in one call, as SciPy does)."""
    n = x.shape[0]
    idx = rng.integers(0, n, (n_resamples, n))
    rows = max(1, _CHUNK_ELEMENTS // n)
    out = np.empty(n_resamples)
    for start in range(0, n_resamples, rows):
        sl = idx[start : start + rows]
        out[start : start + rows] = kind.statistic(x[sl], y[sl])
    return out


def _jackknife(x, y, kind: _CorrelationKind) -> np.ndarray:
    """Leave-one-out statistics ``theta[i]`` (observation i removed)."""
    n = x.shape[0]
    keep = ~np.eye(n, dtype=bool)
    out = np.empty(n)
    rows = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, n, rows):
        m = keep[start : start + rows]
        xs = np.broadcast_to(x, m.shape)[m].reshape(m.shape[0], n - 1)
        ys = np.broadcast_to(y, m.shape)[m].reshape(m.shape[0], n - 1)
        out[start : start + rows] = kind.statistic(xs, ys)
    return out


def _valid_resamples(theta_b: np.ndarray) -> np.ndarray:
    valid = theta_b[np.isfinite(theta_b)]
    if valid.size < 2:
        raise ValueError(
            f"x: only {valid.size} of {theta_b.size} bootstrap resamples have non-constant x and y; "
            "too few distinct values for a bootstrap interval"
        )
    return valid


def _percentile_ci(x, y, kind, estimate, confidence, n_resamples, rng) -> tuple:
    if x.shape[0] < 3:
        raise ValueError(f"x: a bootstrap interval needs at least 3 pairs, got {x.shape[0]}")
    theta_b = _valid_resamples(_bootstrap_distribution(x, y, kind, n_resamples, rng))
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(theta_b, [a, 1.0 - a])
    return float(lo), float(hi), int(theta_b.size)


#: Bootstrap statistics within this distance of the estimate count as ties with it in BCa's
#: bias correction, so the interval does not depend on floating-point rounding (or on the
#: units of x and y) when resampled correlations coincide with the estimate.
BCA_TIE_ATOL = 1e-12


def _bca_levels(theta_b: np.ndarray, estimate: float, theta_jack: np.ndarray, confidence: float) -> tuple[float, float]:
    """Quantile levels of the BCa interval (Efron & Tibshirani 1993, eq. 14.10, 14.14, 14.15).

    ``z0 = Phi^-1(share of theta_b below the estimate, ties counted half)``, clipped to
    ``[1/(2B), 1 - 1/(2B)]`` so it stays finite; acceleration
    ``a = sum d^3 / (6 (sum d^2)^1.5)``, ``d = mean(theta_jack) - theta_jack`` (0 if all equal);
    levels ``Phi(z0 + (z0 + z) / (1 - a (z0 + z)))`` for ``z = -/+ z_{(1+conf)/2}``.
    """
    B = theta_b.size
    below = np.count_nonzero(theta_b < estimate - BCA_TIE_ATOL)
    at_or_below = np.count_nonzero(theta_b <= estimate + BCA_TIE_ATOL)
    pct = (below + at_or_below) / (2.0 * B)
    z0 = float(special.ndtri(np.clip(pct, 1.0 / (2 * B), 1.0 - 1.0 / (2 * B))))
    d = theta_jack.mean() - theta_jack
    den = float(np.sum(d * d))
    accel = float(np.sum(d**3) / (6.0 * den**1.5)) if den > 0 else 0.0
    z_a = float(special.ndtri((1.0 - confidence) / 2.0))
    levels = []
    for z in (z_a, -z_a):
        num = z0 + z
        levels.append(float(special.ndtr(z0 + num / (1.0 - accel * num))))
    return levels[0], levels[1]


def _bca_ci(x, y, kind, estimate, confidence, n_resamples, rng) -> tuple:
    """BCa interval; equals SciPy's ``method="BCa"`` except in degenerate cases and ties.

    Departures from SciPy: degenerate resamples (constant x or y) are dropped; leave-one-out
    subsamples with constant x or y are left out of the acceleration; ties with the estimate
    are detected up to :data:`BCA_TIE_ATOL` rather than by exact float equality; z0 is kept
    finite (see :func:`_bca_levels`).  SciPy returns NaN or rounding-dependent values there.
    """
    if x.shape[0] < 3:
        raise ValueError(f"x: a bootstrap interval needs at least 3 pairs, got {x.shape[0]}")
    theta_b = _valid_resamples(_bootstrap_distribution(x, y, kind, n_resamples, rng))
    theta_j = _jackknife(x, y, kind)
    q_lo, q_hi = _bca_levels(theta_b, estimate, theta_j[np.isfinite(theta_j)], confidence)
    lo, hi = np.quantile(theta_b, [q_lo, q_hi])
    return float(lo), float(hi), int(theta_b.size)


#: Confidence-interval constructions by name; uniform signature
#: ``(x, y, kind, estimate, confidence, n_resamples, rng) -> (lo, hi, resamples_kept)``.
CI_METHODS: Registry[CIMethod] = Registry(
    "CI method",
    {"fisher": _fisher_ci, "bootstrap_percentile": _percentile_ci, "bootstrap_bca": _bca_ci},
)


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _check_non_constant(a: np.ndarray, name: str) -> None:
    if np.ptp(a) == 0:
        raise ValueError(f"{name}: is constant, so the correlation is undefined")


def _check_n_resamples(n_resamples) -> int:
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 2:
        raise ValueError(f"n_resamples: must be an integer >= 2, got {n_resamples!r}")
    return int(n_resamples)


def correlation(
    x,
    y,
    method: str = "pearson",
    *,
    ci_method: str = "fisher",
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int | np.random.Generator = 0,
) -> CorrelationResult:
    """Correlation of paired samples with a confidence interval (VSR App. D.5; ExTra App. C.1).

    Args:
      x: ``x[i]``, 1-D, finite, not constant.
      y: ``y[i]``, same length as ``x``, finite, not constant.
      method: key of :data:`CORRELATIONS` (``"pearson"`` or ``"spearman"``).
      ci_method: key of :data:`CI_METHODS` (``"fisher"``, ``"bootstrap_percentile"``,
        ``"bootstrap_bca"``).
      confidence: interval level in (0, 1).
      n_resamples: bootstrap resamples (ignored by ``"fisher"``).
      seed: seed or Generator for the bootstrap.

    Returns:
      :class:`CorrelationResult`.
    """
    kind = CORRELATIONS.lookup(method, where="method")
    ci = CI_METHODS.lookup(ci_method, where="ci_method")
    confidence = check_probability(confidence, "confidence", open_low=True, open_high=True)
    n_resamples = _check_n_resamples(n_resamples)
    x = as_array(x, "x", ndim=1)
    y = as_array(y, "y", ndim=1, shape=(x.shape[0],))
    if x.shape[0] < 3:
        raise ValueError(f"x: need at least 3 pairs, got {x.shape[0]}")
    _check_non_constant(x, "x")
    _check_non_constant(y, "y")
    estimate = float(kind.statistic(x, y))
    rng = np.random.default_rng(seed)
    lo, hi, kept = ci(x, y, kind, estimate, confidence, n_resamples, rng)
    return CorrelationResult(
        estimate=estimate,
        lo=lo,
        hi=hi,
        n=int(x.shape[0]),
        method=method,
        ci_method=ci_method,
        p_value=kind.p_value(x, y),
        confidence=confidence,
        n_resamples=kept,
    )


def pearson(x, y, **kwargs) -> CorrelationResult:
    """Pearson's r with a CI; ``correlation(x, y, "pearson", **kwargs)`` (VSR App. D.5)."""
    return correlation(x, y, "pearson", **kwargs)


def spearman(x, y, **kwargs) -> CorrelationResult:
    """Spearman's rho with a CI; ``correlation(x, y, "spearman", **kwargs)`` (VSR App. D.5; ExTra App. C.1).

    The Fisher interval uses ``se = sqrt(1.06 / (n - 3))`` (Fieller, Hartley & Pearson 1957),
    accurate for roughly ``n >= 10`` and ``|rho| <= 0.8``; prefer a bootstrap outside that range.
    """
    return correlation(x, y, "spearman", **kwargs)


# ---------------------------------------------------------------------------------------------
# Within-group correlation
# ---------------------------------------------------------------------------------------------

#: Fisher-z weights of a group of size ``n_g`` (vectorised over groups).
WITHIN_GROUP_WEIGHTINGS: Registry[Callable[[np.ndarray], np.ndarray]] = Registry("within-group weighting")
# inverse variance of atanh(r_g) (up to the common factor v): the fixed-effect average
WITHIN_GROUP_WEIGHTINGS.add("n_minus_3", lambda n_g: n_g - 3.0)
# every group counts the same, whatever its size
WITHIN_GROUP_WEIGHTINGS.add("equal", lambda n_g: np.ones_like(n_g, dtype=np.float64))

_WITHIN_CI = ("fisher", "bootstrap", "two_stage")


@dataclass(frozen=True)
class WithinGroupCorrelation:
    """Per-group correlations averaged through Fisher's z, with a CI."""

    estimate: float
    """``tanh(sum_g w_g atanh(r_g) / sum_g w_g)`` over the groups used."""
    lo: float
    """Lower end of the confidence interval."""
    hi: float
    """Upper end of the confidence interval."""
    p_value: float
    """Two-sided test of zero average z: with ``ci_method="two_stage"`` the t-test of the two-stage interval
    (G - 1 degrees of freedom), otherwise the z-test with ``se`` as in the Fisher CI (NaN if a used group has
    n_g = 3)."""
    method: str
    """``"pearson"`` or ``"spearman"``."""
    ci_method: str
    """``"fisher"`` (normal theory) or ``"bootstrap"`` (groups resampled with replacement)."""
    weighting: str
    """Key of :data:`WITHIN_GROUP_WEIGHTINGS`."""
    confidence: float
    """Confidence level of the interval."""
    n_groups_used: int
    """Groups that entered the average."""
    n_groups_skipped: int
    """Groups left out (too small, or constant x or y within the group)."""
    n_skipped_too_small: int
    """Groups with fewer than ``min_size`` points."""
    n_skipped_constant: int
    """Groups (of sufficient size) where x or y is constant."""
    n_points_used: int
    """Observations in the groups used."""
    n_clipped: int
    """Used groups whose |r_g| exceeded ``max_abs_r`` and was clipped before atanh."""
    group_labels: tuple
    """Labels of the groups used (sorted as by ``numpy.unique``)."""
    group_estimates: tuple[float, ...]
    """Unclipped r_g of the groups used."""
    group_sizes: tuple[int, ...]
    """n_g of the groups used."""
    q_stat: float = float("nan")
    """Cochran's Q of the groups' z_g around their fixed-effect (n_g - 3 weighted) mean, in units of Var z_g =
    v / (n_g - 3): large when the groups do not share one correlation (NaN below 2 groups or with n_g = 3)."""
    q_df: int = 0
    """Degrees of freedom of Q: groups used - 1."""
    q_p: float = float("nan")
    """P-value of Q against chi-square(q_df): small = heterogeneous groups, so the Fisher CI is too narrow."""
    i_squared: float = float("nan")
    """Higgins' I^2 = max(0, (Q - df) / Q): the share of the z_g spread beyond sampling noise."""


def cochran_q(z: np.ndarray, n_g: np.ndarray, fisher_variance: float = 1.0) -> tuple[float, int, float, float]:
    """``(Q, df, p, I^2)`` of per-group Fisher z values ``z`` with group sizes ``n_g`` (all > 3): Cochran's
    heterogeneity statistic ``Q = sum_g w_g (z_g - z_fe)^2`` with ``w_g = (n_g - 3) / v`` and ``z_fe`` the
    ``w``-weighted mean; ``Q ~ chi2(G - 1)`` when the groups share one correlation."""
    z = np.asarray(z, dtype=np.float64)
    n_g = np.asarray(n_g, dtype=np.float64)
    if z.size < 2 or np.any(n_g <= 3):
        return float("nan"), max(int(z.size) - 1, 0), float("nan"), float("nan")
    w = (n_g - 3.0) / fisher_variance
    z_fe = float(np.sum(w * z) / np.sum(w))
    q = float(np.sum(w * (z - z_fe) ** 2))
    df = int(z.size - 1)
    p = float(stats.chi2.sf(q, df))
    return q, df, p, (max(0.0, (q - df) / q) if q > 0 else 0.0)


def two_stage_interval(z: np.ndarray, w: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float, float]:
    """``(z_bar, lo, hi, p)`` of the weighted mean of per-group estimates ``z`` (weights ``w``) from their spread
    across groups — stage one the groups' own estimates, stage two a t-interval over them: ``se^2 = G / (G - 1)
    sum_g w_g^2 (z_g - z_bar)^2 / (sum_g w_g)^2`` (the cluster-robust variance; with equal weights ``sd / sqrt(G)``),
    ``t`` with G - 1 degrees of freedom. Valid when groups differ in their true value (random effects); needs
    G >= 2. Interval and estimate on the z scale (apply ``tanh`` for correlations)."""
    z = np.asarray(z, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    g = z.size
    if g < 2:
        raise ValueError("groups: a two-stage interval needs at least 2 usable groups")
    z_bar = float(np.sum(w * z) / np.sum(w))
    se = float(np.sqrt(g / (g - 1.0) * np.sum(w * w * (z - z_bar) ** 2)) / np.sum(w))
    t = float(stats.t.ppf(0.5 + confidence / 2.0, g - 1))
    p = float(2.0 * stats.t.sf(abs(z_bar) / se, g - 1)) if se > 0 else (0.0 if z_bar != 0 else 1.0)
    return z_bar, z_bar - t * se, z_bar + t * se, p


def cluster_bootstrap_correlation(x, y, clusters, method: str, *, confidence: float = 0.95, n_resamples: int = 2000,
                                  seed: int | np.random.Generator = 0) -> tuple[float, float, float, int]:
    """``(r, lo, hi, n_clusters)``: the pooled correlation of ``x`` and ``y`` with a percentile interval from
    resampling whole clusters with replacement (points of a cluster — states of one problem, prefixes of one
    trajectory — stay together, so dependence inside a cluster is kept out of the interval's sample size).
    Resamples where x or y is constant are dropped; needs >= 2 clusters."""
    kind = CORRELATIONS.lookup(method, where="method")
    confidence = check_probability(confidence, "confidence", open_low=True, open_high=True)
    n_resamples = _check_n_resamples(n_resamples)
    x = as_array(x, "x", ndim=1)
    y = as_array(y, "y", ndim=1, shape=(x.shape[0],))
    c = np.asarray(clusters)
    if c.ndim != 1 or c.shape[0] != x.shape[0]:
        raise ValueError(f"clusters: expected shape ({x.shape[0]},), got {c.shape}")
    labels, inverse = np.unique(c, return_inverse=True)
    if labels.size < 2:
        raise ValueError("clusters: a cluster bootstrap needs at least 2 clusters")
    _check_non_constant(x, "x")
    _check_non_constant(y, "y")
    members = [np.flatnonzero(inverse == j) for j in range(labels.size)]
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_resamples):
        idx = np.concatenate([members[j] for j in rng.integers(0, labels.size, labels.size)])
        xb, yb = x[idx], y[idx]
        if np.ptp(xb) > 0 and np.ptp(yb) > 0:
            draws.append(float(kind.statistic(xb, yb)))
    if len(draws) < max(10, n_resamples // 2):
        raise ValueError(f"clusters: only {len(draws)} of {n_resamples} resamples had non-constant x and y")
    a = (1.0 - confidence) / 2.0
    lo, hi = (float(v) for v in np.quantile(np.asarray(draws), [a, 1.0 - a]))
    return float(kind.statistic(x, y)), lo, hi, int(labels.size)


def within_group_correlation(
    x,
    y,
    groups,
    method: str,
    *,
    weighting: str = "n_minus_3",
    ci_method: str = "fisher",
    confidence: float = 0.95,
    min_size: int = 4,
    max_abs_r: float = 0.9999,
    n_resamples: int = 9999,
    seed: int | np.random.Generator = 0,
) -> WithinGroupCorrelation:
    """Within-group correlation averaged through Fisher's z (ExTra App. C.1).

    For each group g with ``n_g >= min_size`` points and non-constant x and y:
    ``z_g = atanh(clip(r_g, -max_abs_r, max_abs_r))``; the average is
    ``z_bar = sum_g w_g z_g / sum_g w_g`` with ``w_g`` from ``weighting`` (default ``n_g - 3``,
    the inverse of ``Var z_g = v / (n_g - 3)``, ``v`` = 1 Pearson / 1.06 Spearman), reported as
    ``tanh(z_bar)``.

    CIs: ``"fisher"``: ``tanh(z_bar -/+ z_crit se)``, ``se^2 = v sum_g w_g^2 / (n_g - 3) / (sum_g w_g)^2``
    (assumes a common true correlation across groups and independent points); ``"bootstrap"``: percentile
    interval of ``tanh(z_bar)`` over resamples of the used groups (the cluster bootstrap: needs >= 2 groups;
    allows between-group heterogeneity and any dependence inside a group); ``"two_stage"``:
    :func:`two_stage_interval` over the groups' z_g (t with G - 1 df; same allowances). Cochran's Q
    (:func:`cochran_q`) says whether the groups share one correlation: ``q_p`` small means the Fisher CI is
    too narrow and a cluster-level interval is the one to read.

    Args:
      x: ``x[i]``; y: ``y[i]``; groups: ``groups[i]`` hashable, sortable labels; all length n.
      method: key of :data:`CORRELATIONS`.
      weighting: key of :data:`WITHIN_GROUP_WEIGHTINGS`.
      ci_method: ``"fisher"`` or ``"bootstrap"``.
      confidence: interval level in (0, 1).
      min_size: smallest group used; >= 4 (Var z_g is infinite at n_g = 3), except 3 is allowed
        with ``weighting="equal"`` and ``ci_method="bootstrap"``.
      max_abs_r: groups with ``|r_g| = 1`` would give infinite z; r_g is clipped to this bound
        (counted in ``n_clipped``).
      n_resamples, seed: for ``ci_method="bootstrap"``.
    """
    kind = CORRELATIONS.lookup(method, where="method")
    weight_fn = WITHIN_GROUP_WEIGHTINGS.lookup(weighting, where="weighting")
    if ci_method not in _WITHIN_CI:
        raise ValueError(f"ci_method: unknown value {ci_method!r}; choose one of {list(_WITHIN_CI)}")
    confidence = check_probability(confidence, "confidence", open_low=True, open_high=True)
    max_abs_r = check_probability(max_abs_r, "max_abs_r", open_low=True, open_high=True)
    n_resamples = _check_n_resamples(n_resamples)
    if isinstance(min_size, bool) or int(min_size) != min_size or min_size < 3:
        raise ValueError(f"min_size: must be an integer >= 3, got {min_size!r}")
    min_size = int(min_size)
    if min_size < 4 and (ci_method == "fisher" or weighting == "n_minus_3"):
        raise ValueError(
            "min_size: must be >= 4 with a Fisher CI or n_minus_3 weights (a group of 3 has infinite "
            "Fisher-z variance 1/(n-3)); use weighting='equal' and ci_method='bootstrap' for groups of 3"
        )
    x = as_array(x, "x", ndim=1)
    y = as_array(y, "y", ndim=1, shape=(x.shape[0],))
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != x.shape[0]:
        raise ValueError(f"groups: expected shape ({x.shape[0]},), got {g.shape}")
    try:
        labels, inverse = np.unique(g, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"groups: labels must be mutually comparable ({exc})") from None

    used_labels, r_used, n_used = [], [], []
    too_small = constant = 0
    for j, label in enumerate(labels):
        members = inverse == j
        n_g = int(members.sum())
        if n_g < min_size:
            too_small += 1
            continue
        xg, yg = x[members], y[members]
        if np.ptp(xg) == 0 or np.ptp(yg) == 0:
            constant += 1
            continue
        used_labels.append(label.item() if hasattr(label, "item") else label)
        r_used.append(float(kind.statistic(xg, yg)))
        n_used.append(n_g)
    if not r_used:
        raise ValueError(
            f"groups: no usable group ({too_small} with fewer than {min_size} points, "
            f"{constant} with constant x or y)"
        )
    r = np.asarray(r_used)
    n_g = np.asarray(n_used, dtype=np.float64)
    clipped = np.abs(r) > max_abs_r
    z = np.arctanh(np.clip(r, -max_abs_r, max_abs_r))
    w = weight_fn(n_g)
    z_bar = float(np.sum(w * z) / np.sum(w))
    if np.all(n_g > 3):
        se = float(np.sqrt(kind.fisher_variance * np.sum(w * w / (n_g - 3.0))) / np.sum(w))
        p_value = float(2.0 * special.ndtr(-abs(z_bar) / se))
    else:
        se, p_value = float("inf"), float("nan")
    zc = _z_crit(confidence)
    q, q_df, q_p, i2 = cochran_q(z, n_g, kind.fisher_variance)
    if ci_method == "fisher":
        lo, hi = float(np.tanh(z_bar - zc * se)), float(np.tanh(z_bar + zc * se))
    elif ci_method == "two_stage":
        _, zlo, zhi, p_value = two_stage_interval(z, w, confidence)
        lo, hi = float(np.tanh(zlo)), float(np.tanh(zhi))
    else:
        if r.size < 2:
            raise ValueError("groups: a bootstrap over groups needs at least 2 usable groups")
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, r.size, (n_resamples, r.size))
        zb = np.sum(w[idx] * z[idx], axis=1) / np.sum(w[idx], axis=1)
        a = (1.0 - confidence) / 2.0
        lo, hi = (float(v) for v in np.tanh(np.quantile(zb, [a, 1.0 - a])))
    return WithinGroupCorrelation(
        estimate=float(np.tanh(z_bar)),
        lo=lo,
        hi=hi,
        p_value=p_value,
        method=method,
        ci_method=ci_method,
        weighting=weighting,
        confidence=confidence,
        n_groups_used=int(r.size),
        n_groups_skipped=too_small + constant,
        n_skipped_too_small=too_small,
        n_skipped_constant=constant,
        n_points_used=int(n_g.sum()),
        n_clipped=int(clipped.sum()),
        group_labels=tuple(used_labels),
        group_estimates=tuple(float(v) for v in r),
        group_sizes=tuple(int(v) for v in n_g),
        q_stat=q,
        q_df=q_df,
        q_p=q_p,
        i_squared=i2,
    )
