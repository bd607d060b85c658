"""pass@k / avg@k (Chen et al. 2021, eq. 1): exact identities, Monte-Carlo unbiasedness, bad input."""

from __future__ import annotations

from fractions import Fraction
from math import comb, log, sqrt

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from theory.metrics import avg_at_k, pass_at_k, pass_at_k_table

FALSE_FAILURE = 1e-6


@st.composite
def nck(draw, n_max: int = 80):
    n = draw(st.integers(1, n_max))
    c = draw(st.integers(0, n))
    k = draw(st.integers(1, n))
    return n, c, k


@given(nck())
def test_pass_at_k_equals_exact_rational_formula(args):
    n, c, k = args
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=4 * np.sqrt(np.finfo(float).eps), abs=1e-300)


@given(nck())
def test_pass_at_1_and_pass_at_n(args):
    n, c, _ = args
    assert pass_at_k(n, c, 1) == pytest.approx(c / n, rel=1e-14, abs=1e-15)
    assert pass_at_k(n, c, n) == float(c > 0)


@given(st.integers(2, 60), st.data())
def test_pass_at_k_monotone_in_k_and_c(n, data):
    c = data.draw(st.integers(0, n))
    in_k = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(a <= b for a, b in zip(in_k[:-1], in_k[1:]))
    k = data.draw(st.integers(1, n))
    in_c = pass_at_k(n, np.arange(n + 1), k)
    assert np.all(np.diff(in_c) >= 0) and in_c[0] == 0.0 and in_c[-1] == 1.0


def test_pass_at_k_vectorised_matches_loop_and_broadcasts():
    rng = np.random.default_rng(0)
    n = rng.integers(5, 50, size=(4, 6))
    c = rng.integers(0, 5, size=(4, 6))
    out = pass_at_k(n, c, 5)
    assert out.shape == (4, 6)
    loop = np.array([[pass_at_k(int(a), int(b), 5) for a, b in zip(ra, rb)] for ra, rb in zip(n, c)])
    np.testing.assert_array_equal(out, loop)
    assert pass_at_k(20, [0, 1, 2], 3).shape == (3,)
    assert isinstance(pass_at_k(20, 3, 2), float)


def test_pass_at_k_keeps_relative_precision_for_tiny_values():
    # pass@k(n, 1, k) = k / n exactly; a naive 1 - C(n-1,k)/C(n,k) in floats loses digits.
    for n, k in [(10**5, 3), (10**6, 1), (5000, 2000)]:
        assert pass_at_k(n, 1, k) == pytest.approx(k / n, rel=1e-12)


def test_pass_at_k_is_unbiased_monte_carlo():
    """Mean of pass@k over problems with c ~ Bin(n, p) -> 1 - (1 - p)^k (Hoeffding, Bonferroni)."""
    cases = [(10, 5, 0.1), (16, 4, 0.3), (64, 16, 0.02)]
    N = 200_000
    t = sqrt(log(2 * len(cases) / FALSE_FAILURE) / (2 * N))  # estimator is bounded in [0, 1]
    rng = np.random.default_rng(12345)
    for n, k, p in cases:
        c = rng.binomial(n, p, size=N)
        mean = float(np.mean(pass_at_k(n, c, k)))
        assert abs(mean - (1 - (1 - p) ** k)) <= t, (n, k, p, mean)


def test_plug_in_estimator_is_biased_monte_carlo():
    """Negative case: the plug-in 1 - (1 - c/n)^k misses 1 - (1 - p)^k by more than the bound."""
    n, k, p, N = 10, 5, 0.1, 200_000
    t = sqrt(log(2 / FALSE_FAILURE) / (2 * N))
    truth = 1 - (1 - p) ** k
    cs = np.arange(n + 1)
    exact_bias = float(np.sum(stats.binom.pmf(cs, n, p) * (1 - (1 - cs / n) ** k))) - truth
    assert abs(exact_bias) > 2 * t  # precondition: the bias is detectable at this N
    c = np.random.default_rng(7).binomial(n, p, size=N)
    plug_in = float(np.mean(1 - (1 - c / n) ** k))
    assert abs(plug_in - truth) > t
    assert abs(float(np.mean(pass_at_k(n, c, k))) - truth) <= t


@given(st.integers(1, 12), st.integers(1, 12), st.data())
def test_avg_at_k_and_table(problems, samples, data):
    bits = data.draw(st.lists(st.booleans(), min_size=problems * samples, max_size=problems * samples))
    correct = np.array(bits, dtype=bool).reshape(problems, samples)
    assert avg_at_k(correct) == pytest.approx(correct.mean(), rel=1e-14, abs=1e-15)
    ks = list(range(1, samples + 1))
    table = pass_at_k_table(correct, ks)
    assert list(table) == ks
    assert table[1] == pytest.approx(avg_at_k(correct), rel=1e-14, abs=1e-15)
    assert table[samples] == pytest.approx(np.mean(correct.any(axis=1)), rel=1e-14, abs=1e-15)
    for k in ks:
        direct = np.mean([pass_at_k(samples, int(row.sum()), k) for row in correct])
        assert table[k] == pytest.approx(direct, rel=1e-14, abs=1e-15)


@pytest.mark.parametrize(
    "n, c, k, arg",
    [
        (5, 2, 6, "k"),  # k > n
        ([5, 3], [1, 1], 4, "k"),  # k > n for one problem
        (5, 6, 2, "c"),  # c > n
        (-1, 0, 1, "n"),
        (5, -1, 1, "c"),
        (0, 0, 1, "n"),
        (5, 2, 0, "k"),
        (5, 2, -3, "k"),
        (5, 2, 1.5, "k"),
        (5, 2, True, "k"),
        (5, 2, "2", "k"),
        (5.5, 2, 1, "n"),
        (5, 2.2, 1, "c"),
        ([5, 5], [1, 2, 3], 1, "c"),  # not broadcastable
        (5, np.nan, 1, "c"),
        ([], [], 1, "n"),
    ],
)
def test_pass_at_k_bad_input(n, c, k, arg):
    with pytest.raises(ValueError, match=rf"^{arg}:"):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(
    "correct",
    [[1, 0, 1], [[1, 0], [2, 1]], [[0.5, 1]], np.zeros((0, 3)), [[1, np.nan]]],
)
def test_avg_at_k_bad_input(correct):
    with pytest.raises(ValueError, match=r"^correct:"):
        avg_at_k(correct)


@pytest.mark.parametrize("ks, arg", [([], "ks"), ([1, 1], "ks"), ([4], "ks"), ([0], "k")])
def test_pass_at_k_table_bad_input(ks, arg):
    with pytest.raises(ValueError, match=rf"^{arg}:"):
        pass_at_k_table([[1, 0, 1], [0, 0, 1]], ks)
