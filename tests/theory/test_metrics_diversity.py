"""Distinct-n, BLEU / Self-BLEU, LogDet (ExTra §5.4)."""

from __future__ import annotations

import math
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.metrics import bleu, cosine_kernel, distinct_n, logdet_diversity, ngrams, self_bleu

RTOL = 4 * np.sqrt(np.finfo(float).eps)

tokens = st.lists(st.integers(0, 5), min_size=0, max_size=14)
responses = st.lists(tokens, min_size=2, max_size=6)


# --------------------------------------------------------------------------------------------
# Distinct-n
# --------------------------------------------------------------------------------------------


@given(responses, st.integers(1, 4))
def test_distinct_n_is_unique_over_total(resp, n):
    grams = [tuple(r[i : i + n]) for r in resp for i in range(len(r) - n + 1)]
    if not grams:
        with pytest.raises(ValueError, match=r"^responses:"):
            distinct_n(resp, n)
        return
    d = distinct_n(resp, n)
    assert d == len(set(grams)) / len(grams)
    assert 0 < d <= 1


def test_distinct_n_examples():
    assert distinct_n([[1, 2, 3, 4, 5]], 4) == 1.0  # two distinct 4-grams
    assert distinct_n([[1, 2, 3, 4]] * 4, 4) == 0.25
    assert distinct_n([["the", "cat", "sat"], ["the", "cat", "ran"]], 2) == 3 / 4
    assert distinct_n([np.array([1, 2, 3, 4]), (1, 2, 3, 5)], 4) == 1.0
    assert ngrams([1, 2, 3], 2) == [(1, 2), (2, 3)]


# --------------------------------------------------------------------------------------------
# BLEU
# --------------------------------------------------------------------------------------------


def reference_bleu(hyp, refs, n, eps=0.1):
    """Plain re-statement of Papineni BLEU with epsilon smoothing (NLTK method1)."""
    if not hyp:
        return 0.0
    logs = []
    for k in range(1, n + 1):
        h = Counter(tuple(hyp[i : i + k]) for i in range(len(hyp) - k + 1))
        best = Counter()
        for r in refs:
            for g, c in Counter(tuple(r[i : i + k]) for i in range(len(r) - k + 1)).items():
                best[g] = max(best[g], c)
        match = sum(min(c, best[g]) for g, c in h.items())
        if k == 1 and match == 0:
            return 0.0
        logs.append(math.log((match if match else eps) / max(sum(h.values()), 1)))
    r = min((len(x) for x in refs), key=lambda L: (abs(L - len(hyp)), L))
    bp = 1.0 if len(hyp) > r else math.exp(1 - r / len(hyp))
    return bp * math.exp(sum(logs) / n)


def test_bleu_hand_computed():
    # p1..p4 = 4/5, 3/4, 2/3, 1/2 and no brevity penalty
    assert bleu(list("abcde"), [list("abcdf")]) == pytest.approx((4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25, rel=RTOL)
    # perfect precisions, hypothesis 4 vs reference 6 tokens: BP = exp(1 - 6/4)
    assert bleu(list("abcd"), [list("abcdef")]) == pytest.approx(math.exp(-0.5), rel=RTOL)
    # clipping: "the the the the" vs a reference with two "the": p1 = 2/4; no bigram match -> eps
    got = bleu(["the"] * 4, [["the", "cat", "the", "mat"]], n=2)
    assert got == pytest.approx(math.sqrt(2 / 4 * 0.1 / 3), rel=RTOL)
    assert bleu(["the"] * 4, [["the", "cat", "the", "mat"]], n=2, smoothing="none") == 0.0
    assert bleu(["the"] * 4, [["the", "cat", "the", "mat"]], n=2, smoothing="add_one") == pytest.approx(
        math.sqrt(2 / 4 * 1 / 4), rel=RTOL
    )
    # closest reference length: 4 and 6 are equally close to 5, the shorter wins -> BP = 1
    assert bleu([1, 2, 3, 4, 5], [[1, 2, 3, 4], [1, 2, 3, 4, 5, 6]], n=1) == 1.0
    assert bleu([1, 2, 3, 4, 5], [[1, 2, 3, 4, 5, 6]], n=1) == pytest.approx(math.exp(1 - 6 / 5), rel=RTOL)
    assert bleu([1, 2, 3, 4], [[9, 9, 9, 9]]) == 0.0  # no unigram match
    assert bleu([], [[1, 2]]) == 0.0


@given(tokens, st.lists(tokens, min_size=1, max_size=4), st.integers(1, 4))
def test_bleu_matches_plain_restatement(hyp, refs, n):
    assert bleu(hyp, refs, n) == pytest.approx(reference_bleu(hyp, refs, n), rel=1e-12, abs=1e-15)


def test_bleu_matches_nltk():
    nltk_bleu = pytest.importorskip("nltk.translate.bleu_score")
    sf = nltk_bleu.SmoothingFunction()
    rng = np.random.default_rng(0)
    for _ in range(300):
        hyp = list(rng.integers(0, 5, rng.integers(1, 12)))
        refs = [list(rng.integers(0, 5, rng.integers(1, 12))) for _ in range(rng.integers(1, 4))]
        for name, fn in (("epsilon", sf.method1), ("add_one", sf.method2), ("none", sf.method0)):
            with warnings.catch_warnings():  # NLTK warns about zero counts
                warnings.simplefilter("ignore")
                want = nltk_bleu.sentence_bleu(refs, hyp, smoothing_function=fn)
            assert bleu(hyp, refs, smoothing=name) == pytest.approx(want, rel=1e-12, abs=1e-15)


# --------------------------------------------------------------------------------------------
# Self-BLEU
# --------------------------------------------------------------------------------------------


@given(responses)
def test_self_bleu_others_and_pairwise_match_loops(resp):
    others = np.mean([bleu(r, resp[:i] + resp[i + 1 :]) for i, r in enumerate(resp)])
    assert self_bleu(resp) == pytest.approx(others, rel=1e-12, abs=1e-15)
    pairs = [bleu(resp[i], [resp[j]]) for i in range(len(resp)) for j in range(len(resp)) if i != j]
    assert self_bleu(resp, mode="pairwise") == pytest.approx(np.mean(pairs), rel=1e-12, abs=1e-15)
    assert 0.0 <= self_bleu(resp) <= 1.0


def test_self_bleu_extremes():
    r = [3, 1, 4, 1, 5, 9, 2, 6]
    assert self_bleu([r, r, r]) == 1.0
    assert self_bleu([r, r], mode="pairwise") == 1.0
    assert self_bleu([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]) == 0.0
    # more repetition across responses -> higher Self-BLEU
    low = self_bleu([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [1, 2, 8, 9, 11]])
    high = self_bleu([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 3, 4, 7]])
    assert low < high


# --------------------------------------------------------------------------------------------
# LogDet
# --------------------------------------------------------------------------------------------


@given(st.integers(1, 8), st.integers(1, 10), st.floats(0.01, 50), st.integers(0, 2**32 - 1))
def test_logdet_equals_slogdet_and_eigenvalues(m, d, alpha, seed):
    e = np.random.default_rng(seed).normal(size=(m, d))
    val = logdet_diversity(e, alpha)
    K = cosine_kernel(e)
    sign, ref = np.linalg.slogdet(np.eye(m) + alpha * K)
    lam = np.clip(np.linalg.eigvalsh(K), 0, None)
    scale = m * math.log1p(alpha)
    assert sign == 1.0
    assert val == pytest.approx(ref, rel=RTOL, abs=RTOL * scale)
    assert val == pytest.approx(np.sum(np.log1p(alpha * lam)), rel=RTOL, abs=RTOL * scale)
    assert -RTOL * scale <= val <= scale * (1 + RTOL)
    # invariant to rescaling each embedding
    assert logdet_diversity(e * np.random.default_rng(seed).uniform(0.1, 10, (m, 1)), alpha) == pytest.approx(
        val, rel=RTOL, abs=RTOL * scale
    )


def test_logdet_extremes():
    m, alpha = 5, 2.0
    assert logdet_diversity(np.eye(m), alpha) == pytest.approx(m * math.log1p(alpha), rel=RTOL)
    same = np.tile([1.0, 2.0, 3.0], (m, 1))  # K = all-ones, eigenvalues (m, 0, ..., 0)
    assert logdet_diversity(same, alpha) == pytest.approx(math.log1p(alpha * m), rel=RTOL)
    assert logdet_diversity(np.eye(m), 1.0) > logdet_diversity(same, 1.0)


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, args, kwargs, arg",
    [
        (distinct_n, ("one two three four",), {}, "responses"),
        (distinct_n, (["one two three four"],), {}, "responses"),
        (distinct_n, ([],), {}, "responses"),
        (distinct_n, ([[1, 2]],), {}, "responses"),  # no 4-grams
        (distinct_n, ([[1, 2, 3, 4]],), {"n": 0}, "n"),
        (distinct_n, ([[1, 2, 3, 4]],), {"n": 2.0}, "n"),
        (distinct_n, ([[[1], [2], [3], [4]]],), {}, "responses"),  # unhashable tokens
        (distinct_n, (5,), {}, "responses"),
        (distinct_n, ([np.ones((2, 4))],), {}, "responses"),
        (self_bleu, ([[1, 2, 3, 4]],), {}, "responses"),  # one response
        (self_bleu, ([[1, 2], [1, 2]],), {"mode": "all"}, "mode"),
        (self_bleu, ([[1, 2], [1, 2]],), {"smoothing": "floor"}, "smoothing"),
        (self_bleu, ([[1, 2], [1, 2]],), {"n": -1}, "n"),
        (bleu, ("abc", [[1]]), {}, "hypothesis"),
        (bleu, ([1], []), {}, "references"),
        (bleu, ([1], "abc"), {}, "references"),
        (logdet_diversity, (np.zeros((3, 2)),), {}, "embeddings"),
        (logdet_diversity, (np.ones(3),), {}, "embeddings"),
        (logdet_diversity, (np.array([[1.0, np.nan]]),), {}, "embeddings"),
        (logdet_diversity, (np.eye(2),), {"alpha": 0.0}, "alpha"),
        (logdet_diversity, (np.eye(2),), {"alpha": -1.0}, "alpha"),
        (logdet_diversity, (np.zeros((0, 3)),), {}, "embeddings"),
    ],
)
def test_diversity_bad_input(fn, args, kwargs, arg):
    with pytest.raises(ValueError, match=rf"^{arg}:"):
        fn(*args, **kwargs)
