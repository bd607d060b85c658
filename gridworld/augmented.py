"""The time-augmented state space ``(t, s)`` and its marginals over cells (VSR §2.1, eq. (2); §2.3).

With a finite horizon the Markov state is ``(s, t)``; the VSR quantities are distributions /
fields on it, stored as ``x[t, s]`` (``t < H``).  Flattened index: ``i = t * S + s``.

For heatmaps over cells (VSR Figure 2) a *distribution* (``d^π``, ``μ``) is marginalised by
summing over ``t``, and a *field* (``σ``, ``p``) by its ``d``-weighted average over ``t``:
``σ̄(s) = Σ_t d[t, s] σ[t, s] / Σ_t d[t, s]``.  With these conventions the cell marginal of
``μ_var`` is exactly ``∝ d̄ σ̄`` (``d̄`` the cell marginal of ``d``), so the heatmaps obey the
same Neyman form as the augmented quantities.
"""

from __future__ import annotations

import numpy as np

from theory._validate import as_array, check_nonnegative


def flatten(x) -> np.ndarray:
    """``x[t, s]`` → ``x_aug[t * S + s]``."""
    x = as_array(x, "x", ndim=2)
    return x.reshape(-1).copy()


def unflatten(x_aug, n_states: int) -> np.ndarray:
    """``x_aug[t * S + s]`` → ``x[t, s]``."""
    x = as_array(x_aug, "x_aug", ndim=1)
    if n_states <= 0 or x.size % n_states:
        raise ValueError(f"x_aug: length {x.size} is not a multiple of n_states = {n_states}")
    return x.reshape(-1, n_states).copy()


def augmented_index(t, s, n_states: int) -> np.ndarray:
    """Flat index ``t * S + s`` of the augmented state(s) ``(t, s)``."""
    t, s = np.asarray(t, dtype=np.int64), np.asarray(s, dtype=np.int64)
    if np.any(s < 0) or np.any(s >= n_states) or np.any(t < 0):
        raise ValueError(f"s: must lie in [0, {n_states}) and t must be >= 0")
    return t * n_states + s


def split_index(i, n_states: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`augmented_index`: ``(t, s)`` of flat index ``i``."""
    i = np.asarray(i, dtype=np.int64)
    return i // n_states, i % n_states


def cell_marginal(dist) -> np.ndarray:
    """Marginal over cells of a distribution ``dist[t, s]``: ``Σ_t dist[t, s]``."""
    dist = as_array(dist, "dist", ndim=2)
    check_nonnegative(dist, "dist")
    return dist.sum(axis=0)


def cell_average(field, weights, *, empty: float = np.nan) -> np.ndarray:
    """``weights``-weighted average over ``t`` of ``field[t, s]`` (``empty`` where the weights vanish)."""
    field = as_array(field, "field", ndim=2)
    weights = as_array(weights, "weights", shape=field.shape)
    check_nonnegative(weights, "weights")
    w = weights.sum(axis=0)
    num = (weights * field).sum(axis=0)
    out = np.full(field.shape[1], float(empty))
    np.divide(num, w, out=out, where=w > 0)
    return out


def heatmap_fields(d, p, fields) -> dict[str, np.ndarray]:
    """Per-cell arrays for VSR Figure 2 from ``d[H+1, S]``, ``p[H+1, S]`` and a ``VSRFields``.

    Keys: ``d`` (cell marginal of ``d^π``), ``mu_var``, ``mu_eps`` (cell marginals), ``sigma``
    and ``p`` (``d``-weighted averages over ``t``; NaN on cells never visited).
    """
    d = as_array(d, "d", ndim=2)
    p = as_array(p, "p", shape=d.shape)
    w = d[:-1]
    return {
        "d": cell_marginal(fields.dvis),
        "mu_var": cell_marginal(fields.mu_var),
        "mu_eps": cell_marginal(fields.mu_eps),
        "sigma": cell_average(fields.sigma, w),
        "p": cell_average(p[:-1], w),
    }
