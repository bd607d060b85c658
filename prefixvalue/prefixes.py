"""Pure prefix arithmetic shared by the studies (SPEC §4; VSR §3.2 / App. D.5; ExTra App. C.1).

* where to cut a trajectory: at a fraction ``alpha`` of its *tokens*
  (:func:`alpha_cut`, VSR Fig. 7 / D.5) or after a fraction of its *reasoning steps*
  (:func:`step_cuts`, ExTra App. C.1), with :func:`token_cut_for_offset` mapping a character
  offset of the decoded text to a token position (tokenizers need not be character level);
* the zero-cost VSR score ``p̂ = (1 - α) p0 + α R``, ``σ̂ = p̂ (1 - p̂)`` (:func:`sigma_hat`) and
  the empirical standard deviation of binary continuation rewards (:func:`empirical_std`);
* per-prefix entropy statistics from a teacher-forced entropy trace (:func:`entropy_stats`);
* ExTra's embedding-smoothed mean token entropy (:func:`smoothing_weights`, :func:`smoothed_mte`).

Everything here is NumPy (float64) with shapes stated and checked on entry.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from theory._validate import as_array, check_in_range

__all__ = [
    "alpha_cut",
    "empirical_std",
    "entropy_stats",
    "p_hat",
    "sigma_hat",
    "smoothed_mte",
    "smoothing_weights",
    "step_cuts",
    "token_cut_for_offset",
]


def _check_fraction(x: float, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating)) or not math.isfinite(x) or not 0.0 <= x <= 1.0:
        raise ValueError(f"{name}: must be a number in [0, 1], got {x!r}")
    return float(x)


def _check_length(n: int, name: str, lo: int = 0) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < lo:
        raise ValueError(f"{name}: must be an int >= {lo}, got {n!r}")
    return int(n)


def alpha_cut(alpha: float, length: int) -> int:
    """Token position of the prefix holding a fraction ``alpha`` of a ``length``-token trajectory.

    ``round(alpha * length)`` with halves rounded up (so ``alpha = 0.5`` of 5 tokens keeps 3),
    in ``[0, length]``: ``alpha = 0`` is the bare prompt, ``alpha = 1`` the whole trajectory
    (VSR Fig. 7, ``α_i = i / |τ|``).
    """
    alpha = _check_fraction(alpha, "alpha")
    length = _check_length(length, "length")
    return int(min(length, math.floor(alpha * length + 0.5)))


def step_cuts(n_steps: int, fractions: Sequence[float]) -> tuple[tuple[float, int], ...]:
    """Step counts ``k`` at which to truncate a trajectory of ``n_steps`` steps (ExTra App. C.1).

    ``k = clip(round(f * n_steps), 1, n_steps - 1)`` for each fraction ``f`` (halves rounded
    up): every prefix holds at least one complete step and leaves at least one step to generate.
    Duplicate ``k`` (short trajectories) are kept once, with the first fraction that produced
    them. Returns ``((f, k), ...)`` in increasing ``k``; empty when ``n_steps < 2`` (no interior
    cut exists).
    """
    n_steps = _check_length(n_steps, "n_steps")
    seen: dict[int, float] = {}
    for i, f in enumerate(fractions):
        f = _check_fraction(f, f"fractions[{i}]")
        if n_steps < 2:
            continue
        k = int(min(n_steps - 1, max(1, math.floor(f * n_steps + 0.5))))
        seen.setdefault(k, f)
    return tuple((f, k) for k, f in sorted(seen.items()))


def token_cut_for_offset(token_ids: Sequence[int], offset: int, decode: Callable[[Sequence[int]], str]) -> int:
    """Smallest ``t`` with ``len(decode(token_ids[:t])) >= offset`` (a character offset -> token cut).

    Used to turn a step boundary of the decoded text (``task.split_steps``) into a token prefix
    without re-tokenising: the prefix state is then exactly the first ``t`` sampled tokens. For a
    character-level tokenizer ``t == offset``; for a subword tokenizer the cut lands on the first
    token boundary at or after the character offset. Binary search, ``O(log T)`` decodes (assumes
    decoded length is non-decreasing in ``t``, true for every tokenizer we use).
    """
    n = len(token_ids)
    offset = _check_length(offset, "offset")
    if offset == 0:
        return 0
    full = len(decode(list(token_ids)))
    if offset > full:
        raise ValueError(f"offset: {offset} lies beyond the decoded text of {full} characters")
    lo, hi = 1, n
    while lo < hi:
        mid = (lo + hi) // 2
        if len(decode(list(token_ids[:mid]))) >= offset:
            hi = mid
        else:
            lo = mid + 1
    return lo


def p_hat(alpha, p0, reward) -> np.ndarray:
    """VSR's interpolated continuation success ``p̂[i] = (1 - α[i]) p0[i] + α[i] R[i]`` (VSR §3.2, Alg. 1).

    ``alpha[i]``, ``p0[i]``, ``reward[i]`` broadcast together; all in ``[0, 1]``.
    """
    a = check_in_range(as_array(alpha, "alpha", ndim=(0, 1)), "alpha", 0.0, 1.0)
    p = check_in_range(as_array(p0, "p0", ndim=(0, 1)), "p0", 0.0, 1.0)
    r = check_in_range(as_array(reward, "reward", ndim=(0, 1)), "reward", 0.0, 1.0)
    return (1.0 - a) * p + a * r


def sigma_hat(alpha, p0, reward, *, sqrt: bool = False) -> np.ndarray:
    """VSR's zero-cost score ``σ̂ = p̂ (1 - p̂)`` (VSR §3.2, App. D.5), or ``sqrt(p̂ (1 - p̂))``.

    The paper scores states with ``p̂ (1 - p̂)`` (a variance); ``sqrt=True`` gives the standard
    deviation that Neyman allocation uses (SPEC §3.2).
    """
    p = p_hat(alpha, p0, reward)
    v = p * (1.0 - p)
    return np.sqrt(v) if sqrt else v


def empirical_std(n_correct, n) -> np.ndarray:
    """Standard deviation of binary continuation rewards: ``sqrt(q (1 - q))``, ``q = c / n``.

    The population (``ddof = 0``) standard deviation of ``n`` rewards with ``c`` ones, the
    quantity VSR D.5 correlates with σ̂. ``n_correct[i]``, ``n[i]`` broadcast; ``0 <= c <= n``, ``n >= 1``.
    """
    c = as_array(n_correct, "n_correct", ndim=(0, 1))
    m = as_array(n, "n", ndim=(0, 1))
    if np.any(m < 1):
        raise ValueError("n: must be >= 1")
    if np.any(c < 0) or np.any(c > m):
        raise ValueError("n_correct: must satisfy 0 <= n_correct <= n")
    q = c / m
    return np.sqrt(q * (1.0 - q))


def entropy_stats(entropies, logprobs, cut: int, step_start: int) -> dict[str, float]:
    """Label-free statistics of the prefix ``y[:cut]`` from teacher-forced traces (ExTra §5.6).

    Args:
      entropies: ``H[t]`` = full-vocabulary entropy of ``π(· | x, y_<t)``, ``t < T`` (nats).
      logprobs: ``log π(y_t | x, y_<t)``, same shape.
      cut: prefix length in tokens, ``1 <= cut <= T``.
      step_start: first token of the prefix's last (complete) step, ``0 <= step_start < cut``.

    Returns ``mte`` (``mean H[:cut]``, ExTra's MTE), ``last_step_entropy`` (mean over
    ``H[step_start:cut]``), ``min/max/std_entropy``, ``next_token_entropy`` (``H[cut]``, the
    entropy at the state itself; NaN when ``cut == T``), ``mean_logprob`` and ``perplexity``
    (``exp(-mean_logprob)``).
    """
    h = as_array(entropies, "entropies", ndim=1)
    lp = as_array(logprobs, "logprobs", ndim=1, shape=(h.shape[0],))
    cut = _check_length(cut, "cut", lo=1)
    if cut > h.shape[0]:
        raise ValueError(f"cut: {cut} exceeds the trace length {h.shape[0]}")
    step_start = _check_length(step_start, "step_start")
    if step_start >= cut:
        raise ValueError(f"step_start: must be < cut ({cut}), got {step_start}")
    hp, lpp = h[:cut], lp[:cut]
    mean_lp = float(lpp.mean())
    return {
        "mte": float(hp.mean()),
        "last_step_entropy": float(h[step_start:cut].mean()),
        "min_entropy": float(hp.min()),
        "max_entropy": float(hp.max()),
        "std_entropy": float(hp.std()),
        "next_token_entropy": float(h[cut]) if cut < h.shape[0] else float("nan"),
        "mean_logprob": mean_lp,
        "perplexity": float(math.exp(-mean_lp)),
    }


def smoothing_weights(embeddings, tau: float) -> np.ndarray:
    """``W[j, k] = softmax_k(cos(e_j, e_k) / τ)`` over the rows of ``embeddings[n, d]`` (SPEC §3.4).

    Rows with zero norm have cosine 0 with everything. Each row of ``W`` sums to 1; computed in
    float64 with the max subtracted before exponentiation.
    """
    e = as_array(embeddings, "embeddings", ndim=2)
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau: must be a finite number > 0, got {tau!r}")
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    u = np.divide(e, norms, out=np.zeros_like(e), where=norms > 0)
    z = (u @ u.T) / float(tau)
    z -= z.max(axis=1, keepdims=True)
    w = np.exp(z)
    return w / w.sum(axis=1, keepdims=True)


def smoothed_mte(mte, embeddings, tau: float = 0.1) -> np.ndarray:
    """ExTra's smoothed entropy ``H̃[j] = Σ_k softmax_k(cos(e_j, e_k)/τ) H[k]`` (SPEC §3.4, App. B).

    ``mte[n]`` the candidates' mean token entropies, ``embeddings[n, d]`` their embeddings
    (same prompt). Returns ``H̃[n]``.
    """
    h = as_array(mte, "mte", ndim=1)
    e = as_array(embeddings, "embeddings", ndim=2, shape=(h.shape[0], None))
    return smoothing_weights(e, tau) @ h
