"""Pure prefix arithmetic: cuts, step truncation, sigma-hat, entropy statistics, smoothed MTE."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefixvalue.prefixes import (
    alpha_cut,
    empirical_std,
    entropy_stats,
    p_hat,
    sigma_hat,
    smoothed_mte,
    smoothing_weights,
    step_cuts,
    token_cut_for_offset,
)


@pytest.mark.parametrize(
    ("alpha", "length", "cut"),
    [(0.0, 56, 0), (1.0, 56, 56), (0.25, 56, 14), (0.5, 5, 3), (0.25, 6, 2), (0.75, 6, 5), (0.5, 0, 0), (0.3, 1, 0)],
)
def test_alpha_cut_rounds_half_up(alpha, length, cut):
    assert alpha_cut(alpha, length) == cut


@given(st.floats(0, 1), st.integers(0, 500))
def test_alpha_cut_is_nearest_position(alpha, length):
    cut = alpha_cut(alpha, length)
    assert 0 <= cut <= length
    assert abs(cut - alpha * length) <= 0.5 + 1e-9


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True])
def test_alpha_cut_rejects_bad_alpha(bad):
    with pytest.raises(ValueError, match="alpha"):
        alpha_cut(bad, 10)


def test_step_cuts_hand_cases():
    # 5 steps at 20/40/60/80%: k = 1, 2, 3, 4
    assert step_cuts(5, (0.2, 0.4, 0.6, 0.8)) == ((0.2, 1), (0.4, 2), (0.6, 3), (0.8, 4))
    # 3 steps: round(0.6)=1, round(1.2)=1, round(1.8)=2, round(2.4)=2 -> k in {1, 2}, first fraction kept
    assert step_cuts(3, (0.2, 0.4, 0.6, 0.8)) == ((0.2, 1), (0.6, 2))
    # never the empty prefix nor the whole trajectory
    assert step_cuts(9, (0.0, 1.0)) == ((0.0, 1), (1.0, 8))
    assert step_cuts(1, (0.5,)) == ()
    assert step_cuts(0, (0.5,)) == ()


@given(st.integers(2, 60), st.lists(st.floats(0, 1), min_size=1, max_size=6))
def test_step_cuts_interior_and_distinct(n_steps, fractions):
    cuts = step_cuts(n_steps, fractions)
    ks = [k for _, k in cuts]
    assert ks == sorted(set(ks))
    assert all(1 <= k <= n_steps - 1 for k in ks)
    for f, k in cuts:
        assert f in fractions
        assert k == min(n_steps - 1, max(1, math.floor(f * n_steps + 0.5)))


def test_token_cut_identity_for_character_tokens():
    text = "12+3=15,15-4=11\nA:11"
    ids = list(range(len(text)))
    decode = lambda t: "".join(text[i] for i in t)  # noqa: E731
    for off in range(len(text) + 1):
        assert token_cut_for_offset(ids, off, decode) == off


def test_token_cut_with_multichar_tokens_lands_on_next_boundary():
    pieces = ["12", "+3", "=15,", "15", "-4=", "11\n", "A:", "11"]
    decode = lambda t: "".join(pieces[i] for i in t)  # noqa: E731
    ids = list(range(len(pieces)))
    assert token_cut_for_offset(ids, 0, decode) == 0
    assert token_cut_for_offset(ids, 8, decode) == 3  # "12+3=15," ends exactly at token 3
    assert token_cut_for_offset(ids, 7, decode) == 3  # mid-token: the first boundary at or after
    assert token_cut_for_offset(ids, 9, decode) == 4
    with pytest.raises(ValueError, match="offset"):
        token_cut_for_offset(ids, 100, decode)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=30), st.data())
def test_token_cut_is_minimal(lengths, data):
    pieces = ["x" * n for n in lengths]
    decode = lambda t: "".join(pieces[i] for i in t)  # noqa: E731
    ids = list(range(len(pieces)))
    total = sum(lengths)
    off = data.draw(st.integers(0, total))
    t = token_cut_for_offset(ids, off, decode)
    assert len(decode(ids[:t])) >= off
    assert t == 0 or len(decode(ids[: t - 1])) < off


def test_p_hat_and_sigma_hat_hand_values():
    # VSR §3.2: p = (1 - a) p0 + a R
    assert p_hat(0.25, 0.2, 1.0) == pytest.approx(0.75 * 0.2 + 0.25)
    assert p_hat(0.0, 0.3, 1.0) == pytest.approx(0.3)
    assert p_hat(1.0, 0.3, 0.0) == pytest.approx(0.0)
    p = 0.75 * 0.2 + 0.25
    assert sigma_hat(0.25, 0.2, 1.0) == pytest.approx(p * (1 - p))
    assert sigma_hat(0.25, 0.2, 1.0, sqrt=True) == pytest.approx(math.sqrt(p * (1 - p)))
    np.testing.assert_allclose(sigma_hat([0.0, 0.5, 1.0], [0.5, 0.5, 0.5], [1, 1, 1]), [0.25, 0.1875, 0.0])
    with pytest.raises(ValueError, match="p0"):
        p_hat(0.5, 1.5, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        sigma_hat(-0.1, 0.5, 1.0)


def test_empirical_std_is_population_std_of_binary_rewards():
    for n in (1, 7, 16):
        for c in range(n + 1):
            r = np.array([1.0] * c + [0.0] * (n - c))
            assert empirical_std(c, n) == pytest.approx(r.std(ddof=0), abs=1e-12)
    with pytest.raises(ValueError, match="n_correct"):
        empirical_std(5, 4)


def test_entropy_stats_hand_computation():
    h = np.array([1.0, 2.0, 0.5, 3.0, 0.25])
    lp = np.log(np.array([0.5, 0.25, 0.5, 0.125, 1.0]))
    s = entropy_stats(h, lp, cut=4, step_start=2)
    assert s["mte"] == pytest.approx((1 + 2 + 0.5 + 3) / 4)
    assert s["last_step_entropy"] == pytest.approx((0.5 + 3) / 2)
    assert s["min_entropy"] == 0.5 and s["max_entropy"] == 3.0
    assert s["std_entropy"] == pytest.approx(np.std([1, 2, 0.5, 3]))
    assert s["next_token_entropy"] == 0.25
    mean_lp = np.mean(np.log([0.5, 0.25, 0.5, 0.125]))
    assert s["mean_logprob"] == pytest.approx(mean_lp)
    assert s["perplexity"] == pytest.approx(math.exp(-mean_lp))
    assert math.isnan(entropy_stats(h, lp, cut=5, step_start=0)["next_token_entropy"])
    with pytest.raises(ValueError, match="cut"):
        entropy_stats(h, lp, cut=6, step_start=0)
    with pytest.raises(ValueError, match="step_start"):
        entropy_stats(h, lp, cut=2, step_start=2)


def test_smoothing_weights_hand_computation():
    # e0 = e1 (cos 1), e2 orthogonal to both (cos 0); tau = 0.5 -> logits 2, 2, 0 for rows 0/1
    e = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    w = smoothing_weights(e, 0.5)
    a, b = math.exp(2.0), math.exp(0.0)
    np.testing.assert_allclose(w[0], [a / (2 * a + b), a / (2 * a + b), b / (2 * a + b)], rtol=1e-12)
    np.testing.assert_allclose(w[2], [b / (2 * b + a), b / (2 * b + a), a / (2 * b + a)], rtol=1e-12)
    h = np.array([1.0, 3.0, 10.0])
    np.testing.assert_allclose(smoothed_mte(h, e, 0.5), w @ h, rtol=1e-12)
    assert smoothed_mte(h, e, 0.5)[0] == pytest.approx((a * 1 + a * 3 + b * 10) / (2 * a + b))


@given(st.integers(1, 8), st.integers(1, 5), st.floats(0.01, 5.0), st.integers(0, 2**31 - 1))
def test_smoothed_mte_is_a_convex_combination(n, d, tau, seed):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(n, d))
    h = rng.uniform(0, 3, size=n)
    w = smoothing_weights(e, tau)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(w >= 0)
    s = smoothed_mte(h, e, tau)
    assert np.all(s >= h.min() - 1e-12) and np.all(s <= h.max() + 1e-12)
    # tiny tau: a candidate whose direction differs from all others keeps (almost) its own value
    u = e / np.linalg.norm(e, axis=1, keepdims=True)
    cos = u @ u.T
    np.fill_diagonal(cos, -np.inf)
    if n == 1 or cos.max() < 1 - 1e-2:  # other weights <= n exp(-1e-2 / 1e-4) ~ n e^-100
        np.testing.assert_allclose(smoothed_mte(h, e, 1e-4), h, atol=1e-9)


def test_smoothing_rejects_bad_tau_and_shapes():
    with pytest.raises(ValueError, match="tau"):
        smoothing_weights(np.eye(2), 0.0)
    with pytest.raises(ValueError, match="embeddings"):
        smoothed_mte([1.0, 2.0], np.eye(3), 0.1)


def test_smoothed_mte_agrees_with_the_trainer_plugin_when_present():
    """The same formula built twice (this study and the ExTra trainer plug-in) must agree."""
    mte_mod = pytest.importorskip("llm_harness.methods.mte")
    other = getattr(mte_mod, "smoothed_entropy", None)
    if other is None:
        pytest.skip("llm_harness.methods.mte has no smoothed_entropy")
    rng = np.random.default_rng(5)
    e = rng.normal(size=(7, 4))
    h = rng.uniform(0, 2, size=7)
    np.testing.assert_allclose(smoothed_mte(h, e, 0.1), other(h, e, 0.1), rtol=1e-10)
