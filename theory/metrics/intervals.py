"""The project's one Student-t interval of a mean (seeds, problems or paired differences as the units).

``t_interval(values)`` drops non-finite entries and returns ``(mean, lo, hi)``: the sample mean and
``mean ± t_{n-1, (1+c)/2} · s / sqrt(n)`` with the Bessel-corrected ``s``; fewer than two values give nan
bounds (one value: its mean; none: nan). Every report of the project (comparison suites, the trainer's
avg@k interval, the grid-world contrasts) uses it, so their intervals agree to the last digit.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

__all__ = ["t_interval"]


def t_interval(values: Iterable[float | None], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lo, hi)`` of the finite entries of ``values`` (module doc)."""
    from scipy import stats

    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: must be in (0, 1), got {confidence!r}")
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan, math.nan
    m = float(v.mean())
    if v.size < 2:
        return m, math.nan, math.nan
    h = float(stats.t.ppf(0.5 + confidence / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, m - h, m + h
