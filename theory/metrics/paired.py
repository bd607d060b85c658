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

__all__ = ["Contrast", "holm", "paired_contrast", "paired_power", "seeds_for_power"]


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
