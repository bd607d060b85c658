"""The one Student-t interval (``theory.metrics.t_interval``) and its users agreeing with it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.metrics import t_interval

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=2, max_size=40), st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_matches_scipy_and_contains_the_mean(xs, conf):
    from scipy import stats

    m, lo, hi = t_interval(xs, conf)
    v = np.asarray(xs)
    assert m == pytest.approx(v.mean(), abs=1e-9)
    if v.std(ddof=1) > 0:
        elo, ehi = stats.t.interval(conf, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
        assert (lo, hi) == pytest.approx((elo, ehi), rel=1e-9, abs=1e-9)
    assert lo <= m <= hi


def test_non_finite_entries_are_dropped_and_small_samples_give_nan_bounds():
    assert t_interval([1.0, None, float("nan"), 3.0])[0] == 2.0
    m, lo, hi = t_interval([4.0])
    assert m == 4.0 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(x) for x in t_interval([]))
    with pytest.raises(ValueError, match="confidence"):
        t_interval([1.0, 2.0], 1.0)


def test_every_report_uses_it():
    from llm_harness.compare.stats import seed_interval
    from theory.metrics.paired import paired_contrast

    xs = [0.1, 0.4, 0.35, 0.2, 0.5]
    m, lo, hi = t_interval(xs)
    assert seed_interval(xs) == (m, lo, hi)
    c = paired_contrast(xs)
    assert (c.mean, c.ci_low, c.ci_high) == (m, lo, hi)
