"""Confidence intervals for accuracies measured by sampling (test-bed, agent and study evaluations).

* :func:`clopper_pearson` — the exact binomial interval (one sample per problem).
* :func:`clustered_interval` — several samples per problem are correlated (the problem's own
  success rate is shared), so the binomial interval over all samples is too narrow. Following
  Korn & Graubard (1998), the Clopper–Pearson interval is evaluated at an *effective* sample size
  ``n_eff = p(1 - p) / Var(p_hat)``, with ``Var(p_hat)`` estimated from the spread of per-problem
  mean accuracies; ``n_eff`` is capped at the number of samples.
* :func:`wilson_interval` — the Wilson score interval (the agent cards' intervals), and
  :func:`clustered_wilson`, the same at the Korn–Graubard effective size of ``correct[seed, sample]``
  (several episodes per seed).
* :func:`paired_consistent` — is a fresh sample per problem consistent with a reference's
  per-problem outcomes on the same problems? An exact conditional (exchangeability) test with
  false-failure rate <= ``alpha``, used by the integration tests that compare a shipped
  checkpoint with its card.
"""

from __future__ import annotations

import numpy as np

from vsr_util.checks import check_number

__all__ = [
    "beta_interval",
    "clopper_pearson",
    "clustered_interval",
    "clustered_wilson",
    "effective_size",
    "paired_consistent",
    "poisson_binomial_pmf",
    "wilson_interval",
]


def _check_level(confidence: float) -> float:
    return check_number("confidence", confidence, 0, 1, lo_open=True, hi_open=True)


def beta_interval(x: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper–Pearson bounds for ``x`` successes in ``n`` trials (``x``, ``n`` may be fractional).

    ``lower = Beta.ppf(a/2; x, n - x + 1)`` (0 when ``x == 0``),
    ``upper = Beta.ppf(1 - a/2; x + 1, n - x)`` (1 when ``x == n``), ``a = 1 - confidence``.
    """
    confidence = _check_level(confidence)
    n = check_number("n", float(n), 0, lo_open=True)
    x = check_number("x", float(x), 0, n)
    from scipy import stats  # lazily: the GPU check imports this package where only torch + transformers exist

    a = 1.0 - confidence
    lo = 0.0 if x == 0 else float(stats.beta.ppf(a / 2, x, n - x + 1))
    hi = 1.0 if x == n else float(stats.beta.ppf(1 - a / 2, x + 1, n - x))
    return lo, hi


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for ``k`` successes out of ``n`` independent trials."""
    return beta_interval(check_number("k", k, integer=True), check_number("n", n, integer=True), confidence)


def effective_size(correct: np.ndarray) -> tuple[float, float]:
    """``(p_hat, n_eff)`` of ``correct[problem, sample]`` (0/1), problems independent (module doc).

    One sample per problem: ``n_eff`` is the number of samples. With ``m > 1`` samples,
    ``n_eff = p(1 - p) / Var(p_hat)`` (Korn–Graubard) with ``Var(p_hat)`` the sample variance of the
    per-problem means divided by the number of problems, capped at the number of samples; with no
    spread to estimate (one problem, or p in {0, 1}) it counts problems, not samples.
    """
    c = np.asarray(correct, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] < 1:
        raise ValueError(f"correct: expected a non-empty 2-D array [problem, sample], got shape {c.shape}")
    if not np.all((c == 0.0) | (c == 1.0)):
        raise ValueError("correct: entries must be 0 or 1")
    n_prob, m = c.shape
    total = n_prob * m
    p = float(c.mean())
    if m == 1:
        n_eff = float(total)  # independent trials: the exact interval
    elif n_prob == 1 or p in (0.0, 1.0):
        n_eff = float(n_prob)  # no spread to estimate: count problems, not samples
    else:
        var_p = float(c.mean(axis=1).var(ddof=1)) / n_prob
        n_eff = float(total) if var_p <= 0.0 else min(float(total), max(1.0, p * (1.0 - p) / var_p))
    return p, n_eff


def clustered_interval(correct: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(accuracy, lower, upper)`` for ``correct[problem, sample]`` (0/1), problems independent.

    One sample per problem gives the exact Clopper–Pearson interval. With ``m > 1`` samples the
    interval is Clopper–Pearson at the Korn–Graubard effective sample size (:func:`effective_size`).
    """
    p, n_eff = effective_size(correct)
    lo, hi = beta_interval(p * n_eff, n_eff, confidence)
    return p, lo, hi


def wilson_interval(x: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score bounds for ``x`` successes in ``n`` trials (``x``, ``n`` may be fractional).

    With ``p = x / n`` and ``z`` the two-sided normal quantile:
    ``(p + z²/2n ± z sqrt(p(1 - p)/n + z²/4n²)) / (1 + z²/n)`` (Wilson 1927), clipped to [0, 1].
    """
    confidence = _check_level(confidence)
    n = check_number("n", float(n), 0, lo_open=True)
    x = check_number("x", float(x), 0, n)
    from scipy import stats

    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p, z2 = x / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, float(centre - half)), min(1.0, float(centre + half))


def clustered_wilson(correct: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(rate, lower, upper)``: the Wilson interval at the effective size of ``correct[problem, sample]``
    (:func:`effective_size`; one sample per problem gives the plain Wilson interval)."""
    p, n_eff = effective_size(correct)
    lo, hi = wilson_interval(p * n_eff, n_eff, confidence)
    return p, lo, hi


def poisson_binomial_pmf(q: np.ndarray) -> np.ndarray:
    """``pmf[k] = P(sum_i B_i = k)`` for independent ``B_i ~ Bernoulli(q[i])`` (exact convolution, float64)."""
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 1 or np.any((q < 0) | (q > 1)):
        raise ValueError("q: must be a 1-D array of probabilities in [0, 1]")
    pmf = np.zeros(q.size + 1)
    pmf[0] = 1.0
    for i, qi in enumerate(q):
        pmf[1 : i + 2] = pmf[1 : i + 2] * (1.0 - qi) + pmf[: i + 1] * qi
        pmf[0] *= 1.0 - qi
    return pmf


def paired_consistent(
    new: np.ndarray, ref_counts: np.ndarray, ref_samples: int, alpha: float = 1e-6
) -> tuple[bool, float, tuple[int, float]]:
    """Exact test that a new sample per problem comes from the same per-problem success rates as a
    reference with ``ref_samples`` samples per problem (``ref_counts[i]`` of them correct).

    ``new[i]`` in {0, 1}: outcome of one fresh sample on problem ``i``. Under the hypothesis the
    ``ref_samples + 1`` outcomes of problem ``i`` are i.i.d., hence exchangeable: given their total
    ``t[i] = new[i] + ref_counts[i]``, the new one is correct with probability
    ``q[i] = t[i] / (ref_samples + 1)`` whatever the unknown rate, independently over problems.
    So ``S = sum(new)`` is Poisson-binomial(``q``) given the totals, and the two-sided exact
    p-value (outcomes no more likely than ``S``) rejects with probability <= ``alpha``.
    With ``ref_samples = 1`` this is McNemar's exact test. Returns
    ``(accepted, p_value, (S, E[S | totals]))``.
    """
    check_number("alpha", alpha, 0, 1, lo_open=True, hi_open=True)
    check_number("ref_samples", ref_samples, 1, integer=True)
    x, r = np.asarray(new), np.asarray(ref_counts)
    if x.ndim != 1 or x.shape != r.shape or x.size == 0:
        raise ValueError(f"new: expected two non-empty 1-D arrays of equal length, got shapes {x.shape} and {r.shape}")
    if not np.all((x == 0) | (x == 1)):
        raise ValueError("new: outcomes must be 0 or 1")
    if not (np.all(r == np.round(r)) and np.all((r >= 0) & (r <= ref_samples))):
        raise ValueError(f"ref_counts: must be integers in [0, ref_samples={ref_samples}]")
    q = (x + r) / float(ref_samples + 1)
    pmf = poisson_binomial_pmf(q)
    s_obs = int(x.sum())
    pval = float(min(1.0, pmf[pmf <= pmf[s_obs] * (1 + 1e-7)].sum()))
    return pval >= alpha, pval, (s_obs, float(q.sum()))
