"""Unbiased pass@k and avg@k from per-sample correctness (Chen et al. 2021; Replay App. A; ExTra App. B.6).

Shapes:

* ``n``, ``c``   integer arrays (broadcast together): samples drawn per problem and how many
  of them are correct,
* ``correct[problem, sample]``   0/1 (or bool) matrix, one row per problem.

The estimator is the one of Chen et al. (2021, "Evaluating Large Language Models Trained on
Code"): with ``n >= k`` samples of which ``c`` are correct,

    pass@k = 1 - C(n - c, k) / C(n, k)
           = 1 - prod_{j=0}^{k-1} (1 - c / (n - j)),

the probability that a uniformly random size-``k`` subset of the ``n`` samples contains a
correct one.  Averaged over problems it is unbiased for ``1 - (1 - p)^k`` when
``c ~ Binomial(n, p)``, unlike the plug-in ``1 - (1 - c/n)^k``.  We evaluate the product in
log space, ``-expm1(sum_j log1p(-c / (n - j)))``, a sum of same-sign terms, so no binomial
coefficient is ever formed and the result keeps full relative precision even when it is
close to 0 or 1.
"""

from __future__ import annotations

import numbers
from typing import Iterable

import numpy as np

from theory._validate import as_array

__all__ = ["pass_at_k", "avg_at_k", "pass_at_k_table", "correct_matrix"]


def _integer_array(x, name: str) -> np.ndarray:
    """``x`` as an int64 array; raise unless every entry is a finite non-negative integer."""
    arr = as_array(x, name, dtype=np.float64)
    if np.any(arr != np.round(arr)):
        idx = tuple(int(i) for i in np.argwhere(arr != np.round(arr))[0])
        raise ValueError(f"{name}: entries must be integers (entry {idx} is {arr[idx]!r})")
    if np.any(arr < 0):
        idx = tuple(int(i) for i in np.argwhere(arr < 0)[0])
        raise ValueError(f"{name}: must be non-negative (entry {idx} is {arr[idx]:.6g})")
    return arr.astype(np.int64)


def _check_k(k) -> int:
    is_int = isinstance(k, (numbers.Integral, float, np.floating)) and not isinstance(k, (bool, np.bool_))
    is_int = is_int and float(k).is_integer()
    if not is_int:
        raise ValueError(f"k: must be a positive integer, got {k!r}")
    k = int(k)
    if k < 1:
        raise ValueError(f"k: must be a positive integer (>= 1), got {k}")
    return k


def pass_at_k(n, c, k: int):
    """Unbiased pass@k estimate ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021, eq. 1).

    Args:
      n: ``n[...]`` number of samples per problem, integer >= 1 (broadcast against ``c``).
      c: ``c[...]`` number of correct samples, integer with ``0 <= c <= n``.
      k: subset size, integer with ``1 <= k <= n`` for every entry of ``n``.

    Returns:
      ``float`` for scalar inputs, else a float64 array of the broadcast shape, in [0, 1].
      Problems with ``n - c < k`` (every size-k subset holds a correct sample) give exactly 1.
    """
    k = _check_k(k)
    n_arr = _integer_array(n, "n")
    c_arr = _integer_array(c, "c")
    try:
        n_b, c_b = np.broadcast_arrays(n_arr, c_arr)
    except ValueError:
        raise ValueError(f"c: shape {c_arr.shape} cannot be broadcast against n shape {n_arr.shape}") from None
    if np.any(n_b < 1):
        raise ValueError(f"n: must be >= 1 (smallest value is {int(n_b.min())})")
    if np.any(c_b > n_b):
        idx = tuple(int(i) for i in np.argwhere(c_b > n_b)[0])
        raise ValueError(f"c: must satisfy c <= n (entry {idx}: c={int(c_b[idx])} > n={int(n_b[idx])})")
    if np.any(k > n_b):
        raise ValueError(f"k: must satisfy k <= n for every problem (k={k} > n={int(n_b.min())})")

    n_f = n_b.astype(np.float64)
    c_f = c_b.astype(np.float64)
    always = (n_b - c_b) < k  # C(n-c, k) = 0
    # For the remaining entries every factor 1 - c/(n-j), j < k, lies in (0, 1].
    c_safe = np.where(always, 0.0, c_f)
    log_fail = np.zeros(n_b.shape, dtype=np.float64)
    for j in range(k):
        log_fail += np.log1p(-c_safe / (n_f - j))
    out = np.where(always, 1.0, -np.expm1(log_fail)) + 0.0  # + 0.0 turns -0.0 into 0.0
    return float(out) if out.ndim == 0 else out


def correct_matrix(correct, name: str = "correct") -> np.ndarray:
    """Validate ``correct[problem, sample]`` as a non-empty 0/1 matrix; return it as float64."""
    arr = as_array(correct, name, ndim=2, dtype=np.float64)
    bad = (arr != 0) & (arr != 1)
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: entries must be 0 or 1 (entry {idx} is {arr[idx]:.6g})")
    return arr


def avg_at_k(correct) -> float:
    """avg@k: mean accuracy over the k samples of each problem, then over problems (Replay App. A).

    Args:
      correct: ``correct[problem, sample]`` in {0, 1}; ``k`` is the number of columns.

    Returns:
      ``mean_p mean_i correct[p, i]`` (equal to the mean of pass@1 over problems).
    """
    arr = correct_matrix(correct)
    return float(arr.mean(axis=1).mean())


def pass_at_k_table(correct, ks: Iterable[int]) -> dict[int, float]:
    """Mean unbiased pass@k over problems for several ``k`` (Chen et al. 2021, eq. 1).

    Args:
      correct: ``correct[problem, sample]`` in {0, 1}; each row holds ``n`` samples.
      ks: subset sizes, each ``1 <= k <= n``; duplicates are rejected.

    Returns:
      ``{k: mean_p pass_at_k(n, c_p, k)}`` in the order of ``ks``, with ``c_p = sum_i correct[p, i]``.
    """
    arr = correct_matrix(correct)
    ks = list(ks)
    if not ks:
        raise ValueError("ks: must contain at least one k")
    if len(set(int(k) for k in ks)) != len(ks):
        raise ValueError(f"ks: duplicate values in {ks!r}")
    n = arr.shape[1]
    c = arr.sum(axis=1)
    out: dict[int, float] = {}
    for k in ks:
        k = _check_k(k)
        if k > n:
            raise ValueError(f"ks: k={k} exceeds the number of samples per problem n={n}")
        out[k] = float(np.mean(pass_at_k(n, c, k)))
    return out
