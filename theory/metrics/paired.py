"""Paired-seed statistics of a comparison: contrasts, Holm's correction, power.

Every arm of a comparison runs the same seeds; seed ``s`` fixes the prompt order and the evaluation
sample for every arm, so an arm's effect is measured on the per-seed differences ``d_s`` to the
reference arm. :func:`paired_contrast` is the paired t-test on them (its interval is
:func:`theory.metrics.intervals.t_interval`); :func:`holm` adjusts a family of p-values (step-down, strong
family-wise control); :func:`paired_power` is the power of the two-sided paired t-test against a true
difference ``delta`` when the differences have standard deviation ``sd`` (non-central t), and
:func:`seeds_for_power` the smallest seed count reaching a target power. Pure functions of numbers (scipy for
the t distributions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Contrast", "CrossedContrast", "crossed_contrast", "holm", "paired_contrast", "paired_power", "seeds_for_power"]


@dataclass(frozen=True)
class Contrast:
    """A paired contrast over seeds."""

    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float
    p: float
    """Two-sided paired t-test p-value (nan for fewer than 2 seeds or zero spread with zero mean)."""


def paired_contrast(diffs: Sequence[float], confidence: float = 0.95) -> Contrast:
    """Mean, Student-t interval (``theory.metrics.t_interval``) and two-sided p-value of per-seed differences
    (non-finite ones dropped)."""
    from scipy import stats

    from theory.metrics.intervals import t_interval

    d = np.asarray([x for x in diffs if x is not None and np.isfinite(x)], dtype=np.float64)
    n = int(d.size)
    if n == 0:
        return Contrast(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    m = float(d.mean())
    if n < 2:
        return Contrast(1, m, math.nan, math.nan, math.nan, math.nan)
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    _, lo, hi = t_interval(d, confidence)
    if se == 0.0:
        p = math.nan if m == 0.0 else 0.0
    else:
        p = float(2 * stats.t.sf(abs(m) / se, n - 1))
    return Contrast(n, m, sd, lo, hi, p)


@dataclass(frozen=True)
class CrossedContrast:
    """A paired contrast over seeds *and* evaluation problems (:func:`crossed_contrast`)."""

    seeds: int
    problems: int
    mean: float
    ci_low: float
    ci_high: float
    p: float
    df: float
    """Satterthwaite degrees of freedom of the interval's t quantile."""
    var_seed: float
    """Seed-to-seed variance component of a cell's difference (method of moments, floored at 0)."""
    var_problem: float
    """Problem-to-problem variance component (floored at 0)."""
    var_residual: float
    """Interaction + sampling variance of one cell."""


def crossed_contrast(diffs, confidence: float = 0.95) -> CrossedContrast:
    """The mean of a seeds × problems table of paired differences with an interval that counts both as random.

    ``diffs[s, p]`` = arm − reference on evaluation problem ``p`` of seed ``s`` (e.g. the difference of success
    rates over the problem's k samples), every arm evaluated on the same problems. A seed-only interval conditions on
    the fixed problem set; here the problems are a sample too. Two-way crossed random effects without replication,
    ``d_sp = μ + a_s + b_p + e_sp``: with mean squares ``MS_S = P·var(row means)``, ``MS_P = S·var(column means)``
    and the residual ``MS_E``, ``Var(d̄) = (MS_S + MS_P − MS_E)/(S·P)`` is unbiased (expected mean squares of the
    crossed design); the interval is ``d̄ ± t_{ν} se`` with Satterthwaite's ``ν`` for that linear combination (a
    negative combination falls back to ``(MS_S + MS_P)/(S·P)``, conservative). Needs ``S ≥ 2`` and ``P ≥ 2``;
    rows or columns with a non-finite cell are refused (pair only what both arms evaluated).
    """
    from scipy import stats

    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] < 2 or d.shape[1] < 2:
        raise ValueError(f"diffs: expected a seeds x problems table with at least 2 of each, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("diffs: non-finite cells (pair only the seeds and problems both arms evaluated)")
    S, P = d.shape
    m = float(d.mean())
    rows, cols = d.mean(axis=1), d.mean(axis=0)
    ms_s = P * float(np.sum((rows - m) ** 2)) / (S - 1)
    ms_p = S * float(np.sum((cols - m) ** 2)) / (P - 1)
    resid = d - rows[:, None] - cols[None, :] + m
    df_e = (S - 1) * (P - 1)
    ms_e = float(np.sum(resid ** 2)) / df_e
    comb = ms_s + ms_p - ms_e
    terms = [(ms_s, S - 1), (ms_p, P - 1), (-ms_e, df_e)]
    if comb <= 0:
        comb = ms_s + ms_p
        terms = terms[:2]
    var = comb / (S * P)
    den = sum(c * c / f for c, f in terms)
    nu = comb * comb / den if den > 0 else math.inf
    if var <= 0:
        return CrossedContrast(S, P, m, m, m, math.nan if m == 0 else 0.0, nu, 0.0, 0.0, 0.0)
    se = math.sqrt(var)
    q = float(stats.t.ppf(0.5 + confidence / 2, nu))
    p = float(2 * stats.t.sf(abs(m) / se, nu))
    return CrossedContrast(S, P, m, m - q * se, m + q * se, p, float(nu), max(0.0, (ms_s - ms_e) / P),
                           max(0.0, (ms_p - ms_e) / S), ms_e)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order (nan entries stay nan and are not counted)."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    if m == 0:
        return out.tolist()
    order = idx[np.argsort(p[idx], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def paired_power(delta: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level ``alpha`` with ``n`` seeds against a true mean
    difference ``delta`` when the per-seed differences have standard deviation ``sd``."""
    from scipy import stats

    if n < 2 or not (sd > 0) or not np.isfinite(sd):
        return math.nan
    df = n - 1
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    ncp = abs(delta) / (sd / math.sqrt(n))
    upper = float(stats.nct.sf(crit, df, ncp))
    if not np.isfinite(upper):  # scipy's non-central t loses precision far in the tail: power is 1 there
        upper = 1.0 if ncp > crit else 0.0
    lower = float(stats.nct.cdf(-crit, df, ncp))
    return float(min(1.0, upper + (lower if np.isfinite(lower) else 0.0)))


def seeds_for_power(delta: float, sd: float, power: float = 0.8, alpha: float = 0.05, n_max: int = 10_000) -> int:
    """Smallest seed count whose :func:`paired_power` reaches ``power`` (``n_max + 1`` if none up to ``n_max``)."""
    if not (sd > 0) or not np.isfinite(sd):
        return 2
    for n in range(2, n_max + 1):
        if paired_power(delta, sd, n, alpha) >= power:
            return n
    return n_max + 1
