"""Diversity of one prompt's responses: Distinct-n, Self-BLEU, LogDet (ExTra §5.4).

Inputs:

* ``responses``: a sequence of ``m`` token sequences (lists/tuples/1-D arrays of hashable
  tokens, e.g. tokenizer ids), the responses sampled for one prompt.  Bare strings are
  rejected: tokenise first, so the unit of an n-gram is explicit.
* ``embeddings[m, d]``: one sentence embedding per response (any non-zero vectors; they are
  normalised here).

Definitions:

* Distinct-n = (number of distinct n-grams) / (number of n-grams), both pooled over the ``m``
  responses.  Higher is more diverse.
* BLEU-N (Papineni et al. 2002): ``BP * exp(sum_{k<=N} (1/N) log p_k)`` with clipped k-gram
  precisions ``p_k`` (each hypothesis k-gram count clipped by its largest count in any single
  reference) and brevity penalty ``BP = exp(1 - r/c)`` if ``c < r`` else 1, where ``c`` is the
  hypothesis length and ``r`` the reference length closest to ``c`` (the shorter on ties).
  Zero precisions are smoothed by one of :data:`BLEU_SMOOTHINGS` (default ``"epsilon"``).
* Self-BLEU-N (Zhu et al. 2018, Texygen): the mean over responses of BLEU-N of that response
  against all the other responses as references (``mode="others"``).  ExTra calls it the
  "mean pairwise BLEU-4"; ``mode="pairwise"`` averages single-reference BLEU over ordered
  pairs instead.  Lower is more diverse.
* LogDet = ``log det(I + alpha K)`` with ``K[i, j] = cos(e_i, e_j)`` (a DPP log-volume).  Higher
  is more diverse; ``0 <= LogDet <= m log(1 + alpha)`` (the upper bound is Hadamard's
  inequality, attained by orthogonal embeddings).  ExTra does not state alpha; default 1.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Hashable, Sequence

import numpy as np

from theory._validate import as_array, check_positive_scalar
from vsr_util.registry import Registry

__all__ = [
    "BLEU_SMOOTHINGS",
    "SELF_BLEU_MODES",
    "BLEU_EPSILON",
    "ngrams",
    "distinct_n",
    "bleu",
    "self_bleu",
    "cosine_kernel",
    "logdet_diversity",
]

#: Numerator that replaces a zero clipped count under ``smoothing="epsilon"``
#: (Chen & Cherry 2014 "method 1"; NLTK ``SmoothingFunction().method1``, used by Texygen).
BLEU_EPSILON = 0.1

Tokens = tuple[Hashable, ...]


# ---------------------------------------------------------------------------------------------
# Token handling
# ---------------------------------------------------------------------------------------------


def _token_sequences(responses, name: str = "responses", *, min_count: int = 1) -> list[Tokens]:
    """Validate ``responses`` as a sequence of token sequences; return a list of tuples."""
    if isinstance(responses, (str, bytes)) or not isinstance(responses, (Sequence, np.ndarray)):
        raise ValueError(f"{name}: must be a sequence of token sequences, got {type(responses).__name__}")
    out: list[Tokens] = []
    for i, r in enumerate(responses):
        if isinstance(r, (str, bytes)):
            raise ValueError(f"{name}: response {i} is a string; pass token sequences (tokenise first)")
        if isinstance(r, np.ndarray):
            if r.ndim != 1:
                raise ValueError(f"{name}: response {i} must be 1-D, got shape {r.shape}")
            r = r.tolist()
        if not isinstance(r, Sequence):
            raise ValueError(f"{name}: response {i} is not a token sequence ({type(r).__name__})")
        try:
            for tok in r:
                hash(tok)
        except TypeError:
            raise ValueError(f"{name}: response {i} contains unhashable tokens") from None
        out.append(tuple(r))
    if len(out) < min_count:
        raise ValueError(f"{name}: need at least {min_count} responses, got {len(out)}")
    return out


def _check_order(n, name: str = "n") -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name}: must be a positive integer, got {n!r}")
    return int(n)


def ngrams(tokens: Sequence[Hashable], n: int) -> list[Tokens]:
    """The ``len(tokens) - n + 1`` contiguous n-grams of one token sequence, in order."""
    n = _check_order(n)
    t = tuple(tokens)
    return [t[i : i + n] for i in range(len(t) - n + 1)]


# ---------------------------------------------------------------------------------------------
# Distinct-n
# ---------------------------------------------------------------------------------------------


def distinct_n(responses, n: int = 4) -> float:
    """Distinct-n: distinct n-grams / all n-grams, pooled over one prompt's responses (ExTra §5.4).

    Args:
      responses: ``m >= 1`` token sequences.
      n: n-gram order (ExTra uses 4).

    Returns:
      A value in (0, 1]; 1 when no n-gram repeats anywhere.  Raises if no response has ``n``
      tokens (no n-grams at all).
    """
    seqs = _token_sequences(responses)
    n = _check_order(n)
    counts: Counter = Counter()
    for s in seqs:
        counts.update(ngrams(s, n))
    total = sum(counts.values())
    if total == 0:
        raise ValueError(f"responses: no response has at least n={n} tokens, so there are no {n}-grams")
    return len(counts) / total


# ---------------------------------------------------------------------------------------------
# BLEU
# ---------------------------------------------------------------------------------------------

Smoothing = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _smooth_epsilon(matches: np.ndarray, totals: np.ndarray) -> np.ndarray:
    # Zero matches (including orders the hypothesis is too short for) -> epsilon / max(total, 1).
    return np.where(matches > 0, matches, BLEU_EPSILON) / np.maximum(totals, 1)


def _smooth_add_one(matches: np.ndarray, totals: np.ndarray) -> np.ndarray:
    # Lin & Och (2004): add one to numerator and denominator of every order k >= 2 (an order the
    # hypothesis is too short for counts as 0 / 1 before smoothing, as in NLTK ``method2``).
    p = (matches + 1.0) / (np.maximum(totals, 1) + 1.0)
    p[0] = matches[0] / max(totals[0], 1)
    return p


def _smooth_none(matches: np.ndarray, totals: np.ndarray) -> np.ndarray:
    return matches / np.maximum(totals, 1)


#: Precision smoothings ``(matches[k], totals[k]) -> p[k]`` for orders k = 1..N.  Under every
#: one of them a hypothesis with no matching unigram scores 0, as in NLTK.
BLEU_SMOOTHINGS: Registry[Smoothing] = Registry(
    "BLEU smoothing", {"epsilon": _smooth_epsilon, "add_one": _smooth_add_one, "none": _smooth_none}
)


def _counts(tokens: Tokens, max_n: int) -> list[Counter]:
    return [Counter(ngrams(tokens, k)) for k in range(1, max_n + 1)]


def _bleu_from_counts(hyp_len: int, hyp_counts: list[Counter], clip: Callable[[int, Tokens], int],
                      ref_lens: Sequence[int], smoothing: Smoothing) -> float:
    """BLEU from hypothesis counts; ``clip(k, gram)`` is the largest count of ``gram`` in a reference."""
    if hyp_len == 0:
        return 0.0
    N = len(hyp_counts)
    matches = np.zeros(N)
    totals = np.zeros(N)
    for k, cnt in enumerate(hyp_counts):
        totals[k] = sum(cnt.values())
        matches[k] = sum(min(c, clip(k, g)) for g, c in cnt.items())
    if matches[0] == 0:
        return 0.0
    p = smoothing(matches, totals)
    if np.any(p <= 0):
        return 0.0
    r = min(ref_lens, key=lambda L: (abs(L - hyp_len), L))
    bp = 1.0 if hyp_len > r else float(np.exp(1.0 - r / hyp_len))
    return float(bp * np.exp(np.mean(np.log(p))))


def bleu(hypothesis, references, n: int = 4, *, smoothing: str = "epsilon") -> float:
    """Sentence BLEU-n of one token sequence against one or more references (Papineni et al. 2002).

    Args:
      hypothesis: one token sequence.
      references: ``>= 1`` token sequences.
      n: maximum n-gram order (uniform weights 1/n).
      smoothing: key of :data:`BLEU_SMOOTHINGS`.

    Returns:
      A value in [0, 1]; 1 when the hypothesis equals a reference of length >= n.  It equals
      NLTK's ``sentence_bleu`` with ``SmoothingFunction().method1`` / ``method2`` / ``method0``
      for ``smoothing="epsilon"`` / ``"add_one"`` / ``"none"``.
    """
    (hyp,) = _token_sequences([hypothesis], "hypothesis")
    refs = _token_sequences(references, "references")
    n = _check_order(n)
    smooth = BLEU_SMOOTHINGS.lookup(smoothing, where="smoothing")
    ref_counts = [_counts(rf, n) for rf in refs]

    def clip(k: int, gram: Tokens) -> int:
        return max(rc[k].get(gram, 0) for rc in ref_counts)

    return _bleu_from_counts(len(hyp), _counts(hyp, n), clip, [len(rf) for rf in refs], smooth)


def _self_bleu_others(seqs: list[Tokens], n: int, smooth: Smoothing) -> float:
    counts = [_counts(s, n) for s in seqs]
    lens = [len(s) for s in seqs]
    # Per order: gram -> (largest count, index holding it, second-largest count) over responses,
    # so "largest count among the other responses" costs O(1) per gram.
    tops: list[dict] = []
    for k in range(n):
        top: dict = {}
        for i, cnt in enumerate(counts):
            for g, c in cnt[k].items():
                best, who, second = top.get(g, (0, -1, 0))
                if c > best:
                    top[g] = (c, i, best)
                elif c > second:
                    top[g] = (best, who, c)
        tops.append(top)
    scores = []
    for i in range(len(seqs)):
        def clip(k: int, gram: Tokens, i=i) -> int:
            best, who, second = tops[k][gram]
            return second if who == i else best

        scores.append(_bleu_from_counts(lens[i], counts[i], clip, lens[:i] + lens[i + 1 :], smooth))
    return float(np.mean(scores))


def _self_bleu_pairwise(seqs: list[Tokens], n: int, smooth: Smoothing) -> float:
    counts = [_counts(s, n) for s in seqs]
    scores = []
    for i in range(len(seqs)):
        for j in range(len(seqs)):
            if i != j:
                scores.append(
                    _bleu_from_counts(len(seqs[i]), counts[i], lambda k, g, j=j: counts[j][k].get(g, 0),
                                      [len(seqs[j])], smooth)
                )
    return float(np.mean(scores))


#: How Self-BLEU averages: ``(responses, n, smoothing) -> float``.
SELF_BLEU_MODES: Registry[Callable[[list[Tokens], int, Smoothing], float]] = Registry(
    "Self-BLEU mode", {"others": _self_bleu_others, "pairwise": _self_bleu_pairwise}
)


def self_bleu(responses, n: int = 4, *, mode: str = "others", smoothing: str = "epsilon") -> float:
    """Self-BLEU-n of one prompt's responses (ExTra §5.4; Zhu et al. 2018).

    Args:
      responses: ``m >= 2`` token sequences.
      n: maximum n-gram order (ExTra uses 4).
      mode: ``"others"``: mean over i of BLEU(response i; all others as references);
        ``"pairwise"``: mean over ordered pairs i != j of BLEU(response i; response j).
      smoothing: key of :data:`BLEU_SMOOTHINGS`.

    Returns:
      A value in [0, 1]; 1 when all responses are identical (and have >= n tokens).
    """
    seqs = _token_sequences(responses, min_count=2)
    n = _check_order(n)
    smooth = BLEU_SMOOTHINGS.lookup(smoothing, where="smoothing")
    fn = SELF_BLEU_MODES.lookup(mode, where="mode")
    return fn(seqs, n, smooth)


# ---------------------------------------------------------------------------------------------
# LogDet
# ---------------------------------------------------------------------------------------------


def cosine_kernel(embeddings) -> np.ndarray:
    """``K[i, j] = <e_i, e_j> / (|e_i| |e_j|)`` for ``embeddings[m, d]`` with non-zero rows."""
    e = as_array(embeddings, "embeddings", ndim=2)
    norms = np.linalg.norm(e, axis=1)
    if np.any(norms == 0):
        raise ValueError(f"embeddings: row {int(np.argmin(norms))} is zero, its cosine similarity is undefined")
    u = e / norms[:, None]
    K = u @ u.T
    np.fill_diagonal(K, 1.0)
    return K


def logdet_diversity(embeddings, alpha: float = 1.0) -> float:
    """LogDet diversity ``log det(I + alpha K)``, K the cosine kernel (ExTra §5.4).

    Args:
      embeddings: ``e[m, d]`` one embedding per response, no zero rows.
      alpha: kernel scale, > 0 (ExTra does not state it; default 1).

    Returns:
      ``2 * sum_i log L_ii`` from the Cholesky factor ``I + alpha K = L L^T`` (never ``det``),
      in ``[0, m log(1 + alpha)]``.
    """
    alpha = check_positive_scalar(alpha, "alpha")
    K = cosine_kernel(embeddings)
    M = np.eye(K.shape[0]) + alpha * K
    L = np.linalg.cholesky(M)  # M >= I is positive definite
    return float(2.0 * np.sum(np.log(np.diag(L))))
