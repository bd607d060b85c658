"""Accuracy Efficiency Score (AES) of a run against a reference run (Replay §6.1, eq. 4).

    AES  = dL + beta * dAcc,
    dL   = (L_ref - L) / L_ref       (> 0 when the run answers with fewer tokens),
    dAcc = (A - A_ref) / A_ref       (> 0 when the run is more accurate),
    beta = 3 if dAcc >= 0 else 5     (accuracy drops cost more than gains earn).

``L`` is the mean response length (tokens) and ``A`` the accuracy; ``A`` and ``A_ref`` only
enter through their ratio, so percent or fraction both work as long as they match.  The Replay
paper credits the metric to Luo et al. (2025a); the formula above is the paper's eq. (4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory._validate import as_array, check_nonnegative, check_positive_scalar

__all__ = ["AES_BETA_GAIN", "AES_BETA_LOSS", "AESTerms", "aes", "aes_terms"]

#: beta when the accuracy does not drop (dAcc >= 0), Replay §6.1.
AES_BETA_GAIN = 3.0
#: beta when the accuracy drops (dAcc < 0), Replay §6.1.
AES_BETA_LOSS = 5.0


@dataclass(frozen=True)
class AESTerms:
    """The pieces of AES; each is a float (scalar inputs) or an array of the broadcast shape."""

    delta_length: "float | np.ndarray"
    """dL = (L_ref - L) / L_ref."""
    delta_acc: "float | np.ndarray"
    """dAcc = (A - A_ref) / A_ref."""
    beta: "float | np.ndarray"
    """The weight applied to dAcc: ``beta_gain`` where dAcc >= 0, else ``beta_loss``."""
    score: "float | np.ndarray"
    """AES = dL + beta * dAcc."""


def _positive_array(x, name: str, *, strict: bool) -> np.ndarray:
    arr = as_array(x, name)
    if strict and np.any(arr <= 0):
        idx = tuple(int(i) for i in np.argwhere(arr <= 0)[0])
        raise ValueError(f"{name}: must be > 0 (entry {idx} is {arr[idx]:.6g})")
    return check_nonnegative(arr, name)


def aes_terms(
    length,
    acc,
    ref_length,
    ref_acc,
    *,
    beta_gain: float = AES_BETA_GAIN,
    beta_loss: float = AES_BETA_LOSS,
) -> AESTerms:
    """dL, dAcc, beta and AES of a run against a reference (Replay §6.1, eq. 4).

    Args:
      length: ``L[...]`` mean response length of the run, >= 0.
      acc: ``A[...]`` accuracy of the run, >= 0 (same unit as ``ref_acc``).
      ref_length: ``L_ref[...]`` reference mean length, > 0.
      ref_acc: ``A_ref[...]`` reference accuracy, > 0.
      beta_gain: weight of dAcc when dAcc >= 0 (paper: 3).
      beta_loss: weight of dAcc when dAcc < 0 (paper: 5).

    All four arrays broadcast together; scalar inputs give float fields.
    """
    beta_gain = check_positive_scalar(beta_gain, "beta_gain")
    beta_loss = check_positive_scalar(beta_loss, "beta_loss")
    arrays = {
        "length": _positive_array(length, "length", strict=False),
        "acc": _positive_array(acc, "acc", strict=False),
        "ref_length": _positive_array(ref_length, "ref_length", strict=True),
        "ref_acc": _positive_array(ref_acc, "ref_acc", strict=True),
    }
    try:
        L, A, L_ref, A_ref = np.broadcast_arrays(*arrays.values())
    except ValueError:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in arrays.items())
        raise ValueError(f"length: shapes cannot be broadcast together ({shapes})") from None
    d_len = (L_ref - L) / L_ref
    d_acc = (A - A_ref) / A_ref
    beta = np.where(d_acc >= 0, beta_gain, beta_loss)
    score = d_len + beta * d_acc
    if score.ndim == 0:
        return AESTerms(float(d_len), float(d_acc), float(beta), float(score))
    return AESTerms(d_len, d_acc, beta, score)


def aes(
    length,
    acc,
    ref_length,
    ref_acc,
    *,
    beta_gain: float = AES_BETA_GAIN,
    beta_loss: float = AES_BETA_LOSS,
):
    """AES = dL + beta dAcc of a run against a reference (Replay §6.1, eq. 4); see :func:`aes_terms`.

    Returns a float for scalar inputs, else an array of the broadcast shape.  A run scored
    against itself gets exactly 0.
    """
    return aes_terms(length, acc, ref_length, ref_acc, beta_gain=beta_gain, beta_loss=beta_loss).score
