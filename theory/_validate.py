"""Input validation shared by every pure function in ``theory`` (and reused by the solvers).

Every checker raises ``ValueError`` whose message starts with the argument name and states the
violated condition, e.g. ``"pi: rows must sum to 1 (worst row 3 sums to 0.8)"``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

#: Tolerance used when checking that probability vectors sum to one.
SIMPLEX_ATOL = 1e-8


def as_array(
    x,
    name: str,
    *,
    ndim: int | Sequence[int] | None = None,
    shape: tuple[int | None, ...] | None = None,
    dtype=np.float64,
    allow_empty: bool = False,
) -> np.ndarray:
    """Convert ``x`` to a finite array of ``dtype`` and check its rank / shape.

    ``shape`` entries that are ``None`` are free; the others must match exactly.
    """
    try:
        arr = np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as exc:  # pragma: no cover - message path
        raise ValueError(f"{name}: cannot be converted to a {np.dtype(dtype).name} array ({exc})") from None
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            raise ValueError(f"{name}: expected {' or '.join(map(str, allowed))} dimensions, got shape {arr.shape}")
    if shape is not None:
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            want = "(" + ", ".join("?" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name}: expected shape {want}, got {arr.shape}")
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name}: must not be empty")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return arr


def check_nonnegative(x: np.ndarray, name: str) -> np.ndarray:
    """Raise unless every entry of ``x`` is >= 0."""
    if np.any(x < 0):
        idx = np.unravel_index(int(np.argmin(x)), x.shape)
        raise ValueError(f"{name}: must be non-negative (entry {tuple(int(i) for i in idx)} is {x[idx]:.6g})")
    return x


def check_in_range(x: np.ndarray, name: str, lo: float, hi: float) -> np.ndarray:
    """Raise unless ``lo <= x <= hi`` entrywise."""
    bad = (x < lo) | (x > hi)
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: entries must lie in [{lo}, {hi}] (entry {idx} is {x[idx]:.6g})")
    return x


def check_simplex(p: np.ndarray, name: str, *, axis: int = -1, atol: float = SIMPLEX_ATOL) -> np.ndarray:
    """Raise unless ``p`` is non-negative and sums to one along ``axis``."""
    check_nonnegative(p, name)
    sums = p.sum(axis=axis)
    err = np.abs(sums - 1.0)
    if np.any(err > atol):
        worst = np.unravel_index(int(np.argmax(err)), np.shape(err)) if np.ndim(err) else ()
        where = f" (worst slice {tuple(int(i) for i in worst)} sums to {np.asarray(sums)[worst]:.10g})" if worst else f" (sums to {float(sums):.10g})"
        what = "rows must sum to 1" if p.ndim > 1 else "must sum to 1"
        raise ValueError(f"{name}: {what} within {atol:g}{where}")
    return p


def check_support(mu: np.ndarray, name: str, required: np.ndarray, condition: str) -> np.ndarray:
    """Raise unless ``mu > 0`` wherever the boolean mask ``required`` is true.

    ``condition`` describes the mask for the message, e.g. ``"d(s) > 0"``.
    """
    bad = required & (mu <= 0)
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: support condition violated: must be > 0 wherever {condition} (fails at state {idx})")
    return mu


def check_same_shape(a: np.ndarray, a_name: str, b: np.ndarray, b_name: str) -> None:
    """Raise unless two arrays have identical shapes."""
    if a.shape != b.shape:
        raise ValueError(f"{a_name}: shape {a.shape} does not match {b_name} shape {b.shape}")


def check_positive_scalar(x: float, name: str, *, strict: bool = True) -> float:
    """Raise unless ``x`` is a finite (strictly) positive number."""
    x = float(x)
    if not np.isfinite(x) or (x <= 0 if strict else x < 0):
        raise ValueError(f"{name}: must be a finite {'positive' if strict else 'non-negative'} number, got {x!r}")
    return x


def check_probability(x: float, name: str, *, open_low: bool = False, open_high: bool = False) -> float:
    """Raise unless ``x`` lies in the unit interval (optionally open at either end)."""
    x = float(x)
    lo_ok = x > 0 if open_low else x >= 0
    hi_ok = x < 1 if open_high else x <= 1
    if not (np.isfinite(x) and lo_ok and hi_ok):
        interval = ("(" if open_low else "[") + "0, 1" + (")" if open_high else "]")
        raise ValueError(f"{name}: must lie in {interval}, got {x!r}")
    return x
