"""Between verl's batch tensors and the toolkit's per-group arrays (verl 0.9.1, ``verl/trainer/ppo/core_algos.py``).

verl hands an advantage estimator ``token_level_rewards[bs, L]``, ``response_mask[bs, L]`` and
``index[bs]`` (the group id ``uid`` of every row). The toolkit's estimators take ragged reward
groups. These helpers convert both ways without changing a number:

* :func:`outcome_scores` — the row's outcome reward ``Σ_t r[b, t]`` (verl's ``scores``), float64;
* :func:`group_rows` — the rows of each uid, groups in order of first appearance;
* :func:`scatter` — per-row advantages ``a[bs]`` broadcast over the response tokens.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

__all__ = ["group_rows", "outcome_scores", "scatter"]


def outcome_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> np.ndarray:
    """``s[b] = Σ_t token_level_rewards[b, t]`` (float64); shapes ``[bs, L]`` checked."""
    if token_level_rewards.ndim != 2 or token_level_rewards.shape != response_mask.shape:
        raise ValueError(f"token_level_rewards: shape {tuple(token_level_rewards.shape)} must be [bs, L] and equal "
                         f"response_mask's {tuple(response_mask.shape)}")
    s = token_level_rewards.detach().to(torch.float64).sum(-1).cpu().numpy()
    if not np.all(np.isfinite(s)):
        raise ValueError("token_level_rewards: must be finite")
    return s


def group_rows(index: Sequence[Any]) -> list[np.ndarray]:
    """Row indices of each distinct ``index`` value, groups in first-appearance order."""
    order: dict[Any, list[int]] = {}
    for b, uid in enumerate(np.asarray(index, dtype=object).tolist()):
        order.setdefault(uid, []).append(b)
    return [np.asarray(v, dtype=np.int64) for v in order.values()]


def scatter(values: np.ndarray, response_mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``out[b, t] = values[b] · response_mask[b, t]`` in ``like``'s dtype and device."""
    v = torch.as_tensor(np.asarray(values, dtype=np.float64), device=like.device)
    return (v.unsqueeze(-1) * response_mask.to(v.dtype)).to(like.dtype)
