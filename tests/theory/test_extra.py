"""ExTra theory: Lemma A.1, App. E.2, Prop. A.2, Prop. 1 - properties, negatives and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from theory import extra as ex
from concentration import hoeffding_radius
from theory_strategies import assert_close, floats


@st.composite
def gated_groups(draw):
    G = draw(st.integers(1, 16))
    r = draw(hnp.arrays(np.float64, G, elements=st.sampled_from([0.0, 1.0])))
    b = draw(hnp.arrays(np.float64, G, elements=floats(0.0, 1.0))) * (r == 1)
    return r, b


@given(G=st.integers(1, 32), c=floats(-5, 5), ratio=hnp.arrays(np.float64, 32, elements=floats(0.0, 5.0)))
def test_lemma_a1_equal_rewards_zero_gradient(G, c, ratio):
    A = ex.grpo_advantages(np.full(G, c))
    assert np.all(A == 0)
    assert np.all(ex.clipped_surrogate(ratio[:G], A) == 0)
    assert np.all(ex.clipped_surrogate_grad_logratio(ratio[:G], A) == 0)


@given(adv=hnp.arrays(np.float64, 8, elements=floats(-3, 3)), logr=hnp.arrays(np.float64, 8, elements=floats(-1, 1)))
def test_surrogate_gradient_matches_finite_difference(adv, logr):
    ratio = np.exp(logr)
    kink = (np.abs(ratio - 0.8) < 1e-4) | (np.abs(ratio - 1.28) < 1e-4)
    h = 1e-7
    fd = (ex.clipped_surrogate(ratio * np.exp(h), adv) - ex.clipped_surrogate(ratio * np.exp(-h), adv)) / (2 * h)
    an = ex.clipped_surrogate_grad_logratio(ratio, adv)
    np.testing.assert_allclose(an[~kink], fd[~kink], atol=1e-5)


def test_grpo_advantage_conventions():
    r = np.array([1.0, 0.0, 0.0, 1.0])
    A = ex.grpo_advantages(r, eps=0.0)
    np.testing.assert_allclose(A, [1, -1, -1, 1])
    np.testing.assert_allclose(ex.grpo_advantages(r, ddof=1, eps=0.0), (r - 0.5) / np.std(r, ddof=1))
    batch = np.stack([r, np.ones(4)])
    np.testing.assert_allclose(ex.grpo_advantages(batch, eps=0.0), np.stack([A, np.zeros(4)]))


@given(gated_groups(), st.sampled_from([0.0, 0.5, 1.0, 7.0, 1e4]))
def test_e2_post_normalization_properties(group, gamma):
    r, b = group
    rep = ex.e2_ordering(r, b, gamma)
    assert rep.correct_above_incorrect and rep.novelty_only and rep.all_zero
    # the task-reward part is exactly GRPO's: novelty never enters the normalisation statistics
    np.testing.assert_allclose(ex.post_normalization_advantages(r, b, gamma) - gamma * b, ex.grpo_advantages(r))


def test_negative_pre_normalization_couples_novelty_to_the_statistics():
    """Pre-normalisation: (i) a shared novelty offset is erased, (ii) incorrect responses' advantages
    depend on the novelty of other responses. Post-normalisation has neither problem."""
    r_all = np.ones(4)
    b_same = np.full(4, 0.6)
    assert np.all(ex.pre_normalization_advantages(r_all, b_same) == 0)
    np.testing.assert_allclose(ex.post_normalization_advantages(r_all, b_same), 0.6)
    r = np.array([1.0, 1.0, 0.0, 0.0])
    b1 = np.array([0.0, 0.0, 0.0, 0.0])
    b2 = np.array([0.9, 0.0, 0.0, 0.0])
    pre1, pre2 = ex.pre_normalization_advantages(r, b1), ex.pre_normalization_advantages(r, b2)
    post1, post2 = ex.post_normalization_advantages(r, b1), ex.post_normalization_advantages(r, b2)
    assert abs(pre1[2] - pre2[2]) > 0.05  # incorrect response's advantage moved
    assert post1[2] == post2[2]
    # pre-normalised novelty also shrinks the correct-incorrect gap of the unchanged correct response
    assert pre2[1] - pre2[2] < pre1[1] - pre1[2]


def test_negative_ungated_novelty_rewards_diverse_failures():
    """Without the correctness gate an incorrect but novel answer can outrank a correct one."""
    r = np.array([1.0, 0.0, 0.0])
    b_ungated = np.array([0.0, 1.0, 0.0])
    A = ex.grpo_advantages(r) + 10.0 * b_ungated
    assert A[1] > A[0]
    with pytest.raises(ValueError, match=r"^bonus: must be 0 for incorrect"):
        ex.e2_ordering(r, b_ungated, 10.0)


def test_novelty_bonus_definition():
    z = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    correct = np.array([True, True, True, False])
    b = ex.novelty_bonus(z, correct)
    np.testing.assert_allclose(b, [0.0, 0.0, 1.0, 0.0])  # duplicates get 0, orthogonal gets 1, incorrect gated
    mem = np.array([[0.0, 2.0]])
    np.testing.assert_allclose(ex.novelty_bonus(z, correct, mem), [0.0, 0.0, 0.0, 0.0])
    # a lone correct response with empty memory: max over the empty set is 0 -> bonus 1
    np.testing.assert_allclose(ex.novelty_bonus(z[:1], correct[:1]), [1.0])


@given(M=st.integers(1, 8), data=st.data())
def test_prop_a2_novelty_counts_new_modes(M, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    basis = np.linalg.qr(rng.normal(size=(M + 2, M + 2)))[0][:M]
    covered = data.draw(st.lists(st.integers(0, M - 1), unique=True))
    mode = data.draw(st.integers(0, M - 1))
    correct = data.draw(st.booleans())
    memory = basis[covered] if covered else None
    raw = ex.novelty_raw(basis[mode] * 3.0, correct, memory)
    gain = ex.covered_modes(covered + ([mode] if correct else [])) - ex.covered_modes(covered)
    assert_close(raw, gain)


def test_negative_prop_a2_needs_separated_modes():
    """With overlapping modes (cos = 0.5 across modes) raw novelty no longer counts modes."""
    memory = np.array([[1.0, 0.0]])
    y = np.array([0.5, np.sqrt(0.75)])  # a new mode, but cos = 0.5 with the stored one
    assert ex.novelty_raw(y, True, memory) == pytest.approx(0.5)  # not the coverage gain of 1


@given(
    w=hnp.arrays(np.float64, st.integers(1, 10), elements=floats(0.0, 1.0)),
    data=st.data(),
)
def test_prop1_above_average_prefix_exists(w, data):
    w = (w + 1e-3) / (w + 1e-3).sum()
    q = data.draw(hnp.arrays(np.float64, w.size, elements=floats(0.0, 1.0)))
    p0 = ex.scratch_success(w, q)
    assert q.max() >= p0 - 1e-12
    j = int(np.argmax(q))
    if q[j] > p0 + 1e-9 and p0 > 0:
        K = np.arange(1, 50)
        assert np.all(ex.success_within(q[j], K) >= ex.success_within(p0, K))
        assert np.all((ex.success_within(q[j], K) > ex.success_within(p0, K)) | (ex.success_within(p0, K) > 1 - 1e-12))
        assert ex.expected_attempts(q[j]) < ex.expected_attempts(p0)


@given(p=floats(1e-3, 1.0))
def test_expected_attempts_series(p):
    assert_close(ex.expected_attempts_series(p), 1.0 / p, scale=1.0 / p)


def test_monte_carlo_regeneration_beats_scratch():
    """Sample a two-stage generator; first-success counts from the best prefix vs from scratch.

    Both mean attempt counts are checked against 1/q* and 1/p0 with Hoeffding radii on a
    truncated (at 200 attempts) geometric count, plus the truncation bias bound.
    """
    rng = np.random.default_rng(1)
    w = np.array([0.5, 0.3, 0.2])
    q = np.array([0.05, 0.2, 0.6])
    p0 = ex.scratch_success(w, q)
    n, cap = 40_000, 200

    def attempts(p):
        k = rng.geometric(p, size=n)
        return np.minimum(k, cap)

    def scratch_attempt_success():
        j = rng.choice(3, size=n * 10, p=w)
        return rng.random(n * 10) < q[j]

    # scratch success frequency matches p0 (law of total probability, sampled)
    freq = scratch_attempt_success().mean()
    assert abs(freq - p0) < hoeffding_radius(n * 10, 1.0, 1e-6)
    for p in (p0, q.max()):
        trunc_bias = (1 - p) ** cap * (cap + 1 / p)  # E[K] - E[min(K, cap)] <= this
        t = hoeffding_radius(n, cap - 1, 1e-6)
        assert abs(attempts(p).mean() - 1 / p) < t + trunc_bias
    assert 1 / q.max() < 1 / p0


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"^prefix_probs: must sum to 1"):
        ex.scratch_success([0.5, 0.6], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"^q: entries must lie in"):
        ex.scratch_success([0.5, 0.5], [0.1, 1.2])
    with pytest.raises(ValueError, match=r"^p: must lie in \(0, 1\]"):
        ex.expected_attempts(0.0)
    with pytest.raises(ValueError, match=r"^rewards: E.2 is stated for binary"):
        ex.e2_ordering([0.5, 1.0], [0.0, 0.0])
    with pytest.raises(ValueError, match=r"^embeddings: embeddings must be non-zero"):
        ex.novelty_bonus(np.zeros((2, 3)), [True, True])
    with pytest.raises(ValueError, match=r"^correct: expected shape"):
        ex.novelty_bonus(np.ones((2, 3)), [True])
    with pytest.raises(ValueError, match=r"^ratio: must be non-negative"):
        ex.clipped_surrogate([-1.0], [1.0])
