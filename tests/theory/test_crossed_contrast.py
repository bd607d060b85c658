"""The seed × problem (crossed) contrast: coverage on simulated two-way data with a known mean, its invariances,
and the cases it refuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from theory.metrics import crossed_contrast, paired_contrast


@pytest.mark.parametrize("sd_seed, sd_problem", [(0.02, 0.1), (0.0, 0.1), (0.05, 0.0)])
def test_the_interval_covers_the_true_mean_at_its_level(sd_seed, sd_problem):
    rng = np.random.default_rng(7)
    S, P, truth, n = 8, 120, 0.01, 400
    hits = 0
    for _ in range(n):
        d = truth + rng.normal(0, sd_seed, S)[:, None] + rng.normal(0, sd_problem, P)[None, :] + rng.normal(0, 0.2, (S, P))
        c = crossed_contrast(d)
        hits += c.ci_low <= truth <= c.ci_high
    assert 0.91 <= hits / n <= 0.985  # nominal 0.95; binomial sd at n = 400 is 0.011


def test_a_problem_effect_widens_the_interval_that_seeds_alone_miss():
    """The seed-only interval conditions on the problems: with a large problem component it is too narrow."""
    rng = np.random.default_rng(3)
    S, P, n = 8, 60, 300
    seed_hits = crossed_hits = 0
    for _ in range(n):
        d = rng.normal(0, 0.3, P)[None, :] + rng.normal(0, 0.05, (S, P))  # true mean 0, the problems' draw dominates
        lo, hi = paired_contrast(d.mean(axis=1)).ci_low, paired_contrast(d.mean(axis=1)).ci_high
        seed_hits += lo <= 0 <= hi
        c = crossed_contrast(d)
        crossed_hits += c.ci_low <= 0 <= c.ci_high
    assert seed_hits / n < 0.5 and crossed_hits / n > 0.9


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(2, 6), st.integers(2, 9)), elements=st.floats(-1, 1)),
       st.floats(-2, 2), st.floats(0.1, 10))
def test_shift_scale_and_order(d, shift, scale):
    c = crossed_contrast(d)
    s = crossed_contrast(scale * d + shift)
    assert s.mean == pytest.approx(scale * c.mean + shift, abs=1e-9)
    if np.isfinite(c.ci_low) and c.ci_high > c.ci_low:
        assert s.ci_high - s.ci_low == pytest.approx(scale * (c.ci_high - c.ci_low), rel=1e-6, abs=1e-9)
    rng = np.random.default_rng(0)
    p = crossed_contrast(d[rng.permutation(d.shape[0])][:, rng.permutation(d.shape[1])])
    assert (p.ci_low, p.ci_high) == pytest.approx((c.ci_low, c.ci_high), rel=1e-9, abs=1e-9, nan_ok=True)


@pytest.mark.parametrize("bad, match", [(np.zeros((1, 5)), "at least 2"), (np.zeros(5), "at least 2"),
                                        (np.array([[0.0, np.nan], [0.0, 1.0]]), "non-finite")])
def test_bad_tables_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        crossed_contrast(bad)
