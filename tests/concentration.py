"""Calibrated concentration bounds for Monte-Carlo-versus-exact assertions (test support for every test folder:
``tests/`` is on ``sys.path`` through its ``conftest.py``).

Each radius ``t`` satisfies ``Pr(|mean_n - E X| >= t) <= delta`` under the stated conditions,
so a test that asserts ``|mean_n - exact| < t`` fails spuriously with probability <= delta
(calibrated false-failure rates, never hand-tuned tolerances).
"""

from __future__ import annotations

import math

from theory._validate import check_positive_scalar, check_probability


def hoeffding_radius(n: int, value_range: float, delta: float) -> float:
    """Two-sided Hoeffding radius for the mean of ``n`` i.i.d. variables in an interval of width ``value_range``."""
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    value_range = check_positive_scalar(value_range, "value_range", strict=False)
    delta = check_probability(delta, "delta", open_low=True, open_high=True)
    return value_range * math.sqrt(math.log(2.0 / delta) / (2.0 * n))


def bernstein_radius(n: int, variance: float, bound: float, delta: float) -> float:
    """Two-sided Bernstein radius: ``|X - E X| <= bound`` a.s., ``Var X = variance``.

    Solves ``2 exp(-n t^2 / (2 variance + 2 bound t / 3)) = delta`` for ``t``.
    """
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    variance = check_positive_scalar(variance, "variance", strict=False)
    bound = check_positive_scalar(bound, "bound", strict=False)
    delta = check_probability(delta, "delta", open_low=True, open_high=True)
    L = math.log(2.0 / delta)
    # n t^2 - (2 bound L / 3) t - 2 variance L = 0
    a, b, c = float(n), -2.0 * bound * L / 3.0, -2.0 * variance * L
    return (-b + math.sqrt(b * b - 4.0 * a * c)) / (2.0 * a)
