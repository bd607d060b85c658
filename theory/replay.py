"""Replay Appendix E: closed forms of |A| and sigma_g for binary +/-1 rewards."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _check_group(k: int, G: int) -> None:
    if int(G) != G or G < 2:
        raise ValueError(f"G: group size must be an integer >= 2, got {G!r}")
    if int(k) != k or not 0 < k < G:
        raise ValueError(f"k: correct count must be an integer with 0 < k < G = {G} (a mixed group), got {k!r}")


@dataclass(frozen=True)
class BinaryGroupStats:
    """Group statistics for ``k`` correct out of ``G`` with rewards in {-1, +1} (population std)."""

    mean: float  #: mu_g = 2k/G - 1
    std: float  #: sigma_g = 2 sqrt((k/G)(1 - k/G))
    abs_adv_correct: float  #: sqrt((G-k)/k)
    abs_adv_incorrect: float  #: sqrt(k/(G-k))
    ratio: float  #: |A_correct| / |A_incorrect| = (G-k)/k
    minority_is_correct: bool  #: k < G - k


def binary_group_stats(k: int, G: int) -> BinaryGroupStats:
    """Closed forms of Replay Prop. 1 (App. E, eqs. 5-8 and 11)."""
    _check_group(k, G)
    f = k / G
    return BinaryGroupStats(
        mean=2.0 * f - 1.0,
        std=2.0 * float(np.sqrt(f * (1.0 - f))),
        abs_adv_correct=float(np.sqrt((G - k) / k)),
        abs_adv_incorrect=float(np.sqrt(k / (G - k))),
        ratio=(G - k) / k,
        minority_is_correct=k < G - k,
    )


def pm1_rewards(k: int, G: int) -> np.ndarray:
    """The reward vector with ``k`` entries +1 followed by ``G - k`` entries -1."""
    _check_group(k, G)
    return np.concatenate([np.ones(k), -np.ones(G - k)])
