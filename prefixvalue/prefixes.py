"""Pure prefix arithmetic shared by the studies (VSR §3.2 / App. D.5; ExTra App. C.1).

* where to cut a trajectory: at a fraction ``alpha`` of its *tokens*
  (:func:`alpha_cut`, VSR Fig. 7 / D.5) or after a fraction of its *reasoning steps*
  (:func:`step_cuts`, ExTra App. C.1); a character offset of the decoded text becomes a token
  position with :func:`llm_harness.methods.mte.char_to_token_cut` (tokenizers need not be character level);
* the zero-cost VSR score ``p̂ = (1 - α) p0 + α R``, ``σ̂ = p̂ (1 - p̂)`` (:func:`variance_hat`; its square root :func:`std_hat`) and
  the empirical standard deviation of binary continuation rewards (:func:`empirical_std`);
* per-prefix entropy statistics from a teacher-forced entropy trace (:func:`entropy_stats`);
* ExTra's embedding-smoothed mean token entropy (:func:`smoothing_weights`, :func:`smoothed_mte`).

The scores (``p_hat``, ``variance_hat``, ``std_hat``, ``smoothing_weights``, ``smoothed_mte``) live in
:mod:`theory.prefix_scores`, shared with the trainer's plug-ins; they are re-exported here.

Everything here is NumPy (float64) with shapes stated and checked on entry.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from theory._validate import as_array
from theory.prefix_scores import alpha_cut  # noqa: F401  (re-exported: the studies' cut, shared with the lab)
from vsr_util.checks import check_number
from theory.prefix_scores import p_hat, smoothing_weights, std_hat, variance_hat
from theory.prefix_scores import smoothed_entropy as smoothed_mte

__all__ = [
    "alpha_cut",
    "empirical_std",
    "entropy_stats",
    "p_hat",
    "std_hat",
    "variance_hat",
    "smoothed_mte",
    "smoothing_weights",
    "step_cuts",
]


def step_cuts(n_steps: int, fractions: Sequence[float]) -> tuple[tuple[float, int], ...]:
    """Step counts ``k`` at which to truncate a trajectory of ``n_steps`` steps (ExTra App. C.1).

    ``k = clip(round(f * n_steps), 1, n_steps - 1)`` for each fraction ``f`` (halves rounded
    up): every prefix holds at least one complete step and leaves at least one step to generate.
    Duplicate ``k`` (short trajectories) are kept once, with the first fraction that produced
    them. Returns ``((f, k), ...)`` in increasing ``k``; empty when ``n_steps < 2`` (no interior
    cut exists).
    """
    n_steps = check_number("n_steps", n_steps, 0, integer=True)
    seen: dict[int, float] = {}
    for i, f in enumerate(fractions):
        f = check_number(f"fractions[{i}]", f, 0, 1)
        if n_steps < 2:
            continue
        k = int(min(n_steps - 1, max(1, math.floor(f * n_steps + 0.5))))
        seen.setdefault(k, f)
    return tuple((f, k) for k, f in sorted(seen.items()))


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
    from llm_harness.methods.mte import mean_token_entropy  # lazily: llm_harness.methods loads the trainer

    h = as_array(entropies, "entropies", ndim=1)
    lp = as_array(logprobs, "logprobs", ndim=1, shape=(h.shape[0],))
    cut = check_number("cut", cut, 1, integer=True)
    if cut > h.shape[0]:
        raise ValueError(f"cut: {cut} exceeds the trace length {h.shape[0]}")
    step_start = check_number("step_start", step_start, 0, integer=True)
    if step_start >= cut:
        raise ValueError(f"step_start: must be < cut ({cut}), got {step_start}")
    hp, lpp = h[:cut], lp[:cut]
    mean_lp = float(lpp.mean())
    return {
        "mte": float(mean_token_entropy(h)[cut - 1]),  # ExTra eq. 3, the trainer's implementation
        "last_step_entropy": float(h[step_start:cut].mean()),
        "min_entropy": float(hp.min()),
        "max_entropy": float(hp.max()),
        "std_entropy": float(hp.std()),
        "next_token_entropy": float(h[cut]) if cut < h.shape[0] else float("nan"),
        "mean_logprob": mean_lp,
        "perplexity": float(math.exp(-mean_lp)),
    }
