"""Mean Token Entropy of step prefixes and its embedding-smoothed argmin (ExTra §4.2–4.3).

Pure functions used by ExTra's regeneration (:mod:`llm_harness.methods.extra`):

* :func:`mean_token_entropy` — ``MTE(y_≤t) = (1/t) Σ_{s≤t} H(π(·|x, y_<s))`` for every ``t`` at once
  (ExTra eq. 3), from the full-vocabulary entropies a scorer returns;
* :func:`smoothed_entropy` / :func:`select_prefix` — ``H̃_j = Σ_k softmax_k(cos(e_j, e_k)/τ) H_k``
  and ``argmin_j H̃_j`` (ExTra §4.3 smoothing formula);
* :func:`step_char_cuts` / :func:`char_to_token_cuts` — reasoning-step boundaries of a decoded
  response (the task's ``split_steps``) mapped to token prefix lengths (:func:`char_to_token_cut`
  for one offset; the one character -> token cut of the project, also used by the prefix-value studies).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from theory._validate import as_array
from theory.prefix_scores import smoothed_entropy as _smoothed_entropy
from vsr_util.checks import check_number

__all__ = [
    "char_to_token_cut",
    "char_to_token_cuts",
    "cosine_matrix",
    "mean_token_entropy",
    "select_prefix",
    "smoothed_entropy",
    "step_char_cuts",
]


def mean_token_entropy(entropies) -> np.ndarray:
    """``mte[t-1] = (1/t) Σ_{s=1..t} H_s`` for ``t = 1..T`` (ExTra eq. 3).

    ``entropies[T]``: ``H_s = H(π(·|x, y_<s))`` in nats, non-negative; returns ``mte[T]`` (float64).
    """
    h = as_array(entropies, "entropies", ndim=1)
    if np.any(h < 0):
        raise ValueError("entropies: must be >= 0 (entropies in nats)")
    return np.cumsum(h) / np.arange(1, h.shape[0] + 1, dtype=np.float64)


def cosine_matrix(a, b=None) -> np.ndarray:
    """``C[j, k] = cos(a_j, b_k)`` (``b = a`` when omitted); a zero row has cosine 0 with everything.

    ``a[J, D]``, ``b[K, D]`` → ``C[J, K]`` float64.
    """
    a = as_array(a, "a", ndim=2)
    b = a if b is None else as_array(b, "b", ndim=2, shape=(None, a.shape[1]))

    def unit(x: np.ndarray) -> np.ndarray:
        n = np.linalg.norm(x, axis=1, keepdims=True)
        return np.divide(x, n, out=np.zeros_like(x), where=n > 0)

    return unit(a) @ unit(b).T


def smoothed_entropy(mte, embeddings, tau: float = 0.1) -> np.ndarray:
    """``H̃_j = Σ_k w_jk H_k`` with ``w_jk = softmax_k(cos(e_j,e_k)/τ)`` (ExTra §4.3); see
    :func:`theory.prefix_scores.smoothed_entropy` (the one implementation, shared with the studies)."""
    return _smoothed_entropy(mte, embeddings, tau)


def select_prefix(mte, embeddings, tau: float = 0.1) -> tuple[int, np.ndarray]:
    """``(j*, H̃)`` with ``j* = argmin_j H̃_j`` (first index on ties; ExTra Alg. 1 l.24)."""
    ht = smoothed_entropy(mte, embeddings, tau)
    return int(np.argmin(ht)), ht


def step_char_cuts(steps: Sequence, text_len: int) -> list[int]:
    """Character offsets that end a strict step prefix: ``steps[k].end`` for every step but the last.

    ``steps`` partition a text of length ``text_len`` (``Task.split_steps``); the last step completes
    the response and is not a prefix to continue from. Empty offsets are dropped.
    """
    cuts = sorted({int(s.end) for s in list(steps)[:-1]})
    return [c for c in cuts if 0 < c < text_len]


def _token_cut(n: int, offset: int, length: Callable[[int], int]) -> int:
    """Smallest ``k`` in ``[0, n]`` with ``length(k) >= offset`` (``length`` non-decreasing, ``length(n) >= offset``)."""
    if offset <= 0:
        return 0
    lo, hi = 1, n
    while lo < hi:
        mid = (lo + hi) // 2
        if length(mid) >= offset:
            hi = mid
        else:
            lo = mid + 1
    return lo


def char_to_token_cut(ids: Sequence[int], offset: int, decode: Callable[[Sequence[int]], str]) -> int:
    """Smallest ``k`` with ``len(decode(ids[:k])) >= offset``: a character offset of the decoded text
    as a token prefix length (0 for offset 0; ValueError past the end of the text).

    The prefix state is then exactly the first ``k`` sampled tokens, without re-tokenising. Binary
    search, ``O(log T)`` decodes (decoded length is non-decreasing in ``k`` for every tokenizer we
    use), so a cut inside a multi-character token moves to the end of that token; for a character
    tokenizer ``k == offset``.
    """
    offset = check_number("offset", offset, 0, integer=True)
    ids = list(ids)
    full = len(decode(ids)) if offset else 0
    if offset > full:
        raise ValueError(f"offset: {offset} lies beyond the decoded text of {full} characters")
    return _token_cut(len(ids), offset, lambda k: len(decode(ids[:k])))


def char_to_token_cuts(ids: Sequence[int], char_cuts: Sequence[int], decode: Callable[[Sequence[int]], str]) -> list[int]:
    """:func:`char_to_token_cut` of every character cut, sharing the decodes; cuts past the end of the
    text are dropped, duplicates merged, the result sorted."""
    ids = list(ids)
    n = len(ids)
    cache: dict[int, int] = {}

    def length(k: int) -> int:
        if k not in cache:
            cache[k] = len(decode(ids[:k]))
        return cache[k]

    return sorted({_token_cut(n, int(c), length) for c in char_cuts if length(n) >= c})
